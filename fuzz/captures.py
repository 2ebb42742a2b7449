"""pcap and pcapng writers whose every header field can be mutated.

In: a ``random.Random``, frames (already mutated by ``fuzz.packets``),
link types and the seed's Decryption Secrets Blocks. Out: the file as a
list of chunks (file header or SHB first, then one chunk per record or
block), so the minimizer can drop whole records. Raises nothing.

Formats: draft-ietf-opsawg-pcap s4-s5; draft-ietf-opsawg-pcapng s3-s4.
"""

from __future__ import annotations

import random
import struct

from espforensics.model.records import DecryptionSecrets, Frame
from fuzz.keytext import mutate_esp_sa

ESPS = 0x45535053  # pcapng DSB secrets type of ESP SA lines
_NS = 1_000_000_000
# nanosecond, microsecond, and Kuznetzov's "modified" pcap (microseconds, 24-byte records)
_PCAP_MAGICS = ((0xA1B23C4D, _NS), (0xA1B2C3D4, 1_000_000), (0xA1B2CD34, 1_000_000))
_MODIFIED = 0xA1B2CD34
_TSRESOLS = (9, 9, 9, 6, 0, 3, 19, 127, 0x80 | 10, 0x80 | 30, 0x80 | 127, 0xFF)
_TSOFFSETS = (0, 0, 0, 1, -1, 1 << 40, -(1 << 40), (1 << 63) - 1, -(1 << 63))
_BIG = (0, 1, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 257 << 20, 256 << 20)


def _maybe(rng: random.Random, rate: float, value: int, *choices: int) -> int:
    return rng.choice((*choices, rng.randrange(1 << 32))) if rng.random() < rate else value


def _pcap_record(
    rng: random.Random, o: str, frame: Frame, per_s: int, rate: float, extra: bytes
) -> bytes:
    sec, frac = divmod(frame.ts_ns, _NS)
    frac = frac * per_s // _NS
    sec = _maybe(rng, rate / 4, sec % (1 << 32), 0, 0xFFFFFFFF, 0x7FFFFFFF)
    frac = _maybe(rng, rate / 4, frac, per_s, per_s - 1, 0xFFFFFFFF)
    caplen, wirelen = len(frame.data), frame.wirelen % (1 << 32)
    r = rng.random()
    if r < rate / 4:
        wirelen = max(0, caplen - rng.randint(1, 64))  # caplen > wirelen
    elif r < rate / 3:
        caplen = rng.choice((*_BIG, caplen + rng.randint(1, 64), max(0, caplen - 4)))
    return struct.pack(o + "IIII", sec, frac, caplen, wirelen) + extra + frame.data


def pcap_chunks(
    rng: random.Random, frames: list[Frame], linktypes: tuple[int, ...], rate: float
) -> list[bytes]:
    """A pcap file: a global header then one record per frame, fields maybe mutated."""
    o = rng.choice("<>")
    magic, per_s = rng.choice(_PCAP_MAGICS)
    linktype = linktypes[0] if linktypes else 1
    linktype = _maybe(rng, rate / 3, linktype, 0, 147, 0x1000_0000 | linktype, 0xFFFFFFFF)
    major = _maybe(rng, rate / 6, 2, 0, 1, 3)
    snaplen = _maybe(rng, rate / 4, 262144, 0, 1, 64, 0xFFFFFFFF)
    head = struct.pack(o + "IHHiII", magic, major % 65536, 4, 0, 0, snaplen) + struct.pack(
        o + "I", linktype
    )
    extra = rng.randbytes(8) if magic == _MODIFIED else b""  # ifindex, protocol, type, pad
    return [head] + [_pcap_record(rng, o, f, per_s, rate, extra) for f in frames]


def _block(o: str, btype: int, body: bytes, rng: random.Random, rate: float) -> bytes:
    """pcapng s3.1: type, length, body padded to 32 bits, the length again."""
    body += b"\x00" * (-len(body) % 4)
    blen = tail = 12 + len(body)
    r = rng.random()
    if r < rate / 40:
        blen = rng.choice((blen + 1, blen + 2, blen - 4, 8, 12, 0xFFFFFFFC, 257 << 20))
    elif r < rate / 30:
        tail = blen + rng.choice((4, -4, 1))
    head = struct.pack(o + "II", btype, blen % (1 << 32))
    return head + body + struct.pack(o + "I", tail % (1 << 32))


def _option(o: str, code: int, value: bytes) -> bytes:
    return struct.pack(o + "HH", code, len(value)) + value + b"\x00" * (-len(value) % 4)


def _idb(rng: random.Random, o: str, linktype: int, rate: float) -> tuple[bytes, int, int]:
    """An IDB with if_tsresol / if_tsoffset maybe set; returns it and both values."""
    tsresol = rng.choice(_TSRESOLS) if rng.random() < rate else 9
    offset = rng.choice(_TSOFFSETS) if rng.random() < rate / 2 else 0
    opts = _option(o, 9, bytes((tsresol,)))
    if offset:
        opts += _option(o, 14, struct.pack(o + "q", offset))
    if rng.random() < rate / 6:  # a lying option length, or an odd one
        opts += struct.pack(o + "HH", rng.choice((9, 14, 2)), rng.choice((0, 3, 200)))
    opts += _option(o, 0, b"")
    lt = _maybe(rng, rate / 6, linktype, 0, 147, 0xFFFF) % 65536
    snap = _maybe(rng, rate / 6, 262144, 0, 1, 64)
    return struct.pack(o + "HHI", lt, 0, snap) + opts, tsresol, offset


