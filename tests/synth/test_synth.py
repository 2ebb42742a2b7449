"""Checks of the capture builder itself, independent of the analyzer.

Frames are parsed back with dpkt and a hand-written checksum, ESP is opened
with ``context_for(sa).open`` at the offset the truth names, and the facts of
each scenario are recounted from the bytes.
"""

from __future__ import annotations

import functools
import gzip
import io
import ipaddress
import json
import random
import re
import struct
from collections import Counter, defaultdict
from pathlib import Path

import dpkt
import pytest
import yaml

from espforensics.crypto import context_for
from espforensics.keys.sa import SecurityAssociation
from espforensics.model.enums import Verdict
from espforensics.model.records import Frame
from espforensics.synth import (
    SCENARIOS,
    FrameTruth,
    IvFixed,
    IvFromSeq,
    IvSeqOffset,
    Scenario,
    Trailer,
    build_plaintext,
    build_scenario,
    esp_sa_text,
    iter_bench_frames,
    keys_yaml,
    make_sa,
    seqiv,
    write_capture,
    xfrm_state_text,
)
from espforensics.synth.__main__ import main
from espforensics.synth.kernel import SLOT_IV_AREA
from espforensics.synth.link import LINKS, frame_ip
from espforensics.synth.packets import (
    IPV4_ROUTER_ALERT,
    ipv4_fragments,
    ipv4_packet,
    ipv6_fragments,
    ipv6_packet,
)

ROOT = Path(__file__).resolve().parents[2]
V4 = (ipaddress.ip_address("192.0.2.1"), ipaddress.ip_address("192.0.2.2"))
ESP_VERDICTS = {Verdict.OK, Verdict.BAD_TRAILER, Verdict.AUTH_FAIL, Verdict.UNKNOWN_SA}


@functools.cache
def scenario(name: str) -> Scenario:
    return build_scenario(name, 1)


# -- independent parsing helpers -------------------------------------------------


def ones_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total: int = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def l4_ok(src: bytes, dst: bytes, proto: int, segment: bytes) -> bool:
    if proto == 1:
        return ones_sum(segment) == 0xFFFF
    if len(src) == 4:
        pseudo = src + dst + struct.pack(">BBH", 0, proto, len(segment))
    else:
        pseudo = src + dst + struct.pack(">I3xB", len(segment), proto)
    return ones_sum(pseudo + segment) == 0xFFFF


def link_strip(frame: Frame) -> bytes:
    """The IP packet of a frame, parsed with dpkt where dpkt can."""
    lt, data = frame.linktype, frame.data
    if lt == 1:
        eth = dpkt.ethernet.Ethernet(data[:22])  # headers only: dpkt's IPv6 walk trips on ESP
        tags = getattr(eth, "vlan_tags", [])
        assert (tags[-1].type if tags else eth.type) in (0x0800, 0x86DD)
        return data[14 + 4 * len(tags) :]
    if lt == 113:
        assert dpkt.sll.SLL(data).ethtype in (0x0800, 0x86DD)
        return data[16:]
    if lt == 276:
        assert dpkt.sll2.SLL2(data).ethtype in (0x0800, 0x86DD)
        return data[20:]
    if lt == 0:
        af = int.from_bytes(data[:4], "little")
        assert af == (2 if data[4] >> 4 == 4 else af) and af in (2, 24, 28, 30)
        return data[4:]
    assert lt in (101, 228, 229)
    return data


def ip_end(packet: bytes) -> int:
    if packet[0] >> 4 == 4:
        return int.from_bytes(packet[2:4], "big")
    return 40 + int.from_bytes(packet[4:6], "big")


def addresses(packet: bytes) -> tuple[bytes, bytes]:
    if packet[0] >> 4 == 4:
        return packet[12:16], packet[16:20]
    return packet[8:24], packet[24:40]


def v6_upper(packet: bytes) -> tuple[int, int]:
    """(upper-layer protocol, its offset) after the IPv6 option headers."""
    nh, off = packet[6], 40
    while nh in (0, 43, 60):
        nh, off = packet[off], off + 8 * (packet[off + 1] + 1)
    return nh, off


def sa_of(sc: Scenario, spi: int) -> SecurityAssociation | None:
    return next((sa for sa in sc.sas if sa.spi == spi), None)


def open_at(sa: SecurityAssociation, packet: bytes, off: int, seq64: int) -> bytes | None:
    ctx = context_for(sa)
    iv = packet[off + 8 : off + 8 + ctx.iv_len]
    return ctx.open(seq64, iv, packet[off + 8 + ctx.iv_len : ip_end(packet)])


def trailer_valid(pt: bytes, block: int = 4) -> bool:
    n = pt[-2]
    whole = len(pt) % block == 0 and len(pt) % 4 == 0
    return whole and len(pt) >= n + 2 and pt[-2 - n : -2] == bytes(range(1, n + 1))


def check_payload(packet: bytes, nh: int, pt: bytes) -> None:
    """The decrypted payload is a well-formed, checksummed packet."""
    body = pt[: -2 - pt[-2]]
    if nh in (4, 41):
        inner = body[: ip_end(body)]
        if nh == 4:
            assert ones_sum(inner[: (inner[0] & 15) * 4]) == 0xFFFF
            hl, proto = (inner[0] & 15) * 4, inner[9]
        else:
            hl, proto = 40, inner[6]
        src, dst = addresses(inner)
        assert l4_ok(src, dst, proto, inner[hl:])
    else:
        src, dst = addresses(packet)
        assert l4_ok(src, dst, nh, body)


