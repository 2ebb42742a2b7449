"""The tunnels around an ESP datagram, rewritten around the packet that replaces it.

In: a frame's bytes, where its outer IP header starts, and the tunnels the
analysis crossed to reach the ESP datagram (the tunnel words of its
``carriers`` column, outermost first). Out: ``walk`` finds the tunnels'
headers again (``Layer``) and where the ESP datagram starts; ``rewrap``
puts the decrypted packet in the datagram's place and fixes every header
around it, as its sender would have built them. Pure: no I/O. Raises
``MalformedPacket`` when a tunnel is not where the analysis found it or
cannot be rewritten: a fragment, or behind an AH, whose ICV could not
cover the rebuilt packet (the caller keeps the frame as captured).

What is fixed, from the innermost tunnel out (decode/tunnel.py opens them):
- what names the carried packet's IP version, should decryption change it
  (tunnel mode, IPv6 in IPv4): the EtherType of a carried Ethernet frame,
  after its VLAN tags (rebuild.py's ``relink``); IP in IP's protocol, 4 or
  41 (RFC 2003, RFC 4213); GRE's and Geneve's protocol type (RFC 2784 s2.4,
  RFC 8926 s3.4);
- each tunnel's IP lengths: IPv4's total length and header checksum (RFC
  791), IPv6's payload length (RFC 8200 s3);
- the UDP length of VXLAN and Geneve, and their UDP checksum: left 0 over
  IPv4 when the sender sent none (RFC 7348 s5, RFC 8926 s3.3), else
  computed (RFC 768; over IPv6 it is required, RFC 8200 s8.1);
- GRE's checksum when its C bit is set (RFC 2784 s2.5).
ERSPAN's and VXLAN's own headers hold no length. Bytes after a datagram's
end (an Ethernet trailer) are dropped, as around a datagram not tunneled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from espforensics.decode.clear import internet_checksum, udp_checksum
from espforensics.decode.esp import UDP_HEADER_LEN
from espforensics.decode.ip import OuterIp, parse_ip
from espforensics.decode.link import ETH_IPV4, ETH_IPV6, LINKTYPE_ETHERNET, parse_link
from espforensics.decode.tunnel import PROTO_IPIP, PROTO_IPV6, Carried, unwrap
from espforensics.errors import MalformedPacket
from espforensics.rewrite.rebuild import last_next_header, relink

_UDP_TUNNELS = frozenset({"vxlan", "geneve"})
_GRE_TUNNELS = frozenset({"gre", "erspan"})  # a GRE header after the IP header
_GRE_C = 0x8000  # GRE: a checksum is present (RFC 2784 s2.1)
# Where the protocol type of a tunnel carrying IP sits, from the end of its IP header.
_PROTOCOL_TYPE_AT = {"gre": 2, "geneve": UDP_HEADER_LEN + 2}


@dataclass(frozen=True, slots=True)
class Layer:
    """One tunnel around the ESP datagram: its IP header at ``at`` in the frame."""

    at: int
    ip: OuterIp
    carried: Carried

    @property
    def body(self) -> int:
        """Where what it carries (an Ethernet frame or an IP header) starts in the frame."""
        return self.at + self.carried.offset


def walk(data: bytes, at: int, words: Sequence[str]) -> tuple[tuple[Layer, ...], int]:
    """The tunnels ``words`` from the IP header at ``at``; where the ESP datagram starts.

    The analysis opened exactly these tunnels (a NAT-T port is never one), so
    each is opened again without the NAT-T ports, and must be the one named.
    """
    layers: list[Layer] = []
    for word in words:
        ip = parse_ip(data[at:], through_ah=True)  # as the analysis walked it
        if ip.frag_id is not None:
            raise MalformedPacket(f"its {word} tunnel's datagram is a fragment")
        if ip.ah:
            raise MalformedPacket(f"its {word} tunnel's AH could not cover the inner packet")
        carried = unwrap(ip, data[at : at + ip.total_len], frozenset())
        if carried is None or carried.word != word:
            raise MalformedPacket(f"its {word} tunnel is not found again")
        if ip.version == 6 and ip.routed and word in _UDP_TUNNELS:
            raise MalformedPacket(f"its {word} tunnel's UDP checksum depends on a routing header")
        layers.append(Layer(at, ip, carried))
        at += carried.offset
        if carried.ethernet:
            at += parse_link(LINKTYPE_ETHERNET, data[at:]).offset
    return tuple(layers), at


def rewrap(data: bytes, layers: Sequence[Layer], inner_at: int, packet: bytes) -> bytes:
    """``data`` with the datagram at ``inner_at`` (inside ``layers``) replaced by ``packet``."""
    version = packet[0] >> 4
    last = layers[-1]
    if last.carried.ethernet:
        header = relink(LINKTYPE_ETHERNET, data[last.body : inner_at], version)
        if header is None:
            raise MalformedPacket(
                f"the frame its {last.carried.word} tunnel carries has PPPoE or MPLS, "
                "not rewritten for the inner packet"
            )
        content = header + packet
    else:
        content = packet
    for k in range(len(layers) - 1, -1, -1):
        layer = layers[k]
        head = bytearray(data[layer.at : layer.body])
        if k == len(layers) - 1 and not layer.carried.ethernet:
            _name_version(head, layer, version)
        content = _fixed(head, layer, content)
        if k:
            content = data[layers[k - 1].body : layer.at] + content  # its Ethernet header
    return data[: layers[0].at] + content


def _name_version(head: bytearray, layer: Layer, version: int) -> None:
    """Make the tunnel's headers name the IP version it now carries (one carrying IP)."""
    at = layer.ip.header_len
    if layer.carried.word == "ipip":
        proto = PROTO_IPIP if version == 4 else PROTO_IPV6
        head[9 if layer.ip.version == 4 else last_next_header(bytes(head[:at]))] = proto
        return
    field = at + _PROTOCOL_TYPE_AT[layer.carried.word]
    head[field : field + 2] = (ETH_IPV4 if version == 4 else ETH_IPV6).to_bytes(2)


def _fixed(head: bytearray, layer: Layer, content: bytes) -> bytes:
    """The tunnel's datagram: its headers ``head`` with their lengths and checksums fixed
    for ``content``."""
    ip, at = layer.ip, layer.ip.header_len
    out = head + content
    total = len(out)
    if ip.version == 4:
        ihl = (out[0] & 0x0F) * 4
        out[2:4] = total.to_bytes(2)
        out[10:12] = b"\x00\x00"
        out[10:12] = internet_checksum(bytes(out[:ihl])).to_bytes(2)
    else:
        out[4:6] = (total - 40).to_bytes(2)
    if layer.carried.word in _UDP_TUNNELS:
        out[at + 4 : at + 6] = (total - at).to_bytes(2)
        if ip.version == 6 or out[at + 6 : at + 8] != b"\x00\x00":
            out[at + 6 : at + 8] = b"\x00\x00"
            out[at + 6 : at + 8] = udp_checksum(ip.src, ip.dst, bytes(out[at:])).to_bytes(2)
    elif layer.carried.word in _GRE_TUNNELS and int.from_bytes(out[at : at + 2]) & _GRE_C:
        out[at + 4 : at + 6] = b"\x00\x00"
        out[at + 4 : at + 6] = internet_checksum(bytes(out[at:])).to_bytes(2)
    return bytes(out)