def _ticks(ts_ns: int, tsresol: int, offset: int) -> int:
    per_s = 2 ** (tsresol & 0x7F) if tsresol & 0x80 else 10 ** (tsresol & 0x7F)
    ticks: int = max(0, (ts_ns - offset * _NS) * per_s // _NS) % (1 << 64)
    return ticks


def _packet(
    rng: random.Random, o: str, frame: Frame, if_id: int, ticks: int, rate: float
) -> tuple[int, bytes]:
    """An EPB (or, now and then, an SPB or OPB) for one frame."""
    caplen, wirelen = len(frame.data), frame.wirelen % (1 << 32)
    if rng.random() < rate / 4:
        caplen = rng.choice((caplen + 4, caplen + 100, 0xFFFFFFFF, max(0, caplen - 1)))
    if rng.random() < rate / 4:
        wirelen = rng.choice((0, max(0, caplen - 8), 0xFFFFFFFF))
    if rng.random() < rate / 8:
        if_id = rng.choice((if_id + 1, 7, 0xFFFF))
    if rng.random() < rate / 6:
        ticks = rng.choice(((1 << 64) - 1, 1 << 63, 0, ticks ^ (1 << rng.randrange(64))))
    high, low = ticks >> 32, ticks & 0xFFFFFFFF
    kind = rng.random()
    if kind < 0.05:
        return 3, struct.pack(o + "I", wirelen) + frame.data
    if kind < 0.1:
        head = struct.pack(o + "HHIIII", if_id % 65536, 0, high, low, caplen, wirelen)
        return 2, head + frame.data
    return 6, struct.pack(o + "IIIII", if_id % (1 << 32), high, low, caplen, wirelen) + frame.data


def _dsb(rng: random.Random, o: str, secrets: DecryptionSecrets, rate: float) -> bytes:
    text = secrets.data.decode("utf-8", "replace")
    data = secrets.data
    if rng.random() < rate:
        data = mutate_esp_sa(rng, text).encode("utf-8", "surrogatepass")
    stype = _maybe(rng, rate / 6, secrets.secrets_type, 0x544C534B, 0)
    length = _maybe(rng, rate / 8, len(data), len(data) + 4, 0xFFFFFFFF)
    return struct.pack(o + "II", stype, length) + data


def _shb(rng: random.Random, o: str, rate: float) -> bytes:
    major = _maybe(rng, rate / 8, 1, 0, 2)
    minor = _maybe(rng, rate / 8, 0, 2, 0xFFFF)
    magic = _maybe(rng, rate / 10, 0x1A2B3C4D, 0x4D3C2B1A, 0)
    return struct.pack(o + "IHHq", magic, major % 65536, minor % 65536, -1)


class _Section:
    """The interfaces of the pcapng section being written."""

    def __init__(self, rng: random.Random, o: str, linktypes: list[int], rate: float) -> None:
        self.o = o
        self.chunks = [_block(o, 0x0A0D0D0A, _shb(rng, o, rate), rng, rate)]
        self.ifaces: dict[int, tuple[int, int, int]] = {}
        for lt in linktypes:
            body, tsresol, offset = _idb(rng, o, lt, rate)
            self.ifaces[lt] = (len(self.ifaces), tsresol, offset)
            self.chunks.append(_block(o, 1, body, rng, rate))

    def packet(self, rng: random.Random, frame: Frame, rate: float) -> bytes:
        if_id, tsresol, offset = self.ifaces.get(frame.linktype, (0, 9, 0))
        ticks = _ticks(frame.ts_ns, tsresol, offset)
        btype, body = _packet(rng, self.o, frame, if_id, ticks, rate)
        return _block(self.o, btype, body, rng, rate)


_ODD_BLOCKS = (4, 5, 0x00000BAD, 0x40000BAD, 0x12345678, 0x80000001)


def pcapng_chunks(
    rng: random.Random,
    frames: list[Frame],
    linktypes: tuple[int, ...],
    secrets: tuple[DecryptionSecrets, ...],
    rate: float,
) -> list[bytes]:
    """A pcapng file: SHB, IDBs, DSBs and packet blocks, any field maybe mutated."""
    types = list(dict.fromkeys([*linktypes, *(f.linktype for f in frames)]))
    section = _Section(rng, rng.choice("<>"), types, rate)
    chunks = section.chunks
    dsbs = [_block(section.o, 0x0A, _dsb(rng, section.o, s, rate), rng, rate) for s in secrets]
    late = rng.random() < rate / 2 and frames  # DSB after some packets
    at = rng.randrange(len(frames)) if late else 0
    if not late:
        chunks += dsbs
    for i, frame in enumerate(frames):
        if late and i == at:
            chunks += dsbs
        r = rng.random()
        if r < rate / 10:
            body = rng.randbytes(rng.choice((0, 4, 16, 40)))
            chunks.append(_block(section.o, rng.choice(_ODD_BLOCKS), body, rng, rate))
        elif r < rate / 7:
            section = _Section(rng, "<" if section.o == ">" else ">", types, rate)
            chunks += section.chunks
        chunks.append(section.packet(rng, frame, rate))
    return chunks
