"""A pcapng read as batches (capture/pcapng.py, capture/batch.py ``Gathered``): the same
frames and secrets as the per-frame iteration, in the same order, and the same error after
them; a plain file's batches read again by a worker from their span, the very same batch.

One walker reads both ways: every rule of the format (sections, byte orders,
interfaces, timestamp resolutions and offsets, SPB/OPB/EPB, DSB) applies to
both. A compressed file is read as a stream of chunks, its batches joined
from pieces of them (no span); a plain one is walked where it sits.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from espforensics.capture import open_capture, open_compressed_writer, write_pcapng
from espforensics.capture.batch import FrameBatch
from espforensics.errors import CaptureError, CaptureTruncated
from espforensics.model.records import DecryptionSecrets, Frame
from espforensics.synth import write_scenario
from tests.capture.test_capture import block, epb, idb, make_frames, option, shb, write_file
from tests.support.helpers import scenario

Item = Frame | DecryptionSecrets
FIELDS = ("number", "ts_ns", "caplen", "wirelen", "linktype")
# pcapng scenarios of the fixture builder: secrets, every link type, fragments, an ESN
# wrap, NAT-T, snaplen-cut frames, malformed packets, one of each kind of flow.
SCENARIOS = (
    "pcapng-dsb",
    "link-all",
    "fragments-v4",
    "esn-wrap",
    "natt",
    "snaplen",
    "malformed",
    "example",
)


def _per_frame(path: Path) -> tuple[list[Item], str | None]:
    """The per-frame iteration's items, and its error's message (if any)."""
    got: list[Item] = []
    try:
        with open_capture(path) as capture:
            got.extend(capture)
    except CaptureError as exc:
        return got, exc.message
    return got, None


def _check_span(batch: FrameBatch) -> None:
    """A plain file's batch, read again from its span: the same columns and bytes."""
    span = batch.span
    assert span is not None and span.columns is not None
    assert span.columns.shape == (4, len(batch)) and span.heads.shape == (len(batch),)
    assert span.columns.dtype == np.int64 and span.heads.dtype == np.int64
    again = span.read()
    for field in FIELDS:
        assert np.array_equal(getattr(again, field), getattr(batch, field)), field
    assert list(again.frames()) == list(batch.frames())


def _batched(path: Path, size: int) -> tuple[list[Item], str | None, list[FrameBatch]]:
    """The batch iteration's items, a batch's frames in its place; its error; the batches."""
    got: list[Item] = []
    batches: list[FrameBatch] = []
    try:
        with open_capture(path) as capture:
            plain = capture.compression is None
            for item in capture.batches(itertools.repeat(size)):
                if isinstance(item, FrameBatch):
                    assert 0 < len(item) <= size
                    assert (item.span is not None) == plain
                    if plain:
                        _check_span(item)
                    batches.append(item)
                    got.extend(item.frames())
                else:
                    got.append(item)
    except CaptureError as exc:
        return got, exc.message, batches
    return got, None, batches


def _same_both_ways(path: Path, sizes: tuple[int, ...] = (1, 5, 64, 4096)) -> list[Item]:
    expected, error = _per_frame(path)
    for size in sizes:
        got, got_error, _ = _batched(path, size)
        assert got == expected, size
        assert got_error == error, size
    return expected


