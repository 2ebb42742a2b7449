"""The inner packet of a decrypted ESP datagram, as bytes a dissector reads.

In: the outer datagram (from its IP header), the ESP payload and next
header, the mode, and for a misplaced header the clear bytes in front of
it. Out: the packet that replaces the datagram (``tunnel``,
``transport``, ``misplaced_ipv4``) and the link header fitted to its IP
version (``relink``). Pure: no I/O. Raises ``MalformedPacket`` when the
bytes do not make a packet (the caller then keeps the frame as it was).

RFC 4303 s3.1: tunnel mode protects a whole inner IP packet; transport
mode an upper-layer payload after the outer IP header (and its IPv6
extension headers), whose next-header field then names ESP (or UDP for
RFC 3948 ESP-in-UDP, whose UDP header goes with ESP). Lengths and the
IPv4 header checksum (RFC 791 s3.1) are fixed; an IPv6 header has none
(RFC 8200 s3: payload length fixed).

The bulk forms sit beside the per-packet ones and give the same bytes for
a batch's packets at once (rewrite/bulk.py; tests/rewrite/test_bulk_copies.py runs
both): ``ip_lengths`` beside ``ip_length``, ``transport_heads`` beside
``transport`` (its outer header, for a header of 20 or 40 bytes),
``checksums`` beside ``internet_checksum``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from espforensics.decode.clear import internet_checksum, l4_checksum_ok
from espforensics.decode.link import (
    ETH_IPV4,
    ETH_IPV6,
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_PPP,
    LINKTYPE_PPP_HDLC,
    RAW_TYPES,
    is_cisco_hdlc,
)
from espforensics.errors import MalformedPacket

PROTO_IPIP, PROTO_IPV6, PROTO_TCP, PROTO_UDP = 4, 41, 6, 17
_EXT = frozenset({0, 43, 60})  # RFC 8200 s4: hop-by-hop, routing, destination options
_AF_INET, _AF_INET6_BSD = 2, 24


def ip_length(packet: bytes) -> int | None:
    """The length an IPv4/IPv6 packet's header claims, or None if it is no IP header."""
    if len(packet) >= 20 and packet[0] >> 4 == 4 and packet[0] & 0x0F >= 5:
        return int.from_bytes(packet[2:4])
    if len(packet) >= 40 and packet[0] >> 4 == 6:
        return 40 + int.from_bytes(packet[4:6])
    return None


