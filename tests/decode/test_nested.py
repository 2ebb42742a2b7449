"""Issue 20 s3: ESP inside ESP, and IPComp inside ESP.

tests/data/scapy/nested.pcap was sealed by scapy (make_nested.py there lists
its frames): two SAs nested in tunnel mode, two in transport mode (next
header 50), and IPComp (RFC 3173) under an SA with next header 108. Every
layer of every frame is asserted row by row, with all the keys, the outer
keys only and the inner keys only; the steady lane is checked against the
per-frame path on a longer capture of nested ESP built with our own sealer;
and tshark 4.0 is asked what it reads of the same capture.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import zlib
from functools import cache
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.analysis import analyze_to_dir, summarize
from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.capture import open_capture
from espforensics.decode.ip import parse_ip
from espforensics.decode.ipcomp import MAX_INFLATED, decompress
from espforensics.decode.nested import NestedEsp, nested_esp
from espforensics.engine.run import Engine
from espforensics.errors import MalformedPacket
from espforensics.keys import SaTable, load_sas
from espforensics.keys.sa import Secret, SecurityAssociation
from espforensics.model.enums import FindingKind, Unchecked, Verdict
from espforensics.model.options import Options
from espforensics.model.records import Finding, Frame, PacketRecord
from espforensics.render.html import format_html
from espforensics.render.text import format_text
from espforensics.report.content import report_content
from espforensics.report.lead import lead
from espforensics.results.gate import EXIT_CLEAN, EXIT_UNCHECKED, exit_code
from espforensics.results.summary import Summary
from espforensics.synth.esp import EspSealer
from espforensics.synth.packets import ipv4_packet, ipv6_packet, udp_bytes
from espforensics.tables.packets import iter_packet_records

DATA = Path(__file__).parents[1] / "data" / "scapy"
PCAP = DATA / "nested.pcap"
KEYS = DATA / "nested.keys.yaml"
A, B, T, D, P = 0xB001, 0xB002, 0xB003, 0xB004, 0xB005  # make_nested.py's SAs
OK, UNKNOWN = Verdict.OK, Verdict.UNKNOWN_SA


@cache
def _frames() -> tuple[Frame, ...]:
    with open_capture(PCAP) as cap:
        return tuple(f for f in cap if isinstance(f, Frame))


def _keys(*spis: int) -> SaTable:
    """The SAs of nested.keys.yaml whose SPI is one of ``spis``."""
    table = SaTable()
    for sa in load_sas([KEYS]):
        if sa.spi in spis:
            table.add(sa)
    return table


def _run(
    sas: SaTable, frames: tuple[Frame, ...] | list[Frame], lane: bool, batch: int = 4
) -> tuple[list[PacketRecord], list[Finding]]:
    """Every row the engine yields, records and steady runs' records alike."""
    analyzer = FrameAnalyzer(sas, Options(steady_lane=lane, batch_frames=batch), "nested")
    engine = Engine(analyzer, Options(steady_lane=lane, batch_frames=batch))
    rows: list[PacketRecord] = []
    for row in engine.iter_rows(frames):
        assert isinstance(row, PacketRecord), "the lane took a frame that carries ESP"
        rows.append(row)
    engine.close()
    return rows, analyzer.findings


def _row(rec: PacketRecord) -> tuple[object, ...]:
    return (
        rec.frame, rec.layer, rec.spi, rec.verdict, rec.seq,
        rec.inner_proto, rec.inner_sport, rec.inner_dport,
    )  # fmt: skip


# make_nested.py: frame, layer, SPI, verdict, seq, inner protocol, inner ports.
ALL_KEYS = [
    (1, 1, A, OK, 1, "esp", None, None),
    (1, 2, B, OK, 1, "tcp", 4001, 80),
    (2, 1, A, OK, 2, "esp", None, None),
    (2, 2, B, OK, 2, "tcp", 4002, 80),
    (3, 1, A, OK, 3, "esp", None, None),
    (3, 2, B, OK, 2, "tcp", 4003, 80),
    (4, 1, A, OK, 4, "esp", None, None),
    (4, 2, B, OK, 3, "tcp", 4004, 80),
    (5, 1, T, OK, 1, "esp", None, None),
    (5, 2, D, OK, 1, "icmp", None, None),
    (6, 1, T, OK, 2, "esp", None, None),
    (6, 2, D, OK, 2, "icmp", None, None),
    (7, 1, P, OK, 1, "udp", 5353, 53),
    (8, 1, P, OK, 2, "", None, None),
    (9, 1, P, OK, 3, "udp", 5353, 53),
]


