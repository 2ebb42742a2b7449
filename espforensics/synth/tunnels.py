"""Underlay framing: a captured Ethernet frame as a tunnel on an underlay carries it.

In: a ``Frame`` of LINKTYPE_ETHERNET whose EtherType is IPv4 or IPv6 (no
VLAN tag), and a tunnel's name (a key of ``TUNNELS``). Out: the frame a
port of the underlay would capture: Ethernet, the underlay's IPv4
(198.51.100.1 -> 198.51.100.2) or IPv6 (2001:db8::1 -> 2001:db8::2)
header, the tunnel's headers, then what the tunnel carries (the frame
itself, or its IP datagram), cut where the frame was cut (its lengths
are the whole datagram's). Raises ``ValueError`` for any other frame.

The layouts, each as its specification writes it and decode/tunnel.py
opens it: VXLAN (RFC 7348 s5: the I flag, VNI 100) on UDP 4789, on 8472
(Linux's default) and over IPv6 (its UDP checksum set, RFC 8200 s8.1),
and with an 802.1Q tag inside; Geneve (RFC 8926 s3) carrying Ethernet,
or IP behind an 8-byte option; GRE (RFC 2784) with no optional word, and
with checksum, key and sequence number (RFC 2890); NVGRE (RFC 7637);
ERSPAN types I, II and III (draft-foschiano-erspan-03; type III with its
platform subheader); IP in IP over IPv4 and over IPv6 (RFC 2003, RFC
4213, RFC 2473). ``Tunnel.tshark`` is what tshark must be told to decode
it (VXLAN on 8472 is not its default).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from espforensics.model.records import Frame

LINKTYPE_ETHERNET = 1
MACS = bytes.fromhex("020000000002020000000001")  # the underlay's: to ...02, from ...01
UNDER4 = (bytes([198, 51, 100, 1]), bytes([198, 51, 100, 2]))
UNDER6 = (bytes.fromhex("20010db8" + "0" * 23 + "1"), bytes.fromhex("20010db8" + "0" * 23 + "2"))
SPORT = 40000  # the underlay's UDP source port (a flow hash, for VXLAN and Geneve)
VNI = b"\x00\x00\x64\x00"  # VNI 100, then the reserved byte
VXLAN = b"\x08\x00\x00\x00" + VNI  # its I flag set (RFC 7348 s5)
GENEVE_ETH = b"\x00\x00\x65\x58" + VNI  # version 0, no options, Ethernet (RFC 8926 s3.4)
GENEVE_OPT = b"\x01\x02\x03\x01" + b"\x00" * 4  # class, type, one word of data
GRE_SEQ = b"\x00\x00\x00\x01"  # a GRE sequence number (RFC 2890 s2.2)
ERSPAN_II = b"\x10\x00\x88\xbe" + GRE_SEQ + b"\x10\x64\x00\x01\x00\x00\x00\x05"  # GRE, ERSPAN II
ERSPAN_III = b"\x10\x00\x22\xeb" + GRE_SEQ + b"\x20\x64\x00\x01" + b"\x00" * 4  # to its SGT
TAG = b"\x81\x00\x00\x0a"  # 802.1Q, VLAN 10


def _sum16(data: bytes) -> int:
    data += b"\x00" * (len(data) % 2)
    total = sum(int.from_bytes(data[i : i + 2]) for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def ipv4(proto: int, payload: bytes) -> bytes:
    """The underlay's IPv4 datagram (RFC 791), its header checksum set."""
    src, dst = UNDER4
    head = b"\x45\x00" + (20 + len(payload)).to_bytes(2) + b"\x00\x07\x00\x00\x40"
    head += bytes([proto]) + b"\x00\x00" + src + dst
    check = (~_sum16(head)) & 0xFFFF
    return head[:10] + check.to_bytes(2) + head[12:] + payload


def ipv6(proto: int, payload: bytes) -> bytes:
    """The underlay's IPv6 datagram (RFC 8200)."""
    src, dst = UNDER6
    return b"\x60\x00\x00\x00" + len(payload).to_bytes(2) + bytes([proto, 64]) + src + dst + payload


def udp(dport: int, body: bytes) -> bytes:
    """A UDP datagram over the IPv4 underlay, without a checksum (RFC 768)."""
    head = SPORT.to_bytes(2) + dport.to_bytes(2) + (8 + len(body)).to_bytes(2)
    return head + b"\x00\x00" + body


