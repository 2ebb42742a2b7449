"""Faulty scenarios: frames an analyzer must flag, each for a known reason.

In: a seed. Out: ``Scenario`` objects (see docs/synth.md for counts):
``fragments-v4``, ``fragments-v6``, ``corrupt-icv``, ``unknown-spi``,
``snaplen``, ``bad-trailer``, ``malformed``, ``kernel-gso-v4`` and
``kernel-gso-v6``. Raises nothing for valid seeds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from espforensics.model.enums import Verdict
from espforensics.synth.builder import (
    NATT_PORT,
    V4_A,
    V4_B,
    V6_A,
    V6_B,
    CaptureBuilder,
    Fault,
    SaFlow,
    TcpTalk,
    filler,
    ip,
    sa_pair,
)
from espforensics.synth.esp import Trailer
from espforensics.synth.kernel import CLEAR_INNER_LEN, MISPLACED_SHIFT, gso_misplaced_payload
from espforensics.synth.link import ETH_IPV4, ethernet_frame
from espforensics.synth.packets import (
    IPV4_ROUTER_ALERT,
    PROTO_HOPOPTS,
    PROTO_IPIP,
    PROTO_ROUTING,
    PROTO_TCP,
    PROTO_UDP,
    TCP_ACK,
    TCP_PSH,
    ip_packet,
    ipv4_fragments,
    ipv4_packet,
    ipv6_fragments,
    tcp_bytes,
    udp_bytes,
)
from espforensics.synth.traffic import (
    arp,
    bulk,
    close,
    handshake,
    ping,
    session,
    transport,
    tunnel,
    udp_pair,
)
from espforensics.synth.truth import FrameTruth, Scenario

BAD_NEXT_HEADER = 255  # IANA reserved: never a valid payload type
SNAPLEN = 128


def _fragmented(
    cb: CaptureBuilder, flow: SaFlow, size: int, order: Sequence[int], missing: int | None = None
) -> None:
    """One ESP datagram (a UDP payload) in ``len(order)`` outer fragments,
    sent in ``order`` (fragment indexes), leaving out ``missing`` if given."""
    count = len(order)
    datagram = udp_bytes(flow.src, flow.dst, 7000, 7001, filler(size))
    esp, truth = flow.seal(datagram, PROTO_UDP)
    body, proto = flow.body(esp)
    flow.ident += 1
    if flow.src.version == 4:
        frags = ipv4_fragments(
            flow.src, flow.dst, proto, body, count, ident=flow.ident, options=flow.options
        )
    else:
        frags = ipv6_fragments(
            flow.src, flow.dst, proto, body, count, ident=flow.ident, ext=flow.ext
        )
    arrival = [i for i in order if i != missing]
    numbers = []
    for k, index in enumerate(arrival):
        label = (f"fragment {index + 1}/{count}",)
        if missing is None and k == len(arrival) - 1:
            fact = replace(truth, fragments=count, tags=label)
        else:
            fact = FrameTruth(0, Verdict.FRAGMENT, tags=label)
        numbers.append(cb.emit_ip(frags[index], fact))
    if missing is None:
        for number in numbers[:-1]:
            cb.retag(number, reassembled_in=numbers[-1])


def _fragments(seed: int, v6: bool) -> Scenario:
    """Outer fragments: in order, out of order, one missing, with options."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    a, b = (V6_A, V6_B) if v6 else (V4_A, V4_B)
    base = 0x5100 if v6 else 0x5000
    ab, ba = sa_pair(rng, (base + 1, base + 2), a, b)
    ext = (PROTO_HOPOPTS, PROTO_ROUTING) if v6 else ()
    options = b"" if v6 else IPV4_ROUTER_ALERT
    hdr, _ = sa_pair(rng, (base + 3, base + 4), a, b, ext=ext, options=options)
    udp, _ = sa_pair(rng, (base + 5, base + 6), a, b, encap_port=NATT_PORT)
    udp_pair(cb, ab, ba)
    _fragmented(cb, ab, 3000, (0, 1, 2))
    _fragmented(cb, ab, 3000, (2, 0, 1))
    _fragmented(cb, ab, 4000, (0, 1, 2, 3), missing=1)
    _fragmented(cb, hdr, 2000, (1, 0))
    _fragmented(cb, udp, 2000, (0, 1))
    udp_pair(cb, ab, ba)
    family = "IPv6 (Fragment header)" if v6 else "IPv4"
    desc = f"{family} outer fragments: in order, out of order, one missing, options, NAT-T"
    sas = (ab.sealer, ba.sealer, hdr.sealer, udp.sealer)
    return cb.scenario(f"fragments-{'v6' if v6 else 'v4'}", desc, sas)