@pytest.mark.parametrize("lane", [False, True], ids=["per-frame", "steady"])
def test_every_layer_has_its_row(lane: bool) -> None:
    rows, _ = _run(load_sas([KEYS]), _frames(), lane)
    assert [_row(r) for r in rows] == ALL_KEYS
    inner = {r.frame: r for r in rows if r.layer == 2}
    # Tunnel mode: the inner layer's addresses are its own tunnel's; offsets count from
    # its IP header; its length is the inner IP packet's (scapy: 124 bytes for 10 of data).
    assert (inner[1].src, inner[1].dst, inner[1].esp_offset) == ("203.0.113.1", "203.0.113.2", 20)
    assert (inner[1].caplen, inner[1].len) == (124, 124)
    assert (rows[0].algorithm, inner[1].algorithm) == (
        "cbc(aes) + hmac(sha1)",
        "cbc(aes) + hmac(sha256)",
    )
    assert inner[1].inner_src == "10.1.0.1" and inner[1].inner_checksum == "ok"
    # Transport mode (next header 50): the same addresses as the outer layer.
    outer5 = next(r for r in rows if r.frame == 5)
    assert (outer5.next_header, inner[5].src, inner[5].dst) == (50, "192.0.2.1", "192.0.2.2")
    assert (inner[5].next_header, inner[5].inner_checksum) == (1, "ok")


def test_a_sequence_duplicate_inside_the_inner_sa_is_found() -> None:
    rows, findings = _run(load_sas([KEYS]), _frames(), False)
    dup = [f for f in findings if f.kind is FindingKind.SEQ_DUPLICATE]
    assert [(f.spi, f.frames, f.src, f.dst) for f in dup] == [
        (B, (3,), "203.0.113.1", "203.0.113.2")
    ]
    assert [(r.frame, r.layer) for r in rows if r.seq_anomaly] == [(3, 2)]


def test_outer_keys_only_the_inner_layer_is_unknown_sa() -> None:
    rows, _ = _run(_keys(A, T, P), _frames(), False)
    got = [(r.frame, r.layer, r.spi, r.verdict) for r in rows if r.frame <= 6]
    assert got == [
        (n, layer, spi, OK if layer == 1 else UNKNOWN)
        for n, (outer, inner) in zip(range(1, 7), [(A, B)] * 4 + [(T, D)] * 2, strict=True)
        for layer, spi in ((1, outer), (2, inner))
    ]
    assert all(r.detail.startswith("no key for SPI") for r in rows if r.layer == 2)


def test_inner_keys_only_the_inner_layer_is_invisible() -> None:
    sas = _keys(B, D)
    analyzer = FrameAnalyzer(sas, Options(steady_lane=False), "nested")
    engine = Engine(analyzer, Options(steady_lane=False))
    rows = [r for r in engine.iter_rows(_frames()) if isinstance(r, PacketRecord)]
    assert [(r.frame, r.layer, r.spi, r.verdict) for r in rows] == [
        (n, 1, spi, UNKNOWN) for n, spi in enumerate([A] * 4 + [T] * 2 + [P] * 3, start=1)
    ]
    assert sorted(u.spi for u in analyzer.unused_sas) == [B, D]  # no packet reached them


def test_ipcomp_is_inflated_for_the_inner_checks() -> None:
    rows, _ = _run(load_sas([KEYS]), _frames(), False)
    comp = {r.frame: r for r in rows if r.spi == P}
    # make_nested.py: IPComp header + DEFLATE of a 428-byte IPv4 UDP packet (20 + 8 + 400).
    assert (comp[7].next_header, comp[7].ipcomp_cpi, comp[7].ipcomp_len) == (108, 2, 428)
    assert (comp[7].inner_src, comp[7].inner_dst) == ("10.1.0.1", "10.2.0.1")
    assert (comp[7].inner_checksum, comp[7].tfc_len) == ("ok", 0)  # the inflated packet's UDP
    assert comp[7].payload_len is not None and comp[7].payload_len < 428  # it was compressed
    assert (comp[9].ipcomp_cpi, comp[9].ipcomp_len, comp[9].inner_sport) == (0x4242, 428, 5353)
    bomb = comp[8]
    assert bomb.ipcomp_cpi is None and bomb.inner_proto == ""
    assert bomb.detail.startswith(
        "inner packet: IPComp data of 114 bytes inflates past 65535 bytes (not followed)"
    )
    assert bomb.inner_checksum == "not_checked"


