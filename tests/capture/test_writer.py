"""Tests of espforensics.capture.writer: exact bytes, dpkt as a reader, misuse."""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence
from pathlib import Path

import dpkt
import pytest

from espforensics.capture import open_compressed_writer, write_pcap, write_pcapng
from espforensics.model.records import DecryptionSecrets, Frame
from tests.support.helpers import capture_names, real_capture

F1 = Frame(1, 1_700_000_000_000_001_000, 3, 5, 1, b"abc")


def pcap_bytes(frames: list[Frame], **kwargs: object) -> bytes:
    out = io.BytesIO()
    write_pcap(out, frames, **kwargs)  # type: ignore[arg-type]
    return out.getvalue()


def pcapng_bytes(items: Sequence[Frame | DecryptionSecrets], **kwargs: object) -> bytes:
    out = io.BytesIO()
    write_pcapng(out, items, **kwargs)  # type: ignore[arg-type]
    return out.getvalue()


def test_pcap_header_matches_a_tcpdump_file(captures: Path) -> None:
    # the real captures were written by tcpdump: microseconds, LE, snaplen 262144, Ethernet
    with open(real_capture(capture_names("linux-6.1")[0]).pcap, "rb") as f:
        tcpdump = f.read(24)
    assert pcap_bytes([], linktype=1, nanosecond=False) == tcpdump


def test_pcap_record_bytes() -> None:
    data = pcap_bytes([F1], linktype=1, nanosecond=True, byteorder="big")
    assert data[:4] == bytes.fromhex("a1b23c4d")
    assert data[24:] == struct.pack(">IIII", 1_700_000_000, 1_000, 3, 5) + b"abc"
    micro = pcap_bytes([F1], linktype=1, nanosecond=False)
    assert micro[24:40] == struct.pack("<IIII", 1_700_000_000, 1, 3, 5)


def test_pcapng_exact_bytes() -> None:
    secrets = DecryptionSecrets(0x544C534B, b"k")
    shb = bytes.fromhex("0a0d0d0a 1c000000 4d3c2b1a 0100 0000 ffffffffffffffff 1c000000")
    idb = bytes.fromhex(
        "01000000 20000000 6500 0000 64000000 0900 0100 06000000 0000 0000 20000000"
    )
    dsb = bytes.fromhex("0a000000 18000000 4b534c54 01000000 6b000000 18000000")
    ticks = 1_700_000_000_000_001
    epb = struct.pack("<IIIIIII", 6, 36, 0, ticks >> 32, ticks & 0xFFFFFFFF, 3, 5) + b"abc\0"
    epb += struct.pack("<I", 36)
    with pytest.raises(ValueError, match="no interface has link type 1"):
        pcapng_bytes([F1], linktypes=[101])
    data = pcapng_bytes(
        [secrets, F1._replace(linktype=101)], linktypes=[101], tsresol=6, snaplen=100
    )
    assert data == shb + idb + dsb + epb


def test_pcapng_frames_use_first_interface_of_their_link_type() -> None:
    frames = [F1, F1._replace(number=2, linktype=101)]
    data = pcapng_bytes(frames, linktypes=[101, 1, 1, 101])
    epbs = data[28 + 4 * 32 :]
    assert struct.unpack_from("<I", epbs, 8)[0] == 1
    assert struct.unpack_from("<I", epbs, 36 + 8)[0] == 0


def test_pcapng_simple_packet_block_bytes() -> None:
    data = pcapng_bytes([F1._replace(wirelen=3)], linktypes=[1], simple=True, byteorder="big")
    assert data[28 + 32 :] == struct.pack(">III", 3, 20, 3) + b"abc\0" + struct.pack(">I", 20)


def test_dpkt_reads_written_pcapng() -> None:
    frames = [
        Frame(i + 1, 1_600_000_000_000_000_000 + i * 1_234_000, 4, 4, 1, bytes([i] * 4))
        for i in range(20)
    ]
    data = pcapng_bytes(frames, linktypes=[1], tsresol=6)
    got = list(dpkt.pcapng.Reader(io.BytesIO(data)))
    assert [(ts, bytes(buf)) for ts, buf in got] == [
        (f.ts_ns // 1000 / 1e6, f.data) for f in frames
    ]


def test_counts_only_frames() -> None:
    out = io.BytesIO()
    items: list[Frame | DecryptionSecrets] = [DecryptionSecrets(1, b""), F1, F1]
    assert write_pcapng(out, items, linktypes=[1]) == 2
    assert write_pcap(io.BytesIO(), [F1] * 3, linktype=1) == 3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: pcap_bytes([F1], linktype=101), "frame 1: link type 1, file has 101"),
        (
            lambda: pcap_bytes([F1._replace(caplen=4)], linktype=1),
            r"frame 1: caplen 4 != len\(data\) 3",
        ),
        (lambda: pcap_bytes([F1._replace(ts_ns=-1)], linktype=1), "outside pcap's range"),
        (lambda: pcap_bytes([F1._replace(ts_ns=1 << 62)], linktype=1), "outside pcap's range"),
        (lambda: pcap_bytes([F1._replace(wirelen=1 << 32)], linktype=1), "does not fit 32 bits"),
        (lambda: pcap_bytes([], linktype=1, byteorder="middle"), "byteorder must be"),
        (lambda: pcapng_bytes([F1], linktypes=[]), "at least one link type"),
        (lambda: pcapng_bytes([F1], linktypes=[1, 101], simple=True), "exactly one link type"),
        (lambda: pcapng_bytes([F1], linktypes=[1], tsresol=128), "tsresol 128"),
        (lambda: pcapng_bytes([F1], linktypes=[1 << 16]), "does not fit pcapng's 16 bits"),
        (lambda: pcapng_bytes([F1._replace(ts_ns=-5)], linktypes=[1]), "outside pcapng's range"),
        (lambda: pcapng_bytes([F1], linktypes=[1], simple=True), "cannot say caplen 3"),
    ],
)
def test_misuse_raises_value_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_compressed_writer_is_reproducible(tmp_path: Path) -> None:
    blobs = []
    for name in ("a", "b"):
        path = tmp_path / name / "same.pcap.gz"
        path.parent.mkdir()
        with open_compressed_writer(path, "gzip") as out:
            write_pcap(out, [F1], linktype=1)
        blobs.append(path.read_bytes())
    assert blobs[0] == blobs[1]
    assert blobs[0][:2] == b"\x1f\x8b"


def test_compressed_writer_rejects_unknown_kind(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown compression 'lz4'"):
        open_compressed_writer(tmp_path / "x", "lz4")  # type: ignore[arg-type]