# -- every scenario, every frame ---------------------------------------------------


def check_esp_frame(sc: Scenario, packet: bytes, truth: FrameTruth) -> None:
    off = truth.esp_offset
    assert off is not None and truth.spi is not None and truth.seq64 is not None
    spi, seq = struct.unpack_from(">II", packet, off)
    assert (spi, seq) == (truth.spi, truth.seq)
    sa = sa_of(sc, spi)
    if truth.verdict == Verdict.UNKNOWN_SA:
        assert sa is None
        return
    assert sa is not None
    pt = open_at(sa, packet, off, truth.seq64)
    if truth.verdict == Verdict.AUTH_FAIL:
        assert pt is None and truth.next_header is None
        return
    assert pt is not None
    assert truth.next_header is None or pt[-1] == truth.next_header
    good = trailer_valid(pt, context_for(sa).block) and pt[-1] != 255
    assert good == (truth.verdict == Verdict.OK)
    if truth.verdict == Verdict.OK:
        check_payload(packet, pt[-1], pt)


def check_outer(packet: bytes) -> None:
    if packet[0] >> 4 == 4:
        assert ones_sum(packet[: (packet[0] & 15) * 4]) == 0xFFFF
        assert ip_end(packet) == len(packet)
        if packet[9] == 17 and not int.from_bytes(packet[6:8], "big") & 0x3FFF:
            udp = packet[(packet[0] & 15) * 4 :]
            assert udp[6:8] == b"\x00\x00" or l4_ok(*addresses(packet), 17, udp)
    else:
        assert ip_end(packet) == len(packet)
        proto, start = v6_upper(packet)
        if proto == 17:
            assert l4_ok(*addresses(packet), 17, packet[start:])


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_frame_matches_its_truth(name: str) -> None:
    sc = scenario(name)
    assert len(sc.frames) == len(sc.truth)
    for frame, truth in zip(sc.frames, sc.truth, strict=True):
        assert truth.frame == frame.number and frame.caplen == len(frame.data)
        if "header_only" in truth.tags:  # whole, and too short to be ESP: SPI and seq only
            assert truth.spi is not None and frame.caplen == frame.wirelen
            assert frame.data[-8:-4] == truth.spi.to_bytes(4)
            continue
        if truth.verdict == Verdict.TRUNCATED:
            assert frame.caplen < frame.wirelen
            continue
        assert frame.caplen == frame.wirelen
        if truth.verdict in (Verdict.NOT_ESP, Verdict.UNDECODABLE):
            continue
        packet = link_strip(frame)
        check_outer(packet)
        if truth.verdict in ESP_VERDICTS and truth.fragments is None:
            check_esp_frame(sc, packet, truth)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_seqiv_constant_per_spi(name: str) -> None:
    """IV xor seq64 is one constant per seqiv SPI (AEADs, CTR), except on frames tagged iv_*."""
    sc = scenario(name)
    seen: dict[int, set[int]] = defaultdict(set)
    for frame, truth in zip(sc.frames, sc.truth, strict=True):
        if truth.verdict != Verdict.OK or truth.fragments or any("iv_" in t for t in truth.tags):
            continue
        sa = sa_of(sc, truth.spi or 0)
        if sa is not None and not context_for(sa).counter:
            continue  # CBC (echainiv) and NULL: test_echainiv_ivs
        packet = link_strip(frame)
        assert truth.esp_offset is not None and truth.seq64 is not None
        off = truth.esp_offset
        if "iv_reuse" in truth.tags:
            continue
        seen[truth.spi or 0].add(int.from_bytes(packet[off + 8 : off + 16], "big") ^ truth.seq64)
    assert all(len(constants) == 1 for constants in seen.values())


# -- counts ---------------------------------------------------------------------

EXPECTED_COUNTS = {
    "example": {"ok": 36, "not_esp": 4},
    "ipv4-transport-tcp": {"ok": 96, "not_esp": 2},
    "ipv6-tunnel": {"ok": 44, "not_esp": 2},
    "inner-protocols": {"ok": 18},
    "outer-headers": {"ok": 12},
    "natt": {"ok": 22, "not_esp": 12},
    "pcapng-dsb": {"ok": 20},
    "link-all": {"ok": 40, "not_esp": 2},
    "fragments-v4": {"ok": 8, "fragment": 9},
    "fragments-v6": {"ok": 8, "fragment": 9},
    "corrupt-icv": {"ok": 24, "auth_fail": 3},
    "unknown-spi": {"ok": 12, "unknown_sa": 4},
    "snaplen": {"ok": 11, "truncated": 10, "not_esp": 2},
    "bad-trailer": {"ok": 24, "bad_trailer": 6},
    "malformed": {"ok": 4, "undecodable": 3},
    "kernel-gso-v4": {"ok": 13, "esp_misplaced": 12},
    "kernel-gso-v6": {"ok": 13, "esp_misplaced": 12},
    "esn-wrap": {"ok": 16},
    "algorithms": {"ok": 27},
    "aeads": {"ok": 108},
    "iv-reuse": {"ok": 1000},
    "iv-seq-minus-1": {"ok": 66},
    "iv-policies": {"ok": 16},
    "sequence": {"ok": 26},
    "shared-key": {"ok": 18},
    "encauth": {"ok": 366},
    "encauth-faults": {"ok": 40, "auth_fail": 2, "bad_trailer": 4},
}


@pytest.mark.parametrize("name", list(EXPECTED_COUNTS))
def test_verdict_counts(name: str) -> None:
    assert scenario(name).verdict_counts() == EXPECTED_COUNTS[name]


