"""A pcap read as batches (capture/pcap.py, capture/batch.py): the same frames, read again
by a worker from its span, and pages let go of once a batch is done with.

A plain file is walked through a read-only mapping, a compressed one as a
stream of reads; both give the same frames, at any batch size.
"""

from __future__ import annotations

import gzip
import itertools
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from espforensics.capture import open_capture, write_pcap
from espforensics.capture.batch import FrameBatch
from espforensics.model import Frame
from tests.test_capture import make_frames

FIELDS = ("start", "number", "ts_ns", "caplen", "wirelen", "linktype")


def _write(path: Path, frames: list[Frame], order: Literal["little", "big"], ns: bool) -> Path:
    with path.open("wb") as out:
        write_pcap(out, frames, linktype=1, byteorder=order, nanosecond=ns)
    return path


def _batches(path: Path, size: int) -> list[FrameBatch]:
    with open_capture(path) as capture:
        items = list(capture.batches(itertools.repeat(size)))
    assert all(isinstance(b, FrameBatch) for b in items)
    return [b for b in items if isinstance(b, FrameBatch)]


@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("ns", [True, False])
@pytest.mark.parametrize("size", [1, 3, 4096])
def test_batches_hold_the_frames_mapped_or_streamed(
    tmp_path: Path, order: Literal["little", "big"], ns: bool, size: int
) -> None:
    frames = make_frames(300)
    if not ns:  # microsecond files keep microseconds
        frames = [f._replace(ts_ns=f.ts_ns // 1000 * 1000) for f in frames]
    plain = _write(tmp_path / "p.pcap", frames, order, ns)
    packed = tmp_path / "p.pcap.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (plain, packed):
        batches = _batches(path, size)
        assert [len(b) for b in batches[:-1]] == [size] * (len(batches) - 1)
        got = [b.frame(i) for b in batches for i in range(len(b))]
        assert got == frames
        assert all((b.span is None) == (path == packed) for b in batches)


def test_a_span_reads_the_same_batch_again(tmp_path: Path) -> None:
    """What a --jobs worker reads from a batch's span is that batch, field for field."""
    path = _write(tmp_path / "p.pcap", make_frames(500), "little", True)
    for batch in _batches(path, 64):
        assert batch.span is not None
        again = batch.span.read()
        for name in FIELDS[1:]:
            assert np.array_equal(getattr(again, name), getattr(batch, name)), name
        assert [again.frame(i) for i in range(len(again))] == [
            batch.frame(i) for i in range(len(batch))
        ]


def _mapped_rss_kb(path: Path) -> int:
    """The resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1].isdigit() or (line[:1] in "abcdef" and "-" in line.split()[0]):
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_released_batches_leave_no_pages_mapped(tmp_path: Path) -> None:
    """A batch done with lets its pages go: however large the file, this process keeps
    about a batch of it; a batch not released keeps its pages."""
    frames = make_frames(40_000, size=300)  # about 12 MB
    path = _write(tmp_path / "big.pcap", frames, "little", True)
    size = path.stat().st_size
    with open_capture(path) as capture:
        kept = []
        for batch in capture.batches(itertools.repeat(1024)):
            assert isinstance(batch, FrameBatch)
            np.frombuffer(batch.buf, np.uint8)[batch.start].sum()  # touch every frame
            kept.append(batch)
        held = _mapped_rss_kb(path)
        for batch in kept:
            batch.release()
        released = _mapped_rss_kb(path)
    assert held * 1024 > size // 2  # touched and not released: resident
    assert released * 1024 < 2 * 1024 * 1024  # the pages at batch edges at most
