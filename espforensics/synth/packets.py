"""IP, UDP, TCP and ICMP packets for synthetic captures (dpkt adapter).

In: addresses (``ipaddress`` objects), ports, payload bytes. Out: packed
packets as ``bytes`` with correct lengths and checksums. Raises
``ValueError`` when asked for something that cannot be packed (a
fragment count larger than the payload allows, misaligned options).

dpkt builds the headers it knows (IPv4, IPv6, TCP, UDP, ICMP, ICMPv6);
IPv6 extension headers and IPv4 options are packed with ``struct`` here.
Checksums are computed explicitly over the RFC pseudo-headers
(RFC 793 s3.1, RFC 768, RFC 8200 s8.1) so they do not depend on dpkt's
heuristics.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import dpkt

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

PROTO_HOPOPTS = 0
PROTO_ICMP = 1
PROTO_IPIP = 4
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_IPV6 = 41
PROTO_ROUTING = 43
PROTO_FRAGMENT = 44
PROTO_ESP = 50
PROTO_ICMPV6 = 58
PROTO_DSTOPTS = 60
IPV4_HEADER_LEN = 20
IPV6_HEADER_LEN = 40
TCP_ACK = dpkt.tcp.TH_ACK
TCP_SYN = dpkt.tcp.TH_SYN
TCP_FIN = dpkt.tcp.TH_FIN
TCP_PSH = dpkt.tcp.TH_PUSH
# RFC 2113 Router Alert (copied on fragmentation) and two NOPs: 8 bytes.
IPV4_ROUTER_ALERT = b"\x94\x04\x00\x00\x01\x01\x01\x00"
_TCP_TIMESTAMPS = b"\x01\x01\x08\x0a"  # NOP NOP TS(len 10), values follow


def l4_checksum(src: IpAddress, dst: IpAddress, proto: int, segment: bytes) -> int:
    """Internet checksum of ``segment`` with the IPv4 or IPv6 pseudo-header."""
    if src.version == 4:
        pseudo = struct.pack(">4s4sxBH", src.packed, dst.packed, proto, len(segment))
    else:
        pseudo = struct.pack(">16s16sIxxxB", src.packed, dst.packed, len(segment), proto)
    total = dpkt.in_cksum_add(dpkt.in_cksum_add(0, pseudo), segment)
    return int(dpkt.in_cksum_done(total))


def _with_checksum(pkt: dpkt.Packet, src: IpAddress, dst: IpAddress, proto: int) -> bytes:
    pkt.sum = 0
    pkt.sum = l4_checksum(src, dst, proto, bytes(pkt))
    if proto == PROTO_UDP and pkt.sum == 0:
        pkt.sum = 0xFFFF  # RFC 768: a computed zero is sent as all ones
    return bytes(pkt)


@dataclass(frozen=True, slots=True)
class TcpSegment:
    """The fields of one TCP segment; ``ts`` adds a timestamps option."""

    sport: int
    dport: int
    seq: int
    ack: int = 0
    flags: int = TCP_ACK
    data: bytes = b""
    window: int = 502
    ts: int | None = None


def tcp_bytes(src: IpAddress, dst: IpAddress, seg: TcpSegment) -> bytes:
    """The TCP segment, checksummed for these (inner or outer) addresses."""
    tcp = dpkt.tcp.TCP(
        sport=seg.sport,
        dport=seg.dport,
        seq=seg.seq & 0xFFFFFFFF,
        ack=seg.ack & 0xFFFFFFFF,
        flags=seg.flags,
        win=seg.window,
        data=seg.data,
    )
    if seg.ts is not None:
        tcp.opts = _TCP_TIMESTAMPS + struct.pack(">II", seg.ts & 0xFFFFFFFF, 0)
    tcp.off = (20 + len(tcp.opts)) // 4
    return _with_checksum(tcp, src, dst, PROTO_TCP)


def udp_bytes(
    src: IpAddress, dst: IpAddress, sport: int, dport: int, data: bytes, *, zero_sum: bool = False
) -> bytes:
    """A UDP datagram; ``zero_sum`` sends no checksum (IPv4 only, RFC 768)."""
    udp = dpkt.udp.UDP(sport=sport, dport=dport, ulen=8 + len(data), data=data)
    if zero_sum and src.version == 4:
        udp.sum = 0
        return bytes(udp)
    return _with_checksum(udp, src, dst, PROTO_UDP)


def icmp_echo(ident: int, seq: int, data: bytes, *, reply: bool = False) -> bytes:
    """An ICMP echo request or reply (RFC 792); checksum without pseudo-header."""
    echo = dpkt.icmp.ICMP.Echo(id=ident, seq=seq, data=data)
    icmp = dpkt.icmp.ICMP(type=0 if reply else 8, code=0, sum=0, data=echo)
    return bytes(icmp)


def icmp6_echo(
    src: IpAddress, dst: IpAddress, ident: int, seq: int, data: bytes, *, reply: bool = False
) -> bytes:
    """An ICMPv6 echo request or reply (RFC 4443 s4), pseudo-header checksummed."""
    echo = dpkt.icmp6.ICMP6.Echo(id=ident, seq=seq, data=data)
    icmp6 = dpkt.icmp6.ICMP6(type=129 if reply else 128, code=0, data=echo)
    return _with_checksum(icmp6, src, dst, PROTO_ICMPV6)


def icmp6_message(src: IpAddress, dst: IpAddress, icmp_type: int, body: bytes) -> bytes:
    """Any ICMPv6 message (e.g. 135 Neighbor Solicitation, RFC 4861 s4.3)."""
    icmp6 = dpkt.icmp6.ICMP6(type=icmp_type, code=0, data=body)
    return _with_checksum(icmp6, src, dst, PROTO_ICMPV6)


def ping_bytes(src: IpAddress, dst: IpAddress, ident: int, seq: int, data: bytes) -> bytes:
    """An echo request of the right ICMP family for these addresses."""
    if src.version == 4:
        return icmp_echo(ident, seq, data)
    return icmp6_echo(src, dst, ident, seq, data)


def icmp_proto(version: int) -> int:
    """The IP protocol number of ICMP for an IP version."""
    return PROTO_ICMP if version == 4 else PROTO_ICMPV6


def ipv4_packet(
    src: IpAddress,
    dst: IpAddress,
    proto: int,
    payload: bytes,
    *,
    ident: int = 0,
    options: bytes = b"",
    frag_offset: int = 0,
    more_fragments: bool = False,
    total_len: int | None = None,
    ttl: int = 64,
) -> bytes:
    """An IPv4 packet (RFC 791); ``frag_offset`` counts bytes (multiple of 8)."""
    if len(options) % 4 or len(options) > 40:
        raise ValueError("IPv4 options must be a multiple of 4 bytes, at most 40")
    flags = (dpkt.ip.IP_MF if more_fragments else 0) | (frag_offset // 8)
    if not more_fragments and frag_offset == 0:
        flags |= dpkt.ip.IP_DF
    ip = dpkt.ip.IP(src=src.packed, dst=dst.packed, p=proto, id=ident & 0xFFFF, ttl=ttl)
    ip.opts = options
    ip.hl = (IPV4_HEADER_LEN + len(options)) // 4
    ip._flags_offset = flags
    ip.data = payload
    ip.len = IPV4_HEADER_LEN + len(options) + len(payload) if total_len is None else total_len
    ip.sum = 0
    ip.sum = dpkt.in_cksum(ip.pack_hdr() + options)
    return bytes(ip)


def ipv6_ext(kind: int, next_header: int) -> bytes:
    """An 8-byte IPv6 extension header of type ``kind`` (RFC 8200 s4).

    Hop-by-hop and destination options carry one PadN option; the routing
    header is type 253 (RFC 4727 experiment) with segments left 0, which
    every node must skip (RFC 8200 s4.4).
    """
    if kind in (PROTO_HOPOPTS, PROTO_DSTOPTS):
        return bytes((next_header, 0, 1, 4, 0, 0, 0, 0))
    if kind == PROTO_ROUTING:
        return bytes((next_header, 0, 253, 0, 0, 0, 0, 0))
    raise ValueError(f"no builder for IPv6 extension header {kind}")


def ipv6_fragment_header(next_header: int, offset: int, more: bool, ident: int) -> bytes:
    """The Fragment extension header (RFC 8200 s4.5); offset in bytes."""
    return struct.pack(">BBHI", next_header, 0, offset | int(more), ident & 0xFFFFFFFF)


def ipv6_packet(
    src: IpAddress,
    dst: IpAddress,
    next_header: int,
    payload: bytes,
    *,
    ext: Sequence[int] = (),
    flow: int = 0,
    hlim: int = 64,
) -> bytes:
    """An IPv6 packet (RFC 8200) with the extension headers ``ext`` in order."""
    chain = _ext_chain(ext, next_header)
    first = ext[0] if ext else next_header
    ip6 = dpkt.ip6.IP6(src=src.packed, dst=dst.packed, nxt=first, hlim=hlim)
    ip6.flow = flow
    ip6.plen = len(chain) + len(payload)
    ip6.data = chain + payload
    return bytes(ip6)


def _ext_chain(ext: Sequence[int], last_next: int) -> bytes:
    if not ext:
        return b""
    nexts = [*ext[1:], last_next]
    return b"".join(ipv6_ext(kind, nxt) for kind, nxt in zip(ext, nexts, strict=True))


def ip_packet(
    src: IpAddress,
    dst: IpAddress,
    proto: int,
    payload: bytes,
    *,
    ident: int = 0,
    options: bytes = b"",
    ext: Sequence[int] = (),
) -> bytes:
    """An IPv4 or IPv6 packet, chosen by the address family."""
    if src.version == 4:
        return ipv4_packet(src, dst, proto, payload, ident=ident, options=options)
    return ipv6_packet(src, dst, proto, payload, ext=ext, flow=ident & 0xFFFFF)


def ip_header_len(version: int, *, options: bytes = b"", ext: Sequence[int] = ()) -> int:
    """Length of the outer header chain before the transport payload."""
    if version == 4:
        return IPV4_HEADER_LEN + len(options)
    return IPV6_HEADER_LEN + 8 * len(ext)


def split_payload(payload: bytes, count: int) -> list[bytes]:
    """Cut ``payload`` into ``count`` pieces, all but the last a multiple of 8."""
    size = -(-len(payload) // count)
    size += -size % 8
    pieces = [payload[i : i + size] for i in range(0, len(payload), size)]
    if len(pieces) != count:
        raise ValueError(f"{len(payload)} bytes do not split into {count} fragments")
    return pieces


def ipv4_fragments(
    src: IpAddress,
    dst: IpAddress,
    proto: int,
    payload: bytes,
    count: int,
    *,
    ident: int,
    options: bytes = b"",
) -> list[bytes]:
    """RFC 791 fragments of one datagram, in order. Options with the copy
    flag (bit 0x80 of the type) are repeated in every fragment."""
    copied = options if options[:1] and options[0] & 0x80 else b""
    frags, offset = [], 0
    pieces = split_payload(payload, count)
    for i, piece in enumerate(pieces):
        opts = options if i == 0 else copied
        more = i < len(pieces) - 1
        frags.append(
            ipv4_packet(
                src,
                dst,
                proto,
                piece,
                ident=ident,
                options=opts,
                frag_offset=offset,
                more_fragments=more,
            )
        )
        offset += len(piece)
    return frags


def ipv6_fragments(
    src: IpAddress,
    dst: IpAddress,
    next_header: int,
    payload: bytes,
    count: int,
    *,
    ident: int,
    ext: Sequence[int] = (),
) -> list[bytes]:
    """RFC 8200 s4.5 fragments: ``ext`` (hop-by-hop, routing) stays in the
    unfragmentable part, in front of each Fragment header."""
    frags, offset = [], 0
    pieces = split_payload(payload, count)
    for i, piece in enumerate(pieces):
        more = i < len(pieces) - 1
        body = ipv6_fragment_header(next_header, offset, more, ident) + piece
        frags.append(ipv6_packet(src, dst, PROTO_FRAGMENT, body, ext=ext))
        offset += len(piece)
    return frags


def ike_payload(spi_i: int, message_id: int, *, exchange: int = 37, marker: bool = True) -> bytes:
    """A minimal IKEv2 message (RFC 7296 s3.1), with the RFC 3948 s2.2
    non-ESP marker when it travels on the NAT-T port."""
    body = bytes(8)  # an empty Notify-free encrypted payload stand-in
    header = struct.pack(
        ">QQBBBBII", spi_i, spi_i ^ 0x5A5A, 46, 0x20, exchange, 0x08, message_id, 28 + len(body)
    )
    return (b"\x00\x00\x00\x00" if marker else b"") + header + body


NAT_KEEPALIVE = b"\xff"  # RFC 3948 s2.3
