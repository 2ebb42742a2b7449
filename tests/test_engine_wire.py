"""engine/wire.py against the per-frame decoders, frame by frame, on every fixture scenario.

For each frame the vectorised stage marks ``steady``, every field must be
what decode/link.py, decode/ip.py and decode/esp.py give; a frame it marks
``inert`` must be one the per-frame decoders find no ESP and no fragment
in; and every ESP datagram of a common layout, captured whole, must be
marked ``steady`` (else the lane would take nothing).
"""

from __future__ import annotations

import pytest

from espforensics.decode.esp import ESP_HEADER_LEN, EspLocation, locate_esp, parse_esp_header
from espforensics.decode.ip import OuterIp, parse_ip
from espforensics.decode.link import ETH_IPV4, ETH_IPV6, parse_link
from espforensics.engine.wire import ADDR_LEN, FrameBatch, parse
from espforensics.errors import MalformedPacket
from espforensics.model import Frame, Proto
from espforensics.synth import SCENARIOS, build_scenario

NATT = frozenset({4500})
COMMON_LINKS = frozenset({1, 12, 14, 101, 113, 228, 229, 276})


def _decoded(frame: Frame) -> tuple[int, OuterIp | None, EspLocation | None]:
    """(IP offset, OuterIp, ESP location) by the per-frame decoders; raises for a bad frame."""
    link = parse_link(frame.linktype, frame.data)
    if link.ethertype not in (ETH_IPV4, ETH_IPV6):
        return link.offset, None, None
    data = frame.data[link.offset :]
    ip = parse_ip(data)
    if ip.frag_id is not None:
        return link.offset, ip, None
    loc = locate_esp(ip, data[: ip.total_len], NATT)
    return link.offset, ip, loc if isinstance(loc, EspLocation) else None


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_wire_fields_are_the_decoders(name: str) -> None:
    frames = build_scenario(name).frames
    wire = parse(FrameBatch.of(tuple(frames)), NATT)
    steady = inert = 0
    for i, frame in enumerate(frames):
        try:
            at, ip, loc = _decoded(frame)
        except MalformedPacket:  # Truncated too: such a frame is neither steady nor inert
            assert not wire.steady[i] and not wire.inert[i], frame.number
            continue
        if wire.inert[i]:
            inert += 1
            assert loc is None and (ip is None or ip.frag_id is None), frame.number
        if not wire.steady[i]:
            # A datagram of a common layout, captured whole, with room for SPI, seq and IV,
            # must be read by the wire stage.
            assert not (
                loc is not None
                and ip is not None
                and frame.linktype in COMMON_LINKS
                and (ip.version == 4 or ip.header_len == 40)
                and at + ip.total_len <= frame.caplen
                and ip.total_len - loc.offset >= ESP_HEADER_LEN + 8
            ), frame.number
            continue
        steady += 1
        assert loc is not None and ip is not None, frame.number
        data = frame.data[at:]
        spi, seq = parse_esp_header(data, loc.offset)
        width = 4 if ip.version == 4 else ADDR_LEN
        addrs = wire.addrs[i]
        assert (
            int(wire.l3[i]),
            int(wire.ip_version[i]),
            int(wire.total_len[i]),
            int(wire.esp_offset[i]),
            bool(wire.udp[i]),
            int(wire.spi[i]),
            int(wire.seq[i]),
            addrs[:width].tobytes(),
            addrs[ADDR_LEN : ADDR_LEN + width].tobytes(),
        ) == (
            at,
            ip.version,
            ip.total_len,
            loc.offset,
            loc.proto is Proto.ESP_UDP,
            spi,
            seq,
            ip.src,
            ip.dst,
        ), frame.number
        if loc.proto is Proto.ESP_UDP:
            assert (int(wire.udp_sport[i]), int(wire.udp_dport[i])) == (
                loc.udp_sport,
                loc.udp_dport,
            )
    if name in ("example", "ipv4-transport-tcp", "ipv6-tunnel", "natt", "link-all"):
        assert steady >= 10 and inert >= 1, (steady, inert)


def test_every_common_link_type_is_read() -> None:
    """link-all has a frame of each link type; the common ones must all be steady."""
    frames = build_scenario("link-all").frames
    wire = parse(FrameBatch.of(tuple(frames)), NATT)
    seen = {f.linktype for i, f in enumerate(frames) if wire.steady[i]}
    assert seen == {f.linktype for f in frames} & COMMON_LINKS
    assert seen >= {1, 101, 113, 228, 229, 276}
