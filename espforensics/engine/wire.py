"""The stateless stage: a batch of frames in, the wire fields of its common layouts out.

In: a ``FrameBatch`` (the frames of one batch, their bytes joined into one
buffer) and the UDP ports of ESP-in-UDP. Out: ``WireColumns``, numpy
arrays with one row per frame: ``steady`` marks the frames whose whole
datagram was captured and whose layout is a common one, and for those the
outer IP and ESP fields. Raises nothing: a frame of any other layout is
simply not marked, and the per-frame decoders (decode/) handle it.

The common layouts (each row chosen by a mask, one code path):
- link: Ethernet with at most two VLAN tags (802.1Q, 802.1ad, old QinQ),
  Linux cooked v1 and v2, raw IP (LINKTYPE 12, 14, 101, 228, 229);
- IPv4 without options past the IHL, not a fragment (RFC 791 s3.1), its
  payload ESP or UDP, or an AH (RFC 4302) before them;
  IPv6 whose next header is ESP or UDP (no extension headers, RFC 8200 s4);
- ESP on protocol 50, or in UDP on a NAT-T port whose payload is neither a
  NAT-keepalive nor IKE's non-ESP marker (RFC 3948 s2);
- or such an IP datagram inside one tunnel (``_tunnel``): IP in IP, GRE
  with no optional word carrying IP, VXLAN or Geneve carrying untagged
  Ethernet (or IP, Geneve), in an outer datagram of the layouts above that
  holds it whole; the fields are then the carried datagram's, and
  ``carriers`` names the tunnel.
Every field is read exactly as decode/link.py, decode/ip.py, decode/tunnel.py
and decode/esp.py read it; tests compare the two on every fixture and on
generated frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt

from espforensics.capture.batch import PAD, FrameBatch
from espforensics.decode.esp import ESP_HEADER_LEN, UDP_HEADER_LEN
from espforensics.decode.ip import PROTO_AH, PROTO_ESP, PROTO_UDP
from espforensics.decode.link import (
    ETH_CARRIERS,
    ETH_IPV4,
    ETH_IPV6,
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    RAW_TYPES,
    VLAN_TAGS,
)
from espforensics.decode.tunnel import (
    ETH_BRIDGED,
    GENEVE_PORT,
    PROTO_GRE,
    PROTO_IPIP,
    PROTO_IPV6,
    TUNNEL_PORTS,
    TUNNEL_PROTOS,
    VXLAN_PORTS,
)
from espforensics.model.arrays import read_be, rows_at
from espforensics.model.arrays import u8 as _u8

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]

_VLAN_TAGS: Final = tuple(VLAN_TAGS)  # for np.isin
_RAW_TYPES: Final = tuple(RAW_TYPES)  # for np.isin
_VXLAN_PORTS: Final = tuple(VXLAN_PORTS)  # for np.isin
_TUNNEL_PORTS: Final = tuple(TUNNEL_PORTS)  # for np.isin
ADDR_LEN: Final = 16  # address bytes per side in ``addrs`` (IPv4 in the first 4)
# The ``carriers`` of a steady frame: its VLAN tags (at most two), then the tunnel the
# lane opened, if any (``LANE_TUNNELS[0]``: none; the words of decode/tunnel.py's
# ``TUNNEL_WORDS``); ``CARRIERS[tags + VLAN_DEPTHS * tunnel]``.
LANE_TUNNELS: Final = ("", "ipip", "gre", "vxlan", "geneve")
VLAN_DEPTHS: Final = 3
CARRIERS: Final = tuple(
    " ".join(("vlan",) * tags + ((word,) if word else ()))
    for word in LANE_TUNNELS
    for tags in range(VLAN_DEPTHS)
)
MIN_SEALED: Final = ESP_HEADER_LEN + 8  # SPI, seq and an 8-byte IV at least
__all__ = ["PAD", "FrameBatch", "WireColumns", "parse"]


@dataclass(frozen=True, slots=True)
class WireColumns:
    """What the common layouts say of each frame of a batch; rows not ``steady`` are unset."""

    steady: Mask
    l3: I64  # where the IP header starts in the frame (the link header's length)
    ip_version: I64
    total_len: I64  # the datagram's length as its IP header says (<= what was captured)
    esp_offset: I64  # from the IP header, as tcpdump's ip[]/ip6[] count
    udp: Mask  # ESP in UDP (the ports are then set)
    udp_sport: I64
    udp_dport: I64
    spi: I64
    seq: I64
    addrs: U8  # rows of src (16 bytes) || dst (16 bytes); IPv4 in the first 4 of each
    carriers: I64  # what the frame crosses before the IP header: an index of ``CARRIERS``
    # Frames that certainly carry neither ESP nor a fragment, nor a tunnel that may carry
    # them (decode/tunnel.py): their records need no state.
    inert: Mask


def _fits(end: I64) -> Callable[[I64, int | I64], Mask]:
    """``fits(at, width)``: the rows whose ``width`` bytes from ``at`` were captured."""

    def fits(at: I64, width: int | I64) -> Mask:
        return at + width <= end

    return fits


class _IpLayer(NamedTuple):
    """An IP header's fields, per frame of a batch (unset where not ``v4`` or ``v6``)."""

    v4: Mask
    v6: Mask
    total: I64  # the datagram's length as the header says
    proto: I64  # the upper-layer protocol, after an IPv4 AH
    header_len: I64  # bytes from the IP header to the upper-layer header
    plain: Mask  # no extension header, no IPv6 AH: the upper layer is ``proto``


