"""Link-layer framing of IP packets for every link type we capture on.

In: a packed IP packet (its version is read from the first nibble) and a
``Link`` saying how to frame it. Out: the frame bytes and the LINKTYPE_*
number to record. Raises ``ValueError`` when the link type cannot carry
the packet (IPv6 on LINKTYPE_IPV4 and the reverse).

Link types (tcpdump.org/linktypes.html): 0 NULL (4-byte AF in the capture
writer's byte order: AF_INET 2, AF_INET6 24 NetBSD/OpenBSD, 28 FreeBSD,
30 Darwin), 1 Ethernet (optionally 802.1Q, or 802.1ad + 802.1Q), 101 RAW,
113 Linux cooked v1, 228 IPV4, 229 IPV6, 276 Linux cooked v2. dpkt packs
Ethernet, SLL, SLL2 and ARP; VLAN tags and NULL are packed with struct.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Literal

import dpkt

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
ETH_ARP = 0x0806
TPID_8021Q = 0x8100
TPID_8021AD = 0x88A8
AF_INET = 2
MAC_A = bytes.fromhex("02005e000a01")
MAC_B = bytes.fromhex("02005e000a02")
BROADCAST = b"\xff" * 6


@dataclass(frozen=True, slots=True)
class Link:
    """How frames of one capture interface look.

    ``vlans`` are 802.1Q/802.1ad tags outermost first, as (TPID, VID).
    ``af6`` is the AF_INET6 value written on LINKTYPE_NULL.
    """

    name: str
    linktype: int
    vlans: tuple[tuple[int, int], ...] = ()
    af6: int = 30
    byteorder: Literal["little", "big"] = "little"
    ifindex: int = 2


ETHERNET = Link("ethernet", LINKTYPE_ETHERNET)
LINKS: dict[str, Link] = {
    "ethernet": ETHERNET,
    "vlan": Link("vlan", LINKTYPE_ETHERNET, vlans=((TPID_8021Q, 100),)),
    "qinq": Link("qinq", LINKTYPE_ETHERNET, vlans=((TPID_8021AD, 200), (TPID_8021Q, 100))),
    "sll": Link("sll", LINKTYPE_LINUX_SLL),
    "sll2": Link("sll2", LINKTYPE_LINUX_SLL2),
    "raw": Link("raw", LINKTYPE_RAW),
    "ipv4": Link("ipv4", LINKTYPE_IPV4),
    "ipv6": Link("ipv6", LINKTYPE_IPV6),
    "null-bsd": Link("null-bsd", LINKTYPE_NULL, af6=24),
    "null-freebsd": Link("null-freebsd", LINKTYPE_NULL, af6=28),
    "null-darwin": Link("null-darwin", LINKTYPE_NULL, af6=30),
}


def _ethertype(packet: bytes) -> int:
    return ETH_IPV6 if packet[0] >> 4 == 6 else ETH_IPV4


def ethernet_frame(
    payload: bytes,
    ethertype: int,
    *,
    src: bytes = MAC_A,
    dst: bytes = MAC_B,
    vlans: tuple[tuple[int, int], ...] = (),
) -> bytes:
    """An Ethernet II frame; VLAN tags go between the MACs and the type."""
    if not vlans:
        eth = dpkt.ethernet.Ethernet(src=src, dst=dst, type=ethertype)
        eth.data = payload  # assigned after __init__, which would re-parse it
        return bytes(eth)
    tags = b"".join(struct.pack(">HH", tpid, vid & 0x0FFF) for tpid, vid in vlans)
    return dst + src + tags + struct.pack(">H", ethertype) + payload


def _sll(packet: bytes, outgoing: bool) -> bytes:
    sll = dpkt.sll.SLL(
        type=4 if outgoing else 0,
        hrd=1,
        hlen=6,
        hdr=MAC_A + b"\x00\x00",
        ethtype=_ethertype(packet),
        data=packet,
    )
    return bytes(sll)


def _sll2(packet: bytes, link: Link, outgoing: bool) -> bytes:
    sll2 = dpkt.sll2.SLL2(
        ethtype=_ethertype(packet),
        intindex=link.ifindex,
        hrd=1,
        type=4 if outgoing else 0,
        hlen=6,
        hdr=MAC_A + b"\x00\x00",
        data=packet,
    )
    return bytes(sll2)


def _null(packet: bytes, link: Link) -> bytes:
    af = link.af6 if packet[0] >> 4 == 6 else AF_INET
    return af.to_bytes(4, link.byteorder) + packet


def frame_ip(packet: bytes, link: Link = ETHERNET, *, outgoing: bool = True) -> bytes:
    """Frame an IP packet for ``link``; ``outgoing`` picks MAC direction."""
    version = packet[0] >> 4
    lt = link.linktype
    if lt == LINKTYPE_ETHERNET:
        src, dst = (MAC_A, MAC_B) if outgoing else (MAC_B, MAC_A)
        return ethernet_frame(packet, _ethertype(packet), src=src, dst=dst, vlans=link.vlans)
    if lt == LINKTYPE_LINUX_SLL:
        return _sll(packet, outgoing)
    if lt == LINKTYPE_LINUX_SLL2:
        return _sll2(packet, link, outgoing)
    if lt == LINKTYPE_NULL:
        return _null(packet, link)
    if lt == LINKTYPE_RAW or (lt, version) in ((LINKTYPE_IPV4, 4), (LINKTYPE_IPV6, 6)):
        return packet
    raise ValueError(f"link type {lt} cannot carry IPv{version}")


def arp_frame(
    sender: ipaddress.IPv4Address, target: ipaddress.IPv4Address, *, reply: bool = False
) -> bytes:
    """An Ethernet ARP request (broadcast) or reply (RFC 826), 42 bytes."""
    sha, tha = (MAC_B, MAC_A) if reply else (MAC_A, b"\x00" * 6)
    arp = dpkt.arp.ARP(
        hrd=1,
        pro=ETH_IPV4,
        hln=6,
        pln=4,
        op=2 if reply else 1,
        sha=sha,
        spa=sender.packed,
        tha=tha,
        tpa=target.packed,
    )
    return ethernet_frame(bytes(arp), ETH_ARP, src=sha, dst=MAC_A if reply else BROADCAST)