def test_decompress_refuses_what_is_no_deflate_packet() -> None:
    packet = b"\x45" + bytes(27)
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = deflate.compress(packet) + deflate.flush()
    got = decompress(bytes([4, 0, 0, 2]) + data)
    assert (got.next_header, got.cpi, got.compressed, got.data) == (4, 2, len(data), packet)
    with pytest.raises(MalformedPacket, match=r"^IPComp header cut at 3 bytes$"):
        decompress(b"\x04\x00\x00")
    with pytest.raises(MalformedPacket, match=r"CPI 2 \(DEFLATE\) does not inflate as DEFLATE"):
        decompress(bytes([4, 0, 0, 2, 0xFF, 0xFF, 0xFF]))
    with pytest.raises(MalformedPacket, match="negotiated CPI 0x4242 is not one whole DEFLATE"):
        decompress(bytes([4, 0, 0x42, 0x42]) + data[:-2])
    with pytest.raises(MalformedPacket, match="not one whole DEFLATE stream"):
        decompress(bytes([4, 0, 0, 2]) + data + b"\x00")  # bytes after the stream's end
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    big = bomb.compress(bytes(MAX_INFLATED + 1)) + bomb.flush()
    with pytest.raises(MalformedPacket, match="inflates past 65535 bytes"):
        decompress(bytes([4, 0, 0, 2]) + big)
    exact = zlib.compressobj(9, zlib.DEFLATED, -15)
    edge = exact.compress(bytes(MAX_INFLATED)) + exact.flush()
    assert len(decompress(bytes([4, 0, 0, 2]) + edge).data) == MAX_INFLATED