def _ip_layer(view: U8, l3: I64, etype: I64, end: I64) -> _IpLayer:
    """The IP header at ``l3`` (-1: none) announced by ``etype``: a whole datagram, not a
    fragment, as decode/ip.py reads it."""

    fits = _fits(end)
    vihl = _u8(view, l3, (l3 >= 0) & fits(l3, 1))
    v4 = (etype == ETH_IPV4) & (vihl >> 4 == 4) & fits(l3, 20)
    v6 = (etype == ETH_IPV6) & (vihl >> 4 == 6) & fits(l3, 40)
    ihl = (vihl & 0x0F) * 4
    v4 &= (ihl >= 20) & fits(l3, ihl)  # options cut by the snap length: the per-frame path's
    total = np.where(v4, read_be(view, l3 + 2, v4, 2), 40 + read_be(view, l3 + 4, v6, 2))
    v4 &= (total >= ihl) & (read_be(view, l3 + 6, v4, 2) & 0x3FFF == 0)
    proto = np.where(v4, _u8(view, l3 + 9, v4), _u8(view, l3 + 6, v6))
    header_len = np.where(v4, ihl, 40)
    # IPv4: an AH before ESP (RFC 4302 s2.2: its length in 4-byte words minus 2), walked
    # as decode/ip.py walks it; a bad one stays protocol 51, the per-frame decoder's.
    ah = v4 & (proto == PROTO_AH) & fits(l3 + ihl, 2)
    ah_len = (_u8(view, l3 + ihl + 1, ah) + 2) * 4
    ah &= (ah_len >= 12) & (ihl + ah_len <= total) & fits(l3 + ihl, ah_len)
    proto = np.where(ah, _u8(view, l3 + ihl, ah), proto)
    header_len = np.where(ah, ihl + ah_len, header_len)
    # RFC 8200 s4: 0, 43, 44 and 60 are extension headers (44 a fragment) to walk first,
    # and an IPv6 AH: such frames are the per-frame decoder's.
    plain = (v4 & (proto != PROTO_AH)) | (v6 & ~np.isin(proto, (0, 43, 44, 60, PROTO_AH)))
    return _IpLayer(v4, v6, total, proto, header_len, plain)


