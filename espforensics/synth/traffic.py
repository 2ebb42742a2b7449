"""Conversations that scenarios reuse: TCP sessions, pings, ARP, IKE, NS.

In: a ``CaptureBuilder``, ``Sender`` functions that turn a TCP segment
into an outer packet and its truth (transport, tunnel, ...), and the
link to frame on. Out: frames appended to the builder, in a plausible
order. Raises ``ValueError`` from the packers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from ipaddress import IPv4Address

from espforensics.synth.builder import (
    NO_FAULT,
    NOT_ESP,
    CaptureBuilder,
    Fault,
    SaFlow,
    TcpTalk,
    filler,
)
from espforensics.synth.link import ETHERNET, Link, arp_frame
from espforensics.synth.packets import (
    NAT_KEEPALIVE,
    PROTO_IPIP,
    PROTO_IPV6,
    PROTO_TCP,
    PROTO_UDP,
    TCP_ACK,
    TCP_FIN,
    TCP_PSH,
    TCP_SYN,
    IpAddress,
    TcpSegment,
    icmp6_echo,
    icmp6_message,
    icmp_echo,
    icmp_proto,
    ike_payload,
    ip_packet,
    ping_bytes,
    tcp_bytes,
    udp_bytes,
)
from espforensics.synth.truth import FrameTruth

Sender = Callable[[TcpSegment, Fault], tuple[bytes, FrameTruth]]
IKE_PORT = 500


def inner_proto(version: int) -> int:
    """ESP next header of a whole inner IP packet (RFC 4303 s2.6)."""
    return PROTO_IPIP if version == 4 else PROTO_IPV6


def transport(flow: SaFlow) -> Sender:
    """Send segments over a transport-mode SA."""
    return flow.send_tcp


def tunnel(flow: SaFlow, inner_src: IpAddress, inner_dst: IpAddress) -> Sender:
    """Send segments as inner IP packets (tunnel mode, or ipip over transport)."""

    def send(seg: TcpSegment, fault: Fault = NO_FAULT) -> tuple[bytes, FrameTruth]:
        inner = ip_packet(
            inner_src,
            inner_dst,
            PROTO_TCP,
            tcp_bytes(inner_src, inner_dst, seg),
            ident=seg.seq & 0xFFFF,
        )
        return flow.send(inner, inner_proto(inner_src.version), None, fault)

    return send


def _emit(cb: CaptureBuilder, sent: tuple[bytes, FrameTruth], link: Link, out: bool) -> int:
    return cb.emit_ip(sent[0], sent[1], link, outgoing=out)


def handshake(
    cb: CaptureBuilder, ab: Sender, ba: Sender, talk: TcpTalk, link: Link = ETHERNET
) -> None:
    """SYN, SYN/ACK, ACK: three frames."""
    _emit(cb, ab(talk.seg(True, TCP_SYN), NO_FAULT), link, True)
    _emit(cb, ba(talk.seg(False, TCP_SYN), NO_FAULT), link, False)
    _emit(cb, ab(talk.seg(True, TCP_ACK), NO_FAULT), link, True)


def bulk(
    cb: CaptureBuilder,
    ab: Sender,
    ba: Sender,
    talk: TcpTalk,
    count: int,
    size: int,
    link: Link = ETHERNET,
    ack_every: int = 2,
    faults: Mapping[int, Fault] | None = None,
) -> None:
    """``count`` data segments from the client, an ACK after every
    ``ack_every``: count + count // ack_every frames. ``faults`` maps the
    index of a data segment (0-based) to what to do to it."""
    faults = faults or {}
    for i in range(count):
        seg = talk.seg(True, TCP_PSH, filler(size, i * size))
        _emit(cb, ab(seg, faults.get(i, NO_FAULT)), link, True)
        if (i + 1) % ack_every == 0:
            _emit(cb, ba(talk.seg(False, TCP_ACK), NO_FAULT), link, False)


def close(cb: CaptureBuilder, ab: Sender, ba: Sender, talk: TcpTalk, link: Link = ETHERNET) -> None:
    """FIN, FIN/ACK, ACK: three frames."""
    _emit(cb, ab(talk.seg(True, TCP_FIN), NO_FAULT), link, True)
    _emit(cb, ba(talk.seg(False, TCP_FIN), NO_FAULT), link, False)
    _emit(cb, ab(talk.seg(True, TCP_ACK), NO_FAULT), link, True)


def session(
    cb: CaptureBuilder,
    ab: Sender,
    ba: Sender,
    count: int,
    size: int,
    link: Link = ETHERNET,
    faults: Mapping[int, Fault] | None = None,
) -> None:
    """A whole TCP connection: 6 + count + count // 2 frames."""
    talk = TcpTalk()
    handshake(cb, ab, ba, talk, link)
    bulk(cb, ab, ba, talk, count, size, link, faults=faults)
    close(cb, ab, ba, talk, link)