def test_single_link_scenarios() -> None:
    assert {n for n in SCENARIOS if n.startswith("link-")} == {"link-all"} | {
        f"link-{n}" for n in LINKS
    }
    for name in LINKS:
        sc = scenario(f"link-{name}")
        ok = 2 if name in ("ipv4", "ipv6") else 4
        assert sc.format == "pcap" and len(sc.linktypes) == 1
        assert sc.verdict_counts() == (
            {"ok": ok, "not_esp": 2} if name == "ethernet" else {"ok": ok}
        )


def test_docs_list_every_scenario_with_counts() -> None:
    text = (ROOT / "docs" / "synth.md").read_text()
    for name in SCENARIOS:
        counts = ", ".join(f"{k} {v}" for k, v in scenario(name).verdict_counts().items())
        rows = [line for line in text.splitlines() if line.startswith(f"| `{name}` ")]
        assert len(rows) == 1, name
        assert f"| {len(scenario(name).frames)} | {counts} |" in rows[0], name


# -- ESP sealing ----------------------------------------------------------------------


@pytest.mark.parametrize("length", range(13))
def test_padding_is_1_2_3_and_aligned(length: int) -> None:
    pt = build_plaintext(b"x" * length, 6)
    n = pt[-2]
    assert len(pt) % 4 == 0 and n < 4 and pt[-1] == 6
    assert pt[length : length + n] == bytes(range(1, n + 1))
    extra = build_plaintext(b"x" * length, 6, Trailer(extra_pad=8))
    assert extra[-2] == n + 8 and trailer_valid(extra)


def test_trailer_faults() -> None:
    bad = build_plaintext(b"x" * 4, 17, Trailer(bad_pad=True))  # natural pad 2 -> zeros
    assert bad[-2] == 2 and bad[-4:-2] == b"\x00\x00" and not trailer_valid(bad)
    forced = build_plaintext(b"x" * 2, 17, Trailer(bad_pad=True))  # natural pad 0 -> 4
    assert forced[-2] == 4 and not trailer_valid(forced)
    liar = build_plaintext(b"abcdefg", 17, Trailer(pad_len_delta=4))
    assert liar[-2] == 7 and not trailer_valid(liar)
    assert build_plaintext(b"", 17, Trailer(next_header=255))[-1] == 255
    tfc = build_plaintext(b"ab", 4, Trailer(tfc=6))
    assert tfc[2:8] == bytes(6) and trailer_valid(tfc)
    with pytest.raises(ValueError):
        build_plaintext(b"", 6, Trailer(extra_pad=3))


@pytest.mark.parametrize(("key_bytes", "icv_bits"), [(16, 64), (24, 96), (32, 128)])
def test_seal_then_open(key_bytes: int, icv_bits: int) -> None:
    rng = random.Random(5)
    sealer = make_sa(rng, 0x1234, *V4, key_bytes=key_bytes, icv_bits=icv_bits)
    payload = b"inner payload"
    packet = sealer.seal(payload, 17, 42)
    assert struct.unpack_from(">II", packet) == (0x1234, 42)
    assert packet[8:16] == (42 ^ int.from_bytes(sealer.iv_constant, "big")).to_bytes(8, "big")
    pt = build_plaintext(payload, 17)
    assert len(packet) == 16 + len(pt) + icv_bits // 8
    assert context_for(sealer.sa).open(42, packet[8:16], packet[16:]) == pt
    broken = sealer.seal(payload, 17, 42, corrupt_icv=True)
    assert broken[:-1] == packet[:-1] and broken[-1] == packet[-1] ^ 1
    assert context_for(sealer.sa).open(42, broken[8:16], broken[16:]) is None


def test_iv_overrides() -> None:
    sealer = make_sa(random.Random(2), 0x99, *V4)
    const = sealer.iv_constant
    assert sealer.iv_for(10) == seqiv(10, const)
    assert sealer.iv_for(10, IvSeqOffset(-1)) == seqiv(9, const) == sealer.iv_for(3, IvFromSeq(9))
    assert sealer.iv_for(10, IvFixed(b"12345678")) == b"12345678"


def test_esn_aad_uses_the_high_half() -> None:
    sc = scenario("esn-wrap")
    sa = sa_of(sc, 0x6001)
    assert sa is not None and sa.esn and sa.esn_hi == 0
    rows = [(f, t) for f, t in zip(sc.frames, sc.truth, strict=True) if t.spi == 0x6001]
    assert [t.seq64 for _, t in rows] == [
        (1 << 32) + d for d in (-5, -4, -3, -1, 0, 1, 2, 3, -2, 4, 5)
    ]
    late_frame, late = rows[8]
    assert late.tags == ("late",) and late.seq == 0xFFFFFFFE
    packet = link_strip(late_frame)
    assert open_at(sa, packet, 20, late.seq64 or 0) is not None
    assert open_at(sa, packet, 20, (late.seq64 or 0) + (1 << 32)) is None


