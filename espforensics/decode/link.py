"""Link-layer decoding: where the IP header starts in a captured frame.

In: a LINKTYPE_* number and the frame bytes. Out: ``LinkLayer`` (offset of
the network header and its EtherType; 0x0800 IPv4, 0x86DD IPv6, anything
else is not IP). Raises ``Truncated`` when the link header is cut short and
``MalformedPacket`` for a link type we do not decode.

Link types (tcpdump.org/linktypes.html): 0 NULL (BSD loopback, host byte
order AF), 1 Ethernet (802.1Q / 802.1ad tags skipped), 12 and 14 raw IP
(DLT_RAW on BSDs), 101 RAW, 108 LOOP (network byte order AF), 113 Linux
cooked v1, 228 IPV4, 229 IPV6, 276 Linux cooked v2.
"""

from __future__ import annotations

from typing import NamedTuple

from espforensics.errors import MalformedPacket, Truncated
from espforensics.model import new_tuple

ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
_VLAN_TAGS = frozenset({0x8100, 0x88A8, 0x9100})  # 802.1Q, 802.1ad, old QinQ
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
_RAW_TYPES = frozenset({12, 14, LINKTYPE_RAW})


class LinkLayer(NamedTuple):
    """Where the network-layer header starts and what it is."""

    offset: int
    ethertype: int


def _ethernet(data: bytes) -> LinkLayer:
    off = 12
    while True:
        if len(data) < off + 2:
            raise Truncated(f"Ethernet header cut at {len(data)} bytes")
        ethertype = int.from_bytes(data[off : off + 2], "big")
        if ethertype not in _VLAN_TAGS:
            return new_tuple(LinkLayer, (off + 2, ethertype))
        off += 4  # skip TPID's TCI; the next EtherType follows


def _raw(data: bytes) -> LinkLayer:
    if not data:
        raise Truncated("empty raw IP frame")
    version = data[0] >> 4
    return LinkLayer(0, ETH_IPV4 if version == 4 else ETH_IPV6 if version == 6 else 0)


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


def parse_link(linktype: int, data: bytes) -> LinkLayer:
    """Decode the link header of a frame captured with ``linktype``."""
    if linktype == LINKTYPE_ETHERNET:
        return _ethernet(data)
    if linktype in _RAW_TYPES:
        return _raw(data)
    if linktype == LINKTYPE_IPV4:
        return LinkLayer(0, ETH_IPV4)
    if linktype == LINKTYPE_IPV6:
        return LinkLayer(0, ETH_IPV6)
    if linktype == LINKTYPE_LINUX_SLL:
        if len(data) < 16:
            raise Truncated("Linux cooked header cut short")
        return LinkLayer(16, int.from_bytes(data[14:16], "big"))
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(data) < 20:
            raise Truncated("Linux cooked v2 header cut short")
        return LinkLayer(20, int.from_bytes(data[0:2], "big"))
    if linktype == LINKTYPE_NULL:
        return _null(data, "host")
    if linktype == LINKTYPE_LOOP:
        return _null(data, "big")
    raise MalformedPacket(f"link type {linktype} is not supported")