def ping(cb: CaptureBuilder, ab: SaFlow, ba: SaFlow, ident: int, link: Link = ETHERNET) -> None:
    """An echo request and reply over transport-mode SAs: two frames."""
    data = filler(56)
    request = ping_bytes(ab.src, ab.dst, ident, 1, data)
    if ba.src.version == 4:
        reply = icmp_echo(ident, 1, data, reply=True)
    else:
        reply = icmp6_echo(ba.src, ba.dst, ident, 1, data, reply=True)
    _emit(cb, ab.send(request, icmp_proto(ab.src.version)), link, True)
    _emit(cb, ba.send(reply, icmp_proto(ba.src.version)), link, False)


def udp_pair(cb: CaptureBuilder, ab: SaFlow, ba: SaFlow, link: Link = ETHERNET) -> None:
    """A UDP query and answer (port 53 style) over transport SAs: two frames."""
    query = udp_bytes(ab.src, ab.dst, 53001, 53, filler(40))
    answer = udp_bytes(ba.src, ba.dst, 53, 53001, filler(120, 7))
    _emit(cb, ab.send(query, PROTO_UDP), link, True)
    _emit(cb, ba.send(answer, PROTO_UDP), link, False)


def arp(cb: CaptureBuilder, a: IpAddress, b: IpAddress) -> None:
    """ARP who-has and is-at on Ethernet: two not-ESP frames."""
    if not isinstance(a, IPv4Address) or not isinstance(b, IPv4Address):
        raise ValueError("ARP needs IPv4 addresses")
    cb.emit(arp_frame(a, b), NOT_ESP)
    cb.emit(arp_frame(b, a, reply=True), NOT_ESP)


def neighbor_solicit(cb: CaptureBuilder, a: IpAddress, b: IpAddress, link: Link = ETHERNET) -> None:
    """ICMPv6 Neighbor Solicitation and Advertisement in clear: two frames."""
    ns = icmp6_message(a, b, 135, bytes(4) + b.packed)
    na = icmp6_message(b, a, 136, b"\x60\x00\x00\x00" + b.packed)
    cb.emit_ip(ip_packet(a, b, 58, ns), NOT_ESP, link, outgoing=True)
    cb.emit_ip(ip_packet(b, a, 58, na), NOT_ESP, link, outgoing=False)


def ike(
    cb: CaptureBuilder,
    a: IpAddress,
    b: IpAddress,
    port: int,
    message_id: int,
    link: Link = ETHERNET,
) -> None:
    """An IKEv2 request and response on ``port`` (marker on any port but
    500, RFC 3948 s2.2): two not-ESP frames."""
    marker = port != IKE_PORT
    for src, dst, out in ((a, b, True), (b, a, False)):
        body = ike_payload(0x1122334455667788, message_id, marker=marker)
        cb.emit_ip(
            ip_packet(src, dst, PROTO_UDP, udp_bytes(src, dst, port, port, body)),
            NOT_ESP,
            link,
            outgoing=out,
        )


def keepalive(
    cb: CaptureBuilder, a: IpAddress, b: IpAddress, port: int, link: Link = ETHERNET
) -> None:
    """One NAT-keepalive (RFC 3948 s2.3): a UDP datagram holding 0xFF."""
    datagram = udp_bytes(a, b, port, port, NAT_KEEPALIVE, zero_sum=True)
    cb.emit_ip(ip_packet(a, b, PROTO_UDP, datagram), NOT_ESP, link)
