"""An independent frame counter for pcap and pcapng bytes.

In: the (decompressed) bytes of a capture. Out: a ``Walk``: packet records
counted up to the first fault, whether the file was sound to its end, and
the Decryption Secrets Blocks with the number of frames before each.
Raises nothing. Written from the format drafts alone, sharing no code with
``espforensics.capture``, so the oracle can check rows == frames.

Formats: draft-ietf-opsawg-pcap s4-s5, draft-ietf-opsawg-pcapng s3-s4
(a reader must refuse a section of major version other than 1, s4.1).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

_PCAP = {  # magic: byte order, record header bytes (24: Kuznetzov's "modified" pcap)
    b"\xd4\xc3\xb2\xa1": ("<", 16),
    b"\xa1\xb2\xc3\xd4": (">", 16),
    b"\x4d\x3c\xb2\xa1": ("<", 16),
    b"\xa1\xb2\x3c\x4d": (">", 16),
    b"\x34\xcd\xb2\xa1": ("<", 24),
    b"\xa1\xb2\xcd\x34": (">", 24),
}
_MAX_CAPLEN = 256 << 20
_MAX_BLOCK = 257 << 20
_MIN_BLOCK = {0x0A0D0D0A: 28, 1: 20, 2: 32, 3: 16, 6: 32, 0x0A: 20}


@dataclass(slots=True)
class Walk:
    """What the walker saw."""

    frames: int = 0
    complete: bool = False  # the file is a capture, sound to its last byte
    capture: bool = True  # the first bytes are a pcap or pcapng magic
    dsbs: list[tuple[int, int, bytes]] = field(default_factory=list)  # frames before, type, data


def walk(data: bytes) -> Walk:
    """Count the frames of a pcap or pcapng file."""
    if data[:4] in _PCAP:
        return _walk_pcap(data, *_PCAP[data[:4]])
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        return _walk_pcapng(data)
    return Walk(capture=False)


def _walk_pcap(data: bytes, o: str, head: int) -> Walk:
    result = Walk()
    if len(data) < 24:
        return result
    off = 24
    while off < len(data):
        if off + head > len(data):
            return result
        caplen = struct.unpack_from(o + "I", data, off + 8)[0]
        if caplen > _MAX_CAPLEN or off + head + caplen > len(data):
            return result
        result.frames += 1
        off += head + caplen
    result.complete = True
    return result


def _idb_sound(data: bytes, o: str, off: int, blen: int) -> bool:
    """pcapng s4.2: options stay inside the block; if_tsresol 1 byte, if_tsoffset 8."""
    pos, stop = off + 16, off + blen - 4
    while pos + 4 <= stop:
        code, length = struct.unpack_from(o + "HH", data, pos)
        if code == 0:
            return True
        if pos + 4 + length > stop or (code == 9 and length != 1) or (code == 14 and length != 8):
            return False
        pos += 4 + ((length + 3) & ~3)
    return True


def _walk_pcapng(data: bytes) -> Walk:
    result, o, ifaces, off = Walk(), "<", 0, 0
    while off < len(data):
        if off + 12 > len(data):
            return result
        btype = struct.unpack_from("<I", data, off)[0]
        if btype == 0x0A0D0D0A:
            magic = data[off + 8 : off + 12]
            if magic not in (b"\x1a\x2b\x3c\x4d", b"\x4d\x3c\x2b\x1a"):
                return result
            o = ">" if magic == b"\x1a\x2b\x3c\x4d" else "<"
        btype, blen = struct.unpack_from(o + "II", data, off)
        if blen % 4 or blen < _MIN_BLOCK.get(btype, 12) or blen > _MAX_BLOCK:
            return result
        if off + blen > len(data) or struct.unpack_from(o + "I", data, off + blen - 4)[0] != blen:
            return result
        if btype == 0x0A0D0D0A:
            if struct.unpack_from(o + "H", data, off + 12)[0] != 1:
                return result
            ifaces = 0
        elif btype == 1:
            if not _idb_sound(data, o, off, blen):
                return result
            ifaces += 1
        elif btype in (2, 6):
            if_id = struct.unpack_from(o + ("H" if btype == 2 else "I"), data, off + 8)[0]
            caplen = struct.unpack_from(o + "I", data, off + 20)[0]
            if if_id >= ifaces or caplen > blen - 32:
                return result
            result.frames += 1
        elif btype == 3:
            if not ifaces:
                return result
            result.frames += 1
        elif btype == 0x0A:
            stype, length = struct.unpack_from(o + "II", data, off + 8)
            if length > blen - 20:
                return result
            result.dsbs.append((result.frames, stype, data[off + 16 : off + 16 + length]))
        off += blen
    result.complete = True
    return result