# -- kernel GSO layout ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "hdr"), [("kernel-gso-v4", 20), ("kernel-gso-v6", 40)])
def test_kernel_layout_bytes(name: str, hdr: int) -> None:
    sc = scenario(name)
    sa = sa_of(sc, 0x1001)
    assert sa is not None
    matches = 0
    for frame, truth in zip(sc.frames, sc.truth, strict=True):
        p = link_strip(frame)
        proto = p[9] if hdr == 20 else p[6]
        hit = proto == 50 and p[hdr + 16 : hdr + 18] == b"\x45\x00"
        hit = hit and p[hdr + 20 : hdr + 24] == b"\x00\x00\x10\x01"
        matches += hit
        assert hit == (truth.verdict == Verdict.ESP_MISPLACED)
        if not hit:
            continue
        assert (truth.esp_offset, truth.expected_offset, truth.leaked) == (hdr + 20, hdr, 4)
        assert truth.leaked_hex == p[hdr + 16 : hdr + 20].hex(" ")
        slot_spi, slot_seq = struct.unpack_from(">II", p, hdr)
        assert slot_spi == 0x1001 and slot_seq <= (truth.seq or 0)
        assert p[hdr + 8 : hdr + 16] == SLOT_IV_AREA == bytes(7) + b"\x02"
        pt = open_at(sa, p, hdr + 20, truth.seq64 or 0)
        assert pt is not None and pt[-1] == 4 and trailer_valid(pt)
        assert open_at(sa, p, hdr, slot_seq) is None
        tcp = pt[: -2 - pt[-2]]
        assert int.from_bytes(p[hdr + 18 : hdr + 20], "big") == 20 + len(tcp)
        assert l4_ok(bytes([10, 9, 0, 1]), bytes([10, 9, 0, 2]), 6, tcp)
    assert matches == 12 == sc.facts["tcpdump_filter_matches"]


# -- fragments ----------------------------------------------------------------------------


def reassemble(packets: list[bytes]) -> tuple[int, bytes]:
    """(protocol, payload) of a datagram from its fragments, any order."""
    pieces, proto = {}, 0
    for p in packets:
        if p[0] >> 4 == 4:
            hl = (p[0] & 15) * 4
            pieces[(int.from_bytes(p[6:8], "big") & 0x1FFF) * 8] = p[hl : ip_end(p)]
            proto = p[9]
            continue
        nh, off = v6_upper(p)
        assert nh == 44
        proto = p[off]
        pieces[int.from_bytes(p[off + 2 : off + 4], "big") & 0xFFF8] = p[off + 8 :]
    data = b"".join(pieces[k] for k in sorted(pieces))
    return proto, data


@pytest.mark.parametrize("name", ["fragments-v4", "fragments-v6"])
def test_fragments_reassemble_and_decrypt(name: str) -> None:
    sc = scenario(name)
    groups: dict[int, list[int]] = defaultdict(list)
    for t in sc.truth:
        if t.reassembled_in is not None:
            groups[t.reassembled_in].append(t.frame)
    completing = [t for t in sc.truth if t.fragments]
    assert sorted(groups) == [t.frame for t in completing]
    orphans = [t for t in sc.truth if t.verdict == Verdict.FRAGMENT and t.reassembled_in is None]
    assert len(orphans) == 3  # the datagram with one of four fragments missing
    for t in completing:
        numbers = [*groups[t.frame], t.frame]
        assert len(numbers) == t.fragments
        proto, data = reassemble([link_strip(sc.frames[n - 1]) for n in numbers])
        esp = data[8:] if proto == 17 else data
        assert struct.unpack_from(">I", esp)[0] == t.spi
        sa = sa_of(sc, t.spi or 0)
        assert sa is not None
        pt = context_for(sa).open(t.seq64 or 0, esp[8:16], esp[16:])
        assert pt is not None and trailer_valid(pt)
    arrivals = [[sc.truth[n - 1].tags[0] for n in [*groups[t.frame], t.frame]] for t in completing]
    assert ["fragment 3/3", "fragment 1/3", "fragment 2/3"] in arrivals
    assert ["fragment 2/2", "fragment 1/2"] in arrivals


def test_fragment_builders() -> None:
    payload = bytes(range(256)) * 10
    frags = ipv4_fragments(*V4, 50, payload, 3, ident=7, options=IPV4_ROUTER_ALERT)
    offsets = [(int.from_bytes(f[6:8], "big") & 0x1FFF) * 8 for f in frags]
    more = [bool(f[6] & 0x20) for f in frags]
    assert more == [True, True, False] and offsets[0] == 0
    assert all(f[0] == 0x47 and f[20:28] == IPV4_ROUTER_ALERT for f in frags)  # copied option
    assert reassemble(frags) == (50, payload)
    v6 = [ipaddress.ip_address("2001:db8::1"), ipaddress.ip_address("2001:db8::2")]
    frags6 = ipv6_fragments(v6[0], v6[1], 50, payload, 4, ident=9, ext=(0, 43))
    assert reassemble(frags6[::-1]) == (50, payload)
    assert dpkt.ip6.IP6(frags6[0]).all_extension_headers[0].nxt == 43


# -- packets and links ------------------------------------------------------------------


def test_ipv4_options_and_ipv6_extension_headers_parse() -> None:
    pkt = ipv4_packet(*V4, 50, b"\x00" * 16, options=IPV4_ROUTER_ALERT, ident=3)
    ip = dpkt.ip.IP(pkt)
    assert ip.hl == 7 and ip.opts == IPV4_ROUTER_ALERT and ip.p == 50 and ip.len == len(pkt)
    assert ones_sum(pkt[:28]) == 0xFFFF
    a, b = ipaddress.ip_address("2001:db8::1"), ipaddress.ip_address("2001:db8::2")
    six = dpkt.ip6.IP6(ipv6_packet(a, b, 50, b"\x00" * 16, ext=(0, 43, 60)))
    assert [type(h).__name__ for h in six.all_extension_headers[:3]] == [
        "IP6HopOptsHeader",
        "IP6RoutingHeader",
        "IP6DstOptsHeader",
    ]
    assert six.all_extension_headers[2].nxt == 50 and six.plen == 24 + 16


