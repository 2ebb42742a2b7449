"""Finding the ESP header after the outer IP header, and reading it.

In: a decoded ``OuterIp`` and the datagram bytes (from the IP header on).
Out: ``EspLocation`` (where the ESP header is expected and how it is
carried) or a ``NotEsp`` reason; ``parse_esp_header`` gives (SPI, seq).
Raises ``Truncated`` when the UDP or ESP header is cut short.

RFC 4303 s2: ESP header = SPI (4) || sequence number (4), in clear.
RFC 3948 s2: ESP in UDP; a payload that starts with four zero bytes (the
non-ESP marker) is IKE, a single 0xFF byte is a NAT-keepalive.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from espforensics.decode.ip import PROTO_ESP, PROTO_UDP, OuterIp
from espforensics.errors import Truncated
from espforensics.model.enums import Proto
from espforensics.model.records import new_tuple

ESP_HEADER_LEN = 8
SPI_LEN = 4  # the header's first field (RFC 4303 s2.1)
UDP_HEADER_LEN = 8
NON_ESP_MARKER = b"\x00\x00\x00\x00"
_UDP = struct.Struct(">HH")
_ESP = struct.Struct(">II")
_PROTO_NAMES = {
    1: "ICMP",
    2: "IGMP",
    6: "TCP",
    17: "UDP",
    47: "GRE",
    51: "AH",
    58: "ICMPv6",
    4: "IPv4-in-IP",
    41: "IPv6-in-IP",
    132: "SCTP",
    108: "IPComp",
}


class EspLocation(NamedTuple):
    """Where the ESP header of a datagram is expected."""

    offset: int  # from the IP header, as tcpdump's ip[]/ip6[] count
    proto: Proto
    udp_sport: int | None
    udp_dport: int | None


class NotEsp(NamedTuple):
    """A datagram that does not carry ESP, and what it carries instead.

    ``payload_word``: for UDP on ports that are not ESP-in-UDP ones, the
    first 4 bytes of its payload, where an SPI would be if it were ESP-in-UDP
    on another port (RFC 3948 s2: the SPI follows the UDP header).
    """

    reason: str
    udp_sport: int | None = None
    udp_dport: int | None = None
    payload_word: int | None = None


def protocol_name(proto: int) -> str:
    """A readable name for an IP protocol number."""
    return _PROTO_NAMES.get(proto, f"IP protocol {proto}")


def locate_esp(ip: OuterIp, data: bytes, natt_ports: frozenset[int]) -> EspLocation | NotEsp:
    """Where the ESP header should be in this datagram, or why there is none."""
    if ip.proto == PROTO_ESP:
        return new_tuple(EspLocation, (ip.header_len, Proto.ESP, None, None))
    if ip.proto != PROTO_UDP:
        return NotEsp(protocol_name(ip.proto))
    off = ip.header_len
    if len(data) < off + UDP_HEADER_LEN:
        raise Truncated("UDP header cut short")
    sport, dport = _UDP.unpack_from(data, off)
    body = off + UDP_HEADER_LEN
    if sport not in natt_ports and dport not in natt_ports:
        word = int.from_bytes(data[body : body + 4]) if len(data) >= body + 4 else None
        return NotEsp(f"UDP {sport} -> {dport}", sport, dport, word)
    end = min(len(data), ip.total_len)
    if end - body == 1 and data[body] == 0xFF:
        return NotEsp("NAT-keepalive (RFC 3948 s2.3)", sport, dport)
    if data[body : body + 4] == NON_ESP_MARKER:
        return NotEsp("IKE (non-ESP marker, RFC 3948 s2.2)", sport, dport)
    if end - body < ESP_HEADER_LEN and ip.total_len - body < ESP_HEADER_LEN:
        return NotEsp(f"UDP {sport} -> {dport} too short for ESP", sport, dport)
    return EspLocation(body, Proto.ESP_UDP, sport, dport)


def parse_esp_header(data: bytes, offset: int) -> tuple[int, int]:
    """(SPI, low 32 bits of the sequence number) of the ESP header at offset."""
    if len(data) < offset + ESP_HEADER_LEN:
        raise Truncated(f"ESP header cut at {len(data) - offset} bytes")
    spi, seq = _ESP.unpack_from(data, offset)
    return spi, seq