def ip_lengths(heads: npt.NDArray[np.uint8], size: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``ip_length`` of each packet (-1 for None): ``heads``, rows of its first 6 bytes at
    least (zeros past its end); ``size``, its length."""
    version, ihl = heads[:, 0] >> 4, heads[:, 0] & 0x0F
    v4 = (size >= 20) & (version == 4) & (ihl >= 5)
    v6 = (size >= 40) & (version == 6)
    word = heads[:, 2:6].astype(np.int64)
    v4_len, v6_len = word[:, 0] << 8 | word[:, 1], 40 + (word[:, 2] << 8 | word[:, 3])
    return np.where(v4, v4_len, np.where(v6, v6_len, -1))


def checksums(rows: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """``internet_checksum`` of each row (an even number of bytes), as a column."""
    words = rows.reshape(len(rows), rows.shape[1] // 2, 2).astype(np.int64)
    total = (words[:, :, 0] << 8 | words[:, :, 1]).sum(axis=1)
    folded = total % 0xFFFF
    folded[(folded == 0) & (total != 0)] = 0xFFFF  # RFC 1071: as internet_checksum folds
    out: npt.NDArray[np.int64] = 0xFFFF ^ folded
    return out


def tunnel(payload: bytes, next_header: int) -> bytes:
    """Tunnel mode: the inner IP packet, without TFC padding after it (RFC 4303 s2.7)."""
    version = {PROTO_IPIP: 4, PROTO_IPV6: 6}.get(next_header)
    if version is None or not payload or payload[0] >> 4 != version:
        raise MalformedPacket(f"next header {next_header} does not start an IP packet")
    length = ip_length(payload)
    if length is None or length > len(payload):
        raise MalformedPacket("the inner IP length exceeds the ESP payload")
    return payload[:length]


def _v4_header(head: bytes, proto: int, total: int) -> bytes:
    out = bytearray(head)
    out[9] = proto
    out[2:4] = total.to_bytes(2)
    out[10:12] = b"\x00\x00"
    out[10:12] = internet_checksum(bytes(out)).to_bytes(2)
    return bytes(out)


def last_next_header(chain: bytes) -> int:
    """Where the IPv6 chain names the upper layer: the last extension header's first byte."""
    at, nxt, off = 6, chain[6], 40
    while nxt in _EXT and off + 2 <= len(chain):
        at, nxt = off, chain[off]
        off += (chain[off + 1] + 1) * 8
    return at


def transport(chain: bytes, payload: bytes, next_header: int) -> bytes:
    """Transport mode: the outer header chain, naming ``next_header``, then the payload.

    ``chain``: the outer IP header and its IPv6 extension headers, up to
    where ESP (or the ESP-in-UDP header, dropped here) began.
    """
    if chain[0] >> 4 == 4:
        return _v4_header(chain, next_header, len(chain) + len(payload)) + payload
    out = bytearray(chain)
    out[last_next_header(chain)] = next_header
    out[4:6] = (len(chain) - 40 + len(payload)).to_bytes(2)
    return bytes(out) + payload


def transport_heads(
    chains: npt.NDArray[np.uint8],
    next_header: npt.NDArray[np.int64],
    payload_len: npt.NDArray[np.int64],
) -> npt.NDArray[np.uint8]:
    """``transport``'s outer header of each packet, as rows of 40 bytes (an IPv4 header's
    20 first): ``chains``, rows of the outer headers as captured, each an IPv4 header of
    20 bytes or an IPv6 header of 40 without extension headers (what comes after them is
    not read)."""
    out = chains[:, :40].copy()
    v4 = out[:, 0] >> 4 == 4
    total = np.where(v4, 20, 0) + payload_len  # IPv4: total length; IPv6: payload length
    at = np.where(v4, 2, 4)
    rows = np.arange(len(out))
    out[v4, 9] = next_header[v4]
    out[~v4, 6] = next_header[~v4]
    out[rows, at], out[rows, at + 1] = total >> 8, total & 0xFF
    head = out[v4, :20]
    head[:, 10:12] = 0
    sums = checksums(head)
    head[:, 10], head[:, 11] = sums >> 8, sums & 0xFF
    out[v4, :20] = head
    return out


def l4_verifies(inner: bytes) -> bool:
    """Does the TCP or UDP checksum of an IPv4 packet (20-byte header) verify?"""
    proto, segment = inner[9], inner[20:]
    if proto not in (PROTO_TCP, PROTO_UDP) or len(segment) < 8:
        return False
    return l4_checksum_ok(inner[12:16], inner[16:20], proto, segment)


def misplaced_ipv4(clear: bytes, template: bytes, segment: bytes) -> bytes:
    """The inner IPv4 packet of a GSO-layout packet (primer s5), rebuilt.

    The sender wrote its ESP header and IV over bytes 4-19 of the inner
    IPv4 header and encrypted from the header after it: the first four
    bytes (``clear``: version, IHL, TOS, total length) are on the wire,
    the other sixteen are taken from ``template`` (the SA's last decrypted
    inner IPv4 header: identification, flags, TTL, protocol, addresses) and
    the header checksum computed. Proof: the inner TCP/UDP checksum, which
    covers the addresses and protocol, must verify.
    """
    if len(clear) != 4 or clear[0] != 0x45 or len(template) != 20:
        raise MalformedPacket("not the GSO layout: 4 clear bytes of a 20-byte IPv4 header")
    total = int.from_bytes(clear[2:4])
    if total != 20 + len(segment):
        raise MalformedPacket(f"inner total length {total} differs from 20 + {len(segment)}")
    head = bytearray(clear + template[4:])
    head[10:12] = b"\x00\x00"
    head[10:12] = internet_checksum(bytes(head)).to_bytes(2)
    inner = bytes(head) + segment
    if not l4_verifies(inner):
        raise MalformedPacket("the inner checksum does not verify with the SA's inner addresses")
    return inner


def relink(linktype: int, header: bytes, version: int) -> bytes | None:
    """The link header ``header`` saying IP ``version``; None if the link type cannot.

    Ethernet (the EtherType after any VLAN tags), Linux cooked v1/v2 and
    Cisco HDLC carry an EtherType; PPP a protocol (RFC 1332 0x21, RFC 5072
    0x57; one byte or two, as the header had it); BSD loopback an address
    family (AF_INET6 as 24 when it has to change, which every reader of
    LINKTYPE_NULL takes as IPv6).
    """
    ethertype = ETH_IPV4 if version == 4 else ETH_IPV6
    out = bytearray(header)
    if linktype in (LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL) and len(out) >= 2:
        if int.from_bytes(out[-2:]) not in (ETH_IPV4, ETH_IPV6):
            return None  # IP behind PPPoE or MPLS: their headers are not rewritten
        out[-2:] = ethertype.to_bytes(2)
    elif linktype == LINKTYPE_LINUX_SLL2 and len(out) >= 2:
        if len(out) != 20:
            return None  # likewise
        out[0:2] = ethertype.to_bytes(2)
    elif is_cisco_hdlc(linktype, header):
        if len(out) != 4:
            return None  # address, control, EtherType, then PPPoE or MPLS: not rewritten
        out[-2:] = ethertype.to_bytes(2)
    elif linktype in (LINKTYPE_PPP, LINKTYPE_PPP_HDLC) and len(out) in (1, 2, 3, 4):
        protocol = 0x21 if version == 4 else 0x57
        width = 1 if len(out) in (1, 3) else 2  # protocol field compression, or not
        out[-width:] = protocol.to_bytes(width)
    elif linktype in (LINKTYPE_NULL, LINKTYPE_LOOP) and len(out) == 4:
        big = linktype == LINKTYPE_LOOP or out[:2] == b"\x00\x00"
        family = int.from_bytes(out, "big" if big else "little")
        if (family == _AF_INET) != (version == 4):
            family = _AF_INET if version == 4 else _AF_INET6_BSD
            out[:] = family.to_bytes(4, "big" if big else "little")
    elif linktype in (LINKTYPE_IPV4, LINKTYPE_IPV6):
        return header if (linktype == LINKTYPE_IPV4) == (version == 4) else None
    elif linktype not in RAW_TYPES:
        return None  # PPPoE without Ethernet (its length), or a type we do not rewrite
    return bytes(out)