def test_every_link_frames_ipv4_and_ipv6() -> None:
    v4 = ipv4_packet(*V4, 50, b"\x00" * 8)
    v6 = ipv6_packet(ipaddress.ip_address("::1"), ipaddress.ip_address("::2"), 50, b"\x00" * 8)
    af6 = {"null-bsd": 24, "null-freebsd": 28, "null-darwin": 30}
    for name, link in LINKS.items():
        for packet in (v4, v6):
            if (name, packet[0] >> 4) in (("ipv4", 6), ("ipv6", 4)):
                with pytest.raises(ValueError):
                    frame_ip(packet, link)
                continue
            data = frame_ip(packet, link)
            assert link_strip(Frame(1, 0, len(data), len(data), link.linktype, data)) == packet
            if name in af6:
                assert data[:4] == (2 if packet is v4 else af6[name]).to_bytes(4, "little")
    vlan = dpkt.ethernet.Ethernet(frame_ip(v4, LINKS["qinq"]))
    assert [(t.type, t.id) for t in vlan.vlan_tags] == [(0x8100, 200), (0x0800, 100)]
    assert frame_ip(v4, LINKS["qinq"])[12:14] == b"\x88\xa8"


def test_natt_frames() -> None:
    sc = scenario("natt")
    kinds: Counter[tuple[str, int]] = Counter()
    for frame, truth in zip(sc.frames, sc.truth, strict=True):
        p = link_strip(frame)
        if p[9] != 17:
            continue
        udp = p[20:]
        ports = struct.unpack_from(">HH", udp)
        body = udp[8:]
        if truth.verdict == Verdict.OK:
            kinds["esp", ports[1]] += 1
            assert truth.esp_offset == 28 and body[:4] != bytes(4)
        elif body == b"\xff":
            kinds["keepalive", ports[1]] += 1
        elif body[:4] == bytes(4):
            kinds["ike-marker", ports[1]] += 1
        else:
            kinds["ike", ports[1]] += 1
    assert kinds == {
        ("esp", 4500): 18,
        ("esp", 14500): 4,
        ("keepalive", 4500): 3,
        ("keepalive", 14500): 1,
        ("ike", 500): 2,
        ("ike-marker", 4500): 4,
        ("ike-marker", 14500): 2,
    }


def test_snaplen_cuts_frames() -> None:
    sc = scenario("snaplen")
    assert sc.snaplen == 128 and max(f.caplen for f in sc.frames) == 128
    assert all(
        (f.caplen < f.wirelen) == (t.verdict == Verdict.TRUNCATED)
        for f, t in zip(sc.frames, sc.truth, strict=True)
    )


# -- facts recounted from the bytes ------------------------------------------------------


def iv_facts(sc: Scenario) -> dict[str, int]:
    seen: set[tuple[bytes, bytes]] = set()
    per_spi: dict[int, Counter[int]] = defaultdict(Counter)
    rows = []
    for frame, t in zip(sc.frames, sc.truth, strict=True):
        p = link_strip(frame)
        iv = p[(t.esp_offset or 0) + 8 : (t.esp_offset or 0) + 16]
        sa = sa_of(sc, t.spi or 0)
        assert sa is not None
        rows.append((t, iv, sa.key.reveal()))
        per_spi[t.spi or 0][int.from_bytes(iv, "big") ^ (t.seq64 or 0)] += 1
    repeats = not_seqiv = 0
    for t, iv, key in rows:
        repeats += (key, iv) in seen
        seen.add((key, iv))
        constant = per_spi[t.spi or 0].most_common(1)[0][0]
        not_seqiv += int.from_bytes(iv, "big") ^ (t.seq64 or 0) != constant
    return {"iv_repeats": repeats, "iv_not_seqiv": not_seqiv}


@pytest.mark.parametrize("name", ["iv-reuse", "iv-seq-minus-1", "iv-policies", "shared-key"])
def test_iv_facts(name: str) -> None:
    sc = scenario(name)
    counted = iv_facts(sc)
    assert counted["iv_repeats"] == sc.facts["iv_repeats"]
    assert counted["iv_not_seqiv"] == sc.facts.get("iv_not_seqiv", 0)


def test_shared_key_scenario() -> None:
    sc = scenario("shared-key")
    keys = {sa.key.reveal() for sa in sc.sas}
    assert len(sc.sas) == 3 and len(keys) == 1


def test_sequence_facts() -> None:
    sc = scenario("sequence")
    seqs = [t.seq or 0 for t in sc.truth]
    holes = sorted(set(range(min(seqs), max(seqs) + 1)) - set(seqs))
    runs = sum(1 for k, s in enumerate(holes) if k == 0 or holes[k - 1] != s - 1)
    late = sum(1 for k, s in enumerate(seqs) if s < max(seqs[:k], default=0) and s not in seqs[:k])
    assert {
        "seq_duplicates": len(seqs) - len(set(seqs)),
        "seq_gaps": runs,
        "seq_missing": len(holes),
        "seq_reordered": late,
    } == sc.facts
    assert sc.frames[10].data == sc.frames[11].data  # the replay is bit-identical


# -- key files ---------------------------------------------------------------------------


