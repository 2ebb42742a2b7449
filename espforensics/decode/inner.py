"""The inner packet of a decrypted ESP payload, to its 5-tuple.

In: the next-header value from the ESP trailer, the payload bytes and the
outer addresses (transport mode keeps them). Out: ``Inner`` (protocol
name, addresses as text, ports or None). Raises ``Truncated`` or
``MalformedPacket`` when the inner headers are cut or impossible.

Next header 4/41 is a whole inner IPv4/IPv6 packet (tunnel mode, or an
ipip/ip6tnl device over a transport-mode SA, RFC 2003 / RFC 2473); 59 is a
dummy packet (RFC 4303 s2.6); anything else is the upper-layer header.

``check_inner`` verifies the inner packet's own checksums (the inner IPv4
header's, RFC 791 s3.1; TCP's, UDP's, ICMPv6's over their pseudo-header,
RFC 9293 s3.1, RFC 768, RFC 8200 s8.1; ICMP's, RFC 792) and measures the
TFC padding after an inner IP packet (RFC 4303 s2.7): ``Checked``. It
raises nothing: what it cannot verify is ``not_checked`` with the reason.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from espforensics.decode.clear import internet_checksum
from espforensics.decode.esp import protocol_name
from espforensics.decode.ip import parse_ip
from espforensics.errors import Truncated
from espforensics.model.arrays import I64, U8, Mask, Strs, distinct, read_be, rows_at, u8
from espforensics.model.enums import InnerChecksum
from espforensics.model.records import new_tuple

_NAMES = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6", 132: "sctp", 59: "none", 50: "esp"}
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


# -- the same decode for many payloads at once (the steady lane's) ---------------------

_PORTS_OF = np.array([has_ports(p) for p in range(256)])


class InnerColumns(NamedTuple):
    """``parse_inner`` of many payloads, as columns; rows not ``decoded`` are unset.

    ``v4``, ``v6``, ``proto``, ``l4_at`` and ``l4_end`` say where each
    decoded row's inner packet sits in the joined buffer, for the checksums.
    """

    decoded: Mask  # the rows decoded here; a row that is not may still decode one by one
    proto_name: Strs
    src: Strs
    dst: Strs
    sport: I64  # -1: none
    dport: I64
    v4: Mask  # an inner IPv4 packet (next header 4), decoded
    v6: Mask  # an inner IPv6 packet without extension headers (next header 41), decoded
    proto: I64  # the upper-layer protocol (the next header itself in transport mode)
    l4_at: I64  # where the upper-layer header starts in the buffer
    l4_end: I64  # and where the inner datagram (or the payload) ends


def _fill_names(out: Strs, values: I64, ok: Mask, name: Callable[[int], str]) -> None:
    """``name(v)`` into ``out`` at each row of ``ok`` (one call per distinct value)."""
    for v in distinct(values[ok]).tolist():
        out[ok & (values == v)] = name(v)


def _addresses(view: U8, at: I64, rows: npt.NDArray[np.intp], width: int) -> Strs:
    """Text of the ``width``-byte addresses at ``at`` of ``rows`` (one ntop per distinct
    address), one per row of ``rows``."""
    raw = rows_at(view, at[rows], width)
    # IPv4: each address as one 32-bit number (sorts 5x faster than 4-byte voids); its
    # bytes in memory are the address's, whatever the machine's byte order.
    packed = raw.view(np.uint32 if width == 4 else np.dtype((np.void, width))).ravel()
    uniq, inverse = np.unique(packed, return_inverse=True)
    text = np.array([ntop(u.tobytes()) for u in uniq], dtype=object)
    found: Strs = text[inverse.ravel()]
    return found


def parse_inners(
    view: U8, start: I64, payload: I64, nh: I64, ok: Mask, outer_src: Strs, outer_dst: Strs
) -> InnerColumns:
    """``parse_inner(nh, view[start:start + payload], src, dst)`` of each row of ``ok``.

    A row ``decoded`` has exactly ``parse_inner``'s fields; a row whose
    ``parse_inner`` raises is never decoded. Inner IPv4 and IPv6 without
    extension headers are decoded here (RFC 791 s3.1, RFC 8200 s3-4), and
    every transport payload; other rows are the caller's, one by one.
    """
    ip = ok & ((nh == 4) | (nh == 41))
    first = np.where(ip & (payload > 0), view[np.where(ip, start, 0)] >> 4, 0)
    v4 = ip & (first == 4) & (payload >= 20)
    ihl = (u8(view, start, v4) & 0x0F) * 4
    total4 = read_be(view, start + 2, v4, 2)
    v4 &= (ihl >= 20) & (total4 >= ihl) & (payload >= ihl)
    later = v4 & (read_be(view, start + 6, v4, 2) & 0x1FFF != 0)  # no upper-layer header
    v6 = ip & (first == 6) & (payload >= 40)
    nxt6 = u8(view, start + 6, v6)
    v6 &= ~np.isin(nxt6, (0, 43, 44, 60))
    total6 = 40 + read_be(view, start + 4, v6, 2)
    proto = np.where(ip, np.where(v4, u8(view, start + 9, v4), nxt6), nh)
    l4_at = np.where(v4, start + ihl, np.where(v6, start + 40, start))
    l4_end = np.where(v4, start + np.minimum(total4, payload), start + payload)
    l4_end = np.where(v6, start + np.minimum(total6, payload), l4_end)
    ported = ok & ~later & _PORTS_OF[proto] & ((v4 | v6) | ~ip)
    fast = ok & (~ip | v4 | v6) & ~(ported & (l4_end - l4_at < 4))
    sport = np.where(ported & fast, read_be(view, l4_at, ported & fast, 2), -1)
    dport = np.where(ported & fast, read_be(view, l4_at + 2, ported & fast, 2), -1)
    name = np.full(len(ok), "", dtype=object)
    _fill_names(name, proto, fast & later, fragment_name)
    _fill_names(name, proto, fast & ~later, l4_name)
    src, dst = np.array(outer_src, dtype=object), np.array(outer_dst, dtype=object)
    src[ip], dst[ip] = "", ""  # an inner IP packet's own, below, or none
    for mask, width, at in ((v4 & fast, 4, 12), (v6 & fast, 16, 8)):
        rows = np.flatnonzero(mask)
        if len(rows):
            src[rows] = _addresses(view, start + at, rows, width)
            dst[rows] = _addresses(view, start + at + width, rows, width)
    return InnerColumns(
        fast, name, src, dst, sport, dport, v4 & fast, v6 & fast, proto, l4_at, l4_end
    )


# -- inner checksums and TFC padding ------------------------------------------------

# Where each protocol keeps its checksum, and its name in a detail; ICMP (1) has no
# pseudo-header (RFC 792) and is checked inside IPv4 only.
CHECKSUM_AT = {6: 16, 17: 6, 58: 2, 1: 2}
_CHECKSUM_NAMES = {6: "TCP", 17: "UDP", 58: "ICMPv6", 1: "ICMP"}
_MIN_LEN = {6: 20, 17: 8, 58: 4, 1: 4}
_OFFLOADED = frozenset({6, 17})  # the protocols checksum offload leaves partial (Linux)
NOT_CHECKED = "inner checksum not checked: "
NATT_TRANSPORT = NOT_CHECKED + (
    "NAT-T transport mode, whose checksums cover addresses a NAT may change (RFC 3948 s3.1.2)"
)
OUTER_EXTENSIONS = (
    NOT_CHECKED
    + "an outer IPv6 routing header (it changes the pseudo-header's destination, RFC 8200 s8.1)"
)
INNER_FRAGMENT = NOT_CHECKED + "an inner IPv4 fragment (its checksum covers the whole datagram)"
_OK = InnerChecksum.OK
_VERSION = {4: 4, 41: 6}  # next header -> the IP version of the packet it announces


class Checked(NamedTuple):
    """The inner packet's checksums and its TFC padding."""

    status: InnerChecksum
    detail: str  # empty when ok or none; else what does not verify, or why not checked
    tfc_len: int | None  # bytes after the inner IP packet; None: no inner IP packet
    # The payload is provably not what the next header names (``mismatch``): not checked.
    mismatch: bool = False


