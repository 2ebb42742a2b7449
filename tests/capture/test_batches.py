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
from espforensics.errors import CaptureError
from espforensics.model.records import Frame
from tests.capture.test_capture import make_frames

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


def test_views_are_the_frames_bytes_mapped_or_streamed(tmp_path: Path) -> None:
    """``FrameBatch.views``, what the copies write a frame's bytes from (rewrite/)."""
    frames = make_frames(300)
    plain = _write(tmp_path / "p.pcap", frames, "little", True)
    packed = tmp_path / "p.pcap.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (plain, packed):
        got: list[bytes] = []
        with open_capture(path) as capture:
            for batch in capture.batches(itertools.repeat(7)):
                assert isinstance(batch, FrameBatch)
                got += [bytes(view) for view in batch.views()]
        assert got == [f.data for f in frames]


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


def _known(path: Path, caplen: np.ndarray, size: int) -> list[FrameBatch] | None:
    with open_capture(path) as capture:
        items = capture.known_batches(caplen, size)
        return None if items is None else [b for b in items if isinstance(b, FrameBatch)]


@pytest.mark.parametrize("size", [1, 3, 64])
@pytest.mark.parametrize(("order", "ns"), [("little", True), ("big", False)])
def test_known_lengths_read_the_batches_the_walk_reads(
    tmp_path: Path, size: int, order: Literal["little", "big"], ns: bool
) -> None:
    """The copies read the capture again with the captured lengths of its packets table
    (Capture.known_batches): the walk's batches, field for field and byte for byte."""
    path = _write(tmp_path / "a.pcap", make_frames(40), order, ns)
    walked = _batches(path, size)
    caplen = np.concatenate([b.caplen for b in walked])
    known = _known(path, caplen, size)
    assert known is not None
    for got, want in zip(known, walked, strict=True):
        for name in FIELDS[1:]:
            assert getattr(got, name).tolist() == getattr(want, name).tolist()
        assert [f.data for f in got.frames()] == [f.data for f in want.frames()]


def test_known_lengths_that_do_not_fit_leave_the_capture_to_the_walk(tmp_path: Path) -> None:
    """Lengths that do not fill the file (a damaged file, a compressed one) give None and
    leave the capture unread; a record that says another length since is an error."""
    frames = make_frames(10)
    path = _write(tmp_path / "a.pcap", frames, "little", True)
    caplen = np.array([f.caplen for f in frames], np.int64)
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(path.read_bytes()[:-3])
    assert _known(cut, caplen, 4) is None
    packed = tmp_path / "a.pcap.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert _known(packed, caplen, 4) is None
    read: list[int] = []
    with open_capture(cut) as capture:
        assert capture.known_batches(caplen, 4) is None
        with pytest.raises(CaptureError, match="inside frame 10"):  # the walk reads it all
            read.extend(len(b) for b in capture.batches(itertools.repeat(4)))
    assert sum(read) == 9
    moved = caplen.copy()
    moved[6], moved[7] = moved[6] - 1, moved[7] + 1  # the same total: it fills the file
    with pytest.raises(CaptureError, match="frame 7's record says") as err:
        _known(path, moved, 4)
    assert err.value.frames_read == 6