def test_keys_yaml_round_trip() -> None:
    sc = scenario("natt")
    doc = yaml.safe_load(keys_yaml(sc.sas))
    assert len(doc["sas"]) == 4
    for entry, sa in zip(doc["sas"], sc.sas, strict=True):
        assert entry["spi"] == f"0x{sa.spi:08x}" and isinstance(entry["spi"], str)
        assert entry["src"] == str(sa.src) and entry["dst"] == str(sa.dst)
        assert entry["aead"] == "rfc4106(gcm(aes))" and entry["icv"] == 128
        assert bytes.fromhex(entry["key"][2:]) == sa.key.reveal()
        assert entry["esn"] is False and entry["esn_hi"] == 0 and entry["mode"] == "transport"
        assert entry["encap"] in (4500, 14500)
    v6 = yaml.safe_load(keys_yaml(scenario("kernel-gso-v6").sas))
    assert v6["sas"][0]["src"] == "fd00:a::1" and v6["sas"][0]["encap"] is None


def test_xfrm_and_esp_sa_text() -> None:
    sas = scenario("esn-wrap").sas
    text = xfrm_state_text(sas)
    blocks = re.split(r"^src ", text, flags=re.MULTILINE)[1:]
    assert len(blocks) == 2
    first = blocks[0]
    assert first.startswith("192.0.2.1 dst 192.0.2.2\n")
    assert "\tproto esp spi 0x00006001 reqid 1 mode transport\n" in first
    assert "flag esn" in first and "flag esn" not in blocks[1]
    key = sas[0].key.reveal().hex()
    assert f"\taead rfc4106(gcm(aes)) 0x{key} 128\n" in first
    lines = esp_sa_text(scenario("algorithms").sas).splitlines()
    assert len(lines) == 18
    fields = lines[0].split(",")
    assert fields[:4] == ['"IPv4"', '"192.0.2.1"', '"192.0.2.2"', '"0x00007001"']
    assert fields[4] == '"AES-GCM with 8 octet ICV [RFC4106]"' and fields[6:] == ['"NULL"', '""']
    assert re.fullmatch(r'"0x[0-9a-f]{40}"', fields[5])


def test_pcapng_dsb_scenario_carries_esp_sa_lines(tmp_path: Path) -> None:
    sc = scenario("pcapng-dsb")
    assert sc.format == "pcapng" and len(sc.secrets) == 1
    assert sc.secrets[0].secrets_type == 0x45535053
    assert sc.secrets[0].data.decode() == esp_sa_text(sc.sas)
    assert '"IPv6","2001:db8::1","2001:db8::2"' in sc.secrets[0].data.decode()


# -- writing -------------------------------------------------------------------------------


def test_write_capture_pcap_and_gzip(tmp_path: Path) -> None:
    sc = scenario("snaplen")
    plain, packed = tmp_path / "a.pcap", tmp_path / "a.pcap.gz"
    assert write_capture(plain, sc.frames, snaplen=sc.snaplen) == len(sc.frames)
    write_capture(packed, iter(sc.frames), compression="gzip", snaplen=sc.snaplen)
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    reader = dpkt.pcap.Reader(io.BytesIO(plain.read_bytes()))
    assert reader.snaplen == 128 and reader.datalink() == 1
    got = [buf for _, buf in reader]
    assert got == [f.data for f in sc.frames]
    with pytest.raises(ValueError):
        write_capture(
            tmp_path / "b.pcap",
            scenario("link-all").frames,
            linktypes=scenario("link-all").linktypes,
        )


def test_write_capture_pcapng_link_all(tmp_path: Path) -> None:
    sc = scenario("link-all")
    path = tmp_path / "all.pcapng"
    write_capture(path, sc.frames, format="pcapng", linktypes=sc.linktypes)
    reader = dpkt.pcapng.Reader(io.BytesIO(path.read_bytes()))
    assert [buf for _, buf in reader] == [f.data for f in sc.frames]
    assert set(sc.linktypes) == {0, 1, 101, 113, 228, 229, 276}


def test_cli_scenario_and_fixture_are_current(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["example", str(tmp_path), "--stem", "example"]) == 0
    assert "40 frames (ok 36, not_esp 4)" in capsys.readouterr().out
    for name in ("example.pcap", "example.keys.yaml", "example.expected.json"):
        assert (tmp_path / name).read_bytes() == (ROOT / "fixtures" / name).read_bytes(), name
    expected = json.loads((tmp_path / "example.expected.json").read_text())
    assert expected["verdicts"] == {"ok": 36, "not_esp": 4} and len(expected["packets"]) == 40
    total = sum(p.stat().st_size for p in (ROOT / "fixtures").iterdir())
    assert total < 100_000


def test_cli_bench_and_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.pcapng"
    assert main(["bench", "30", str(out), "--format", "pcapng", "--seed", "3"]) == 0
    assert len(list(dpkt.pcapng.Reader(io.BytesIO(out.read_bytes())))) == 30
    keys = yaml.safe_load((tmp_path / "bench.keys.yaml").read_text())
    assert [e["spi"] for e in keys["sas"]] == ["0x00001001", "0x00001002"]
    with pytest.raises(SystemExit):
        main(["no-such-scenario", str(tmp_path)])
    capsys.readouterr()
    made = tmp_path / "new-folder" / "bench.pcap"  # its folder is made, as a scenario's
    assert main(["bench", "3", str(made)]) == 0 and made.exists()
    capsys.readouterr()
    (tmp_path / "a-file").write_text("")
    below = tmp_path / "a-file" / "bench.pcap"
    assert main(["bench", "3", str(below)]) == 2
    err = capsys.readouterr().err  # one line naming what is in the way
    assert err == f"python -m espforensics.synth: error: {tmp_path / 'a-file'}: File exists\n"


