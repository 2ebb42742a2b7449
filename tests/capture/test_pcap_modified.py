"""Kuznetzov's "modified" pcap (magic 0xa1b2cd34; 24-byte record headers, libpcap's
``pcap_sf_patched_pkthdr``): read as libpcap reads it, the 8 extra bytes skipped.

A capture of another format is rewritten into it here (the magic, and 8 bytes after
each record's 16-byte header); every frame must read back the same, the analysis's
tables must be the same bytes with one process and with --jobs 2 (whose workers read
their batches again from the file), and tshark must count the same frames.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture, write_pcap
from espforensics.errors import CaptureTruncated
from espforensics.model.options import Options
from espforensics.model.records import Frame
from tests.engine.test_jobs import _window

DATA = Path(__file__).parents[1] / "data" / "scapy"
MODIFIED = 0xA1B2CD34
EXTRA = struct.pack("<IHBB", 3, 0x0800, 0, 0)  # ifindex 3, ETH_P_IP, PACKET_HOST, pad


def _modified(standard: bytes, order: str) -> bytes:
    """A standard microsecond pcap of byte order ``order``, in the modified format."""
    magic = struct.unpack_from(order + "I", standard)[0]
    assert magic == 0xA1B2C3D4
    out = [struct.pack(order + "I", MODIFIED), standard[4:24]]
    off = 24
    while off < len(standard):
        caplen = struct.unpack_from(order + "I", standard, off + 8)[0]
        out += [standard[off : off + 16], EXTRA, standard[off + 16 : off + 16 + caplen]]
        off += 16 + caplen
    return b"".join(out)


def _frames(path: Path) -> list[Frame]:
    with open_capture(path) as cap:
        return [f for f in cap if isinstance(f, Frame)]


@pytest.mark.parametrize("order", ["<", ">"])
def test_every_frame_reads_as_in_the_standard_file(tmp_path: Path, order: str) -> None:
    frames = _frames(DATA / "algos.pcap")
    standard, modified = tmp_path / "s.pcap", tmp_path / "m.pcap"
    with standard.open("wb") as out:
        byteorder: Literal["little", "big"] = "little" if order == "<" else "big"
        write_pcap(out, frames, linktype=1, nanosecond=False, byteorder=byteorder)
    modified.write_bytes(_modified(standard.read_bytes(), order))
    assert modified.read_bytes()[:4] == (
        b"\x34\xcd\xb2\xa1" if order == "<" else b"\xa1\xb2\xcd\x34"
    )
    with open_capture(modified) as cap:
        got = [f for f in cap if isinstance(f, Frame)]
        assert (cap.format, cap.frames_read, cap.bytes_read) == (
            "pcap",
            45,
            len(modified.read_bytes()),
        )
    assert got == frames


def test_a_modified_record_cut_short_is_named(tmp_path: Path) -> None:
    """The file ends inside the 8 extra bytes of frame 45's header."""
    data = _modified((DATA / "algos.pcap").read_bytes(), "<")
    last = len(data) - (16 + 8 + _frames(DATA / "algos.pcap")[-1].caplen)
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[: last + 20])
    with open_capture(path) as cap, pytest.raises(CaptureTruncated) as err:
        for _ in cap:
            pass
    assert err.value.message == "capture ends inside frame 45: read 44 complete frames"


def _tables(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("packets.csv", "sas.csv")}


def test_the_analysis_is_the_standard_files_with_and_without_workers(
    tmp_path: Path, patient: list[int]
) -> None:
    """A steady window of the fuzzer (250+ frames, so the workers open batches), rewritten:
    its tables are the standard file's, with one process and with --jobs 2."""
    window, keys = _window(tmp_path, 2)
    standard = _microseconds(window)
    modified = tmp_path / "m" / standard.name  # the same name: nothing differs by it
    modified.parent.mkdir()
    modified.write_bytes(_modified(standard.read_bytes(), "<"))
    options = Options(batch_frames=16)
    analyze_to_dir(standard, [keys], tmp_path / "s", options=options, plots=False)
    analyze_to_dir(modified, [keys], tmp_path / "one", options=options, plots=False)
    analyze_to_dir(modified, [keys], tmp_path / "two", options=options, plots=False, jobs=2)
    assert _tables(tmp_path / "one") == _tables(tmp_path / "s") == _tables(tmp_path / "two")
    assert patient[0] > 0, "no batch was opened by a worker"


def _microseconds(path: Path) -> Path:
    """The capture at ``path`` as a little-endian microsecond pcap (written again)."""
    frames = _frames(path)
    out = path.with_suffix(".us.pcap")
    with out.open("wb") as fh:
        write_pcap(fh, frames, linktype=frames[0].linktype, nanosecond=False)
    assert _frames(out) == [f._replace(ts_ns=f.ts_ns // 1000 * 1000) for f in frames]
    return out


def test_tshark_reads_the_same_frames() -> None:
    """Wireshark's wiretap reads the modified format too: the same frames, lengths and SPIs
    (so the rewriting above makes what the format's other readers read)."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.pcap"
        path.write_bytes(_modified((DATA / "ah.pcap").read_bytes(), "<"))
        res = subprocess.run(
            ["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.len", "-e", "esp.spi"],
            check=True, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    theirs = [line.split("\t") for line in res.stdout.splitlines()]
    ours = _frames(DATA / "ah.pcap")
    assert [int(n) for n, _ in theirs] == [f.wirelen for f in ours]
    assert [s for _, s in theirs if s] == ["0x000000e1"] * 3 + ["0x000000e2"] * 2 + [
        "0x000000e3", "0x000000e3", "0x000000e2", "0x000000e2"
    ]  # fmt: skip
