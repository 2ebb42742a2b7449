"""ESP after an Authentication Header (an AH-then-ESP bundle, RFC 4301 s4.3).

tests/data/scapy/ah.pcap was sealed by scapy (make_ah.py there lists its
frames): ESP behind AH over IPv4 and over IPv6 (after hop-by-hop options),
whole and in outer fragments (IPv4, and IPv6 with the Fragment header
before AH). Every ESP packet is found after its AH, opened and checked;
tshark 4.0 reads the same SPIs, sequence numbers and ICVs. Before, such a
frame was ``not_esp`` ("AH") and its SA "matched no packet".
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.capture import open_capture
from espforensics.decode.ip import PROTO_AH, PROTO_ESP, parse_ip
from espforensics.engine.run import Engine
from espforensics.errors import MalformedPacket, Truncated
from espforensics.keys import SaTable, load_sas
from espforensics.keys.sa import Secret, SecurityAssociation
from espforensics.model.enums import FindingKind, InnerChecksum, Severity, Verdict
from espforensics.model.options import Options
from espforensics.model.records import Frame, PacketRecord
from espforensics.rewrite import CaptureCopies
from espforensics.synth.esp import EspSealer
from espforensics.synth.packets import ipv4_packet, ipv6_packet, udp_bytes
from tests.support.helpers import PER_FRAME, STEADY, run_frames

DATA = Path(__file__).parents[1] / "data" / "scapy"
PCAP, KEYS = DATA / "ah.pcap", DATA / "ah.keys.yaml"
OK, FRAGMENT = Verdict.OK, Verdict.FRAGMENT


@cache
def _frames() -> tuple[Frame, ...]:
    with open_capture(PCAP) as cap:
        return tuple(f for f in cap if isinstance(f, Frame))


# make_ah.py: frame, verdict, SPI, seq, ESP offset (IP header + extension headers + AH),
# fragments, inner source port.
ROWS = [
    (1, OK, 0xE1, 1, 20 + 24, None, 1001),
    (2, OK, 0xE1, 2, 44, None, 1002),
    (3, OK, 0xE1, 3, 44, None, 1003),
    (4, OK, 0xE2, 1, 40 + 8 + 32, None, 1001),  # AH of 28 bytes, padded to 32 in IPv6
    (5, OK, 0xE2, 2, 80, None, 1002),
    (6, FRAGMENT, None, None, None, None, None),
    (7, OK, 0xE3, 1, 44, 2, 1001),
    (8, FRAGMENT, None, None, None, None, None),
    (9, OK, 0xE3, 2, 44, 2, 1002),
    (10, FRAGMENT, None, None, None, None, None),
    (11, OK, 0xE2, 3, 80, 2, 1003),
    (12, FRAGMENT, None, None, None, None, None),
    (13, OK, 0xE2, 4, 80, 2, 1004),
]


def _row(rec: PacketRecord) -> tuple[object, ...]:
    return (
        rec.frame, rec.verdict, rec.spi, rec.seq, rec.esp_offset, rec.fragments, rec.inner_sport,
    )  # fmt: skip


@pytest.mark.parametrize("options", [PER_FRAME, STEADY], ids=["per-frame", "steady"])
def test_every_esp_packet_after_an_ah_is_found_and_opened(options: Options) -> None:
    run = run_frames(_frames(), load_sas([KEYS]), options)
    assert [_row(r) for r in run.records] == ROWS
    assert all(r.expected_offset == r.esp_offset for r in run.records if r.spi is not None)
    # The transport-mode checksums cover the outer addresses: AH and hop-by-hop change
    # nothing of the pseudo-header (RFC 8200 s8.1), so every one is checked.
    assert {r.inner_checksum for r in run.records if r.spi is not None} == {InnerChecksum.OK}
    # scapy's SPIs 0xe1..0xe3 are in the range RFC 4303 s2.1 reserves to IANA: only that
    assert [(f.kind, f.severity, f.spi) for f in run.findings] == [
        (FindingKind.RESERVED_SPI, Severity.INFO, spi) for spi in (0xE1, 0xE2, 0xE3)
    ]


def test_tshark_reads_the_same_esp_behind_the_ah() -> None:
    """tshark 4.0, given the same SAs, reads the same SPI, sequence number, ICV verdict and
    inner port in every frame that completes an ESP packet."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    opts = ["-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE"]
    for line in _esp_sa_rows():
        opts += ["-o", f"uat:esp_sa:{line}"]
    fields = ["frame.number", "esp.spi", "esp.sequence", "esp.icv_good", "udp.srcport"]
    res = subprocess.run(
        ["tshark", "-n", "-r", str(PCAP), *opts, "-T", "fields",
         *(a for f in fields for a in ("-e", f))],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    theirs = [line.split("\t") for line in res.stdout.splitlines()]
    read = [
        (int(n), int(spi, 16), int(seq), good, int(port))
        for n, spi, seq, good, port in theirs
        if spi
    ]
    assert read == [(n, spi, seq, "1", port) for n, v, spi, seq, _, _, port in ROWS if v is OK]


def _esp_sa_rows() -> list[str]:
    """Wireshark esp_sa rows for ah.keys.yaml's SAs."""
    names = {
        "cbc(aes)": "AES-CBC [RFC3602]",
        "rfc4106(gcm(aes))": "AES-GCM with 16 octet ICV [RFC4106]",
        "hmac(sha1)": "HMAC-SHA-1-96 [RFC2404]",
        "hmac(sha256)": "HMAC-SHA-256-128 [RFC4868]",
    }
    rows = []
    for entry in KEYS.read_text(encoding="ascii").split("- spi: ")[1:]:
        f = dict(re.findall(r"(\w+): (\S+)", "spi: " + entry))
        cipher = f.get("enc") or f["aead"]
        auth = names[f["auth"]] if "auth" in f else "NULL"
        family = "IPv6" if "gcm" in cipher else "IPv4"  # make_ah.py: SA 0xE2 is the IPv6 one
        cols = [family, "*", "*", f"0x{int(f['spi'], 16):08x}", names[cipher], f["key"], auth]
        rows.append(",".join(f'"{c}"' for c in [*cols, f.get("auth_key", "")]))
    return rows


# -- the decoder ----------------------------------------------------------------------------

SRC, DST = IPv4Address("192.0.2.1"), IPv4Address("192.0.2.2")


def _ah(next_header: int, words: int) -> bytes:
    """An AH of ``(words + 2) * 4`` bytes (RFC 4302 s2.2), its SPI 0xA1 and seq 1."""
    head = bytes([next_header, words, 0, 0]) + (0xA1).to_bytes(4) + (1).to_bytes(4)
    return head + bytes(max((words + 2) * 4 - len(head), 0))


def test_parse_ip_walks_an_ah_only_when_asked() -> None:
    esp = (0x1234).to_bytes(4) + bytes(40)
    v4 = ipv4_packet(SRC, DST, PROTO_AH, _ah(PROTO_ESP, 4) + esp)
    walked = parse_ip(v4, through_ah=True)
    assert (walked.proto, walked.header_len, walked.total_len) == (PROTO_ESP, 20 + 24, len(v4))
    assert (parse_ip(v4).proto, parse_ip(v4).header_len) == (PROTO_AH, 20)
    v6 = ipv6_packet(
        IPv6Address("2001:db8::1"), IPv6Address("2001:db8::2"), PROTO_AH, _ah(PROTO_ESP, 5) + esp
    )
    assert parse_ip(v6, through_ah=True)[3:5] == (PROTO_ESP, 40 + 28)


def test_the_ah_of_an_ipv4_fragment_waits_for_its_datagram() -> None:
    """A fragment's data is not walked (a later fragment has no AH at its start)."""
    first = ipv4_packet(SRC, DST, PROTO_AH, _ah(PROTO_ESP, 4) + bytes(40), more_fragments=True)
    ip = parse_ip(first, through_ah=True)
    assert (ip.proto, ip.header_len, ip.frag_offset, ip.more_fragments) == (PROTO_AH, 20, 0, True)


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (_ah(PROTO_ESP, 4)[:10], Truncated, "AH header cut at 10 bytes"),
        (b"", Truncated, "AH header cut at 0 bytes"),  # Hypothesis: was an IndexError
        (_ah(PROTO_ESP, 0), MalformedPacket, "AH length 8 is below 12 bytes"),
        (_ah(PROTO_ESP, 9)[:30], MalformedPacket, "AH length 44 overruns the datagram (50 bytes)"),
    ],
)
def test_a_bad_ah_is_named(body: bytes, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        parse_ip(ipv4_packet(SRC, DST, PROTO_AH, body), through_ah=True)


def test_the_steady_lane_takes_esp_behind_an_ipv4_ah() -> None:
    """One GCM SA, 300 packets, every 7th behind an AH: the lane (engine/wire.py walks an
    IPv4 AH as decode/ip.py does) takes both kinds in bulk and gives the per-frame path's
    rows; the SA's sequence numbers run without a gap or a duplicate."""
    sa = SecurityAssociation(
        spi=0x7001, algorithm="rfc4106(gcm(aes))", key=Secret(bytes(range(20))),
        icv_bits=128, src=SRC, dst=DST, origin="test",
    )  # fmt: skip
    sealer = EspSealer(sa, bytes(range(8)))
    frames = []
    for seq in range(1, 301):
        esp = sealer.seal(udp_bytes(SRC, DST, 1000, 2000, bytes(40)), 17, seq)
        proto, body = (PROTO_AH, _ah(PROTO_ESP, 4) + esp) if seq % 7 == 0 else (PROTO_ESP, esp)
        packet = ipv4_packet(SRC, DST, proto, body)
        frames.append(Frame(seq, seq * 1000, len(packet), len(packet), 101, packet))
    one = run_frames(frames, [sa], PER_FRAME)
    lane = run_frames(frames, [sa], STEADY)
    assert [r.verdict for r in one.records] == [OK] * 300
    assert [r.esp_offset for r in one.records] == [44 if s % 7 == 0 else 20 for s in range(1, 301)]
    assert lane.records == one.records
    assert not one.findings and not lane.findings
    engine = Engine(FrameAnalyzer(SaTable((sa,)), STEADY, "ah"), STEADY)
    taken = [n for row in engine.iter_rows(frames) if not isinstance(row, PacketRecord)
             for n in row.frame.tolist()]  # fmt: skip
    engine.close()
    assert len(taken) > 200 and len([n for n in taken if n % 7 == 0]) > 25  # AH ones too


def test_the_decrypted_capture_leaves_the_ah_out(tmp_path: Path) -> None:
    """--decrypted: a transport-mode packet behind AH becomes its IP header (IPv6: and the
    hop-by-hop header before AH) naming UDP, then the UDP datagram; the AH, whose ICV
    could not cover the new packet, goes with the ESP header."""
    target = tmp_path / "decrypted.pcap"
    analyze_to_dir(
        PCAP, [KEYS], tmp_path / "out", plots=False, copies=CaptureCopies(decrypted=target)
    )
    with open_capture(target) as cap:
        out = [f for f in cap if isinstance(f, Frame)]
    for frame, n in zip(out[:5], range(1, 6), strict=True):
        ip = frame.data[14:]  # Ethernet
        at = parse_ip(ip)
        assert (at.proto, at.header_len, at.total_len) == (17, 20 if n < 4 else 48, len(ip))
        udp = ip[at.header_len :]
        sport = 1000 + (n if n < 4 else n - 3)
        assert udp[:2] == sport.to_bytes(2) and udp[8:] == bytes([0x41 + sport - 1000]) * 20
    assert [f.data for f in out[5:]] == [f.data for f in _frames()[5:]]  # fragments: as captured


def test_a_frame_of_ah_without_esp_says_what_the_ah_carried() -> None:
    """AH alone (transport mode, TCP behind it) is no ESP: its row says "AH, then TCP"."""
    tcp = bytes(20)
    packet = ipv4_packet(SRC, DST, PROTO_AH, _ah(6, 4) + tcp)
    ip = parse_ip(packet, through_ah=True)
    assert (ip.proto, ip.header_len, ip.ah) == (6, 44, True)
    assert not parse_ip(packet).ah
    run = run_frames([Frame(1, 1000, len(packet), len(packet), 101, packet)], [], PER_FRAME)
    assert [(r.verdict, r.detail) for r in run.records] == [(Verdict.NOT_ESP, "AH, then TCP")]
