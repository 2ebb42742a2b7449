"""ESP carried behind a PPPoE session (RFC 2516) or an MPLS label stack (RFC 3032) on
Ethernet, and on serial links (PPP, RFC 1661/1662; Cisco HDLC).

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
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture, write_pcapng
from espforensics.keys import load_sas
from espforensics.keys.sa import Secret, SecurityAssociation
from espforensics.model.enums import FindingKind, Severity, Verdict
from espforensics.model.options import Options
from espforensics.model.records import Frame, PacketRecord
from espforensics.rewrite import CaptureCopies
from espforensics.rewrite.rebuild import relink
from espforensics.synth.esp import EspSealer
from espforensics.synth.packets import ipv4_packet, udp_bytes
from tests.rewrite.test_annotate import read_pcapng
from tests.support.helpers import PER_FRAME, STEADY, run_frames

DATA = Path(__file__).parents[1] / "data" / "scapy"
PCAP, KEYS = DATA / "carriers.pcap", DATA / "carriers.keys.yaml"
OK, NOT_ESP = Verdict.OK, Verdict.NOT_ESP

# make_carriers.py: frame, verdict, SPI, seq, inner source port, detail.
ROWS = [
    (1, OK, 0xC1, 1, 1001, ""),
    (2, OK, 0xC1, 2, 1002, ""),
    (3, NOT_ESP, None, None, None, "not IP: PPPoE session, PPP protocol 0xc021"),  # LCP
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
    # scapy's SPIs 0xc1, 0xc2 are in the range RFC 4303 s2.1 reserves to IANA: only that
    assert [(f.kind, f.severity, f.spi) for f in run.findings] == [
        (FindingKind.RESERVED_SPI, Severity.INFO, spi) for spi in (0xC1, 0xC2)
    ]


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


# -- serial links: PPP and Cisco HDLC --------------------------------------------------------

SRC, DST = IPv4Address("192.0.2.1"), IPv4Address("192.0.2.2")
SERIAL = {  # link type -> the link headers before an IPv4 packet, one per frame
    9: (b"\xff\x03\x00\x21", b"\x00\x21", b"\x21"),  # PPP: HDLC-like framing, plain, compressed
    50: (b"\xff\x03\x00\x21", b"\x0f\x00\x08\x00"),  # PPP in HDLC-like framing; Cisco's
    104: (b"\x0f\x00\x08\x00", b"\x8f\x00\x08\x00"),  # Cisco HDLC, unicast and broadcast
    51: (b"\x11\x00\x00\x07\x00\x00\x00\x21",),  # PPPoE without its Ethernet header
}


def _serial(tmp: Path) -> tuple[Path, SecurityAssociation, list[bytes]]:
    """A pcapng, an interface per link type of SERIAL, a tunnel-mode ESP packet of one
    GCM SA per frame (seq 1, 2, ...), each carrying UDP 1000+seq -> 2000; and the inner
    packets."""
    sa = SecurityAssociation(
        spi=0x5E71, algorithm="rfc4106(gcm(aes))", key=Secret(bytes(range(20))),
        icv_bits=128, src=SRC, dst=DST, mode="tunnel", origin="test",
    )  # fmt: skip
    sealer = EspSealer(sa, bytes(range(8)))
    frames, inner = [], []
    heads = [(lt, head) for lt, hs in SERIAL.items() for head in hs]
    for seq, (lt, link) in enumerate(heads, 1):
        packet = ipv4_packet(SRC, DST, 17, udp_bytes(SRC, DST, 1000 + seq, 2000, b"s" * 20))
        esp = ipv4_packet(SRC, DST, 50, sealer.seal(packet, 4, seq))
        length = (len(esp) + 2).to_bytes(2)  # PPPoE's: the PPP protocol and the packet
        data = (link[:4] + length + link[6:] if lt == 51 else link) + esp
        frames.append(Frame(seq, seq * 1_000_000, len(data), len(data), lt, data))
        inner.append(packet)
    path = tmp / "serial.pcapng"
    with path.open("wb") as out:
        write_pcapng(out, frames, linktypes=list(SERIAL))
    return path, sa, inner


def test_esp_over_ppp_and_cisco_hdlc_is_opened(tmp_path: Path) -> None:
    """Serial-link captures (a router's, a dial-up or DSL line's): every ESP packet is
    found behind its PPP or Cisco HDLC header and opened; tshark reads the same SPIs and
    sequence numbers. They were all `undecodable` ("link type 9 is not supported")."""
    path, sa, inner = _serial(tmp_path)
    with open_capture(path) as cap:
        frames = [f for f in cap if isinstance(f, Frame)]
    run = run_frames(frames, [sa], PER_FRAME)
    assert [(r.frame, r.verdict, r.seq, r.inner_sport) for r in run.records] == [
        (n, OK, n, 1000 + n) for n in range(1, len(inner) + 1)
    ]
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    res = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "esp.spi", "-e", "esp.sequence"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.stdout.split("\n")[:-1] == [f"0x00005e71\t{n}" for n in range(1, len(inner) + 1)]


def test_the_decrypted_capture_rewrites_the_ppp_and_hdlc_protocol(tmp_path: Path) -> None:
    """--decrypted: each frame becomes its link header, the protocol it names set for the
    inner packet's version (PPP 0x21 / 0x0021, Cisco HDLC an EtherType), then the inner
    packet; PPPoE without Ethernet (its length field) stays as captured."""
    path, _, inner = _serial(tmp_path)
    target = tmp_path / "decrypted.pcapng"
    keys = tmp_path / "k.yaml"
    keys.write_text(
        "sas:\n- spi: 0x5e71\n  aead: rfc4106(gcm(aes))\n"
        f"  key: 0x{bytes(range(20)).hex()}\n  mode: tunnel\n"
    )
    analyze_to_dir(
        path, [keys], tmp_path / "out", plots=False, copies=CaptureCopies(decrypted=target)
    )
    _, packets = read_pcapng(target)
    heads = [head for hs in SERIAL.values() for head in hs]
    for n, (p, head, packet) in enumerate(zip(packets, heads, inner, strict=True), 1):
        if n == len(heads):  # PPPoE
            assert any("its PPPoE or MPLS header is not rewritten" in c for c in p.comments)
            continue
        assert p.data == head + packet, n  # IPv4 inside IPv4: the same protocol value
    # An inner packet of the other version: the protocol each header names is set for it.
    assert relink(9, b"\x21", 6) == b"\x57" and relink(9, b"\x00\x57", 4) == b"\x00\x21"
    assert relink(50, b"\xff\x03\x00\x21", 6) == b"\xff\x03\x00\x57"
    assert relink(104, b"\x0f\x00\x08\x00", 6) == b"\x0f\x00\x86\xdd"
    assert relink(104, b"\x0f\x00\x88\x47\x00\x01\x01\x40", 6) is None  # MPLS behind it
    assert relink(51, SERIAL[51][0], 4) is None  # PPPoE: its length would change
