"""Clean scenarios: traffic a correct analyzer decrypts without complaint.

In: a seed. Out: ``Scenario`` objects (see docs/synth.md for counts):
``example``, ``ipv4-transport-tcp``, ``ipv6-tunnel``, ``inner-protocols``,
``outer-headers``, ``natt``, ``pcapng-dsb`` and the ``link-*`` family.
Raises nothing for valid seeds.
"""

from __future__ import annotations

import random

from espforensics.synth.builder import (
    NATT_PORT,
    NO_FAULT,
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
from espforensics.synth.keytext import esp_sa_secrets
from espforensics.synth.link import LINKS
from espforensics.synth.packets import (
    IPV4_ROUTER_ALERT,
    PROTO_DSTOPTS,
    PROTO_HOPOPTS,
    PROTO_ROUTING,
    PROTO_TCP,
    PROTO_UDP,
    TCP_ACK,
    TCP_PSH,
    IpAddress,
    TcpSegment,
    icmp_proto,
    ip_packet,
    ping_bytes,
    tcp_bytes,
    udp_bytes,
)
from espforensics.synth.traffic import (
    arp,
    ike,
    inner_proto,
    keepalive,
    neighbor_solicit,
    ping,
    session,
    transport,
    tunnel,
    udp_pair,
)
from espforensics.synth.truth import CaptureFormat, FrameTruth, Scenario

OTHER_NATT_PORT = 14500


def example(seed: int = 1) -> Scenario:
    """The bundled fixture: 40 frames, IPv4 transport TCP, ARP and IKE."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x1001, 0x1002), V4_A, V4_B)
    arp(cb, V4_A, V4_B)
    ike(cb, V4_A, V4_B, 500, 0)
    session(cb, transport(ab), transport(ba), 20, 400)
    desc = "IPv4 transport-mode TCP over SPI 0x1001/0x1002 on Ethernet, plus ARP and IKE"
    return cb.scenario("example", desc, (ab.sealer, ba.sealer))


def ipv4_transport_tcp(seed: int = 1) -> Scenario:
    """A clean bulk TCP transfer over an IPv4 transport-mode SA pair."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x1001, 0x1002), V4_A, V4_B)
    arp(cb, V4_A, V4_B)
    session(cb, transport(ab), transport(ba), 60, 1400)
    desc = "clean bulk TCP over IPv4 transport mode, SPI 0x1001 a->b and 0x1002 b->a"
    return cb.scenario("ipv4-transport-tcp", desc, (ab.sealer, ba.sealer))


def _tunnel_send(
    flow: SaFlow, src: IpAddress, dst: IpAddress, proto: int, l4: bytes, tfc: int = 0
) -> tuple[bytes, FrameTruth]:
    inner = ip_packet(src, dst, proto, l4)
    fault = Fault(trailer=Trailer(tfc=tfc), tags=("tfc",)) if tfc else NO_FAULT
    return flow.send(inner, inner_proto(src.version), None, fault)


def _tunnel_extras(cb: CaptureBuilder, ab: SaFlow, ba: SaFlow) -> None:
    """Inner IPv4 ping, inner ICMPv6 ping, inner UDP, and two TFC-padded."""
    hosts = ((ip("10.1.0.10"), ip("10.2.0.20")), (ip("fd00:1::10"), ip("fd00:2::20")))
    for src, dst in hosts:
        for flow, s, d, out in ((ab, src, dst, True), (ba, dst, src, False)):
            packet, truth = flow.send(
                ip_packet(s, d, icmp_proto(s.version), ping_bytes(s, d, 7, 1, filler(56))),
                inner_proto(s.version),
            )
            cb.emit_ip(packet, truth, outgoing=out)
    src, dst = hosts[1]
    for tfc in (0, 0, 24, 100):
        packet, truth = _tunnel_send(
            ab, src, dst, PROTO_UDP, udp_bytes(src, dst, 5353, 5353, filler(80)), tfc
        )
        cb.emit_ip(packet, truth)


def ipv6_tunnel(seed: int = 1) -> Scenario:
    """IPv6 outer, tunnel mode, inner IPv6 TCP plus inner IPv4/ICMP/UDP/TFC."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x3001, 0x3002), V6_A, V6_B, mode="tunnel")
    neighbor_solicit(cb, V6_A, V6_B)
    inner_a, inner_b = ip("fd00:1::10"), ip("fd00:2::20")
    session(cb, tunnel(ab, inner_a, inner_b), tunnel(ba, inner_b, inner_a), 20, 1200)
    _tunnel_extras(cb, ab, ba)
    desc = "clean IPv6 tunnel mode (SPI 0x3001/0x3002): inner IPv6 TCP, pings, UDP, TFC"
    return cb.scenario("ipv6-tunnel", desc, (ab.sealer, ba.sealer))


def _inner_ip(cb: CaptureBuilder, ab: SaFlow) -> None:
    """ipip (next header 4) and ip6tnl (41) packets over a transport SA."""
    v4s, v4d = ip("10.9.0.1"), ip("10.9.0.2")
    seg = TcpSegment(40000, 5201, 1, 1, TCP_PSH | TCP_ACK, filler(300))
    inner4 = ip_packet(v4s, v4d, PROTO_TCP, tcp_bytes(v4s, v4d, seg), ident=77)
    cb.emit_ip(*ab.send(inner4, inner_proto(4)))
    v6s, v6d = ip("fd00:9::1"), ip("fd00:9::2")
    inner6 = ip_packet(v6s, v6d, PROTO_UDP, udp_bytes(v6s, v6d, 4000, 4001, filler(200)))
    cb.emit_ip(*ab.send(inner6, inner_proto(6)))


def inner_protocols(seed: int = 1) -> Scenario:
    """Every inner payload type over IPv4 and IPv6 transport, plus tunnel."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    pairs = [sa_pair(rng, (0x1101, 0x1102), V4_A, V4_B), sa_pair(rng, (0x1201, 0x1202), V6_A, V6_B)]
    for ab, ba in pairs:
        talk = TcpTalk()
        cb.emit_ip(*ab.send_tcp(talk.seg(True, TCP_PSH, filler(500))))
        cb.emit_ip(*ba.send_tcp(talk.seg(False, TCP_ACK)), outgoing=False)
        udp_pair(cb, ab, ba)
        ping(cb, ab, ba, 0x42)
        _inner_ip(cb, ab)
    tab, tba = sa_pair(rng, (0x1301, 0x1302), V4_A, V4_B, mode="tunnel")
    _tunnel_udp(cb, tab, tba)
    sas = tuple(f.sealer for pair in [*pairs, (tab, tba)] for f in pair)
    desc = "transport TCP/UDP/ICMP/ICMPv6/ipip/ip6tnl over IPv4 and IPv6, tunnel-mode UDP"
    return cb.scenario("inner-protocols", desc, sas)


def _tunnel_udp(cb: CaptureBuilder, ab: SaFlow, ba: SaFlow) -> None:
    a, b = ip("10.1.0.1"), ip("10.2.0.1")
    for flow, s, d, out in ((ab, a, b, True), (ba, b, a, False)):
        inner = ip_packet(s, d, PROTO_UDP, udp_bytes(s, d, 1234, 4321, filler(64)))
        cb.emit_ip(*flow.send(inner, inner_proto(4)), outgoing=out)


def outer_headers(seed: int = 1) -> Scenario:
    """IPv4 options and IPv6 extension headers in front of ESP."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    opt4 = sa_pair(rng, (0x1401, 0x1402), V4_A, V4_B, options=IPV4_ROUTER_ALERT)
    ext3 = sa_pair(
        rng, (0x1501, 0x1502), V6_A, V6_B, ext=(PROTO_HOPOPTS, PROTO_ROUTING, PROTO_DSTOPTS)
    )
    hbh = sa_pair(rng, (0x1601, 0x1602), V6_A, V6_B, ext=(PROTO_HOPOPTS,))
    natt6 = sa_pair(
        rng, (0x1701, 0x1702), V6_A, V6_B, ext=(PROTO_HOPOPTS, PROTO_DSTOPTS), encap_port=NATT_PORT
    )
    for ab, ba in (opt4, ext3):
        udp_pair(cb, ab, ba)
        ping(cb, ab, ba, 9)
    for ab, ba in (hbh, natt6):
        udp_pair(cb, ab, ba)
    sas = tuple(f.sealer for pair in (opt4, ext3, hbh, natt6) for f in pair)
    desc = "IPv4 Router Alert option; IPv6 hop-by-hop, routing, destination options; NAT-T v6"
    return cb.scenario("outer-headers", desc, sas)


def natt(seed: int = 1) -> Scenario:
    """ESP in UDP 4500 and 14500 with IKE, non-ESP markers and keepalives."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x4001, 0x4002), V4_A, V4_B, encap_port=NATT_PORT)
    c, d = ip("192.0.2.3"), ip("192.0.2.4")
    cd, dc = sa_pair(rng, (0x4003, 0x4004), c, d, encap_port=OTHER_NATT_PORT)
    ike(cb, V4_A, V4_B, 500, 0)
    ike(cb, V4_A, V4_B, NATT_PORT, 1)
    session(cb, transport(ab), transport(ba), 8, 1000)
    keepalive(cb, V4_A, V4_B, NATT_PORT)
    keepalive(cb, V4_B, V4_A, NATT_PORT)
    keepalive(cb, V4_A, V4_B, NATT_PORT)
    ike(cb, V4_A, V4_B, NATT_PORT, 2)
    ping(cb, cd, dc, 5)
    udp_pair(cb, cd, dc)
    keepalive(cb, c, d, OTHER_NATT_PORT)
    ike(cb, c, d, OTHER_NATT_PORT, 0)
    desc = "NAT-T: ESP in UDP 4500 (0x4001/2) and 14500 (0x4003/4), IKE 500/4500, keepalives"
    return cb.scenario("natt", desc, (ab.sealer, ba.sealer, cd.sealer, dc.sealer))


def pcapng_dsb(seed: int = 1) -> Scenario:
    """A pcapng file whose keys ride in a Decryption Secrets Block."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x1801, 0x1802), V4_A, V4_B)
    cd, dc = sa_pair(rng, (0x1901, 0x1902), V6_A, V6_B)
    session(cb, transport(ab), transport(ba), 8, 700)
    ping(cb, cd, dc, 3)
    sealers = (ab.sealer, ba.sealer, cd.sealer, dc.sealer)
    secrets = (esp_sa_secrets(s.sa for s in sealers),)
    desc = "pcapng with an esp_sa Decryption Secrets Block (type 0x45535053), v4 and v6 SAs"
    return cb.scenario("pcapng-dsb", desc, sealers, capture_format="pcapng", secrets=secrets)


def links(seed: int = 1, names: tuple[str, ...] = tuple(LINKS)) -> Scenario:
    """UDP over ESP framed for each named link (see ``link.LINKS``)."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    v4 = sa_pair(rng, (0x2001, 0x2002), V4_A, V4_B)
    v6 = sa_pair(rng, (0x2101, 0x2102), V6_A, V6_B)
    for name in names:
        link = LINKS[name]
        if name == "ethernet":
            arp(cb, V4_A, V4_B)
        families = {"ipv4": (v4,), "ipv6": (v6,)}.get(name, (v4, v6))
        for ab, ba in families:
            udp_pair(cb, ab, ba, link)
    fmt: CaptureFormat = "pcapng" if len(names) > 1 else "pcap"
    label = "all" if len(names) > 1 else names[0]
    desc = f"ESP-carrying UDP on link {', '.join(names)}"
    sas = (v4[0].sealer, v4[1].sealer, v6[0].sealer, v6[1].sealer)
    return cb.scenario(f"link-{label}", desc, sas, capture_format=fmt)
