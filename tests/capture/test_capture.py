"""Tests of espforensics.capture: reading pcap/pcapng, plain and compressed.

Files are made with the writers (round trips), by hand where the writers
cannot produce the structure (power-of-two resolutions, obsolete and unknown
blocks, damage), and dpkt reads the real captures as an independent oracle.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.capture import open_capture, open_compressed_writer, write_pcap, write_pcapng
from espforensics.capture.compression import CHUNK_SIZE
from espforensics.errors import CaptureError, CaptureTruncated
from espforensics.model.records import DecryptionSecrets, Frame
from tests.support.helpers import capture_names, capture_params, needs_captures, real_capture

# shared/ sits beside the project (../shared from its root), here and in CI.
T0 = 1_700_000_000_123_456_789  # ns
Kind = Literal["gzip", "bzip2", "xz", "zstd"]
Order = Literal["little", "big"]
KINDS: list[Kind] = ["gzip", "bzip2", "xz", "zstd"]
ORDERS: list[Order] = ["little", "big"]


def make_frames(
    count: int, linktypes: Sequence[int] = (1,), *, step_ns: int = 1_001_001, size: int = 60
) -> list[Frame]:
    """Frames of varied sizes (0 included), some cut short of their wire length."""
    frames = []
    for i in range(count):
        data = bytes((i + j) & 0xFF for j in range((size + 7 * i) % 97))
        wirelen = len(data) + (i % 3) * 10
        lt = linktypes[i % len(linktypes)]
        frames.append(Frame(i + 1, T0 + i * step_ns, len(data), wirelen, lt, data))
    return frames


def read_all(path: Path) -> list[Frame | DecryptionSecrets]:
    with open_capture(path) as capture:
        return list(capture)


def write_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# ---- hand-made pcapng blocks (draft-ietf-opsawg-pcapng s3-s4) ----


def block(order: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    blen = len(body) + 12
    return struct.pack(order + "II", btype, blen) + body + struct.pack(order + "I", blen)


def shb(order: str = "<", major: int = 1) -> bytes:
    return block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, major, 0, -1))


def option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def idb(order: str, linktype: int, snaplen: int = 0, options: bytes = b"") -> bytes:
    return block(order, 1, struct.pack(order + "HHI", linktype, 0, snaplen) + options)


def epb(order: str, if_id: int, ticks: int, data: bytes, wirelen: int | None = None) -> bytes:
    high, low = divmod(ticks, 1 << 32)
    head = struct.pack(order + "IIIII", if_id, high, low, len(data), wirelen or len(data))
    return block(order, 6, head + data)


def pcap_header(magic: int = 0xA1B2C3D4, linktype: int = 1, order: str = "<") -> bytes:
    return struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 65535, linktype)


# ---- round trips through the writers ----


@pytest.mark.parametrize("byteorder", ORDERS)
@pytest.mark.parametrize("nanosecond", [True, False])
def test_pcap_round_trip(tmp_path: Path, byteorder: Order, nanosecond: bool) -> None:
    frames = make_frames(50)
    path = tmp_path / "a.pcap"
    with path.open("wb") as out:
        count = write_pcap(out, frames, linktype=1, nanosecond=nanosecond, byteorder=byteorder)
    assert count == 50
    with open_capture(path) as capture:
        got = list(capture)
        assert (capture.format, capture.compression) == ("pcap", None)
        assert capture.frames_read == 50
        assert capture.bytes_read == path.stat().st_size
    unit = 1 if nanosecond else 1000
    assert got == [f._replace(ts_ns=f.ts_ns // unit * unit) for f in frames]
    assert all(type(f) is Frame and type(f.data) is bytes for f in got)


def test_pcap_masks_fcs_bits_of_link_type(tmp_path: Path) -> None:
    # draft-ietf-opsawg-pcap s4: FCS length and flag sit above the 26-bit link type
    data = pcap_header(linktype=0x14000001) + struct.pack("<IIII", 5, 6, 2, 2) + b"ab"
    (frame,) = read_all(write_file(tmp_path / "x", data))
    assert frame == Frame(1, 5_000_006_000, 2, 2, 1, b"ab")


def test_pcap_record_larger_than_a_chunk(tmp_path: Path) -> None:
    big = Frame(2, T0, CHUNK_SIZE * 2 + 3, CHUNK_SIZE * 2 + 3, 1, b"\x5a" * (CHUNK_SIZE * 2 + 3))
    frames = [make_frames(1)[0], big, make_frames(3)[2]._replace(number=3)]
    path = tmp_path / "big.pcap"
    with path.open("wb") as out:
        write_pcap(out, frames, linktype=1)
    assert read_all(path) == frames


@pytest.mark.parametrize("byteorder", ORDERS)
@pytest.mark.parametrize("tsresol", [6, 9])
def test_pcapng_two_interfaces_interleaved(tmp_path: Path, byteorder: Order, tsresol: int) -> None:
    frames = make_frames(40, linktypes=(1, 101, 101, 1, 1))
    path = tmp_path / "two.pcapng"
    with path.open("wb") as out:
        write_pcapng(out, frames, linktypes=[1, 101], byteorder=byteorder, tsresol=tsresol)
    unit = 10 ** (9 - tsresol)
    with open_capture(path) as capture:
        got = list(capture)
        assert (capture.format, capture.frames_read) == ("pcapng", 40)
    assert got == [f._replace(ts_ns=f.ts_ns // unit * unit) for f in frames]
    assert all(type(f) is Frame and type(f.data) is bytes for f in got)


def test_pcapng_sections_with_different_byte_orders(tmp_path: Path) -> None:
    first = make_frames(7, linktypes=(1, 101))
    second = [f._replace(number=f.number + 7, linktype=101) for f in make_frames(5)]
    path = tmp_path / "sections.pcapng"
    with path.open("wb") as out:
        write_pcapng(out, first, linktypes=[1, 101], byteorder="little")
        # a new SHB forgets the interfaces: 101 is interface 0 here
        write_pcapng(out, second, linktypes=[101], byteorder="big")
    assert read_all(path) == first + second


def test_pcapng_simple_packet_blocks(tmp_path: Path) -> None:
    epbs = make_frames(2)
    spbs = [
        Frame(3, 0, 64, 200, 1, bytes(64)),  # cut to the snaplen
        Frame(4, 0, 5, 5, 1, b"hello"),  # padded in the block, cut to wirelen
    ]
    path = tmp_path / "spb.pcapng"
    with path.open("wb") as out:
        write_pcapng(out, spbs[:1], linktypes=[1], simple=True, snaplen=64)
        write_pcapng(out, epbs, linktypes=[1])
        write_pcapng(out, spbs[1:], linktypes=[1], simple=True, snaplen=0)
    got = read_all(path)
    # pcapng s4.4: no timestamp, so the previous packet's (none yet: 0)
    assert got == [
        spbs[0]._replace(number=1),
        epbs[0]._replace(number=2),
        epbs[1]._replace(number=3),
        spbs[1]._replace(ts_ns=epbs[1].ts_ns),
    ]


def test_pcapng_decryption_secrets_in_stream_position(tmp_path: Path) -> None:
    f1, f2 = make_frames(2)
    secrets = DecryptionSecrets(0x5353484B, b"CLIENT_RANDOM 01 02\n")  # 21 bytes: padded
    empty = DecryptionSecrets(0x544C534B, b"")
    path = tmp_path / "dsb.pcapng"
    with path.open("wb") as out:
        assert write_pcapng(out, [empty, f1, secrets, f2], linktypes=[1]) == 2
    with open_capture(path) as capture:
        assert list(capture) == [empty, f1, secrets, f2]
        assert capture.frames_read == 2


@pytest.mark.parametrize(
    ("tsresol", "ticks", "expected_ns"),
    [
        (0x80 | 10, 1536, 1_500_000_000),  # 2^-10 s
        (0x80 | 10, 1, 976_562),  # 10^9 / 1024, floored
        (0x80 | 30, 3 << 30, 3_000_000_000),
        (0x80 | 0, 2, 2_000_000_000),
        (12, 1_234_567_890_123, 1_234_567_890),  # picoseconds, floored
        (0, 7, 7_000_000_000),
        (3, (1 << 32) + 5, ((1 << 32) + 5) * 1_000_000),  # the high word counts
        (0, (1 << 64) - 1, ((1 << 64) - 1) * 10**9),  # whole seconds: year 5.8e11, still read
        (0x80 | 127, (1 << 64) - 1, 0),  # 2^-127 s: every 64-bit count is under 1 ns
        (127, (1 << 64) - 1, 0),  # 10^-127 s
    ],
)
def test_pcapng_timestamp_resolutions(
    tmp_path: Path, tsresol: int, ticks: int, expected_ns: int
) -> None:
    opts = option("<", 9, bytes([tsresol])) + option("<", 0, b"")
    data = shb() + idb("<", 1, options=opts) + epb("<", 0, ticks, b"x")
    assert read_all(write_file(tmp_path / "r", data)) == [Frame(1, expected_ns, 1, 1, 1, b"x")]


def test_pcapng_default_resolution_and_offset(tmp_path: Path) -> None:
    # pcapng s4.2: no if_tsresol means microseconds; if_tsoffset adds seconds
    big = shb(">") + idb(">", 1, options=option(">", 14, struct.pack(">q", -10)))
    data = shb() + idb("<", 228) + epb("<", 0, 5, b"a") + big + epb(">", 0, 20_000_000, b"b")
    assert read_all(write_file(tmp_path / "o", data)) == [
        Frame(1, 5_000, 1, 1, 228, b"a"),
        Frame(2, 10_000_000_000, 1, 1, 1, b"b"),
    ]


@pytest.mark.parametrize("offset", [-(1 << 63), (1 << 63) - 1])
def test_pcapng_extreme_offsets_are_read(tmp_path: Path, offset: int) -> None:
    # pcapng s4.2: if_tsoffset is a signed 64-bit count of seconds, any value legal
    opts = option("<", 14, struct.pack("<q", offset)) + option("<", 9, b"\x00")
    data = shb() + idb("<", 1, options=opts) + epb("<", 0, 3, b"x")
    expected = Frame(1, (offset + 3) * 10**9, 1, 1, 1, b"x")
    assert read_all(write_file(tmp_path / "o", data)) == [expected]


def test_pcapng_obsolete_and_unknown_blocks(tmp_path: Path) -> None:
    opb = block("<", 2, struct.pack("<HHIIII", 1, 0, 0, 3, 2, 4) + b"zz")  # pcapng appendix A
    nrb = block("<", 4, struct.pack("<HH", 0, 0))
    custom = block("<", 0x00000BAD, b"\x00\x00\x7e\x0a" + b"anything")
    isb = block("<", 5, struct.pack("<III", 0, 0, 0))
    data = shb() + idb("<", 1) + idb("<", 113) + nrb + opb + custom + epb("<", 0, 9, b"e") + isb
    assert read_all(write_file(tmp_path / "u", data)) == [
        Frame(1, 3_000, 2, 4, 113, b"zz"),
        Frame(2, 9_000, 1, 1, 1, b"e"),
    ]


# ---- compression, sniffed by content ----


@pytest.mark.parametrize("kind", KINDS)
def test_each_compression_round_trips(tmp_path: Path, kind: Kind) -> None:
    items: list[Frame | DecryptionSecrets] = [*make_frames(30, (1, 101))]
    items.insert(4, DecryptionSecrets(1, b"key"))
    path = tmp_path / "capture"  # no suffix: the content decides
    with open_compressed_writer(path, kind) as out:
        write_pcapng(out, items, linktypes=[1, 101])
    with open_capture(path) as capture:
        assert list(capture) == items
        assert (capture.compression, capture.format) == (kind, "pcapng")


def test_gzip_named_like_a_plain_pcap(tmp_path: Path) -> None:
    frames = make_frames(5)
    path = tmp_path / "looks-plain.pcap"
    with open_compressed_writer(path, "gzip") as out:
        write_pcap(out, frames, linktype=1)
    with open_capture(path) as capture:
        assert list(capture) == frames
        assert capture.compression == "gzip"


def test_plain_file_named_gz_is_read_plain(tmp_path: Path) -> None:
    path = tmp_path / "not-really.pcap.gz"
    with open_compressed_writer(path, None) as out:
        write_pcap(out, make_frames(2), linktype=1)
    with open_capture(path) as capture:
        assert capture.compression is None
        assert len(list(capture)) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_concatenated_compressed_streams(tmp_path: Path, kind: Kind) -> None:
    # gzip members, bzip2 streams, xz streams and zstd frames may follow one another
    frames = make_frames(6)
    data = _pcap_bytes(frames)
    streams = []
    for i, piece in enumerate((data[:100], data[100:])):
        part = tmp_path / f"part{i}"
        with open_compressed_writer(part, kind) as out:
            out.write(piece)
        streams.append(part.read_bytes())
    assert read_all(write_file(tmp_path / "whole", b"".join(streams))) == frames


# ---- errors: type, frames_read, and a message naming the fault ----


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.pcap"
    with pytest.raises(CaptureError) as err:
        open_capture(path)
    assert err.value.message == "cannot open: No such file or directory"
    assert str(err.value) == f"{path}: cannot open: No such file or directory"
    assert err.value.frames_read == 0


def test_directory_is_not_a_capture(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match=r"cannot open: Is a directory$"):
        open_capture(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(CaptureError) as err:
        open_capture(write_file(tmp_path / "e.pcap", b""))
    assert err.value.message == "empty file, not a capture"
    assert type(err.value) is CaptureError


def test_empty_gzip_stream(tmp_path: Path) -> None:
    path = write_file(tmp_path / "e.gz", gzip.compress(b"", mtime=0))
    with pytest.raises(CaptureError) as err:
        open_capture(path)
    assert err.value.message == "empty file, not a capture (the gzip stream holds no data)"


def test_garbage_file(tmp_path: Path) -> None:
    with pytest.raises(CaptureError) as err:
        open_capture(write_file(tmp_path / "g.pcap", b"<html><body>404</body></html>"))
    assert err.value.message == "not a pcap or pcapng file (first bytes 0x3c68746d)"
    assert type(err.value) is CaptureError


def test_garbage_inside_gzip(tmp_path: Path) -> None:
    path = write_file(tmp_path / "g", gzip.compress(b"hello world", mtime=0))
    with pytest.raises(CaptureError) as err:
        open_capture(path)
    msg = "not a pcap or pcapng file (first bytes 0x68656c6c after gzip decompression)"
    assert err.value.message == msg


def test_tiny_file(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match=r"\(first bytes 0xd4c3\)$"):
        open_capture(write_file(tmp_path / "t", b"\xd4\xc3"))


def _iterate(path: Path) -> tuple[list[Frame | DecryptionSecrets], CaptureError]:
    """Read until the error; the frames yielded before it and the error."""
    got: list[Frame | DecryptionSecrets] = []
    with pytest.raises(CaptureError) as err, open_capture(path) as capture:
        for item in capture:
            got.append(item)
    return got, err.value


def _pcap_bytes(frames: list[Frame]) -> bytes:
    out = io.BytesIO()
    write_pcap(out, frames, linktype=1)
    return out.getvalue()


def _pcapng_bytes(
    items: Sequence[Frame | DecryptionSecrets], linktypes: Sequence[int] = (1,)
) -> bytes:
    out = io.BytesIO()
    write_pcapng(out, items, linktypes=linktypes)
    return out.getvalue()


@pytest.mark.parametrize("keep", [73, 16, 3])  # all but 1 byte, header only, part of header
def test_pcap_truncated_last_record(tmp_path: Path, keep: int) -> None:
    frames = make_frames(5, size=30)
    assert frames[-1].caplen == 58
    data = _pcap_bytes(frames)
    got, err = _iterate(write_file(tmp_path / "t.pcap", data[: len(data) - 74 + keep]))
    assert got == frames[:4]
    assert type(err) is CaptureTruncated
    assert err.frames_read == 4
    assert err.message == "capture ends inside frame 5: read 4 complete frames"


def test_pcap_truncated_file_header(tmp_path: Path) -> None:
    got, err = _iterate(write_file(tmp_path / "h", pcap_header()[:10]))
    assert (got, type(err), err.frames_read) == ([], CaptureTruncated, 0)
    assert (
        err.message
        == "capture ends inside the pcap file header (10 of 24 bytes): read 0 complete frames"
    )


def test_pcap_absurd_caplen(tmp_path: Path) -> None:
    frames = make_frames(2)
    data = _pcap_bytes(frames) + struct.pack("<IIII", 1, 2, 0xFFFFFFF0, 10) + bytes(100)
    got, err = _iterate(write_file(tmp_path / "a", data))
    assert got == frames
    assert type(err) is CaptureError
    assert err.frames_read == 2
    assert err.message == (
        f"damaged pcap record header of frame 3 at byte offset {len(data) - 116}: "
        "captured length 4294967280 exceeds the 256 MiB limit; read 2 complete frames"
    )


def test_pcapng_truncated_last_block(tmp_path: Path) -> None:
    frames = make_frames(5)
    data = _pcapng_bytes(frames)
    last_block = 32 + frames[-1].caplen + (-frames[-1].caplen % 4)
    got, err = _iterate(write_file(tmp_path / "t.pcapng", data[:-6]))
    assert got == frames[:4]
    assert type(err) is CaptureTruncated
    assert err.frames_read == 4
    offset = len(data) - last_block
    assert err.message == (
        f"capture ends inside frame 5 (enhanced packet block at byte offset {offset}): "
        "read 4 complete frames"
    )


def test_pcapng_truncated_inside_other_blocks(tmp_path: Path) -> None:
    data = (
        shb()
        + idb("<", 1)
        + epb("<", 0, 1, b"a")
        + block("<", 0xA, struct.pack("<II", 1, 8) + bytes(8))
    )
    got, err = _iterate(write_file(tmp_path / "d", data[:-3]))
    assert len(got) == 1
    assert err.message == (
        f"capture ends inside the decryption secrets block at byte offset {len(data) - 28}: "
        "read 1 complete frames"
    )
    _, err = _iterate(write_file(tmp_path / "h", data[: len(data) - 28 + 2]))
    where = len(data) - 28
    assert (
        err.message
        == f"capture ends inside a block header at byte offset {where}: read 1 complete frames"
    )


@pytest.mark.parametrize(
    ("bad_block", "btype_name", "why"),
    [
        (
            struct.pack("<II", 6, 13),
            "enhanced packet block",
            "block length 13 is not a multiple of 4",
        ),
        (
            struct.pack("<II", 6, 8),
            "enhanced packet block",
            "block length 8 is shorter than the 32-byte minimum",
        ),
        (
            struct.pack("<II", 99, 4),
            "block of type 0x00000063",
            "block length 4 is shorter than the 12-byte minimum",
        ),
        (
            struct.pack("<III", 5, 12, 16),
            "interface statistics block",
            "trailing block length differs",
        ),
        (
            struct.pack("<II", 6, 0xFFFFFFF0),
            "enhanced packet block",
            "block length 4294967280 exceeds the 257 MiB limit",
        ),
        (
            epb("<", 3, 0, b"abc"),
            "enhanced packet block",
            "interface 3 is not defined (1 in this section)",
        ),
        (
            struct.pack("<IIIIIIII", 6, 32, 0, 0, 0, 1, 1, 32),
            "enhanced packet block",
            "captured length 1 runs past the end of the block",
        ),
        (
            block("<", 0xA, struct.pack("<II", 1, 9) + bytes(8)),
            "decryption secrets block",
            "secrets length 9 runs past the end of the block (block length 28)",
        ),
        (
            idb("<", 1, options=struct.pack("<HH", 9, 4) + bytes(4)),
            "interface description block",
            "if_tsresol has length 4, not 1",
        ),
        (
            idb("<", 1, options=struct.pack("<HH", 14, 1) + bytes(4)),
            "interface description block",
            "if_tsoffset has length 1, not 8",
        ),
        (
            idb("<", 1, options=option("<", 9, b"\x06") + option("<", 9, b"\x09")),
            "interface description block",
            "if_tsresol is given twice (pcapng allows it once)",
        ),
        (
            idb("<", 1, options=option("<", 14, bytes(8)) * 2),
            "interface description block",
            "if_tsoffset is given twice (pcapng allows it once)",
        ),
        (
            idb("<", 1, options=struct.pack("<HH", 2, 40) + bytes(4)),
            "interface description block",
            "option 2 of length 40 runs past the end of the block",
        ),
        (shb(major=2), "section header block", "pcapng version 2.0 is not supported (only 1.x)"),
        (
            block("<", 0x0A0D0D0A, struct.pack("<IHHq", 0x11223344, 1, 0, -1)),
            "section header block",
            "byte-order magic 0x44332211 is neither 1a2b3c4d nor 4d3c2b1a",
        ),
    ],
)
def test_pcapng_damaged_blocks(tmp_path: Path, bad_block: bytes, btype_name: str, why: str) -> None:
    good = shb() + idb("<", 1) + epb("<", 0, 1, b"a") + epb("<", 0, 2, b"b")
    got, err = _iterate(write_file(tmp_path / "d", good + bad_block + bytes(64)))
    assert len(got) == 2
    assert type(err) is CaptureError
    assert err.frames_read == 2
    assert (
        err.message
        == f"damaged {btype_name} at byte offset {len(good)}: {why}; read 2 complete frames"
    )


def test_simple_packet_without_interface(tmp_path: Path) -> None:
    data = shb() + block("<", 3, struct.pack("<I", 1) + b"a")
    _, err = _iterate(write_file(tmp_path / "s", data))
    assert err.message == (
        "damaged simple packet block at byte offset 28: no interface is defined in this section; "
        "read 0 complete frames"
    )


def _big_pcap(frames: int = 1200) -> tuple[list[Frame], bytes]:
    """A pcap of ~3 MiB, so that decompression spans several chunks."""
    fs = [Frame(i + 1, T0 + i, 2500, 2500, 1, i.to_bytes(4, "big") * 625) for i in range(frames)]
    return fs, _pcap_bytes(fs)


@pytest.mark.parametrize("kind", KINDS)
def test_truncated_compressed_stream(tmp_path: Path, kind: Kind) -> None:
    frames, data = _big_pcap()
    path = tmp_path / "c"
    with open_compressed_writer(path, kind) as out:
        out.write(data)
    compressed = path.read_bytes()
    write_file(path, compressed[: len(compressed) * 3 // 4])
    got, err = _iterate(path)
    assert 0 < len(got) < len(frames)
    assert got == frames[: len(got)]
    assert err.frames_read == len(got)
    assert err.message.startswith(f"compressed stream ({kind}) is damaged or truncated (")
    assert err.message.endswith(f"): read {len(got)} complete frames")


@pytest.mark.parametrize("kind", ["gzip", "xz", "bzip2"])
def test_corrupt_compressed_stream(tmp_path: Path, kind: Kind) -> None:
    frames, data = _big_pcap()
    path = tmp_path / "c"
    with open_compressed_writer(path, kind) as out:
        out.write(data)
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 64] = bytes(b ^ 0x55 for b in raw[middle : middle + 64])
    got, err = _iterate(write_file(path, bytes(raw)))
    # a block's check value comes after its data: the frames before the
    # error may already hold damaged bytes (docs/capture-formats.md)
    assert len(got) < len(frames)
    assert err.frames_read == len(got)
    if kind == "bzip2":  # checked per 900 kB block: garbage may reach the parser first
        assert err.message.startswith(
            ("compressed stream (bzip2) is damaged", "damaged pcap record")
        )
    else:
        assert f"compressed stream ({kind}) is damaged or truncated" in err.message
    assert "\n" not in err.message


def test_zstd_corruption_is_caught_by_checksum(tmp_path: Path) -> None:
    frames, data = _big_pcap(300)
    path = tmp_path / "c.zst"
    with open_compressed_writer(path, "zstd") as out:
        out.write(data)
    raw = bytearray(path.read_bytes())
    raw[-2] ^= 0xFF  # the content checksum (RFC 8878 s3.1.1)
    got, err = _iterate(write_file(path, bytes(raw)))
    assert got == frames[: len(got)]
    assert "compressed stream (zstd) is damaged or truncated" in err.message


# ---- the Capture object ----


def test_capture_reads_once_and_closes(tmp_path: Path) -> None:
    path = write_file(tmp_path / "p", _pcap_bytes(make_frames(3)))
    capture = open_capture(os.fspath(path))
    assert capture.path == os.fspath(path)
    assert next(iter(capture)) == make_frames(1)[0]
    assert capture.frames_read == 1
    with pytest.raises(CaptureError, match="already read or closed"):
        iter(capture)
    capture.close()
    capture.close()
    unread = open_capture(path)
    unread.close()
    with pytest.raises(CaptureError, match="already read or closed"):
        iter(unread)


def test_abandoned_iteration_closes_the_file(tmp_path: Path) -> None:
    path = write_file(tmp_path / "p", _pcapng_bytes(make_frames(3)))
    with open_capture(path) as capture:
        for _ in capture:
            break


# ---- dpkt as an independent oracle ----


def _dpkt_frames(path: str) -> list[tuple[int, bytes]]:
    import dpkt

    out = []
    with open(path, "rb") as f:
        for ts, buf in dpkt.pcap.Reader(f):
            if isinstance(ts, Decimal):
                out.append((int(ts * 1_000_000_000), bytes(buf)))
            else:
                out.append((ts, bytes(buf)))
    return out


def _ours(path: str, nanosecond: bool) -> list[tuple[int | float, bytes]]:
    out: list[tuple[int | float, bytes]] = []
    for f in read_all(Path(path)):
        assert isinstance(f, Frame)
        if nanosecond:
            out.append((f.ts_ns, f.data))
        else:  # the same float arithmetic as dpkt: sec + usec / 1e6
            sec, ns = divmod(f.ts_ns, 1_000_000_000)
            out.append((sec + (ns // 1000) / 1e6, f.data))
    return out


@pytest.mark.parametrize("name", capture_params("linux-6.1"))
def test_real_captures_match_dpkt(name: str) -> None:
    cap = real_capture(name)
    path, truth = str(cap.pcap), cap.truth
    theirs = _dpkt_frames(path)
    ours = _ours(path, nanosecond=False)
    assert len(ours) == len(theirs) == truth["frames"]
    assert ours == theirs


@needs_captures
def test_real_captures_present() -> None:
    assert len(capture_names("linux-6.1")) >= 5


@pytest.mark.parametrize("nanosecond", [True, False])
def test_generated_pcap_matches_dpkt(tmp_path: Path, nanosecond: bool) -> None:
    frames = _big_pcap(500)[0]
    path = tmp_path / "g.pcap"
    with path.open("wb") as out:
        write_pcap(out, make_frames(300) + frames[300:], linktype=1, nanosecond=nanosecond)
    assert _ours(str(path), nanosecond) == _dpkt_frames(str(path))


# ---- random bytes never raise anything but CaptureError ----


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


HEADERS = [
    pcap_header(),
    pcap_header(0xA1B23C4D, order=">"),
    shb() + idb("<", 1),
    shb(">") + idb(">", 1, snaplen=8, options=option(">", 9, b"\x83")),
]


@settings(max_examples=300, deadline=None)
@given(header=st.sampled_from(HEADERS), cut=st.integers(0, 30), tail=st.binary(max_size=400))
def test_random_bytes_after_a_header(fuzz_dir: Path, header: bytes, cut: int, tail: bytes) -> None:
    # the header may itself be cut short, but keeps its 4-byte magic
    path = write_file(fuzz_dir / "fuzz", header[: max(4, len(header) - cut)] + tail)
    with open_capture(path) as capture:
        try:
            for item in capture:
                assert isinstance(item, Frame | DecryptionSecrets)
        except CaptureError as exc:
            assert "\n" not in str(exc)
            assert exc.frames_read == capture.frames_read


@settings(max_examples=100, deadline=None)
@given(
    tail=st.lists(
        st.sampled_from([epb("<", 0, 1, b"ab"), b"\x00" * 4, b"\x06\x00\x00\x00"]), max_size=12
    )
)
def test_random_block_sequences(fuzz_dir: Path, tail: list[bytes]) -> None:
    path = write_file(fuzz_dir / "blocks", shb() + idb("<", 1) + b"".join(tail))
    try:
        frames = read_all(path)
    except CaptureError:
        return
    assert all(isinstance(f, Frame) for f in frames)
