"""The inner packet of a decrypted ESP payload, to its 5-tuple.

In: the next-header value from the ESP trailer, the payload bytes and the
outer addresses (transport mode keeps them). Out: ``Inner`` (protocol
name, addresses as text, ports or None). Raises ``Truncated`` or
``MalformedPacket`` when the inner headers are cut or impossible.

Next header 4/41 is a whole inner IPv4/IPv6 packet (tunnel mode, or an
ipip/ip6tnl device over a transport-mode SA, RFC 2003 / RFC 2473); 59 is a
dummy packet (RFC 4303 s2.6); anything else is the upper-layer header.
"""

from __future__ import annotations

import socket
from typing import NamedTuple

from espforensics.decode.esp import protocol_name
from espforensics.decode.ip import parse_ip
from espforensics.errors import Truncated
from espforensics.model import new_tuple

_NAMES = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6", 132: "sctp", 59: "none"}
_PORTS = frozenset({6, 17, 132, 136})  # TCP, UDP, SCTP, UDP-Lite: ports lead


class Inner(NamedTuple):
    """The inner packet's protocol and addresses."""

    proto: str
    src: str
    dst: str
    sport: int | None
    dport: int | None


def ntop(addr: bytes) -> str:
    """Text form of a packed IPv4 or IPv6 address."""
    return socket.inet_ntop(socket.AF_INET if len(addr) == 4 else socket.AF_INET6, addr)


def l4_name(proto: int) -> str:
    """The ``inner_proto`` of an upper-layer header of protocol ``proto``."""
    return _NAMES.get(proto) or protocol_name(proto).lower()


def fragment_name(proto: int) -> str:
    """The ``inner_proto`` of a non-first inner IP fragment (no upper-layer header in it)."""
    return _NAMES.get(proto, str(proto))


def has_ports(proto: int) -> bool:
    """Does an upper-layer header of ``proto`` start with source and destination ports?"""
    return proto in _PORTS


def _l4(proto: int, data: bytes, src: str, dst: str) -> Inner:
    name = l4_name(proto)
    if proto in _PORTS:
        if len(data) < 4:
            raise Truncated(f"inner {name} header cut at {len(data)} bytes")
        sport, dport = int.from_bytes(data[0:2], "big"), int.from_bytes(data[2:4], "big")
        return new_tuple(Inner, (name, src, dst, sport, dport))
    return new_tuple(Inner, (name, src, dst, None, None))


def parse_inner(next_header: int, payload: bytes, outer_src: str, outer_dst: str) -> Inner:
    """Decode what an ESP payload carries down to its 5-tuple."""
    if next_header in (4, 41):
        ip = parse_ip(payload)
        if ip.frag_id is not None and ip.frag_offset:
            return Inner(fragment_name(ip.proto), ntop(ip.src), ntop(ip.dst), None, None)
        return _l4(ip.proto, payload[ip.header_len : ip.total_len], ntop(ip.src), ntop(ip.dst))
    return _l4(next_header, payload, outer_src, outer_dst)