@pytest.mark.parametrize("kind", [None, "gzip"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenarios_read_the_same_both_ways(
    tmp_path: Path, name: str, kind: Literal["gzip"] | None
) -> None:
    sc = scenario(name)
    paths = write_scenario(sc, tmp_path, compression=kind, capture_format="pcapng")
    items = _same_both_ways(paths["capture"])
    assert [i for i in items if isinstance(i, Frame)] == list(sc.frames)
    assert [i for i in items if isinstance(i, DecryptionSecrets)] == list(sc.secrets)


def _hand_made() -> Iterator[tuple[str, bytes]]:
    """Files of every kind of block: two sections of both byte orders and resolutions,
    an offset, simple and obsolete packet blocks, unknown blocks, secrets between frames."""
    big = shb(">") + idb(">", 1, options=option(">", 14, struct.pack(">q", -10)))
    yield "sections", shb() + idb("<", 228) + epb("<", 0, 5, b"a") + big + epb(">", 0, 9, b"b")
    opb = block("<", 2, struct.pack("<HHIIII", 1, 0, 0, 3, 2, 4) + b"zz")  # pcapng appendix A
    nrb, isb = block("<", 4, struct.pack("<HH", 0, 0)), block("<", 5, struct.pack("<III", 0, 0, 0))
    spb = block("<", 3, struct.pack("<I", 5) + b"abcde")
    yield (
        "kinds",
        shb() + idb("<", 1, 4) + idb("<", 113) + nrb + opb + spb + epb("<", 0, 9, b"e") + isb + spb,
    )
    dsb = block("<", 0xA, struct.pack("<II", 0x45535053, 3) + b"x y")
    frames = b"".join(epb("<", 0, t, bytes([t]) * t) for t in range(1, 12))
    yield "secrets", shb() + idb("<", 1) + frames + dsb + frames + dsb + dsb + frames


@pytest.mark.parametrize(("name", "data"), list(_hand_made()))
def test_hand_made_files_read_the_same_both_ways(tmp_path: Path, name: str, data: bytes) -> None:
    items = _same_both_ways(write_file(tmp_path / f"{name}.pcapng", data), (1, 3, 4096))
    assert [i.number for i in items if isinstance(i, Frame)] == list(
        range(1, 1 + sum(isinstance(i, Frame) for i in items))
    )


def test_a_secrets_block_ends_a_batch(tmp_path: Path) -> None:
    """The SAs of a Decryption Secrets Block apply from the next frame on: the batch
    before it ends there, the frames after it begin the next."""
    frames = make_frames(30)
    secrets = DecryptionSecrets(0x45535053, b"esp_sa lines")
    path = tmp_path / "dsb.pcapng"
    with path.open("wb") as out:
        write_pcapng(out, [*frames[:12], secrets, *frames[12:]], linktypes=(1,))
    _, _, batches = _batched(path, 4096)
    with open_capture(path) as capture:
        kinds = [type(i).__name__ for i in capture.batches(itertools.repeat(4096))]
    assert kinds == ["FrameBatch", "DecryptionSecrets", "FrameBatch"]
    assert [b.number.tolist() for b in batches] == [list(range(1, 13)), list(range(13, 31))]


def test_a_stream_of_many_chunks_reads_the_same(tmp_path: Path) -> None:
    """A gzip pcapng of some MiB: batches joined from pieces of several reads."""
    frames = make_frames(40_000, (1, 228), size=90)
    plain, packed = tmp_path / "big.pcapng", tmp_path / "big.pcapng.gz"
    kinds: tuple[tuple[Path, Literal["gzip"] | None], ...] = ((plain, None), (packed, "gzip"))
    for path, kind in kinds:
        with open_compressed_writer(path, kind) as out:
            write_pcapng(out, frames, linktypes=(1, 228))
    assert plain.stat().st_size > 3 << 20
    for path in (plain, packed):
        assert _same_both_ways(path, (4096, 777)) == frames


def test_a_timestamp_past_int64_comes_as_frames(tmp_path: Path) -> None:
    """if_tsoffset near 2^63 s: the frames' ns do not fit a column, the batch comes as its
    frames (the engine's per-frame path), the same values as the per-frame iteration."""
    opts = option("<", 14, struct.pack("<q", (1 << 62))) + option("<", 9, b"\x00")
    data = shb() + idb("<", 1, options=opts) + epb("<", 0, 3, b"x") + epb("<", 0, 4, b"yz")
    data += shb() + idb("<", 1) + epb("<", 0, 5, b"w")  # a section with sane timestamps
    path = write_file(tmp_path / "far.pcapng", data)
    expected = _same_both_ways(path, (4096,))
    assert [f.ts_ns for f in expected if isinstance(f, Frame)] == [
        ((1 << 62) + 3) * 10**9,
        ((1 << 62) + 4) * 10**9,
        5_000,
    ]
    with open_capture(path) as capture:
        items = list(capture.batches(itertools.repeat(4096)))
    assert [type(i).__name__ for i in items] == ["Frame", "Frame", "Frame"]


@pytest.mark.parametrize("kind", [None, "gzip"])
@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (
            epb("<", 3, 0, b"abc"),
            "damaged enhanced packet block at byte offset {at}: interface 3 is not defined "
            "(1 in this section); read 20 complete frames",
        ),
        (
            struct.pack("<III", 5, 12, 16),
            "damaged interface statistics block at byte offset {at}: trailing block length "
            "differs; read 20 complete frames",
        ),
        (
            epb("<", 0, 1, b"abcdef")[:-3],
            "capture ends inside frame 21 (enhanced packet block at byte offset {at}): read "
            "20 complete frames",
        ),
    ],
)
def test_an_error_comes_after_every_frame_before_it(
    tmp_path: Path, kind: Literal["gzip"] | None, tail: bytes, message: str
) -> None:
    good = shb() + idb("<", 1) + b"".join(epb("<", 0, t, bytes(t)) for t in range(20))
    path = tmp_path / ("bad.pcapng" + (".gz" if kind else ""))
    with open_compressed_writer(path, kind) as out:
        out.write(good + tail)
    expected, error = _per_frame(path)
    assert len(expected) == 20
    assert error == message.format(at=len(good))
    for size in (1, 7, 4096):
        got, got_error, _ = _batched(path, size)
        assert got == expected and got_error == error


def test_a_truncated_stream_keeps_its_message(tmp_path: Path) -> None:
    """A gzip stream cut short: the compressed stream's own error, after the same frames."""
    frames = make_frames(3000, size=200)
    path = tmp_path / "cut.pcapng.gz"
    with open_compressed_writer(tmp_path / "whole.pcapng.gz", "gzip") as out:
        write_pcapng(out, frames, linktypes=(1,))
    whole = (tmp_path / "whole.pcapng.gz").read_bytes()
    path.write_bytes(whole[: len(whole) * 3 // 4])
    expected, error = _per_frame(path)
    assert error is not None and "compressed stream (gzip) is damaged or truncated" in error
    got, got_error, _ = _batched(path, 100)
    assert got == expected and got_error == error
    with pytest.raises(CaptureTruncated), open_capture(path) as capture:
        for _ in capture.batches(itertools.repeat(100)):
            pass
