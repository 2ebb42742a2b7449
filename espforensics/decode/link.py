"""Link-layer decoding: where the IP header starts in a captured frame.

In: a LINKTYPE_* number and the frame bytes. Out: ``LinkLayer`` (offset of
the network header and its EtherType; 0x0800 IPv4, 0x86DD IPv6, anything
else is not IP), and ``carriers``: the encapsulations crossed on the way,
as the libpcap filter keywords that cross them (``vlan`` per 802.1Q/802.1ad
tag, ``pppoes`` for a PPPoE session, ``mpls`` per label; pcap-filter(7)).
Raises ``Truncated`` when the link header is cut short and
``MalformedPacket`` for a link type we do not decode.

Link types (tcpdump.org/linktypes.html): 0 NULL (BSD loopback, host byte
order AF), 1 Ethernet (802.1Q / 802.1ad tags skipped), 12 and 14 raw IP
(DLT_RAW on BSDs), 101 RAW, 108 LOOP (network byte order AF), 113 Linux
cooked v1, 228 IPV4, 229 IPV6, 276 Linux cooked v2; 9 PPP (RFC 1661, with
or without RFC 1662's 0xff 0x03 and with a 1- or 2-byte protocol), 50 PPP
in HDLC-like framing (or Cisco's, RFC 1547 s4.3.1), 51 PPPoE without its
Ethernet header, 104 Cisco HDLC (an EtherType after address and control).
Behind an EtherType
(Ethernet, Linux cooked): a PPPoE session (RFC 2516 s4, 0x8864: its 6-byte
header, then PPP's protocol, 0x0021 IPv4 or 0x0057 IPv6, RFC 1332/5072)
and an MPLS label stack (RFC 3032, 0x8847/0x8848: 4-byte entries to the
one marked bottom of stack, then IPv4 or IPv6 by its version nibble, as
Wireshark guesses it).
"""

from __future__ import annotations

from typing import NamedTuple

from espforensics.errors import MalformedPacket, Truncated
from espforensics.model.records import new_tuple

ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
VLAN_TAGS = frozenset({0x8100, 0x88A8, 0x9100})  # 802.1Q, 802.1ad, old QinQ
ETH_PPPOE = 0x8864  # a PPPoE session's frames (RFC 2516 s4)
ETH_MPLS = frozenset({0x8847, 0x8848})  # unicast, multicast (RFC 3032 s5)
ETH_CARRIERS = frozenset({ETH_PPPOE, *ETH_MPLS})  # what may carry IP behind an EtherType
_PPP_IP = {0x0021: ETH_IPV4, 0x0057: ETH_IPV6}  # PPP protocol -> EtherType
_BY_VERSION = {4: ETH_IPV4, 6: ETH_IPV6}  # an IP header's version nibble -> EtherType
_MAX_LABELS = 16  # an MPLS stack deeper than this is not read
_AF_INET = 2
_AF_INET6 = frozenset({10, 24, 28, 30})  # Linux, NetBSD/OpenBSD, FreeBSD, Darwin

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
LINKTYPE_PPP = 9
LINKTYPE_PPP_HDLC = 50
LINKTYPE_PPP_ETHER = 51
LINKTYPE_C_HDLC = 104
CISCO_ADDRESSES = frozenset({0x0F, 0x8F})  # Cisco HDLC's address byte: unicast, broadcast
RAW_TYPES = frozenset({12, 14, LINKTYPE_RAW})  # raw IP: no link header


class LinkLayer(NamedTuple):
    """Where the network-layer header starts and what it is."""

    offset: int
    ethertype: int  # 0x0800, 0x86DD; else what the link says follows, as ``named``
    named: str = "EtherType"  # what ``ethertype`` is when not IP ("PPP protocol")
    carriers: tuple[str, ...] = ()  # libpcap keywords, outermost first: ("vlan", "mpls")


VLAN: tuple[str, ...] = ("vlan",)
_PPPOES: tuple[str, ...] = ("pppoes",)
_NONE: tuple[str, ...] = ()


def _ethernet(data: bytes) -> LinkLayer:
    off, tags = 12, _NONE
    while True:
        if len(data) < off + 2:
            raise Truncated(f"Ethernet header cut at {len(data)} bytes")
        ethertype = int.from_bytes(data[off : off + 2], "big")
        if ethertype in ETH_CARRIERS:
            return _carried(data, off + 2, ethertype, tags)
        if ethertype not in VLAN_TAGS:
            return new_tuple(LinkLayer, (off + 2, ethertype, "EtherType", tags))
        off, tags = off + 4, tags + VLAN  # skip TPID's TCI; the next EtherType follows