def unchecked_protocol(proto: int) -> str:
    """The detail of an inner protocol whose checksum is not verified."""
    return NOT_CHECKED + f"{l4_name(proto)} ({proto}) has no checksum this version verifies"


def _not_checked(detail: str, tfc: int | None = None) -> Checked:
    return Checked(InnerChecksum.NOT_CHECKED, detail, tfc)


def pseudo_header(src: bytes, dst: bytes, proto: int, length: int) -> bytes:
    """The pseudo-header of a TCP/UDP/ICMPv6 checksum (RFC 9293 s3.1, RFC 8200 s8.1)."""
    if len(src) == 4:
        return src + dst + bytes([0, proto]) + length.to_bytes(2)
    return src + dst + length.to_bytes(4) + bytes([0, 0, 0, proto])


def check_l4(proto: int, seg: bytes, src: bytes, dst: bytes) -> Checked:
    """Verify the checksum of an upper-layer segment whose addresses are ``src``, ``dst``."""
    at = CHECKSUM_AT.get(proto)
    if at is None or (proto == 1 and len(src) != 4):
        return _not_checked(unchecked_protocol(proto))
    name = _CHECKSUM_NAMES[proto]
    if len(seg) < _MIN_LEN[proto]:
        return _not_checked(NOT_CHECKED + f"inner {name} header cut at {len(seg)} bytes")
    if proto == 17:  # RFC 768: the UDP length bounds what the checksum covers
        ulen = int.from_bytes(seg[4:6])
        if not 8 <= ulen <= len(seg):
            return _not_checked(NOT_CHECKED + f"UDP length {ulen} in {len(seg)} bytes")
        seg = seg[:ulen]
    stored = int.from_bytes(seg[at : at + 2])
    if proto == 17 and stored == 0:  # no checksum sent (RFC 768; RFC 6935 for IPv6)
        return Checked(InnerChecksum.NONE, "", None)
    pseudo = b"" if proto == 1 else pseudo_header(src, dst, proto, len(seg))
    if internet_checksum(pseudo + seg) == 0:
        return Checked(_OK, "", None)
    if proto in _OFFLOADED and stored == 0xFFFF ^ internet_checksum(pseudo):
        return Checked(
            InnerChecksum.PARTIAL,
            f"inner {name} checksum {stored:#06x} is the pseudo-header sum alone"
            " (CHECKSUM_PARTIAL: left for checksum offload, never completed)",
            None,
        )
    expected = internet_checksum(pseudo + seg[:at] + bytes(2) + seg[at + 2 :])
    return Checked(
        InnerChecksum.BAD,
        f"inner {name} checksum {stored:#06x}, {expected:#06x} expected: damaged before encryption",
        None,
    )


