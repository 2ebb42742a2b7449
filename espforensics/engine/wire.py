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
  NAT-keepalive nor IKE's non-ESP marker (RFC 3948 s2).
Every field is read exactly as decode/link.py, decode/ip.py and
decode/esp.py read it; tests compare the two on every fixture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from espforensics.capture.batch import PAD, FrameBatch
from espforensics.columns import read_be
from espforensics.columns import u8 as _u8
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
from espforensics.decode.tunnel import TUNNEL_PORTS, TUNNEL_PROTOS

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]

_VLAN_TAGS: Final = tuple(VLAN_TAGS)  # for np.isin
_RAW_TYPES: Final = tuple(RAW_TYPES)  # for np.isin
ADDR_LEN: Final = 16  # address bytes per side in ``addrs`` (IPv4 in the first 4)
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
    vlans: I64  # the VLAN tags crossed before the IP header (decode/link.py's carriers)
    # Frames that certainly carry neither ESP nor a fragment, nor a tunnel that may carry
    # them (decode/tunnel.py): their records need no state.
    inert: Mask


def parse(batch: FrameBatch, natt_ports: frozenset[int]) -> WireColumns:
    """The wire fields of every frame of ``batch`` in a common layout."""
    view = np.frombuffer(batch.buf, np.uint8)
    n = len(batch)
    start, caplen, lt = batch.start, batch.caplen, batch.linktype
    end = start + caplen

    def fits(at: I64, width: int | I64) -> Mask:
        return at + width <= end

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

    # -- outer IP: a whole datagram, captured, not a fragment, carrying ESP or UDP
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
    plain_ip = (v4 & (proto != PROTO_AH)) | (v6 & ~np.isin(proto, (0, 43, 44, 60, PROTO_AH)))
    ip = (v4 | v6) & ((proto == PROTO_ESP) | (proto == PROTO_UDP)) & fits(l3, 0)
    ip &= l3 + total <= end  # the whole datagram was captured
    ip_version = np.where(v4, 4, 6)

    # -- ESP: right after the IP header, or after a UDP header on a NAT-T port
    udp = ip & (proto == PROTO_UDP)
    uat = l3 + header_len
    udp &= total >= header_len + UDP_HEADER_LEN
    sport = read_be(view, uat, udp, 2)
    dport = read_be(view, uat + 2, udp, 2)
    ports = np.fromiter(natt_ports, np.int64, len(natt_ports))
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
    inert = known & ~np.isin(etype, (ETH_IPV4, ETH_IPV6, *ETH_CARRIERS))  # PPPoE, MPLS: per frame
    inert |= plain_ip & ~np.isin(proto, (PROTO_ESP, PROTO_UDP, *TUNNEL_PROTOS))
    inert |= other_udp

    # -- addresses, for the flow lookup: 16 bytes a side (IPv4 in the first 4)
    addrs = np.zeros((n, 2 * ADDR_LEN), np.uint8)
    rows = np.flatnonzero(esp)
    src_at = np.where(v4, l3 + 12, l3 + 8)[rows]
    width = np.where(v4[rows], 4, ADDR_LEN)
    for k in range(ADDR_LEN):
        take = width > k
        idx = rows[take]
        addrs[idx, k] = view[src_at[take] + k]
        addrs[idx, ADDR_LEN + k] = view[src_at[take] + k + width[take]]
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
        vlans=vlans,
        inert=inert & ~esp,
    )