def _tunnel(
    view: U8, l3: I64, outer: _IpLayer, ports: I64, end: I64
) -> tuple[I64, I64, I64] | None:
    """Per frame: where the IP header a tunnel carries starts (-1: none), the EtherType
    it announces, and the tunnel's index in ``LANE_TUNNELS`` (0: none); None when no
    frame of the batch may be one (the common case costs a few masks).

    The tunnels the lane opens, each read as decode/tunnel.py reads it: IP in IP; GRE
    with no flag and version 0 carrying IP; VXLAN (its I flag) and Geneve (version 0)
    carrying untagged Ethernet, or IP for Geneve. The others are the per-frame path's.
    """

    fits = _fits(end)
    ip_types = (ETH_IPV4, ETH_IPV6)
    plain = outer.plain & (l3 >= 0)
    at = l3 + outer.header_len
    ipip = plain & np.isin(outer.proto, (PROTO_IPIP, PROTO_IPV6))
    gre = plain & (outer.proto == PROTO_GRE) & fits(at, 4)
    udp = plain & (outer.proto == PROTO_UDP) & fits(at, UDP_HEADER_LEN + 8)
    dport = read_be(view, at + 2, udp, 2)
    udp &= np.isin(dport, _TUNNEL_PORTS) & ~np.isin(dport, ports)
    if not (ipip.any() or gre.any() or udp.any()):
        return None
    kind = np.zeros(len(l3), np.int64)
    inner = np.where(ipip, at, -1)
    etype = np.where(outer.proto == PROTO_IPIP, ETH_IPV4, ETH_IPV6) * ipip
    kind[ipip] = LANE_TUNNELS.index("ipip")
    word = read_be(view, at, gre, 4)  # flags and version (0), then the protocol type
    gre &= (word >> 16 == 0) & np.isin(word & 0xFFFF, ip_types)
    inner = np.where(gre, at + 4, inner)
    etype = np.where(gre, word & 0xFFFF, etype)
    kind[gre] = LANE_TUNNELS.index("gre")
    udp &= ~np.isin(read_be(view, at, udp, 2), ports)
    body = at + UDP_HEADER_LEN
    first = _u8(view, body, udp)
    vxlan = udp & np.isin(dport, _VXLAN_PORTS) & (first & 0x08 != 0) & fits(body + 8, 14)
    geneve = udp & (dport == GENEVE_PORT) & (first >> 6 == 0)
    ptype = read_be(view, body + 2, geneve, 2)
    eth = np.where(vxlan, body + 8, body + 8 + (first & 0x3F) * 4)  # the carried frame
    on_eth = vxlan | (geneve & (ptype == ETH_BRIDGED) & fits(eth, 14))
    eth_type = read_be(view, eth + 12, on_eth, 2)
    on_eth &= np.isin(eth_type, ip_types)
    on_ip = geneve & np.isin(ptype, ip_types)
    inner = np.where(on_eth, eth + 14, np.where(on_ip, eth, inner))
    etype = np.where(on_eth, eth_type, np.where(on_ip, ptype, etype))
    kind[vxlan & on_eth] = LANE_TUNNELS.index("vxlan")
    kind[geneve & (on_eth | on_ip)] = LANE_TUNNELS.index("geneve")
    return inner, etype, kind