def fragments_v4(seed: int = 1) -> Scenario:
    """IPv4 outer fragments of ESP datagrams."""
    return _fragments(seed, v6=False)


def fragments_v6(seed: int = 1) -> Scenario:
    """IPv6 outer fragments of ESP datagrams."""
    return _fragments(seed, v6=True)


def corrupt_icv(seed: int = 1) -> Scenario:
    """Three data segments whose ICV has one bit flipped after sealing."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x8001, 0x8002), V4_A, V4_B)
    bad = Fault(corrupt_icv=True, tags=("icv_flipped",))
    session(cb, transport(ab), transport(ba), 14, 600, faults={3: bad, 8: bad, 11: bad})
    desc = "IPv4 transport TCP, 3 packets with the last ICV bit flipped (auth_fail)"
    return cb.scenario("corrupt-icv", desc, (ab.sealer, ba.sealer))


def unknown_spi(seed: int = 1) -> Scenario:
    """ESP for SPIs that the key file does not list."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x8101, 0x8102), V4_A, V4_B)
    c, d = ip("192.0.2.3"), ip("192.0.2.4")
    cd, dc = sa_pair(rng, (0x8103, 0x8104), c, d, known=False)
    session(cb, transport(ab), transport(ba), 4, 500)
    udp_pair(cb, cd, dc)
    ping(cb, cd, dc, 11)
    desc = "SPI 0x8101/0x8102 known; 0x8103/0x8104 (192.0.2.3 <-> .4) not in the key file"
    return cb.scenario("unknown-spi", desc, (ab.sealer, ba.sealer))


def snaplen(seed: int = 1) -> Scenario:
    """A capture cut at 128 bytes: data segments lose their tails."""
    rng, cb = random.Random(seed), CaptureBuilder(seed, snaplen=SNAPLEN)
    ab, ba = sa_pair(rng, (0x8201, 0x8202), V4_A, V4_B)
    arp(cb, V4_A, V4_B)
    session(cb, transport(ab), transport(ba), 10, 1200)
    desc = f"snaplen {SNAPLEN}: data segments truncated, handshake and ACKs whole"
    return cb.scenario("snaplen", desc, (ab.sealer, ba.sealer))


def bad_trailer(seed: int = 1) -> Scenario:
    """Bad pad bytes, lying pad lengths, a reserved next header; and valid
    extra padding that must not be flagged."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x9001, 0x9002), V4_A, V4_B)
    faults = {
        2: Fault(trailer=Trailer(bad_pad=True), tags=("bad_pad",)),
        5: Fault(trailer=Trailer(bad_pad=True), tags=("bad_pad",)),
        7: Fault(trailer=Trailer(pad_len_delta=4), tags=("pad_len+4",)),
        9: Fault(trailer=Trailer(pad_len_delta=8), tags=("pad_len+8",)),
        11: Fault(trailer=Trailer(next_header=BAD_NEXT_HEADER), tags=("next_header",)),
        13: Fault(trailer=Trailer(next_header=BAD_NEXT_HEADER), tags=("next_header",)),
        3: Fault(trailer=Trailer(extra_pad=8), tags=("extra_pad",)),
        14: Fault(trailer=Trailer(extra_pad=12), tags=("extra_pad",)),
    }
    session(cb, transport(ab), transport(ba), 16, 500, faults=faults)
    desc = "2 zeroed pad bytes, 2 pad lengths +4/+8, 2 next header 255; 2 valid extra pads"
    return cb.scenario("bad-trailer", desc, (ab.sealer, ba.sealer))


def malformed(seed: int = 1) -> Scenario:
    """Frames whose IP header cannot be parsed, among valid ESP."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x8301, 0x8302), V4_A, V4_B)
    udp_pair(cb, ab, ba)
    datagram = udp_bytes(V4_A, V4_B, 9, 9, filler(64))
    good = ipv4_packet(V4_A, V4_B, PROTO_UDP, datagram)
    bad = FrameTruth(0, Verdict.UNDECODABLE)
    cb.emit(ethernet_frame(b"\x43" + good[1:], ETH_IPV4), bad)  # IHL 3 < 5
    cb.emit(ethernet_frame(b"\x75" + good[1:], ETH_IPV4), bad)  # IP version 7
    short = ipv4_packet(V4_A, V4_B, PROTO_UDP, datagram, total_len=12)
    cb.emit(ethernet_frame(short, ETH_IPV4), bad)  # total length 12 < header
    ping(cb, ab, ba, 13)
    desc = "3 undecodable frames (IPv4 IHL 3; IP version 7; IPv4 total length 12)"
    return cb.scenario("malformed", desc, (ab.sealer, ba.sealer))


