"""Walk the blocks of a pcapng file.

In: a ``ByteSource`` and the first bytes already taken from it (at least the
4-byte Section Header Block type). Out: ``iter_pcapng``, an iterator of
``Frame`` (from Enhanced, Simple and obsolete Packet Blocks, numbered from 1
across the whole file) and ``DecryptionSecrets`` (from Decryption Secrets
Blocks), in file order; ``iter_pcapng_batches``, the same frames as
``FrameBatch`` (a plain file's with the ``Span`` a worker reads them again
from), a Decryption Secrets Block ending a batch. Both come from one walk
(``_walk``), so every rule of the format below holds for both. Every
section has its own byte order and its own interfaces, so one file may mix
link types and endiannesses. Other blocks (name resolution, statistics,
custom, ...) are checked for a sound length and skipped.

Raises (from inside iteration, after the frames before the fault were
yielded) ``CaptureTruncated`` when the file ends inside a block, and
``CaptureError`` for a damaged block: bad length, trailing length differing
from the leading one, a packet naming an undefined interface, a packet or
secret longer than its block, a bad option or byte-order magic.

Format: draft-ietf-opsawg-pcapng (cited as "pcapng s<section>").
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

from espforensics.capture.batch import Buffer, FrameBatch, Gathered
from espforensics.capture.compression import ByteSource
from espforensics.capture.pcap import BATCH_BYTES, BATCH_FRAMES
from espforensics.errors import CaptureError
from espforensics.model.records import DecryptionSecrets, Frame

# What the batch walker yields, in file order.
Item = FrameBatch | Frame | DecryptionSecrets
# What the walk yields: a batch's frames come one by one when asked, or when a timestamp
# is out of int64's range (capture/batch.py ``Gathered.take``).
_Walked = FrameBatch | Iterator[Frame] | DecryptionSecrets

# pcapng s10.1 block type codes.
SHB = 0x0A0D0D0A  # a palindrome, so it reads the same in either byte order
IDB = 0x00000001
OPB = 0x00000002  # obsolete Packet Block, pcapng appendix A
SPB = 0x00000003
EPB = 0x00000006
DSB = 0x0000000A
PCAPNG_MAGIC = SHB.to_bytes(4, "big")

_BLOCK_NAMES = {
    SHB: "section header block",
    IDB: "interface description block",
    OPB: "packet block",
    SPB: "simple packet block",
    4: "name resolution block",
    5: "interface statistics block",
    EPB: "enhanced packet block",
    DSB: "decryption secrets block",
    0x00000BAD: "custom block",
    0x40000BAD: "custom block",
}
_PACKET_BLOCKS = frozenset((OPB, SPB, EPB))

MAX_LEN = 257 << 20  # a 256 MiB packet plus its block fields and options; else garbage
_MIN_LEN = {SHB: 28, IDB: 20, OPB: 32, SPB: 16, EPB: 32, DSB: 20}  # pcapng s4.1-s4.7

# pcapng s4.2 options of the interface description block.
_OPT_ENDOFOPT = 0
_OPT_IF_TSRESOL = 9
_OPT_IF_TSOFFSET = 14
_OPT_NAMES = {_OPT_IF_TSRESOL: "if_tsresol", _OPT_IF_TSOFFSET: "if_tsoffset"}  # once each


@dataclass(frozen=True, slots=True)
class _Layout:
    """The field layouts of one byte order (pcapng s4.1: set by the SHB)."""

    head: struct.Struct  # block type, block total length
    u32: struct.Struct
    shb: struct.Struct  # major, minor version
    idb: struct.Struct  # link type, snaplen
    epb: struct.Struct  # interface id, timestamp high, low, captured, original length
    opb: struct.Struct  # the same fields in the obsolete packet block
    option: struct.Struct  # option code, option length
    i64: struct.Struct


def _layout(order: str) -> _Layout:
    def s(fmt: str) -> struct.Struct:
        return struct.Struct(order + fmt)

    return _Layout(s("II"), s("I"), s("HH"), s("H2xI"), s("IIIII"), s("H2xIIII"), s("HH"), s("q"))


_Unpack = Callable[[Buffer, int], tuple[Any, ...]]


def _unpackers(layout: _Layout) -> tuple[_Unpack, _Unpack, _Unpack]:
    """The bound unpack_from of the fields read for every block, for the hot loop."""
    return layout.head.unpack_from, layout.u32.unpack_from, layout.epb.unpack_from


_LAYOUTS = {b"\x1a\x2b\x3c\x4d": _layout(">"), b"\x4d\x3c\x2b\x1a": _layout("<")}


class _Fields(NamedTuple):
    """A packet block's frame: its data's offset in the buffer, and its fields."""

    at: int
    ts_ns: int
    caplen: int
    wirelen: int
    linktype: int


class _Interface(NamedTuple):
    """One IDB: ts_ns = ticks * mul // div + offset_ns."""

    linktype: int
    snaplen: int
    mul: int
    div: int
    offset_ns: int