def parse(batch: FrameBatch, natt_ports: frozenset[int]) -> WireColumns:
    """The wire fields of every frame of ``batch`` in a common layout."""
    view = np.frombuffer(batch.buf, np.uint8)
    n = len(batch)
    start, caplen, lt = batch.start, batch.caplen, batch.linktype
    end = start + caplen

    fits = _fits(end)
    # -- link: where the IP header starts, and the EtherType it announces
    eth = lt == LINKTYPE_ETHERNET
    l3 = np.full(n, -1, np.int64)
    etype = np.zeros(n, np.int64)
    vlans = np.zeros(n, np.int64)
    at = start + 12
    live = eth.copy()
    for tags in range(3):  # the EtherType, after at most two VLAN tags
        ok = live & fits(at, 2)
        value = read_be(view, at, ok, 2)
        tagged = ok & np.isin(value, _VLAN_TAGS)
        done = ok & ~tagged
        l3 = np.where(done, at + 2, l3)
        etype = np.where(done, value, etype)
        if tags:
            vlans[done] = tags
        live, at = tagged, at + 4
    for kind, type_at, header in ((LINKTYPE_LINUX_SLL, 14, 16), (LINKTYPE_LINUX_SLL2, 0, 20)):
        sll = (lt == kind) & fits(start + header, 0)
        etype = np.where(sll, read_be(view, start + type_at, sll, 2), etype)
        l3 = np.where(sll, start + header, l3)
    raw = np.isin(lt, _RAW_TYPES) & (caplen > 0)
    first = _u8(view, start, raw) >> 4
    etype = np.where(raw, np.where(first == 4, ETH_IPV4, np.where(first == 6, ETH_IPV6, 0)), etype)
    l3 = np.where(raw, start, l3)
    for kind, announced in ((LINKTYPE_IPV4, ETH_IPV4), (LINKTYPE_IPV6, ETH_IPV6)):
        etype = np.where(lt == kind, announced, etype)
        l3 = np.where(lt == kind, start, l3)

    # -- outer IP, and the one a tunnel opened here carries (taken in its place)
    ports = np.fromiter(natt_ports, np.int64, len(natt_ports))
    outer = _ip_layer(view, l3, etype, end)
    carried = _tunnel(view, l3, outer, ports, end)
    opened = np.zeros(n, np.int64)
    layer = outer
    if carried is not None:
        inner_l3, inner_etype, opened = carried
        inner = _ip_layer(view, inner_l3, inner_etype, end)
        # The carried datagram lies within the outer one: the per-frame path cuts it there.
        tunnel = (opened > 0) & (inner_l3 + inner.total <= l3 + outer.total)
        opened = np.where(tunnel, opened, 0)
        layer = _IpLayer(*(np.where(tunnel, a, b) for a, b in zip(inner, outer, strict=True)))
        l3 = np.where(tunnel, inner_l3, l3)
        etype = np.where(tunnel, inner_etype, etype)
    v4, v6, total, proto, header_len, plain_ip = layer
    ip = (v4 | v6) & ((proto == PROTO_ESP) | (proto == PROTO_UDP)) & fits(l3, 0)
    ip &= l3 + total <= end  # the whole datagram was captured
    ip_version = np.where(v4, 4, 6)

    # -- ESP: right after the IP header, or after a UDP header on a NAT-T port
    udp = ip & (proto == PROTO_UDP)
    uat = l3 + header_len
    udp &= total >= header_len + UDP_HEADER_LEN
    sport = read_be(view, uat, udp, 2)
    dport = read_be(view, uat + 2, udp, 2)
    udp &= np.isin(sport, ports) | np.isin(dport, ports)
    other_udp = plain_ip & (proto == PROTO_UDP) & fits(uat, UDP_HEADER_LEN)
    other_udp &= ~np.isin(read_be(view, uat, other_udp, 2), ports)
    other_udp &= ~np.isin(read_be(view, uat + 2, other_udp, 2), (*ports, *TUNNEL_PORTS))
    body = uat + UDP_HEADER_LEN
    room = l3 + total - body
    marker = read_be(view, body, udp & (room >= 4), 4)
    keepalive = (room == 1) & (_u8(view, body, udp & (room >= 1)) == 0xFF)
    udp &= (room >= 4) & (marker != 0) & ~keepalive
    esp = (ip & (proto == PROTO_ESP)) | udp
    esp_offset = np.where(udp, header_len + UDP_HEADER_LEN, header_len)
    esp &= total - esp_offset >= MIN_SEALED
    hdr = l3 + esp_offset
    spi = read_be(view, hdr, esp, 4)
    seq = read_be(view, hdr + 4, esp, 4)
    known = l3 >= 0
    # A tunnel the lane does not open is never inert (decode/tunnel.py opens it per frame);
    # one it opens is judged by what it carries, as the per-frame path judges it.
    inert = known & ~np.isin(etype, (ETH_IPV4, ETH_IPV6, *ETH_CARRIERS))  # PPPoE, MPLS: per frame
    inert |= plain_ip & ~np.isin(proto, (PROTO_ESP, PROTO_UDP, *TUNNEL_PROTOS))
    inert |= other_udp

    # -- addresses, for the flow lookup: 16 bytes a side (IPv4 in the first 4)
    addrs = np.zeros((n, 2 * ADDR_LEN), np.uint8)
    rows = np.flatnonzero(esp)
    four, six = rows[v4[rows]], rows[~v4[rows]]
    pair = rows_at(view, l3[four] + 12, 8)  # RFC 791 s3.1: source, then destination
    addrs[four, :4], addrs[four, ADDR_LEN : ADDR_LEN + 4] = pair[:, :4], pair[:, 4:]
    addrs[six] = rows_at(view, l3[six] + 8, 2 * ADDR_LEN)  # RFC 8200 s3
    return WireColumns(
        steady=esp,
        l3=l3 - start,
        ip_version=ip_version,
        total_len=total,
        esp_offset=esp_offset,
        udp=udp,
        udp_sport=sport,
        udp_dport=dport,
        spi=spi,
        seq=seq,
        addrs=addrs,
        carriers=vlans + VLAN_DEPTHS * opened,
        inert=inert & ~esp,
    )