def _gso_burst(cb: CaptureBuilder, ab: SaFlow, talk: TcpTalk, size: int, count: int) -> None:
    """``count`` GSO segments whose ESP header landed in the inner header."""
    inner_a, inner_b = ip("10.9.0.1"), ip("10.9.0.2")
    first = ab.next_seq
    for _ in range(count):
        seg = talk.seg(True, TCP_PSH | TCP_ACK, filler(size, talk.client_seq % 97))
        inner = ip_packet(
            inner_a, inner_b, PROTO_TCP, tcp_bytes(inner_a, inner_b, seg), ident=seg.seq & 0xFFFF
        )
        seq = ab.take_seq()
        payload = gso_misplaced_payload(ab.sealer, inner, seq, slot_seq64=first)
        expected = ab.header_len
        truth = FrameTruth(
            0,
            Verdict.ESP_MISPLACED,
            ab.spi,
            seq,
            PROTO_IPIP,
            expected + MISPLACED_SHIFT,
            expected,
            leaked=CLEAR_INNER_LEN,
            leaked_hex=inner[:CLEAR_INNER_LEN].hex(" "),
            tags=("gso_layout",),
        )
        cb.emit_ip(ab.outer(payload, 50), truth)


def _kernel(seed: int, v6: bool) -> Scenario:
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    a, b = (ip("fd00:a::1"), ip("fd00:a::2")) if v6 else (V4_A, V4_B)
    ab, ba = sa_pair(rng, (0x1001, 0x1002), a, b)
    inner_a, inner_b = ip("10.9.0.1"), ip("10.9.0.2")
    send_ab, send_ba = tunnel(ab, inner_a, inner_b), tunnel(ba, inner_b, inner_a)
    talk = TcpTalk()
    handshake(cb, send_ab, send_ba, talk)
    for _ in range(4):
        _gso_burst(cb, ab, talk, 1400, 3)
        cb.emit_ip(*send_ba(talk.seg(False, TCP_ACK), Fault()), outgoing=False)
    bulk(cb, send_ab, send_ba, talk, 2, 120, ack_every=2)
    close(cb, send_ab, send_ba, talk)
    name = "kernel-gso-v6" if v6 else "kernel-gso-v4"
    probe = (
        "ip6 proto 50 and ip6[56:2] = 0x4500 and ip6[60:4] = 0x1001"
        if v6
        else ("ip proto 50 and ip[36:2] = 0x4500 and ip[40:4] = 0x1001")
    )
    desc = f"ipip over {'IPv6' if v6 else 'IPv4'} transport SA 0x1001, GSO layout; {probe}"
    facts = {"esp_misplaced": 12, "tcpdump_filter_matches": 12}
    return cb.scenario(name, desc, (ab.sealer, ba.sealer), facts=facts)


def kernel_gso_v4(seed: int = 1) -> Scenario:
    """The GSO layout under an outer IPv4 header (ESP at 40, 45 00 at 36)."""
    return _kernel(seed, v6=False)


def kernel_gso_v6(seed: int = 1) -> Scenario:
    """The GSO layout under an outer IPv6 header (ESP at 60, 45 00 at 56)."""
    return _kernel(seed, v6=True)