def iter_pcapng(source: ByteSource, buf: bytes) -> Generator[Frame | DecryptionSecrets, None, None]:
    """Yield the frames and secrets of a pcapng file; close the source at the end."""
    for item in _iter_items(source, buf, repeat(BATCH_FRAMES), as_frames=True):
        if isinstance(item, DecryptionSecrets):
            yield item
            continue
        assert not isinstance(item, FrameBatch)  # asked for as frames
        yield from item  # each counted in source.frames_read as it comes


def iter_pcapng_batches(
    source: ByteSource, buf: bytes, sizes: Iterator[int]
) -> Generator[Item, None, None]:
    """Yield the frames of a pcapng file as batches, each of at most the next of ``sizes``
    frames (and about BATCH_BYTES), and its secrets in file order (a Decryption Secrets
    Block ends a batch: the SAs it loads apply from the next frame on); close the source
    at the end.

    Frames of a batch with a timestamp out of int64's range come one by one, as ``Frame``.
    A mapped file's frames stay where they sit; a batch of an uncompressed file carries
    the ``Span`` a worker reads it again from.
    """
    for item in _iter_items(source, buf, sizes, as_frames=False):
        if isinstance(item, FrameBatch | DecryptionSecrets):
            yield item
        else:  # a timestamp out of int64's range: its batch's frames one by one
            yield from item


def _iter_items(
    source: ByteSource, buf: bytes, sizes: Iterator[int], as_frames: bool
) -> Generator[_Walked, None, None]:
    """The one walk of both iterations: batches, or (``as_frames``) their frames."""
    try:
        # A plain file's batches are walked where they sit, not copied; frames are copies
        # anyway, read faster from the file's chunks than from its pages mapped.
        mapped = None if as_frames else source.mapped()
        gathered = Gathered(source, mapped, as_frames)
        yield from _walk(source, buf if mapped is None else mapped, sizes, gathered, as_frames)
    finally:
        source.close()


def _walk(
    source: ByteSource, buf: Buffer, sizes: Iterator[int], gathered: Gathered, as_frames: bool
) -> Generator[_Walked, None, None]:
    """The walk of ``iter_pcapng_batches``, every block of ``buf`` (refilled from
    ``source`` unless it is the mapped file) in turn.

    Hot loop kept in one function, with bound methods in locals: an enhanced packet block
    is handled inline, every other block by a helper; a packet block's fields go to the
    ``gathered`` lists, which ``take`` makes a batch of.
    """
    layout = _LAYOUTS[b"\x4d\x3c\x2b\x1a"]  # replaced by the first block, an SHB
    head, u32, epb = _unpackers(layout)
    interfaces: list[_Interface] = []
    add = gathered.rows.append
    streamed = isinstance(buf, bytes)
    off = base = number = last_ts = 0  # base: stream offset of buf[0]
    end = len(buf)
    size = room = next(sizes)  # room: frames the batch may still take
    limit = BATCH_BYTES  # the stream offset that ends a batch
    try:
        while True:
            need = 12  # the smallest block
            if off + 12 <= end:
                btype, blen = head(buf, off)
                if btype == SHB:  # pcapng s4.1: a new section, maybe a new byte order
                    layout = _section_layout(source, buf, off, base)
                    head, u32, epb = _unpackers(layout)
                    blen = head(buf, off)[1]
                # pcapng s3.1: a multiple of 4, at least the block's fixed fields
                if blen & 3 or (blen < 32 and blen < _MIN_LEN.get(btype, 12)) or blen > MAX_LEN:
                    raise _bad_length(source, btype, blen, base + off)
                need = blen
                if off + blen <= end:
                    if u32(buf, off + blen - 4)[0] != blen:
                        raise _damaged(source, btype, base + off, "trailing block length differs")
                    if btype == EPB:  # pcapng s4.3
                        if_id, high, low, caplen, wirelen = epb(buf, off + 8)
                        if if_id >= len(interfaces) or caplen > blen - 32:
                            raise _bad_packet(source, btype, base + off, if_id, caplen, interfaces)
                        linktype, _, mul, div, offset_ns = interfaces[if_id]
                        last_ts = ((high << 32) | low) * mul // div + offset_ns
                        at = off + 28
                    elif btype in (SPB, OPB):
                        read = _simple_packet if btype == SPB else _obsolete_packet
                        at, last_ts, caplen, wirelen, linktype = read(
                            source, layout, interfaces, buf, off, base, last_ts
                        )
                    else:
                        if btype == IDB:
                            interfaces.append(_interface(source, layout, buf, off, blen, base))
                        elif btype == DSB:  # the SAs it loads apply from the next frame on
                            secrets = _secrets(source, layout, buf, off, blen, base)
                            off += blen
                            if (taken := gathered.take(buf, off)) is not None:
                                yield taken
                            room, limit = size, base + off + BATCH_BYTES  # as the engine did
                            yield secrets
                            continue
                        elif btype == SHB:
                            _check_version(source, layout, buf, off, base)
                            interfaces = []
                        off += blen
                        continue
                    number += 1
                    source.frames_read = number
                    add((base + at, last_ts, caplen, wirelen, linktype))
                    off += blen
                    room -= 1
                    if not room or base + off >= limit:
                        if (taken := gathered.take(buf, off)) is not None:
                            yield taken
                        size = room = next(sizes)
                        limit = base + off + BATCH_BYTES
                    continue
            if not streamed:  # the mapped file's end: whole, or inside a block
                if end > off:
                    raise source.truncated(_cut_block(layout, buf[off : off + 4], off, number))
                if (taken := gathered.take(buf, off)) is not None:
                    yield taken
                return
            if as_frames and (taken := gathered.take(buf, off)) is not None:
                yield taken  # its frames' bytes are copied from this buffer
            gathered.piece(buf, off)
            base += off
            buf, off = buf[off:], 0  # what an error takes: none of it
            buf = source.fill(buf, need)
            end = len(buf)
            if end < need:
                if buf:
                    raise source.truncated(_cut_block(layout, buf, base, number))
                if (taken := gathered.take(buf, 0)) is not None:
                    yield taken
                return
    except CaptureError:  # a damaged block or a failed read: the frames before it first
        if (taken := gathered.take(buf, off)) is not None:
            yield taken
        raise