def test_tables_write_a_row_per_layer_and_count_frames_once(tmp_path: Path) -> None:
    summary = analyze_to_dir(PCAP, [KEYS], tmp_path / "out", plots=False)
    with (tmp_path / "out" / "packets.csv").open(newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [(int(r["frame"]), int(r["layer"]), int(r["spi"])) for r in table] == [
        (row[0], row[1], row[2]) for row in ALL_KEYS
    ]
    assert [r["ipcomp_cpi"] for r in table if int(r["spi"]) == P] == ["2", "", "16962"]
    counts = (summary.capture.frames, summary.esp_packets, sum(summary.verdicts.values()))
    assert counts == (9, 9, 9)
    with (tmp_path / "out" / "sas.csv").open(newline="") as fh:
        sas = {int(r["spi"]): r for r in csv.DictReader(fh)}
    assert all(r["spi_hex"] == f"{spi:#010x}" for spi, r in sas.items())
    assert sorted(sas) == [A, B, T, D, P]
    assert (sas[B]["src"], sas[B]["dst"], sas[B]["packets"]) == ("203.0.113.1", "203.0.113.2", "4")
    assert (sas[D]["src"], sas[D]["packets"]) == ("192.0.2.1", "2")
    # The passes that walk the capture beside its table see one row per frame.
    once = list(iter_packet_records(tmp_path / "out" / "packets.parquet", ["spi"]))
    assert [(r.frame, r.spi) for r in once] == [(n, s) for n, s in _outer_spis()]


def test_every_count_of_the_reports_takes_the_inner_layers_too(tmp_path: Path) -> None:
    """15 ESP packets: one per frame (9) and 6 inside them. The lead, the coverage and the
    --unchecked gate count all 15 (they said "15 of 9" before, and the gate let the 6
    unverified inner layers of an outer-keys-only run pass as checked)."""
    whole = summarize(PCAP, load_sas([KEYS]))
    assert (whole.esp_packets, whole.inner_esp_packets, whole.esp_layers) == (9, 6, 15)
    text = format_text(report_content(whole))
    assert "all 15 ESP packets (6 inside other ESP packets) verified with their keys (5 SAs)" in (
        " ".join(text.split())
    )
    assert "frames: 9; ESP packets: 9 (and 6 inside them) in 5 SAs" in text
    html = format_html(report_content(whole))
    assert '<td data-sort="9">9 (and 6 inside them)</td></tr>' in html  # sorted as a number
    plain = format_html(report_content(summarize(PCAP, _keys(B, D))))  # no inner layer seen
    assert '<td class="num" data-sort="9">9</td></tr>' in plain
    assert {(c.name, c.examined, c.esp_packets) for c in whole.coverage} >= {
        ("esp_placement", 15, 15)
    }
    outer = summarize(PCAP, _keys(A, T, P))
    assert (outer.esp_packets, outer.inner_esp_packets) == (9, 6)
    assert lead(outer)[0] == (
        "9 of 15 ESP packets (6 inside other ESP packets) verified with their keys; "
        "not: 6 without a key (SPIs 0x0000b002, 0x0000b004)"
    )
    assert exit_code(outer, None, Unchecked.FAIL) == EXIT_UNCHECKED
    assert exit_code(whole, None, Unchecked.FAIL) == EXIT_CLEAN
    again = Summary.from_json(json.loads(json.dumps(outer.to_json())))
    assert (again.inner_esp_packets, again.coverage) == (6, outer.coverage)


def _outer_spis() -> list[tuple[int, int]]:
    return [(row[0], row[2]) for row in ALL_KEYS if row[1] == 1]


# -- the steady lane: an outer SA in its steady state never takes a packet that carries ESP --

OUT_SRC, OUT_DST = IPv4Address("192.0.2.1"), IPv4Address("192.0.2.2")
MID_SRC, MID_DST = IPv4Address("203.0.113.1"), IPv4Address("203.0.113.2")


def _gcm(
    spi: int, src: IPv4Address | IPv6Address, dst: IPv4Address | IPv6Address
) -> SecurityAssociation:
    return SecurityAssociation(
        spi=spi,
        algorithm="rfc4106(gcm(aes))",
        key=Secret(bytes((spi + i) & 0xFF for i in range(20))),
        icv_bits=128,
        src=src,
        dst=dst,
        origin="test",
    )


def _carries_esp(seq: int) -> bool:
    # Frames 1-80 and 101-120 carry plain UDP: the lane's, once the SA's first 64 packets
    # settled its IV checks (the lane takes from frame 65 on).
    return 81 <= seq <= 100


def _nested_frames(n: int) -> tuple[SaTable, list[Frame]]:
    """An outer SA whose frames 81-100 carry an inner SA's ESP, the others UDP."""
    outer, inner = _gcm(0xC001, OUT_SRC, OUT_DST), _gcm(0xC002, MID_SRC, MID_DST)
    seal_out, seal_in = (
        EspSealer(outer, b"\x5a\x17\xc3\x01\x9e\x42\x88\x2d"),
        EspSealer(inner, bytes(range(8))),
    )
    frames = []
    for seq in range(1, n + 1):
        udp = ipv4_packet(OUT_SRC, OUT_DST, 17, udp_bytes(OUT_SRC, OUT_DST, 7000 + seq, 53, b"z"))
        if _carries_esp(seq):
            udp = ipv4_packet(MID_SRC, MID_DST, 50, seal_in.seal(udp, 4, seq - 80))
        data = ipv4_packet(OUT_SRC, OUT_DST, 50, seal_out.seal(udp, 4, seq))
        frames.append(Frame(seq, 10**18 + seq * 1000, len(data), len(data), 101, data))
    table = SaTable()
    table.add(outer)
    table.add(inner)
    return table, frames


@pytest.mark.parametrize("batch", [4, 8, 16])
def test_steady_lane_leaves_nested_esp_to_the_per_frame_path(batch: int) -> None:
    sas, frames = _nested_frames(120)
    reference, ref_findings = _run(sas, frames, False)
    assert [(r.frame, r.layer, r.spi, r.verdict, r.inner_sport) for r in reference] == [
        (n, layer, spi, OK, None if spi == 0xC001 and _carries_esp(n) else 7000 + n)
        for n in range(1, 121)
        for layer, spi in ((1, 0xC001), (2, 0xC002))
        if layer == 1 or _carries_esp(n)
    ]
    analyzer = FrameAnalyzer(sas, Options(batch_frames=batch), "nested")
    engine = Engine(analyzer, Options(batch_frames=batch))
    rows: list[tuple[object, ...]] = []
    steady: list[int] = []
    for row in engine.iter_rows(frames):
        if isinstance(row, PacketRecord):
            rows.append((row.frame, row.layer, row.spi, row.verdict, row.inner_sport))
            continue
        assert not row.records  # every frame of this capture carries ESP
        steady += row.frame.tolist()
        ports = zip(row.frame.tolist(), row.inner_sport.tolist(), strict=True)
        rows += [(f, 1, 0xC001, OK, p) for f, p in ports]
    engine.close()
    assert steady and not any(_carries_esp(n) for n in steady)  # the lane ran, on UDP only
    assert rows == [(r.frame, r.layer, r.spi, r.verdict, r.inner_sport) for r in reference]
    assert analyzer.findings == ref_findings


# -- tshark 4.0 reads the same layers --------------------------------------------------------

WIRESHARK = {
    "cbc(aes)": "AES-CBC [RFC3602]",
    "cbc(des3_ede)": "TripleDES-CBC [RFC2451]",
    "hmac(sha1)": "HMAC-SHA-1-96 [RFC2404]",
    "hmac(sha256)": "HMAC-SHA-256-128 [RFC4868]",
}


def _esp_sa_rows() -> list[str]:
    text = KEYS.read_text(encoding="ascii")
    rows = []
    for entry in text.split("- spi: ")[1:]:
        f = dict(re.findall(r"(\w+): (\S+)", "spi: " + entry))
        cols = [
            "IPv4", f["src"], f["dst"], f"0x{int(f['spi'], 16):08x}", WIRESHARK[f["enc"]],
            f["key"], WIRESHARK[f["auth"]], f["auth_key"],
        ]  # fmt: skip
        rows.append(",".join(f'"{c}"' for c in cols))
    return rows


def test_tshark_reads_every_layer_as_we_do() -> None:
    """tshark 4.0, given the same SAs, reads the same SPIs and sequence numbers layer by
    layer, checks each layer's ICV, and finds the same inner ports, through IPComp too.

    Frames 7 and 9 carry DNS that tshark's DNS dissector calls malformed ("abcd" data):
    the exception ends the frame's dissection before the ICV field, so tshark shows no
    ICV verdict there. Frame 8 (the zip bomb) tshark inflates and reads as an IP packet
    of version 0; we stop inflating at 65,535 bytes.
    """
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    opts = ["-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE"]
    for line in _esp_sa_rows():
        opts += ["-o", f"uat:esp_sa:{line}"]
    fields = ["frame.number", "esp.spi", "esp.sequence", "esp.icv_good"]
    fields += ["tcp.srcport", "udp.srcport"]
    res = subprocess.run(
        ["tshark", "-n", "-r", str(PCAP), *opts, "-T", "fields",
         *(a for f in fields for a in ("-e", f))],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    got = [dict(zip(fields, line.split("\t"), strict=True)) for line in res.stdout.splitlines()]
    rows, _ = _run(load_sas([KEYS]), _frames(), False)
    assert [int(g["frame.number"]) for g in got] == list(range(1, 10))
    for frame in got:
        n = int(frame["frame.number"])
        ours = [r for r in rows if r.frame == n]
        assert [int(s, 16) for s in frame["esp.spi"].split(",")] == [r.spi for r in ours], n
        assert [int(s) for s in frame["esp.sequence"].split(",")] == [r.seq for r in ours], n
        good = frame["esp.icv_good"].split(",") if frame["esp.icv_good"] else []
        assert good == ([] if n in (7, 9) else ["1"] * len(ours)), n
        sport = frame["tcp.srcport"] or frame["udp.srcport"]
        assert (int(sport) if sport else None) == ours[-1].inner_sport, n


# -- how deep, and what is not analyzed ---------------------------------------------------------


def _tunnel_stack(depth: int, inner: bytes, fragment: bool = False) -> tuple[SaTable, Frame]:
    """``depth`` GCM SAs, each in tunnel mode inside the next: SA 0xD001 is the outermost.

    ``fragment``: the innermost tunnel's IP header says more fragments follow.
    """
    table = SaTable()
    packet = inner
    for k in range(depth, 0, -1):
        sa = _gcm(0xD000 + k, MID_SRC, MID_DST)
        table.add(sa)
        esp = EspSealer(sa, bytes(8)).seal(packet, 4, 1)
        packet = ipv4_packet(MID_SRC, MID_DST, 50, esp, more_fragments=fragment and k == depth)
    return table, Frame(1, 10**18, len(packet), len(packet), 101, packet)


def test_four_layers_are_analyzed_and_a_fifth_is_named() -> None:
    udp = ipv4_packet(OUT_SRC, OUT_DST, 17, udp_bytes(OUT_SRC, OUT_DST, 9999, 53, b"deep"))
    sas, frame = _tunnel_stack(5, udp)
    rows, _ = _run(sas, [frame], False)
    assert [(r.layer, r.spi, r.verdict, r.inner_proto) for r in rows] == [
        (1, 0xD001, OK, "esp"),
        (2, 0xD002, OK, "esp"),
        (3, 0xD003, OK, "esp"),
        (4, 0xD004, OK, "esp"),
    ]
    assert rows[-1].detail.startswith("more than 4 ESP layers; inner checksum not checked")
    sas, frame = _tunnel_stack(4, udp)
    rows, _ = _run(sas, [frame], False)
    assert [(r.layer, r.spi, r.inner_sport) for r in rows][-1] == (4, 0xD004, 9999)
    assert "layers" not in rows[-1].detail


def test_an_inner_esp_fragment_is_named_not_analyzed() -> None:
    udp = ipv4_packet(OUT_SRC, OUT_DST, 17, udp_bytes(OUT_SRC, OUT_DST, 9999, 53, b"frag"))
    sas, frame = _tunnel_stack(2, udp, fragment=True)
    rows, _ = _run(sas, [frame], False)
    assert [(r.layer, r.spi, r.verdict) for r in rows] == [(1, 0xD001, OK)]
    assert rows[0].detail.startswith("inner ESP not analyzed: its inner IP packet is a fragment")


def test_ipcomp_under_an_sa_without_integrity_is_judged_by_the_inflated_packet() -> None:
    """No ICV (RFC 4303 s3.2): the verdict rests on the inner header, the inflated one."""
    sa = SecurityAssociation(
        spi=0xE001, algorithm="cbc(aes)", key=Secret(bytes(range(16))), icv_bits=0,
        src=OUT_SRC, dst=OUT_DST, origin="test",
    )  # fmt: skip
    sealer = EspSealer(sa, bytes(16))
    udp = ipv4_packet(OUT_SRC, OUT_DST, 17, udp_bytes(OUT_SRC, OUT_DST, 4242, 53, b"n" * 200))
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    good = bytes([4, 0, 0, 2]) + comp.compress(udp) + comp.flush()
    bad_ip = bytearray(udp)
    bad_ip[10] ^= 0xFF  # the inner IPv4 header checksum no longer verifies
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    bad = bytes([4, 0, 0, 2]) + comp.compress(bytes(bad_ip)) + comp.flush()
    frames = []
    for seq, payload in enumerate((good, bad), start=1):
        data = ipv4_packet(OUT_SRC, OUT_DST, 50, sealer.seal(payload, 108, seq))
        frames.append(Frame(seq, 10**18 + seq, len(data), len(data), 101, data))
    table = SaTable()
    table.add(sa)
    rows, _ = _run(table, frames, False)
    assert [(r.verdict, r.ipcomp_cpi, r.ipcomp_len, r.inner_sport) for r in rows] == [
        (Verdict.DECRYPTED_NO_ICV, 2, len(udp), 4242),
        (Verdict.UNDECODABLE, 2, len(udp), 4242),
    ]
    assert rows[1].detail.startswith("inner packet: IPv4 header checksum")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([4, 41, 50, 108, 6]), st.binary(max_size=120))
def test_any_plaintext_is_an_inner_esp_packet_a_reason_or_none(nh: int, payload: bytes) -> None:
    """Whatever a plaintext holds, looking for an inner ESP packet or inflating IPComp
    raises nothing but ``MalformedPacket`` (a record's ``detail``)."""
    outer = ipv4_packet(OUT_SRC, OUT_DST, 50, bytes(16))
    found = nested_esp(nh, payload, parse_ip(outer), outer)
    assert found is None or isinstance(found, str | NestedEsp)
    if isinstance(found, NestedEsp):
        assert found.ip.proto == 50 and len(found.data) == found.ip.total_len
    try:
        got = decompress(payload)
    except MalformedPacket:
        return
    assert len(got.data) <= MAX_INFLATED and got.cpi == int.from_bytes(payload[2:4])


def test_an_ipv6_tunnel_with_extension_headers_carries_the_inner_esp() -> None:
    """IPv4 ESP carrying an IPv6 packet whose ESP follows a destination-options header
    (RFC 8200 s4.1): the inner SA is looked up by its IPv6 addresses."""
    a6, b6 = IPv6Address("2001:db8::1"), IPv6Address("2001:db8::2")
    outer_sa, inner_sa = _gcm(0xF001, OUT_SRC, OUT_DST), _gcm(0xF002, a6, b6)
    udp = ipv6_packet(a6, b6, 17, udp_bytes(a6, b6, 6000, 53, b"six"))
    esp = EspSealer(inner_sa, bytes(8)).seal(udp, 41, 1)
    carried = ipv6_packet(a6, b6, 50, esp, ext=[60])
    data = ipv4_packet(OUT_SRC, OUT_DST, 50, EspSealer(outer_sa, bytes(8)).seal(carried, 41, 1))
    table = SaTable()
    table.add(outer_sa)
    table.add(inner_sa)
    rows, _ = _run(table, [Frame(1, 10**18, len(data), len(data), 101, data)], False)
    assert [(r.layer, r.spi, r.verdict, r.src, r.esp_offset, r.inner_sport) for r in rows] == [
        (1, 0xF001, OK, "192.0.2.1", 20, None),
        (2, 0xF002, OK, "2001:db8::1", 48, 6000),
    ]


def test_an_outer_sa_without_integrity_still_opens_its_inner_layer() -> None:
    """decrypted_no_icv (a sound inner IPv4 header) is opened plaintext too: the inner
    ESP packet is analyzed, and its own ICV verifies."""
    outer_sa = SecurityAssociation(
        spi=0xE101, algorithm="cbc(aes)", key=Secret(bytes(range(16))), icv_bits=0,
        src=OUT_SRC, dst=OUT_DST, origin="test",
    )  # fmt: skip
    inner_sa = _gcm(0xE102, MID_SRC, MID_DST)
    udp = ipv4_packet(OUT_SRC, OUT_DST, 17, udp_bytes(OUT_SRC, OUT_DST, 1111, 53, b"cbc"))
    carried = ipv4_packet(MID_SRC, MID_DST, 50, EspSealer(inner_sa, bytes(8)).seal(udp, 4, 1))
    data = ipv4_packet(OUT_SRC, OUT_DST, 50, EspSealer(outer_sa, bytes(16)).seal(carried, 4, 1))
    table = SaTable()
    table.add(outer_sa)
    table.add(inner_sa)
    rows, _ = _run(table, [Frame(1, 10**18, len(data), len(data), 101, data)], False)
    assert [(r.layer, r.spi, r.verdict, r.inner_sport) for r in rows] == [
        (1, 0xE101, Verdict.DECRYPTED_NO_ICV, None),
        (2, 0xE102, OK, 1111),
    ]


def test_ipcomp_as_the_inner_ip_packets_protocol_gives_the_inflated_ports() -> None:
    """ESP tunnel, inner IPv4 of protocol 108 (IPComp in transport mode inside it)."""
    sa = _gcm(0xE201, OUT_SRC, OUT_DST)
    udp = udp_bytes(MID_SRC, MID_DST, 2222, 53, b"w" * 300)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    ipcomp = bytes([17, 0, 0, 2]) + comp.compress(udp) + comp.flush()
    data = ipv4_packet(
        OUT_SRC,
        OUT_DST,
        50,
        EspSealer(sa, bytes(8)).seal(ipv4_packet(MID_SRC, MID_DST, 108, ipcomp), 4, 1),
    )
    table = SaTable()
    table.add(sa)
    rows, _ = _run(table, [Frame(1, 10**18, len(data), len(data), 101, data)], False)
    got = [
        (r.verdict, r.inner_proto, r.inner_src, r.inner_sport, r.ipcomp_cpi, r.ipcomp_len)
        for r in rows
    ]
    assert got == [(OK, "udp", "203.0.113.1", 2222, 2, len(udp))]
