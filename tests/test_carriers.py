"""ESP carried on Ethernet behind a PPPoE session (RFC 2516) or an MPLS label stack (RFC 3032).

tests/data/scapy/carriers.pcap was made with scapy (make_carriers.py there
lists its frames). Every ESP packet is found behind its carrier, opened and
checked as on plain Ethernet; tshark 4.0 reads the same SPIs, sequence
numbers and ICVs; the frames without IP are named by their EtherType. Before,
every one of them was "not IP: EtherType 0x8864" (or 0x8847).
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture
from espforensics.keys import load_sas
from espforensics.model import Frame, PacketRecord, Verdict
from espforensics.pipeline import Options
from espforensics.rewrite import CaptureCopies
from tests.helpers import PER_FRAME, STEADY, run_frames
from tests.test_annotate import read_pcapng

DATA = Path(__file__).parent / "data" / "scapy"
PCAP, KEYS = DATA / "carriers.pcap", DATA / "carriers.keys.yaml"
OK, NOT_ESP = Verdict.OK, Verdict.NOT_ESP

# make_carriers.py: frame, verdict, SPI, seq, inner source port, detail.
ROWS = [
    (1, OK, 0xC1, 1, 1001, ""),
    (2, OK, 0xC1, 2, 1002, ""),
    (3, NOT_ESP, None, None, None, "not IP: EtherType 0x8864"),  # PPP LCP
    (4, OK, 0xC1, 3, 1003, ""),
    (5, OK, 0xC1, 4, 1004, ""),
    (6, OK, 0xC1, 5, 1005, ""),
    (7, OK, 0xC1, 6, 1006, ""),
    (8, NOT_ESP, None, None, None, "not IP: EtherType 0x8863"),  # PPPoE discovery
    (9, OK, 0xC2, 1, 1001, ""),
    (10, OK, 0xC2, 2, 1002, ""),
]


@cache
def _frames() -> tuple[Frame, ...]:
    with open_capture(PCAP) as cap:
        return tuple(f for f in cap if isinstance(f, Frame))


def _row(rec: PacketRecord) -> tuple[object, ...]:
    return (rec.frame, rec.verdict, rec.spi, rec.seq, rec.inner_sport, rec.detail)


@pytest.mark.parametrize("options", [PER_FRAME, STEADY], ids=["per-frame", "steady"])
def test_esp_behind_pppoe_and_mpls_is_opened(options: Options) -> None:
    run = run_frames(_frames(), load_sas([KEYS]), options)
    assert [_row(r) for r in run.records] == ROWS
    assert {r.esp_offset for r in run.records if r.spi} == {20, 40}  # from the IP header
    assert not run.findings


def test_tshark_reads_the_same_esp_behind_the_carriers() -> None:
    """tshark 4.0, with no key, reads the same SPI and sequence number in every ESP frame."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    res = subprocess.run(
        ["tshark", "-n", "-r", str(PCAP), "-T", "fields",
         "-e", "frame.number", "-e", "esp.spi", "-e", "esp.sequence"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    theirs = [line.split("\t") for line in res.stdout.splitlines()]
    read = [(int(n), int(spi, 16), int(seq)) for n, spi, seq in theirs if spi]
    assert read == [(n, spi, seq) for n, v, spi, seq, _, _ in ROWS if v is OK]


def test_the_decrypted_capture_keeps_pppoe_and_mpls_frames(tmp_path: Path) -> None:
    """--decrypted rewrites an Ethernet header's EtherType for the inner packet; a PPPoE or
    MPLS header it would have to rewrite too is not, so those frames stay as captured (the
    pcapng comment says why) and frame 7, on plain Ethernet, is decrypted."""
    target = tmp_path / "decrypted.pcap"
    analyze_to_dir(
        PCAP, [KEYS], tmp_path / "out", plots=False, copies=CaptureCopies(decrypted=target)
    )
    with open_capture(target) as cap:
        out = [f for f in cap if isinstance(f, Frame)]
    frames = _frames()
    assert [n for n, (a, b) in enumerate(zip(out, frames, strict=True), 1) if a != b] == [7]
    udp = out[6].data[14 + 20 :]
    assert udp[:4] == (1006).to_bytes(2) + (2000).to_bytes(2) and udp[8:] == b"x" * 20
    notes = tmp_path / "decrypted.pcapng"
    analyze_to_dir(
        PCAP, [KEYS], tmp_path / "again", plots=False, copies=CaptureCopies(decrypted=notes)
    )
    _, packets = read_pcapng(notes)
    kept = "espforensics: kept as captured: its PPPoE or MPLS header is not rewritten"
    said = [n for n, p in enumerate(packets, 1) if any(c.startswith(kept) for c in p.comments)]
    assert said == [1, 2, 4, 5, 6, 9, 10]
