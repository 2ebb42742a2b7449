"""Outer IPv4/IPv6 decoding up to the upper-layer header.

In: bytes that start with an IP header. Out: ``OuterIp``: addresses
(packed), the upper-layer protocol after any IPv6 extension headers, the
offset where it starts, the datagram length the header claims, and the
fragment fields; ``IpMarks`` (``parse_marks``): the traffic class and
TTL / hop limit. Raises ``Truncated`` when a header is cut short and
``MalformedPacket`` for impossible field values.

RFC 791 s3.1 (IPv4, options skipped by IHL); RFC 8200 s4 (IPv6 extension
headers: hop-by-hop 0, routing 43, fragment 44, destination options 60).
With ``through_ah`` an Authentication Header (RFC 4302: protocol 51, its
length in 4-byte words minus 2) is walked too, as the outer decode does: an
AH-then-ESP bundle (RFC 4301 s4.3) carries its ESP header right after AH.
An IPv4 fragment's AH is walked once its datagram is rebuilt.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from espforensics.errors import MalformedPacket, Truncated
from espforensics.model.records import new_tuple

PROTO_ESP = 50
PROTO_UDP = 17
PROTO_AH = 51
_AH_MIN = 12  # next header, length, reserved, SPI, sequence number (RFC 4302 s2)
_HOPOPTS, _ROUTING, _FRAGMENT, _DSTOPTS = 0, 43, 44, 60
_EXT_HEADERS = frozenset({_HOPOPTS, _ROUTING, _DSTOPTS})
_EXT_AND_AH = _EXT_HEADERS | {PROTO_AH}
_V4 = struct.Struct(">BBHHHBBH4s4s")
_V6 = struct.Struct(">IHBB16s16s")
_FRAG6 = struct.Struct(">BBHI")


class OuterIp(NamedTuple):
    """The outer IP header of a frame, as far as ESP analysis needs it."""

    version: int
    src: bytes
    dst: bytes
    proto: int  # upper-layer protocol (after IPv6 extension headers, and AH when walked)
    header_len: int  # bytes from the IP header to the upper-layer header
    total_len: int  # datagram length the header claims
    frag_id: int | None  # None when the datagram is not a fragment
    frag_offset: int  # offset of this fragment's data, in bytes
    more_fragments: bool
    unfrag_len: int  # IPv6: bytes before the Fragment header; IPv4: header_len
    next_header_at: int  # IPv6: offset of the next-header byte naming the Fragment header
    ah: bool = False  # an Authentication Header was walked before ``proto``
    routed: bool = False  # IPv6: a Routing header was walked (RFC 8200 s8.1: checksums
    # then cover its last address, not the header's destination)


def _ah_len(data: bytes, off: int, end: int) -> int:
    """The length of the Authentication Header at ``off`` (RFC 4302 s2.2)."""
    if len(data) < off + _AH_MIN:
        raise Truncated(f"AH header cut at {max(len(data) - off, 0)} bytes")
    length = (data[off + 1] + 2) * 4
    if length < _AH_MIN:
        raise MalformedPacket(f"AH length {length} is below {_AH_MIN} bytes")
    if off + length > end:
        raise MalformedPacket(f"AH length {length} overruns the datagram ({end} bytes)")
    return length


def _parse_v4(data: bytes, through_ah: bool) -> OuterIp:
    if len(data) < 20:
        raise Truncated(f"IPv4 header cut at {len(data)} bytes")
    vihl, _tos, total, ident, flags_frag, _ttl, proto, _csum, src, dst = _V4.unpack_from(data)
    ihl = (vihl & 0x0F) * 4
    if ihl < 20:
        raise MalformedPacket(f"IPv4 IHL {ihl // 4} is below 5")
    if total < ihl:
        raise MalformedPacket(f"IPv4 total length {total} is below header length {ihl}")
    if len(data) < ihl:
        raise Truncated(f"IPv4 options cut at {len(data)} of {ihl} bytes")
    more = bool(flags_frag & 0x2000)
    offset = (flags_frag & 0x1FFF) * 8
    frag_id = ident if (more or offset) else None
    ah = through_ah and proto == PROTO_AH and frag_id is None
    if ah:
        length = _ah_len(data, ihl, total)  # first: it raises for an AH cut short
        proto, ihl = data[ihl], ihl + length
    return new_tuple(
        OuterIp, (4, src, dst, proto, ihl, total, frag_id, offset, more, ihl, 9, ah, False)
    )


def _parse_v6(data: bytes, through_ah: bool) -> OuterIp:
    if len(data) < 40:
        raise Truncated(f"IPv6 header cut at {len(data)} bytes")
    _vtf, payload_len, nxt, _hlim, src, dst = _V6.unpack_from(data)
    off, nxt_at = 40, 6
    frag_id: int | None = None
    frag_offset, more, unfrag_len, frag_nxt_at = 0, False, 40, 6
    ah = routed = False
    walked = _EXT_AND_AH if through_ah else _EXT_HEADERS
    while nxt in walked or nxt == _FRAGMENT:
        if len(data) < off + 8:
            raise Truncated(f"IPv6 extension header {nxt} cut at {len(data)} bytes")
        if nxt == _FRAGMENT:
            if frag_id is not None:
                raise MalformedPacket("two IPv6 Fragment headers")
            new_nxt, _res, offlg, ident = _FRAG6.unpack_from(data, off)
            frag_id, frag_offset, more = ident, offlg & 0xFFF8, bool(offlg & 1)
            unfrag_len, frag_nxt_at = off, nxt_at
            # RFC 8200 s4.5: what follows is fragment data, reparsed after reassembly.
            nxt, off = new_nxt, off + 8
            break
        if nxt == PROTO_AH:
            length, ah = _ah_len(data, off, 40 + payload_len), True
        else:
            length, routed = (data[off + 1] + 1) * 8, routed or nxt == _ROUTING
        new_nxt = data[off]
        nxt, nxt_at, off = new_nxt, off, off + length
    total = 40 + payload_len
    if off > total:
        raise MalformedPacket(f"IPv6 extension headers ({off} bytes) overrun payload length")
    return OuterIp(
        6, src, dst, nxt, off, total, frag_id, frag_offset, more, unfrag_len, frag_nxt_at, ah,
        routed,
    )  # fmt: skip


def parse_ip(data: bytes, *, through_ah: bool = False) -> OuterIp:
    """Decode the IPv4 or IPv6 header at the start of ``data`` (and an AH after it)."""
    if not data:
        raise Truncated("no IP header")
    version = data[0] >> 4
    if version == 4:
        return _parse_v4(data, through_ah)
    if version == 6:
        return _parse_v6(data, through_ah)
    raise MalformedPacket(f"IP version {version} is neither 4 nor 6")


class IpMarks(NamedTuple):
    """The outer header fields routers change on the way (RFC 2474, RFC 3168)."""

    traffic_class: int  # IPv4 TOS / IPv6 Traffic Class byte: DSCP (6 bits), ECN (2)
    hops: int  # IPv4 TTL / IPv6 Hop Limit


def parse_marks(data: bytes) -> IpMarks:
    """The traffic class and TTL / hop limit of the IP header at the start of ``data``."""
    if not data:
        raise Truncated("no IP header")
    version = data[0] >> 4
    need = 20 if version == 4 else 40
    if version not in (4, 6):
        raise MalformedPacket(f"IP version {version} is neither 4 nor 6")
    if len(data) < need:
        raise Truncated(f"IPv{version} header cut at {len(data)} bytes")
    if version == 4:
        return IpMarks(data[1], data[8])
    return IpMarks(((data[0] & 0x0F) << 4) | (data[1] >> 4), data[7])