def _check_v4(payload: bytes) -> Checked:
    ihl = (payload[0] & 0x0F) * 4
    total = int.from_bytes(payload[2:4])
    if ihl < 20 or len(payload) < ihl or total < ihl:
        return _not_checked(NOT_CHECKED + "inner IPv4 header cut or impossible")
    if internet_checksum(payload[:ihl]):
        stored = int.from_bytes(payload[10:12])
        expected = internet_checksum(payload[:10] + bytes(2) + payload[12:ihl])
        detail = f"inner IPv4 header checksum {stored:#06x}, {expected:#06x} expected:"
        return Checked(InnerChecksum.BAD, detail + " damaged before encryption", None)
    if total > len(payload):
        return _not_checked(NOT_CHECKED + f"inner IPv4 length {total} in {len(payload)} bytes")
    tfc = len(payload) - total
    if int.from_bytes(payload[6:8]) & 0x3FFF:  # MF or a fragment offset (RFC 791 s3.1)
        return _not_checked(INNER_FRAGMENT, tfc)
    return check_l4(payload[9], payload[ihl:total], payload[12:16], payload[16:20])._replace(
        tfc_len=tfc
    )


def _check_v6(payload: bytes) -> Checked:
    if len(payload) < 40:
        return _not_checked(NOT_CHECKED + "inner IPv6 header cut")
    plen, nxt = int.from_bytes(payload[4:6]), payload[6]
    total = 40 + plen
    if total > len(payload):
        return _not_checked(NOT_CHECKED + f"inner IPv6 length {total} in {len(payload)} bytes")
    if plen == 0 and nxt == 0:  # a jumbogram's length is in its hop-by-hop option
        return _not_checked(unchecked_protocol(nxt))
    found = check_l4(nxt, payload[40:total], payload[8:24], payload[24:40])
    return found._replace(tfc_len=len(payload) - total)


# -- a next header that names another protocol than the payload is ------------------------


