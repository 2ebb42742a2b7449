"""Tunnels around the datagram that carries ESP: where the carried frame starts.

In: the outer IP header (``OuterIp``) of a whole datagram, its bytes (from
the IP header on) and the UDP ports of ESP-in-UDP. Out: ``Carried`` (where
the carried Ethernet frame or IP header starts, and the word naming the
tunnel in the ``carriers`` column), or None when the datagram is not a
tunnel opened here. Raises ``Truncated`` when a tunnel header is cut short.

A capture taken on an underlay (a hypervisor's uplink, an ERSPAN mirror
session, a 6in4 link) holds the IPsec peers' datagrams inside another
one. The tunnels opened, as tcpdump and Wireshark open them by default:
- IP in IP: protocol 4 (IPv4, RFC 2003) or 41 (IPv6, RFC 4213 s3.5,
  RFC 2473), the carried IP header right after the outer one: ``ipip``;
- GRE (protocol 47, RFC 2784 with RFC 2890's key and sequence number;
  version 0, the optional checksum, key and sequence words skipped by
  their flags) carrying IPv4 or IPv6 (protocol type 0x0800, 0x86DD):
  ``gre``; or an Ethernet frame (0x6558, transparent Ethernet bridging,
  as NVGRE, RFC 7637): ``gre`` too;
- ERSPAN in GRE (draft-foschiano-erspan-03): type I (0x88BE, no sequence
  number, no ERSPAN header), type II (0x88BE with a sequence number, an
  8-byte header) and type III (0x22EB, a 12-byte header, 8 more when its
  O bit says a platform subheader follows; frame type 0, Ethernet, only),
  each carrying the mirrored Ethernet frame: ``erspan``; a frame the
  mirror truncated (the T bit of types II and III) says so (``cut``);
- VXLAN (RFC 7348 s5) on UDP port 4789, and on 8472, the Linux vxlan
  driver's default: an 8-byte header whose I flag is set, then an
  Ethernet frame: ``vxlan``;
- Geneve (RFC 8926 s3) on UDP port 6081, version 0: 8 bytes and its
  options, then Ethernet (0x6558) or IPv4/IPv6: ``geneve``.
A UDP port given as ESP-in-UDP's is never a tunnel's. Other GRE payloads
(PPP, MPLS, a keepalive) and other versions are not opened: the datagram
is reported as what it is, a GRE one.
"""

from __future__ import annotations

from typing import NamedTuple

from espforensics.decode.esp import UDP_HEADER_LEN
from espforensics.decode.ip import PROTO_UDP, OuterIp
from espforensics.decode.link import ETH_IPV4, ETH_IPV6
from espforensics.errors import Truncated

PROTO_IPIP = 4
PROTO_IPV6 = 41
PROTO_GRE = 47
TUNNEL_PROTOS = frozenset({PROTO_IPIP, PROTO_IPV6, PROTO_GRE})
VXLAN_PORTS = frozenset({4789, 8472})  # IANA's, and the Linux vxlan driver's default
GENEVE_PORT = 6081
TUNNEL_PORTS = VXLAN_PORTS | {GENEVE_PORT}
TUNNEL_WORDS = frozenset({"ipip", "gre", "erspan", "vxlan", "geneve"})  # ``Carried.word``s
ETH_BRIDGED = 0x6558  # transparent Ethernet bridging (GRE, Geneve)
ERSPAN_II = 0x88BE  # type I without a GRE sequence number
ERSPAN_III = 0x22EB
_IP_TYPES = frozenset({ETH_IPV4, ETH_IPV6})
_GRE_C, _GRE_K, _GRE_S = 0x8000, 0x2000, 0x1000  # checksum, key, sequence number present
_VXLAN_I = 0x08  # the VNI is valid (RFC 7348 s5)


class Carried(NamedTuple):
    """What a tunnel carries: from ``offset`` (counted from the outer IP header) an
    Ethernet frame (``ethernet``) or an IP header; ``word`` names the tunnel."""

    offset: int
    ethernet: bool
    word: str
    cut: bool = False  # the mirror cut the frame it carries (ERSPAN's T bit)


def _need(data: bytes, start: int, size: int, what: str) -> None:
    """Raise unless the ``size``-byte header at ``start`` was captured whole."""
    if len(data) < start + size:
        raise Truncated(f"{what} header cut at {max(len(data) - start, 0)} bytes")


def _gre(data: bytes, at: int) -> Carried | None:
    """A GRE header at ``at`` (RFC 2784 s2, RFC 2890 s2) and what follows it."""
    _need(data, at, 4, "GRE")
    flags, ptype = int.from_bytes(data[at : at + 2]), int.from_bytes(data[at + 2 : at + 4])
    if flags & 0x0007:  # version 0 only (1 is PPTP's enhanced GRE)
        return None
    size = 4 + 4 * sum(bool(flags & bit) for bit in (_GRE_C, _GRE_K, _GRE_S))
    _need(data, at, size, "GRE")
    body = at + size
    if ptype in _IP_TYPES:
        return Carried(body, False, "gre")
    if ptype == ETH_BRIDGED:
        return Carried(body, True, "gre")
    if ptype == ERSPAN_II and not flags & _GRE_S:  # type I: the frame itself follows
        return Carried(body, True, "erspan")
    if ptype == ERSPAN_II:
        _need(data, body, 8, "ERSPAN type II")
        return Carried(body + 8, True, "erspan", bool(data[body + 2] & 0x04))
    if ptype == ERSPAN_III:
        _need(data, body, 12, "ERSPAN type III")
        if (data[body + 10] >> 2) & 0x1F:  # frame type: 0 is Ethernet
            return None
        size = 20 if data[body + 11] & 0x01 else 12  # O: a platform-specific subheader
        _need(data, body, size, "ERSPAN type III")
        return Carried(body + size, True, "erspan", bool(data[body + 2] & 0x04))
    return None


def _udp(data: bytes, at: int, natt_ports: frozenset[int]) -> Carried | None:
    """VXLAN or Geneve behind the UDP header at ``at``."""
    _need(data, at, UDP_HEADER_LEN, "UDP")
    sport, dport = int.from_bytes(data[at : at + 2]), int.from_bytes(data[at + 2 : at + 4])
    if sport in natt_ports or dport in natt_ports:
        return None
    body = at + UDP_HEADER_LEN
    if dport in VXLAN_PORTS:
        _need(data, body, 8, "VXLAN")
        return Carried(body + 8, True, "vxlan") if data[body] & _VXLAN_I else None
    if dport == GENEVE_PORT:
        _need(data, body, 8, "Geneve")
        if data[body] >> 6:  # version 0 only
            return None
        ptype = int.from_bytes(data[body + 2 : body + 4])
        size = 8 + (data[body] & 0x3F) * 4  # its options, in 4-byte words
        _need(data, body, size, "Geneve")
        start = body + size
        if ptype == ETH_BRIDGED:
            return Carried(start, True, "geneve")
        return Carried(start, False, "geneve") if ptype in _IP_TYPES else None
    return None


def unwrap(ip: OuterIp, data: bytes, natt_ports: frozenset[int]) -> Carried | None:
    """The frame the datagram ``data`` (outer header ``ip``) tunnels, or None."""
    at = ip.header_len
    if ip.proto in (PROTO_IPIP, PROTO_IPV6):
        return Carried(at, False, "ipip")
    if ip.proto == PROTO_GRE:
        return _gre(data, at)
    if ip.proto == PROTO_UDP:
        return _udp(data, at, natt_ports)
    return None
