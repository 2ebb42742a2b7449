"""Walk a pcapng file block by block, raw, to copy it with changes.

In: a path (plain or compressed, read as ``open_capture`` reads it).
Out: ``iter_blocks`` yields every ``Block`` in file order: the block's
bytes exactly as stored, its type and its section's byte order, and for a
packet block (EPB, OPB, SPB) its frame number, counted from 1 across the
file as ``open_capture`` numbers frames. ``packet_options`` splits an
EPB's or OPB's options off; ``with_options`` puts a new list back.

Raises ``CaptureError`` for a block whose length cannot be right and
``CaptureTruncated`` when the file ends inside a block, after the blocks
before it were yielded (as the frame reader does: the analysis has read
the same file first, so a caller that stops there keeps what it read).

Format: draft-ietf-opsawg-pcapng s3-s4 ("pcapng s<section>").
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from espforensics.capture.compression import ByteSource, open_source
from espforensics.capture.pcapng import EPB, MAX_LEN, OPB, PCAPNG_MAGIC, SPB
from espforensics.errors import CaptureError

_ORDERS = {b"\x1a\x2b\x3c\x4d": ">", b"\x4d\x3c\x2b\x1a": "<"}
PACKET_HEAD = 28  # pcapng s4.3: type, length, interface, timestamp (2), captured, original
_PACKETS = frozenset((EPB, OPB, SPB))


class Block(NamedTuple):
    """One block of a pcapng file as stored."""

    order: str  # "<" or ">": the byte order of its section
    btype: int
    raw: bytes  # the whole block, from its type to its trailing length
    frame: int  # packet blocks: the frame number; other blocks: 0


def _head(source: ByteSource, buf: bytes, base: int, order: str) -> tuple[str, int, int]:
    """(byte order, block type, block length) of the block at the start of ``buf``."""
    if buf[:4] == PCAPNG_MAGIC:  # pcapng s4.1: each section sets its own byte order
        found = _ORDERS.get(buf[8:12])
        if found is None:
            why = f"byte-order magic 0x{buf[8:12].hex()} is neither 1a2b3c4d nor 4d3c2b1a"
            raise source.damaged("section header block", base, why)
        order = found
    btype, blen = struct.unpack_from(order + "II", buf)
    if blen & 3 or blen < 12 or blen > MAX_LEN:
        raise source.damaged(f"block of type 0x{btype:08x}", base, f"block length {blen}")
    return order, btype, blen


def iter_blocks(path: str | os.PathLike[str]) -> Iterator[Block]:
    """Every block of the pcapng file at ``path``; the file is closed at the end."""
    name = os.fspath(path)
    source = open_source(name)
    try:
        buf, base, order, frame = source.fill(b"", 12), 0, "<", 0
        if buf[:4] != PCAPNG_MAGIC:
            raise CaptureError(name, "not a pcapng file")
        while buf:
            buf = source.fill(buf, 12)
            if len(buf) < 12:
                raise source.truncated(f"a block header at byte offset {base}")
            order, btype, blen = _head(source, buf, base, order)
            buf = source.fill(buf, blen)
            if len(buf) < blen:
                raise source.truncated(f"the block at byte offset {base}")
            if btype in _PACKETS:
                frame += 1
                source.frames_read = frame
            yield Block(order, btype, buf[:blen], frame if btype in _PACKETS else 0)
            buf, base = buf[blen:], base + blen
    finally:
        source.close()


def packet_options(block: Block) -> tuple[bytes, list[tuple[int, bytes]]]:
    """An EPB's or OPB's bytes before its options, and its options (pcapng s3.5).

    opt_endofopt is dropped; a damaged option list ends the list where it
    stops making sense (the options are kept up to there).
    """
    raw, order = block.raw, block.order
    caplen = struct.unpack_from(order + "I", raw, 20)[0]
    end = len(raw) - 4
    start = min(PACKET_HEAD + caplen + (-caplen % 4), end)
    options: list[tuple[int, bytes]] = []
    pos = start
    while pos + 4 <= end:
        code, length = struct.unpack_from(order + "HH", raw, pos)
        if code == 0 or pos + 4 + length > end:
            break
        options.append((code, raw[pos + 4 : pos + 4 + length]))
        pos += 4 + length + (-length % 4)
    return raw[:start], options


def with_options(block: Block, body: bytes, options: bytes) -> bytes:
    """The packet block ``body`` (from ``packet_options``) with ``options`` and new lengths."""
    blen = len(body) + len(options) + 4
    pack = struct.Struct(block.order + "I").pack
    return body[:4] + pack(blen) + body[8:] + options + pack(blen)