# -- benchmark frames -------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["gcm", "ccm", "chacha20", "cbc"])
def test_bench_frames_are_real_esp(algorithm: str) -> None:
    from espforensics.synth import bench_sas
    from espforensics.synth.bench import BENCH_ALGORITHMS

    frames = iter_bench_frames(400, seed=4, algorithm=algorithm)
    assert iter(frames) is frames  # a generator, not a list
    sas = {sa.spi: sa for sa in bench_sas(4, algorithm)}
    assert {sa.algorithm for sa in sas.values()} == {BENCH_ALGORITHMS[algorithm][0]}
    sizes, constants = [], defaultdict(set)
    for frame in frames:
        p = link_strip(frame)
        sizes.append(frame.wirelen)
        check_outer(p)
        spi, seq = struct.unpack_from(">II", p, 20)
        ctx = context_for(sas[spi])
        if ctx.counter:  # seqiv; CBC's echainiv IVs: test_cbc_ivs_are_echainiv
            constants[spi].add(int.from_bytes(p[28:36], "big") ^ seq)
        pt = open_at(sas[spi], p, 20, seq)
        assert pt is not None and trailer_valid(pt, ctx.block) and pt[-1] == 6
        check_payload(p, 6, pt)
    assert abs(sum(sizes) / len(sizes) - 1289) < 13 and max(sizes) <= 1514
    assert all(len(c) == 1 for c in constants.values())
    assert set(constants) == (set() if algorithm == "cbc" else {0x1001, 0x1002})


# (algorithm, profile): what each profile's IVs must be, per SA, from (seq64, IV).
_PROFILE_RULES = {
    "linux": lambda seq, iv: iv ^ seq,  # seqiv: one constant per SA
    "seq": lambda seq, iv: iv - seq,  # IV = seq64: the constant 0
    "counter": lambda seq, iv: (iv - seq) % (1 << 64),  # one additive constant per SA
}


@pytest.mark.parametrize("ivs", ["linux", "seq", "counter", "random"])
@pytest.mark.parametrize("algorithm", ["gcm", "chacha20", "cbc"])
def test_bench_iv_profiles(algorithm: str, ivs: str) -> None:
    """Each sender profile's IVs follow its rule, the frames open, the keys stay the same;
    a counter profile of CBC's 16-byte IVs is refused."""
    from espforensics.synth import bench_sas

    sas = {sa.spi: sa for sa in bench_sas(4, algorithm)}
    if algorithm == "cbc" and ivs in ("seq", "counter"):
        with pytest.raises(ValueError, match="8-byte counter-mode IVs"):
            iter_bench_frames(10, seed=4, algorithm=algorithm, ivs=ivs)
        return
    width = context_for(sas[0x1001]).iv_len
    seen: defaultdict[int, set[int]] = defaultdict(set)
    ivs_seen: defaultdict[int, list[int]] = defaultdict(list)
    for frame in iter_bench_frames(300, seed=4, algorithm=algorithm, ivs=ivs):
        p = link_strip(frame)
        spi, seq = struct.unpack_from(">II", p, 20)
        iv = int.from_bytes(p[28 : 28 + width], "big")
        ivs_seen[spi].append(iv)
        if ivs in _PROFILE_RULES and algorithm != "cbc":
            seen[spi].add(_PROFILE_RULES[ivs](seq, iv))
        assert open_at(sas[spi], p, 20, seq) is not None
    for own in ivs_seen.values():  # no profile repeats an IV under one key
        assert len(set(own)) == len(own)
    if ivs == "seq":
        assert seen == {0x1001: {0}, 0x1002: {0}}
    elif ivs in _PROFILE_RULES and algorithm != "cbc":
        assert sorted(map(len, seen.values())) == [1, 1] and set(seen) == {0x1001, 0x1002}
    if ivs == "random":  # neither xor nor add of the sequence number gives one constant
        firsts = ivs_seen[0x1001][:50]
        assert len({iv ^ k for k, iv in enumerate(firsts, 1)}) == 50
        assert len({iv - k for k, iv in enumerate(firsts, 1)}) == 50
    with pytest.raises(ValueError, match="unknown IV profile"):
        iter_bench_frames(1, algorithm="gcm", ivs="chained")
    assert bench_sas(4, algorithm) == tuple(sas.values())


def test_bench_cli_takes_the_iv_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.pcap"
    assert main(["bench", "20", str(out), "--ivs", "seq"]) == 0
    with out.open("rb") as f:
        frames = list(dpkt.pcap.Reader(f))
    seqs = [struct.unpack_from(">I", buf, 38)[0] for _, buf in frames]
    ivs = [int.from_bytes(buf[42:50], "big") for _, buf in frames]
    assert len(frames) == 20 and seqs == ivs  # IV = seq64, each SA's own numbers
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["bench", "20", str(out), "--algorithm", "cbc", "--ivs", "counter"])
    assert stop.value.code == 2
    assert "8-byte counter-mode IVs" in capsys.readouterr().err


def test_same_seed_same_bytes_other_seed_other_keys() -> None:
    a, b, c = (
        build_scenario("example", 1),
        build_scenario("example", 1),
        build_scenario("example", 2),
    )
    assert a.frames == b.frames
    assert keys_yaml(a.sas) == keys_yaml(b.sas) != keys_yaml(c.sas)


# -- ciphers with an HMAC ------------------------------------------------------------------


@pytest.mark.parametrize(("block", "length"), [(b, n) for b in (8, 16) for n in range(20)])
def test_cbc_padding_fills_the_block(block: int, length: int) -> None:
    """RFC 4303 s2.4 with RFC 3602 s2.4 / RFC 2451: a whole number of cipher blocks."""
    pt = build_plaintext(b"x" * length, 6, block=block)
    assert len(pt) % block == 0 and len(pt) - length - 2 == pt[-2] < block
    assert trailer_valid(pt, block)
    bad = build_plaintext(b"x" * 14, 6, Trailer(bad_pad=True), block=16)  # natural pad 0
    assert len(bad) == 32 and bad[14:30] == bytes(16) and not trailer_valid(bad, 16)