def whole_packet(payload: bytes, version: int) -> bool:
    """Is ``payload`` an IP packet of ``version`` with its headers whole (TFC may follow)?

    IPv4: version, header length, total length within the payload and the
    header checksum (RFC 791 s3.1). IPv6: version and payload length within
    the payload (RFC 8200 s3); it has no header checksum.
    """
    if version == 4:
        if len(payload) < 20 or payload[0] >> 4 != 4:
            return False
        ihl, total = (payload[0] & 0x0F) * 4, int.from_bytes(payload[2:4])
        return 20 <= ihl <= total <= len(payload) and internet_checksum(payload[:ihl]) == 0
    return (
        len(payload) >= 40
        and payload[0] >> 4 == 6
        and 40 + int.from_bytes(payload[4:6]) <= (len(payload))
    )


def _proven_ip(payload: bytes) -> str:
    """'a whole IPv4 packet (udp 10.0.0.1 -> 10.0.0.2)' when the bytes prove one, else "".

    IPv4: a whole header whose checksum verifies. IPv6, which has no header
    checksum: a whole packet whose TCP, UDP or ICMPv6 checksum verifies over
    its own pseudo-header. A chance match is 2^-16 or less either way.
    """
    if whole_packet(payload, 4):
        proto, src, dst = payload[9], payload[12:16], payload[16:20]
    elif whole_packet(payload, 6) and payload[6] in (6, 17, 58):
        proto, src, dst = payload[6], payload[8:24], payload[24:40]
        total = 40 + int.from_bytes(payload[4:6])
        if check_l4(proto, payload[40:total], src, dst).status is not _OK:
            return ""
    else:
        return ""
    version = 4 if len(src) == 4 else 6
    return f"a whole IPv{version} packet ({l4_name(proto)} {ntop(src)} -> {ntop(dst)})"


def _proven_segment(payload: bytes, src: bytes, dst: bytes) -> str:
    """'a TCP segment' when ``payload`` is one whose checksum verifies over the outer
    addresses (transport mode, RFC 9293 s3.1, RFC 768, RFC 8200 s8.1), else ""."""
    if not src:
        return ""
    for proto in (6, 17) if len(src) == 4 else (6, 17, 58):
        if proto == 17 and (len(payload) < 8 or int.from_bytes(payload[4:6]) != len(payload)):
            continue  # RFC 768: a UDP datagram is as long as its length says
        if check_l4(proto, payload, src, dst).status is _OK:
            return f"a {_CHECKSUM_NAMES[proto]} segment whose checksum verifies"
    return ""


def _mismatch(next_header: int, what: str) -> Checked:
    named = f"next header {next_header} ({protocol_name(next_header)})"
    detail = f"{named} over {what}, not the protocol it names"
    return Checked(InnerChecksum.NOT_CHECKED, NOT_CHECKED + detail, None, True)


def check_inner(next_header: int, payload: bytes, src: bytes, dst: bytes, why_not: str) -> Checked:
    """Verify the checksums of the inner packet ``payload`` carries (next header ``next_header``).

    Transport mode: the pseudo-header takes the outer addresses ``src`` and
    ``dst``, unless ``why_not`` gives the reason they cannot be trusted
    (NAT-T, outer extension headers). Tunnel mode: the inner header's.

    A payload the bytes prove is not what the next header names (a whole IP
    packet under a transport protocol's number, as draft-mcgrew-gcm-test's
    vectors carry; an IPv6 packet or a transport segment under 4, and so
    on) is ``not_checked`` with ``mismatch`` set: its checksums are not
    run as the named protocol's, which would call it damaged.
    """
    if next_header == 59:  # a dummy packet (RFC 4303 s2.6): nothing in it to verify
        return Checked(InnerChecksum.NONE, "", None)
    if next_header in (4, 41) and not whole_packet(payload, _VERSION[next_header]):
        trusted = (b"", b"") if why_not else (src, dst)
        what = _proven_ip(payload) or _proven_segment(payload, *trusted)
        if what:
            return _mismatch(next_header, what)
    elif next_header not in (4, 41):
        what = _proven_ip(payload)
        if what:
            return _mismatch(next_header, what)
    if next_header in (4, 41) and (not payload or payload[0] >> 4 != _VERSION[next_header]):
        return _not_checked(NOT_CHECKED + "the inner IP version is not the next header's")
    if next_header == 4:
        return _check_v4(payload)
    if next_header == 41:
        return _check_v6(payload)
    if why_not:
        return _not_checked(why_not)
    return check_l4(next_header, payload, src, dst)