def _section_layout(source: ByteSource, buf: Buffer, off: int, base: int) -> _Layout:
    magic = buf[off + 8 : off + 12]
    layout = _LAYOUTS.get(magic)
    if layout is None:
        why = f"byte-order magic 0x{magic.hex()} is neither 1a2b3c4d nor 4d3c2b1a"
        raise _damaged(source, SHB, base + off, why)
    return layout


def _bad_length(source: ByteSource, btype: int, blen: int, where: int) -> CaptureError:
    if blen & 3:
        why = f"block length {blen} is not a multiple of 4"
    elif blen > MAX_LEN:
        why = f"block length {blen} exceeds the {MAX_LEN >> 20} MiB limit"
    else:
        why = f"block length {blen} is shorter than the {_MIN_LEN.get(btype, 12)}-byte minimum"
    return _damaged(source, btype, where, why)


def _check_version(source: ByteSource, layout: _Layout, buf: Buffer, off: int, base: int) -> None:
    """pcapng s4.1: a reader must refuse a major version other than 1."""
    major, minor = layout.shb.unpack_from(buf, off + 12)
    if major != 1:
        why = f"pcapng version {major}.{minor} is not supported (only 1.x)"
        raise _damaged(source, SHB, base + off, why)


def _interface(
    source: ByteSource, layout: _Layout, buf: Buffer, off: int, blen: int, base: int
) -> _Interface:
    """pcapng s4.2: link type, snaplen and the timestamp options of an IDB.

    Every resolution is legal, 10^-0 (whole seconds) and 2^-0 included, and
    so is every if_tsoffset: a signed count of seconds, negative too. Only
    a second if_tsresol or if_tsoffset is refused (pcapng s4.2: "multiple
    allowed: no"), as the reader could not tell which one to apply.
    """
    linktype, snaplen = layout.idb.unpack_from(buf, off + 8)
    mul, div, offset_ns = 1000, 1, 0  # if_tsresol absent: microseconds
    pos, stop = off + 16, off + blen - 4
    seen: set[int] = set()
    while pos + 4 <= stop:
        code, length = layout.option.unpack_from(buf, pos)
        if code == _OPT_ENDOFOPT:
            break
        value = pos + 4
        if value + length > stop:
            why = f"option {code} of length {length} runs past the end of the block"
            raise _damaged(source, IDB, base + off, why)
        if code in seen:
            why = f"{_OPT_NAMES[code]} is given twice (pcapng allows it once)"
            raise _damaged(source, IDB, base + off, why)
        if code in _OPT_NAMES:
            seen.add(code)
        if code == _OPT_IF_TSRESOL:
            if length != 1:
                raise _damaged(source, IDB, base + off, f"if_tsresol has length {length}, not 1")
            mul, div = _resolution(buf[value])
        elif code == _OPT_IF_TSOFFSET:
            if length != 8:
                raise _damaged(source, IDB, base + off, f"if_tsoffset has length {length}, not 8")
            offset_ns = layout.i64.unpack_from(buf, value)[0] * 1_000_000_000
        pos = value + ((length + 3) & ~3)  # pcapng s3.5: values padded to 32 bits
    return _Interface(linktype, snaplen, mul, div, offset_ns)