def _carried(data: bytes, off: int, ethertype: int, outer: tuple[str, ...] = _NONE) -> LinkLayer:
    """What starts at ``off``, announced by ``ethertype`` after the carriers ``outer``:
    IP itself, or IP behind a PPPoE session header or an MPLS label stack (else that
    EtherType, as not IP)."""
    if ethertype not in ETH_CARRIERS:
        return new_tuple(LinkLayer, (off, ethertype, "EtherType", outer))
    if ethertype == ETH_PPPOE:
        return _pppoe(data, off, outer, _PPPOES)
    labels = outer
    for _ in range(_MAX_LABELS):
        if len(data) < off + 4:
            raise Truncated(f"MPLS label stack cut at {len(data)} bytes")
        off, labels = off + 4, (*labels, "mpls")
        if data[off - 2] & 0x01:  # bottom of stack: the payload follows
            version = data[off] >> 4 if len(data) > off else 0
            return LinkLayer(off, _BY_VERSION.get(version, ethertype), carriers=labels)
    return LinkLayer(off, ethertype, carriers=labels)  # no bottom of stack in _MAX_LABELS


def _pppoe(data: bytes, off: int, outer: tuple[str, ...], keyword: tuple[str, ...]) -> LinkLayer:
    """A PPPoE header at ``off`` (RFC 2516 s4), after the carriers ``outer``; a session's
    frame crosses ``keyword`` too (none on link type 51, whose PPPoE header libpcap
    crosses itself)."""
    if len(data) < off + 8:
        raise Truncated(f"PPPoE header cut at {max(len(data) - off, 0)} bytes")
    if data[off] != 0x11 or data[off + 1] != 0:  # version 1, type 1; code 0: session data
        return LinkLayer(off, ETH_PPPOE, carriers=outer)
    protocol = int.from_bytes(data[off + 6 : off + 8], "big")
    session = (*outer, *keyword)
    if protocol in _PPP_IP:
        return LinkLayer(off + 8, _PPP_IP[protocol], carriers=session)
    return LinkLayer(off + 8, protocol, "PPPoE session, PPP protocol", session)


def _raw(data: bytes) -> LinkLayer:
    if not data:
        raise Truncated("empty raw IP frame")
    version = data[0] >> 4
    if version in _BY_VERSION:
        return LinkLayer(0, _BY_VERSION[version])
    return LinkLayer(0, version, "IP version")


def _null(data: bytes, byteorder: str) -> LinkLayer:
    if len(data) < 4:
        raise Truncated("loopback header cut short")
    if byteorder == "host":
        # The AF is in the capturing host's order: small values tell which.
        byteorder = "big" if data[0] == 0 and data[1] == 0 else "little"
    af = int.from_bytes(data[:4], "big" if byteorder == "big" else "little")
    if af == _AF_INET:
        return LinkLayer(4, ETH_IPV4)
    return LinkLayer(4, ETH_IPV6 if af in _AF_INET6 else 0)


def _ppp(data: bytes) -> LinkLayer:
    """PPP (RFC 1661 s2): RFC 1662's address and control bytes if present, then the
    protocol, one byte when its low bit is set (protocol field compression), else two."""
    off = 2 if data[:2] == b"\xff\x03" else 0
    width = 1 if len(data) > off and data[off] & 1 else 2
    if len(data) < off + width:
        raise Truncated(f"PPP header cut at {len(data)} bytes")
    protocol = int.from_bytes(data[off : off + width], "big")
    if protocol in _PPP_IP:
        return LinkLayer(off + width, _PPP_IP[protocol])
    return LinkLayer(off + width, protocol, "PPP protocol")


def _cisco_hdlc(data: bytes) -> LinkLayer:
    """Cisco HDLC: address, control, then an EtherType."""
    if len(data) < 4:
        raise Truncated(f"Cisco HDLC header cut at {len(data)} bytes")
    return _carried(data, 4, int.from_bytes(data[2:4], "big"))


def is_cisco_hdlc(linktype: int, header: bytes) -> bool:
    """Cisco HDLC framing: its own link type, or under PPP_HDLC's (RFC 1547 s4.3.1)."""
    return linktype == LINKTYPE_C_HDLC or (
        linktype == LINKTYPE_PPP_HDLC and header[:1] != b"" and header[0] in CISCO_ADDRESSES
    )


def parse_link(linktype: int, data: bytes) -> LinkLayer:
    """Decode the link header of a frame captured with ``linktype``."""
    if linktype == LINKTYPE_ETHERNET:
        return _ethernet(data)
    if linktype in RAW_TYPES:
        return _raw(data)
    if linktype == LINKTYPE_IPV4:
        return LinkLayer(0, ETH_IPV4)
    if linktype == LINKTYPE_IPV6:
        return LinkLayer(0, ETH_IPV6)
    if linktype == LINKTYPE_LINUX_SLL:
        if len(data) < 16:
            raise Truncated("Linux cooked header cut short")
        return _carried(data, 16, int.from_bytes(data[14:16], "big"))
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(data) < 20:
            raise Truncated("Linux cooked v2 header cut short")
        return _carried(data, 20, int.from_bytes(data[0:2], "big"))
    if linktype == LINKTYPE_NULL:
        return _null(data, "host")
    if linktype == LINKTYPE_LOOP:
        return _null(data, "big")
    if is_cisco_hdlc(linktype, data):
        return _cisco_hdlc(data)
    if linktype in (LINKTYPE_PPP, LINKTYPE_PPP_HDLC):
        return _ppp(data)
    if linktype == LINKTYPE_PPP_ETHER:
        return _pppoe(data, 0, _NONE, _NONE)
    raise MalformedPacket(f"link type {linktype} is not supported")