def _ecb_decrypt(sa: SecurityAssociation, block: bytes) -> bytes:
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = sa.key.reveal()
    cipher = algorithms.AES(key) if sa.algorithm == "cbc(aes)" else TripleDES(key)
    dec = Cipher(cipher, modes.ECB()).decryptor()
    return dec.update(block) + dec.finalize()


@pytest.mark.parametrize("name", ["encauth", "encauth-faults"])
def test_cbc_ivs_are_echainiv(name: str) -> None:
    """Linux echainiv: the wire IV decrypts (one ECB block) to words (salt_i | 1) * seq64.

    The same test as on the real linux-6.1 cbc(aes) capture: one multiplier per
    word and SA for every odd seq64 (those have an inverse modulo 2^64).
    """
    sc = scenario(name)
    seen: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    for frame, truth in zip(sc.frames, sc.truth, strict=True):
        sa = sa_of(sc, truth.spi or 0)
        if sa is None or not sa.algorithm.startswith("cbc(") or truth.seq64 is None:
            continue
        if truth.seq64 % 2 == 0 or {"iv_reuse", "iv_reused_later", "iv_chained"} & set(truth.tags):
            continue
        off = (truth.esp_offset or 0) + 8
        iv_len = context_for(sa).iv_len
        info = _ecb_decrypt(sa, link_strip(frame)[off : off + iv_len])
        inverse = pow(truth.seq64, -1, 1 << 64)
        words = tuple(
            int.from_bytes(info[i : i + 8], "little") * inverse % (1 << 64)
            for i in range(0, iv_len, 8)
        )
        assert all(w & 1 for w in words)
        seen[sa.spi].add(words)
    cbc_sas = {sa.spi for sa in sc.sas if sa.algorithm.startswith("cbc(")}
    assert set(seen) == cbc_sas and all(len(m) == 1 for m in seen.values())


def test_chained_and_reused_cbc_ivs_are_where_the_truth_says() -> None:
    sc = scenario("encauth-faults")
    last_block: dict[int, bytes] = {}
    ivs: dict[int, list[bytes]] = defaultdict(list)
    chained, repeated = [], []
    for frame, truth in zip(sc.frames, sc.truth, strict=True):
        p = link_strip(frame)
        off, spi = truth.esp_offset or 0, truth.spi or 0
        sa = sa_of(sc, spi)
        assert sa is not None
        ctx = context_for(sa)
        iv = p[off + 8 : off + 8 + ctx.iv_len]
        if ctx.iv_len == 16:
            if iv == last_block.get(spi):
                chained.append(truth.frame)
            if iv in ivs[spi]:
                repeated.append(truth.frame)
            ivs[spi].append(iv)
            end = ip_end(p) - ctx.icv_len
            last_block[spi] = p[end - 16 : end]
    assert chained == [t.frame for t in sc.truth if "iv_chained" in t.tags] and len(chained) == 9
    assert repeated == [t.frame for t in sc.truth if "iv_reuse" in t.tags] == [6, 10]
    assert sc.facts["iv_chained"] == 9 and sc.facts["iv_repeats"] == 2


def test_encauth_key_files() -> None:
    sc = scenario("encauth")
    cbc = sa_of(sc, 0x7403)  # cbc(aes)-128 + hmac(sha256) 128
    null = sa_of(sc, 0x741B)  # ecb(cipher_null) + hmac(sha1) 96
    assert cbc is not None and null is not None and cbc.auth_key is not None
    assert (cbc.algorithm, cbc.auth_algorithm, cbc.icv_bits) == ("cbc(aes)", "hmac(sha256)", 128)
    assert (null.algorithm, null.auth_algorithm, null.icv_bits) == (
        "ecb(cipher_null)",
        "hmac(sha1)",
        96,
    )
    block = xfrm_state_text([cbc]).splitlines()
    auth_hex, enc_hex = cbc.auth_key.reveal().hex(), cbc.key.reveal().hex()
    assert block[3:5] == [
        f"\tauth-trunc hmac(sha256) 0x{auth_hex} 128",
        f"\tenc cbc(aes) 0x{enc_hex}",
    ]
    assert "\tenc ecb(cipher_null) 0x" in xfrm_state_text([null]).splitlines()
    [row] = esp_sa_text([cbc]).splitlines()
    assert row.split(",")[4:] == [
        '"AES-CBC [RFC3602]"',
        f'"0x{enc_hex}"',
        '"HMAC-SHA-256-128 [RFC4868]"',
        f'"0x{auth_hex}"',
    ]
    [null_row] = esp_sa_text([null], esn_columns=True).splitlines()
    assert null_row.split(",")[4:] == [
        '"NULL"',
        '""',
        '"HMAC-SHA-1-96 [RFC2404]"',
        f'"0x{null.auth_key.reveal().hex() if null.auth_key else ""}"',
        '"64-bit"' if null.esn else '"32-bit"',
        '"0"',
    ]
    [entry] = yaml.safe_load(keys_yaml([cbc]))["sas"]
    assert (entry["enc"], entry["auth"], entry["icv"]) == ("cbc(aes)", "hmac(sha256)", 128)
    assert entry["key"] == f"0x{enc_hex}" and entry["auth_key"] == f"0x{auth_hex}"
    assert "aead" not in entry
