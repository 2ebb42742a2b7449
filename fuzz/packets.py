"""Mutators of the bytes inside frames: outer IP, IPv6 extension headers, UDP, ESP.

In: a ``random.Random``, frames of a seed capture and its SAs. Out: a new
list of ``Frame`` (some changed, some cut into fragments, duplicated,
put in a tunnel of ``synth.tunnels`` and maybe then changed, or
dropped). Every choice comes from the generator, so a (seed, index) pair
gives the same frames every time. Raises nothing: a frame the harness
cannot parse only gets byte-level mutations.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from espforensics.model.records import Frame
from espforensics.synth.tunnels import TUNNELS, in_tunnel

# Where the outer IP header starts for each link type (before VLAN tags).
_IP_OFFSET = {1: 14, 0: 4, 108: 4, 101: 0, 12: 0, 14: 0, 228: 0, 229: 0, 113: 16, 276: 20}
_VLAN_TPIDS = (0x8100, 0x88A8)
_EXT = (0, 43, 60)  # IPv6 hop-by-hop, routing, destination options
U32_EDGES = (0, 1, 2, 255, 256, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
U16_EDGES = (0, 1, 7, 8, 20, 40, 0x7FFF, 0xFFF8, 0xFFFF)

Mutator = Callable[[random.Random, bytearray, int], bytes]


def ip_offset(data: bytes, linktype: int) -> int | None:
    """Offset of the outer IP header, or None when the harness cannot tell."""
    off = _IP_OFFSET.get(linktype)
    if off is None:
        return None
    while linktype == 1 and len(data) >= off + 4 and _u16(data, off - 2) in _VLAN_TPIDS:
        off += 4
    return off if len(data) > off else None


def _u16(data: bytes | bytearray, at: int) -> int:
    return int.from_bytes(data[at : at + 2], "big")


def esp_offset(pkt: bytes | bytearray) -> int | None:
    """Offset of the ESP header (or of the UDP header before it) in an IP packet."""
    if len(pkt) < 20:
        return None
    if pkt[0] >> 4 == 4:
        return (pkt[0] & 15) * 4
    if pkt[0] >> 4 != 6 or len(pkt) < 40:
        return None
    nh, off = pkt[6], 40
    while nh in (*_EXT, 44) and off + 8 <= len(pkt):
        nh, off = pkt[off], off + (8 if nh == 44 else (pkt[off + 1] + 1) * 8)
    return off


def _set(pkt: bytearray, at: int, value: int, size: int) -> bytes:
    if at + size <= len(pkt):
        pkt[at : at + size] = (value % (1 << (8 * size))).to_bytes(size, "big")
    return bytes(pkt)


def _ipv4_field(rng: random.Random, pkt: bytearray, esp: int) -> bytes:
    at, size = rng.choice(((0, 1), (2, 2), (4, 2), (6, 2), (8, 1), (9, 1), (10, 2), (12, 4)))
    edges = {1: (0x40, 0x45, 0x4F, 0x46, 0x60, 50, 17, 0, 255), 2: U16_EDGES, 4: U32_EDGES}
    if at == 6:
        value = rng.choice((0x2000, 0x1FFF, 0x3FFF, 0x4000, rng.randrange(1 << 16)))
    else:
        value = rng.choice((*edges[size], rng.randrange(1 << (8 * size))))
    return _set(pkt, at, value, size)


def _ipv6_field(rng: random.Random, pkt: bytearray, esp: int) -> bytes:
    at, size = rng.choice(((0, 4), (4, 2), (6, 1), (7, 1), (8, 4), (24, 4)))
    edges = {1: (0, 17, 43, 44, 50, 51, 59, 60, 255), 2: U16_EDGES, 4: (0x60000000, *U32_EDGES)}
    return _set(pkt, at, rng.choice((*edges[size], rng.randrange(1 << (8 * size)))), size)


def _ipv6_ext(rng: random.Random, pkt: bytearray, esp: int) -> bytes:
    """Insert an extension header (maybe a fragment header, maybe a lying length)."""
    if pkt[0] >> 4 != 6 or len(pkt) < 40:
        return _flip(rng, pkt, esp)
    kind = rng.choice((*_EXT, 44))
    hdr_len = rng.choice((0, 0, 1, 2, 255))
    if kind == 44:
        frag = rng.choice((0, 1, 0x1FFF)) << 3 | rng.choice((0, 1))
        ext = struct.pack("!BBHI", pkt[6], 0, frag, rng.randrange(1 << 32))
    else:
        ext = bytes((pkt[6], hdr_len)) + bytes(6 + 8 * min(hdr_len, 2))
    pkt[6] = kind
    out = pkt[:40] + ext + pkt[40:]
    return _set(out, 4, len(out) - 40 + rng.choice((0, 0, 0, 8, -8)), 2)


def _natt(rng: random.Random, pkt: bytearray, esp: int) -> bytes:
    """Put the ESP packet inside UDP (RFC 3948), or a non-ESP marker, or a keepalive."""
    body = bytes(pkt[esp:])
    body = rng.choice((body, b"\x00\x00\x00\x00" + body, b"\xff", body[:4]))
    port = rng.choice((4500, 4500, 500, 0, rng.randrange(1 << 16)))
    udp = struct.pack("!HHHH", port, port, (8 + len(body)) % 65536, 0)
    out = pkt[:esp] + udp + body
    if out[0] >> 4 == 4:
        _set(out, 9, 17, 1)  # a header cut short by an earlier mutation has no protocol byte
        return _set(out, 2, len(out), 2)
    if esp == 40:
        _set(out, 6, 17, 1)
    return _set(out, 4, len(out) - 40, 2)


def _esp_field(rng: random.Random, pkt: bytearray, esp: int) -> bytes:
    if len(pkt) >= esp + 8 and _u16(pkt, esp + 2) in (4500, 500) and pkt[9:10] == b"\x11":
        esp += 8  # NAT-T
    which = rng.randrange(4)
    if which == 0:
        return _set(pkt, esp, rng.choice((*U32_EDGES, rng.randrange(1 << 32))), 4)
    if which == 1:
        return _set(pkt, esp + 4, rng.choice((*U32_EDGES, rng.randrange(1 << 32))), 4)
    if which == 2:
        return _set(pkt, esp + 8, rng.choice((0, (1 << 64) - 1, rng.randrange(1 << 64))), 8)
    back = rng.randrange(1, 40)  # trailer, pad length, next header or ICV
    if back < len(pkt) - esp:
        pkt[-back] ^= 1 << rng.randrange(8)
    return bytes(pkt)


def _flip(rng: random.Random, pkt: bytearray, esp: int) -> bytes:
    for _ in range(rng.randint(1, 8)):
        if pkt:
            pkt[rng.randrange(len(pkt))] = rng.randrange(256)
    return bytes(pkt)


def _cut(rng: random.Random, pkt: bytearray, esp: int) -> bytes:
    if rng.random() < 0.2:
        return bytes(pkt) + rng.randbytes(rng.randint(1, 64))
    return bytes(pkt[: rng.randrange(len(pkt) + 1)])


_MUTATORS: tuple[Mutator, ...] = (_ipv4_field, _ipv6_field, _ipv6_ext, _natt, _esp_field)


def mutate_data(rng: random.Random, data: bytes, linktype: int) -> bytes:
    """One frame's bytes with one to three structure-aware changes."""
    off = ip_offset(data, linktype)
    for _ in range(rng.randint(1, 3)):
        pkt = bytearray(data if off is None else data[off:])
        esp = esp_offset(pkt)
        if esp is None or not pkt or rng.random() < 0.25:
            new = rng.choice((_flip, _cut))(rng, pkt, 0)
        else:
            mutator = rng.choice(_MUTATORS)
            if mutator is _ipv6_field and pkt[0] >> 4 == 4:
                mutator = _ipv4_field
            elif mutator is _ipv4_field and pkt[0] >> 4 == 6:
                mutator = _ipv6_field
            new = mutator(rng, pkt, esp)
        data = new if off is None else data[:off] + new
    return data


