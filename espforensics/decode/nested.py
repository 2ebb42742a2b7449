"""The ESP packet a decrypted ESP payload carries (ESP inside ESP), as a datagram of its own.

In: the decrypted payload (after its trailer, and after IPComp when there
was one), the next header that says what it is, and the outer datagram's
header and bytes. Out: ``NestedEsp`` (the IP header and datagram the
inner ESP packet is analyzed in, as the pipeline analyzes a frame's), a
string saying why an inner ESP packet is not analyzed, or None when the
payload carries no ESP. Raises nothing.

Tunnel mode (next header 4/41, RFC 4303 s3.1.2): the inner IP packet, of
protocol 50, is the datagram; offsets of the inner layer count from its
first byte, and TFC padding after it (RFC 4303 s2.7) is left out.
Transport mode (next header 50, RFC 4303 s3.1.1): the inner ESP header
follows the outer IP header in place of the outer one, between the same
addresses; the datagram is the outer IP header (and its extension
headers) followed by the payload.
"""

from __future__ import annotations

from typing import NamedTuple

from espforensics.decode.ip import PROTO_ESP, OuterIp, parse_ip
from espforensics.errors import MalformedPacket, Truncated


class NestedEsp(NamedTuple):
    """The datagram an inner ESP packet is analyzed in."""

    ip: OuterIp
    data: bytes


# IPv6 headers that may come before an inner ESP header (RFC 8200 s4.1): hop-by-hop,
# routing, fragment, destination options; and ESP itself.
_V6_BEFORE_ESP = frozenset({0, 43, 44, 60, PROTO_ESP})


def may_carry(next_header: int, payload: bytes) -> bool:
    """Could ``payload`` hold an inner ESP packet? (A look at one byte, before a parse.)"""
    if next_header == PROTO_ESP:
        return True
    if next_header == 4:
        return len(payload) > 9 and payload[0] >> 4 == 4 and payload[9] == PROTO_ESP
    if next_header == 41:
        return len(payload) > 6 and payload[0] >> 4 == 6 and payload[6] in _V6_BEFORE_ESP
    return False


def nested_esp(
    next_header: int, payload: bytes, outer: OuterIp, data: bytes
) -> NestedEsp | str | None:
    """The inner ESP packet of ``payload``, why it cannot be analyzed, or None (no ESP)."""
    if next_header == PROTO_ESP:  # transport mode: ESP right after the outer header
        head = data[: outer.header_len]
        ip = outer._replace(
            proto=PROTO_ESP,
            total_len=outer.header_len + len(payload),
            frag_id=None,
            frag_offset=0,
            more_fragments=False,
        )
        return NestedEsp(ip, head + payload)
    if not may_carry(next_header, payload):
        return None
    try:
        ip = parse_ip(payload)
    except (Truncated, MalformedPacket):
        return None  # the inner decode says what is wrong with it
    if ip.proto != PROTO_ESP:
        return None
    if ip.frag_id is not None:
        return "inner ESP not analyzed: its inner IP packet is a fragment"
    if ip.total_len > len(payload):
        return f"inner ESP not analyzed: inner IP length {ip.total_len} in {len(payload)} bytes"
    return NestedEsp(ip, payload[: ip.total_len])