def _resolution(tsresol: int) -> tuple[int, int]:
    """(mul, div) turning ticks into ns; pcapng s4.2 if_tsresol.

    High bit clear: a tick is 10^-n s; set: 2^-n s. The fraction is reduced
    so that the common 10^-6 and 10^-9 need no big-number division.
    """
    exponent = tsresol & 0x7F
    per_second = 2**exponent if tsresol & 0x80 else 10**exponent
    common = math.gcd(1_000_000_000, per_second)
    return 1_000_000_000 // common, per_second // common


def _simple_packet(
    source: ByteSource,
    layout: _Layout,
    interfaces: list[_Interface],
    buf: Buffer,
    off: int,
    base: int,
    ts_ns: int,
) -> _Fields:
    """pcapng s4.4: interface 0, no timestamp (the previous packet's is used).

    The captured length is not stored: it is the original length cut to the
    interface's snaplen (if any) and to the bytes the block holds.
    """
    if not interfaces:
        raise _damaged(source, SPB, base + off, "no interface is defined in this section")
    blen, wirelen = layout.head.unpack_from(buf, off + 4)
    linktype, snaplen = interfaces[0][:2]
    caplen = min(wirelen, blen - 16)
    if snaplen:
        caplen = min(caplen, snaplen)
    return _Fields(off + 12, ts_ns, caplen, wirelen, linktype)


def _obsolete_packet(
    source: ByteSource,
    layout: _Layout,
    interfaces: list[_Interface],
    buf: Buffer,
    off: int,
    base: int,
    ts_ns: int,
) -> _Fields:
    """pcapng appendix A: an EPB with a 16-bit interface id and a drops count."""
    del ts_ns  # this block carries its own timestamp
    blen = layout.head.unpack_from(buf, off)[1]
    if_id, high, low, caplen, wirelen = layout.opb.unpack_from(buf, off + 8)
    if if_id >= len(interfaces) or caplen > blen - 32:
        raise _bad_packet(source, OPB, base + off, if_id, caplen, interfaces)
    linktype, _, mul, div, offset_ns = interfaces[if_id]
    ts_ns = ((high << 32) | low) * mul // div + offset_ns
    return _Fields(off + 28, ts_ns, caplen, wirelen, linktype)


def _secrets(
    source: ByteSource, layout: _Layout, buf: Buffer, off: int, blen: int, base: int
) -> DecryptionSecrets:
    """pcapng s4.7: secrets type, secrets length, secrets data."""
    secrets_type, length = layout.head.unpack_from(buf, off + 8)
    if length > blen - 20:
        why = f"secrets length {length} runs past the end of the block (block length {blen})"
        raise _damaged(source, DSB, base + off, why)
    return DecryptionSecrets(secrets_type, buf[off + 16 : off + 16 + length])


def _block_name(btype: int) -> str:
    return _BLOCK_NAMES.get(btype, f"block of type 0x{btype:08x}")


def _damaged(source: ByteSource, btype: int, where: int, why: str) -> CaptureError:
    return source.damaged(_block_name(btype), where, why)


def _bad_packet(
    source: ByteSource,
    btype: int,
    where: int,
    if_id: int,
    caplen: int,
    interfaces: list[_Interface],
) -> CaptureError:
    if if_id >= len(interfaces):
        why = f"interface {if_id} is not defined ({len(interfaces)} in this section)"
    else:
        why = f"captured length {caplen} runs past the end of the block"
    return _damaged(source, btype, where, why)


def _cut_block(layout: _Layout, buf: Buffer, base: int, frames: int) -> str:
    """Name the block the input ends inside, for the truncation message."""
    if len(buf) < 4:
        return f"a block header at byte offset {base}"
    btype = layout.u32.unpack_from(buf)[0]
    where = f"{_block_name(btype)} at byte offset {base}"
    return f"frame {frames + 1} ({where})" if btype in _PACKET_BLOCKS else f"the {where}"