def _v4_fragments(rng: random.Random, pkt: bytes, pieces: list[tuple[int, bytes]]) -> list[bytes]:
    hl = (pkt[0] & 15) * 4
    out = []
    for i, (offset, body) in enumerate(pieces):
        more = i < len(pieces) - 1 or rng.random() < 0.1
        head = bytearray(pkt[:hl])
        head[2:4] = ((hl + len(body)) % 65536).to_bytes(2, "big")
        head[6:8] = ((more << 13) | (offset >> 3 & 0x1FFF)).to_bytes(2, "big")
        out.append(bytes(head) + body)
    return out


def _v6_fragments(rng: random.Random, pkt: bytes, pieces: list[tuple[int, bytes]]) -> list[bytes]:
    ident = rng.randrange(1 << 32)
    out = []
    for i, (offset, body) in enumerate(pieces):
        more = i < len(pieces) - 1 or rng.random() < 0.1
        frag = struct.pack("!BBHI", pkt[6], 0, (offset >> 3 & 0x1FFF) << 3 | more, ident)
        head = bytearray(pkt[:40])
        head[6] = 44
        head[4:6] = ((8 + len(body)) % 65536).to_bytes(2, "big")
        out.append(bytes(head) + frag + body)
    return out


def _pieces(rng: random.Random, payload: bytes) -> list[tuple[int, bytes]]:
    """Fragment offsets and bodies: in order, overlapping, shuffled, or past 65,535 bytes.

    RFC 791 s3.1 and RFC 8200 s3: a datagram (IPv6: a payload) holds at most 65,535.
    """
    size = max(8, (len(payload) // rng.randint(2, 4)) & ~7)
    pieces = [(at, payload[at : at + size]) for at in range(0, len(payload), size)]
    style = rng.randrange(5)
    if style == 4:  # contiguous up to 65,512, then a few bytes: at or past the 16-bit length
        big = (payload * (65512 // max(1, len(payload)) + 1))[:65512]
        return [(0, big), (65512, rng.randbytes(rng.choice((4, 8, 16, 23, 24, 40))))]
    if style == 1 and len(pieces) > 1:
        pieces[1] = (max(0, pieces[1][0] - 8), pieces[1][1])  # overlap
    elif style == 2:
        pieces.append((0xFFF8 - rng.choice((0, 8, 64)), rng.randbytes(rng.choice((64, 512)))))
    elif style == 3:
        rng.shuffle(pieces)
    return pieces


def fragment(rng: random.Random, frame: Frame) -> list[Frame]:
    """Cut one frame's IP packet into fragments (RFC 791 / RFC 8200 s4.5)."""
    off = ip_offset(frame.data, frame.linktype)
    if off is None:
        return [frame]
    pkt = frame.data[off:]
    hl = esp_offset(pkt) if pkt and pkt[0] >> 4 in (4, 6) else None
    if hl is None or len(pkt) <= hl + 8:
        return [frame]
    build = _v4_fragments if pkt[0] >> 4 == 4 else _v6_fragments
    hl = hl if pkt[0] >> 4 == 4 else 40
    datas = build(rng, pkt, _pieces(rng, pkt[hl:]))
    return [frame._replace(data=frame.data[:off] + d, caplen=off + len(d)) for d in datas]


def _window(rng: random.Random, frames: tuple[Frame, ...]) -> list[Frame]:
    """A short run of the seed's frames: small captures are fast to analyze."""
    if len(frames) <= 12 or rng.random() < 0.1:
        return list(frames)
    n = rng.randint(1, 12)
    start = rng.randrange(len(frames) - n + 1)
    return list(frames[start : start + n])


_TUNNEL_NAMES = tuple(sorted(TUNNELS))


def _tunnels(frame: Frame) -> bool:
    """Can ``synth.tunnels.in_tunnel`` wrap it (Ethernet carrying IP, no tag)?"""
    return frame.linktype == 1 and frame.data[12:14] in (b"\x08\x00", b"\x86\xdd")


def mutate_frames(rng: random.Random, frames: tuple[Frame, ...], rate: float) -> list[Frame]:
    """The frames of a capture with about ``rate`` of them mutated."""
    out: list[Frame] = []
    for frame in _window(rng, frames):
        r = rng.random()
        if r < rate * 0.15:
            out += fragment(rng, frame)
        elif r < rate:
            data = mutate_data(rng, frame.data, frame.linktype)
            out.append(frame._replace(data=data, caplen=len(data)))
        elif r < rate * 1.1:
            out += [frame, frame]  # a duplicate: the same seq and IV twice
        elif r < rate * 1.2 and _tunnels(frame):  # captured on an underlay, maybe then mutated
            wrapped = in_tunnel(frame, rng.choice(_TUNNEL_NAMES))
            if rng.random() < 0.5:
                data = mutate_data(rng, wrapped.data, wrapped.linktype)
                wrapped = wrapped._replace(data=data, caplen=len(data))
            out.append(wrapped)
        else:
            out.append(frame)
    if len(out) > 1 and rng.random() < 0.05:
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    return [f._replace(number=i) for i, f in enumerate(out, 1)]
