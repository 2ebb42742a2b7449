"""ICMP and ICMPv6 errors that quote an ESP packet: its SPI and sequence number.

In: the outer IP header of a whole datagram, the datagram's bytes and the
ESP-in-UDP ports. Out: ``QuotedEsp`` when the datagram is an ICMP error
(RFC 792; RFC 4443 s3) whose quoted packet is ESP, or ESP in UDP (RFC
3948), with at least its SPI; else None. Raises nothing: a quote that
cannot be read is no quote of ESP, and the frame stays what it is.

An ICMP error quotes the offending packet's IP header and at least its
first 8 bytes (RFC 792; RFC 1812 s4.3.2.3 lets a router quote up to 576
bytes in all, and ICMPv6 quotes as much as fits in 1280, RFC 4443 s2.4):
for ESP, exactly its SPI and sequence number (RFC 4303 s2). Those name
the SA the offending packet belonged to (with its addresses), and the
packet within it, as tshark shows them (``esp.spi``, ``esp.sequence``
inside the ICMP layer). The quote is a copy made by a router, not a
packet of the SA: it is never decrypted, sequenced or counted as one.
"""

from __future__ import annotations

from typing import NamedTuple

from espforensics.decode.ip import PROTO_ESP, PROTO_UDP, OuterIp, parse_ip
from espforensics.errors import MalformedPacket

PROTO_ICMP = 1
PROTO_ICMPV6 = 58
_ERRORS = {  # the error messages, which quote the offending packet
    PROTO_ICMP: {
        3: "destination unreachable",
        4: "source quench",
        5: "redirect",
        11: "time exceeded",
        12: "parameter problem",
    },
    PROTO_ICMPV6: {
        1: "destination unreachable",
        2: "packet too big",
        3: "time exceeded",
        4: "parameter problem",
    },
}
_QUOTE_AT = 8  # type, code, checksum, and 4 bytes of the message's own
_UDP_HEADER = 8


class QuotedEsp(NamedTuple):
    """The ESP packet an ICMP error quotes: what the error is, and the packet's header."""

    error: str  # "ICMP destination unreachable (code 4, MTU 1400)"
    version: int  # the quoted packet's IP version
    src: bytes  # its addresses, packed
    dst: bytes
    spi: int
    seq: int | None  # None when the quote ends before the sequence number
    udp: bool  # ESP in UDP (RFC 3948)


def _error(proto: int, icmp: bytes) -> str:
    """'ICMP destination unreachable (code 4, MTU 1400)': the type, its code, an MTU."""
    kind, code = icmp[0], icmp[1]
    family = "ICMP" if proto == PROTO_ICMP else "ICMPv6"
    words = [f"code {code}"]
    if proto == PROTO_ICMP and (kind, code) == (3, 4):  # RFC 1191 s4: next-hop MTU
        words.append(f"MTU {int.from_bytes(icmp[6:8])}")
    elif proto == PROTO_ICMPV6 and kind == 2:  # RFC 4443 s3.2
        words.append(f"MTU {int.from_bytes(icmp[4:8])}")
    return f"{family} {_ERRORS[proto][kind]} ({', '.join(words)})"


def quoted_esp(ip: OuterIp, data: bytes, natt_ports: frozenset[int]) -> QuotedEsp | None:
    """The ESP packet the ICMP error in ``data`` (its whole datagram) quotes, if any."""
    family = PROTO_ICMP if ip.version == 4 else PROTO_ICMPV6
    icmp = data[ip.header_len :]
    if ip.proto != family or len(icmp) < _QUOTE_AT or icmp[0] not in _ERRORS[family]:
        return None
    quote = icmp[_QUOTE_AT:]
    try:
        inner = parse_ip(quote)
    except MalformedPacket:  # Truncated too: a quote that holds no IP header quotes no ESP
        return None
    if inner.frag_offset:  # a later fragment: no ESP header in it
        return None
    at, udp = inner.header_len, False
    if inner.proto == PROTO_UDP:
        ports = quote[at : at + 4]
        if len(ports) < 4 or not {int.from_bytes(ports[:2]), int.from_bytes(ports[2:])} & (
            natt_ports
        ):
            return None
        at, udp = at + _UDP_HEADER, True
    elif inner.proto != PROTO_ESP:
        return None
    header = quote[at : at + 8]
    # SPI 0 is reserved (RFC 4303 s2.1); in UDP it is the non-ESP marker of IKE (RFC 3948 s2.2)
    if len(header) < 4 or header[:4] == bytes(4):
        return None
    spi = int.from_bytes(header[:4])
    seq = int.from_bytes(header[4:8]) if len(header) == 8 else None
    return QuotedEsp(_error(family, icmp), inner.version, inner.src, inner.dst, spi, seq, udp)