def udp6(dport: int, body: bytes) -> bytes:
    """A UDP datagram over the IPv6 underlay, its checksum set (RFC 8200 s8.1)."""
    src, dst = UNDER6
    head = SPORT.to_bytes(2) + dport.to_bytes(2) + (8 + len(body)).to_bytes(2)
    pseudo = src + dst + (8 + len(body)).to_bytes(4) + b"\x00\x00\x00\x11"
    check = (~_sum16(pseudo + head + b"\x00\x00" + body)) & 0xFFFF or 0xFFFF
    return head + check.to_bytes(2) + body


Wrap = Callable[[bytes, int, bytes], bytes]  # (Ethernet frame, EtherType, IP) -> underlay IP


@dataclass(frozen=True, slots=True)
class Tunnel:
    """How an underlay carries a frame, and the ``carriers`` the analysis names."""

    name: str
    carriers: str
    wrap: Wrap
    tshark: tuple[str, ...] = ()  # what tshark needs told to decode it

    def __str__(self) -> str:
        return self.name


def _ipip(under: Callable[[int, bytes], bytes]) -> Wrap:
    return lambda frame, etype, ip: under(4 if etype == 0x0800 else 41, ip)


def _all() -> tuple[Tunnel, ...]:
    return (
        Tunnel("vxlan", "vxlan", lambda f, e, ip: ipv4(17, udp(4789, VXLAN + f))),
        Tunnel(
            "vxlan-8472",
            "vxlan",
            lambda f, e, ip: ipv4(17, udp(8472, VXLAN + f)),
            ("-d", "udp.port==8472,vxlan"),
        ),
        Tunnel("vxlan-v6", "vxlan", lambda f, e, ip: ipv6(17, udp6(4789, VXLAN + f))),
        Tunnel(
            "vxlan-vlan",
            "vxlan vlan",
            lambda f, e, ip: ipv4(17, udp(4789, VXLAN + f[:12] + TAG + f[12:])),
        ),
        Tunnel("geneve", "geneve", lambda f, e, ip: ipv4(17, udp(6081, GENEVE_ETH + f))),
        Tunnel(  # one 8-byte option (2 words), then the IP datagram itself
            "geneve-ip",
            "geneve",
            lambda f, e, ip: ipv4(
                17, udp(6081, b"\x02\x00" + e.to_bytes(2) + VNI + GENEVE_OPT + ip)
            ),
        ),
        Tunnel("gre", "gre", lambda f, e, ip: ipv4(47, b"\x00\x00" + e.to_bytes(2) + ip)),
        Tunnel(  # checksum (left 0), key 5 and a sequence number
            "gre-csum-key-seq",
            "gre",
            lambda f, e, ip: ipv4(
                47, b"\xb0\x00" + e.to_bytes(2) + b"\x00" * 4 + b"\x00\x00\x00\x05" + GRE_SEQ + ip
            ),
        ),
        Tunnel("nvgre", "gre", lambda f, e, ip: ipv4(47, b"\x20\x00\x65\x58" + VNI + f)),
        Tunnel("erspan-1", "erspan", lambda f, e, ip: ipv4(47, b"\x00\x00\x88\xbe" + f)),
        Tunnel("erspan-2", "erspan", lambda f, e, ip: ipv4(47, ERSPAN_II + f)),
        Tunnel(  # with the 8-byte platform-specific subheader (its O bit)
            "erspan-3",
            "erspan",
            lambda f, e, ip: ipv4(47, ERSPAN_III + b"\x00\x00\x00\x01" + b"\x00" * 8 + f),
        ),
        Tunnel("ipip", "ipip", _ipip(ipv4)),
        Tunnel("ip6ip", "ipip", _ipip(ipv6)),
    )


TUNNELS: dict[str, Tunnel] = {t.name: t for t in _all()}


def in_tunnel(frame: Frame, name: str) -> Frame:
    """``frame`` as the underlay captures it inside the tunnel ``name``."""
    data = frame.data
    etype = int.from_bytes(data[12:14]) if len(data) >= 14 else 0
    if frame.linktype != LINKTYPE_ETHERNET or etype not in (0x0800, 0x86DD):
        raise ValueError(f"frame {frame.number} is not Ethernet carrying IP")
    missing = max(frame.wirelen - frame.caplen, 0)  # the bytes the snap length cut
    whole = data + bytes(missing)
    under = TUNNELS[name].wrap(whole, etype, whole[14:])
    body = MACS + (b"\x86\xdd" if under[0] >> 4 == 6 else b"\x08\x00") + under
    kept = len(body) - missing
    return frame._replace(data=body[:kept], caplen=kept, wirelen=len(body))
