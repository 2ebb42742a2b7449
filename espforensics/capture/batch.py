"""A batch of captured frames as columns, their bytes in one buffer.

In: the frames of a batch (``FrameBatch.of``), a pcap reader's records as
they sit in its buffer (capture/pcap.py), or the columns a pcapng walker
gathered (``Gathered``, capture/pcapng.py). Out: a ``FrameBatch``, which
the engine parses as columns (engine/wire.py) and whose ``frame(i)`` the
per-frame path takes, with the ``Span`` a worker reads it again from.
Raises ``OverflowError`` (``of``) for a timestamp past 2^63 ns.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from espforensics.capture.compression import ByteSource
from espforensics.model.arrays import rows_at
from espforensics.model.records import Frame, new_tuple

I64 = npt.NDArray[np.int64]
# What a batch's bytes sit in: a buffer of their own, or the capture file mapped.
Buffer = bytes | mmap.mmap
CAN_DROP = hasattr(mmap.mmap, "madvise") and hasattr(mmap, "MADV_DONTNEED")  # Linux, BSDs
PAD: Final = 16  # zero bytes after the last frame: a masked-out read, an ICV's 16-byte gather


def drop_pages(mapped: mmap.mmap, first: int, last: int) -> None:
    """Let go of the pages from ``first`` to ``last`` (page multiples) of a file mapped
    read-only: they stay in the page cache (read again if touched) but no longer count in
    this process's memory (MADV_DONTNEED). Nothing where the system lacks it (``CAN_DROP``)."""
    if CAN_DROP and last > first:
        mapped.madvise(mmap.MADV_DONTNEED, first, last - first)


@dataclass(frozen=True, slots=True)
class FrameBatch:
    """The frames of one batch: their fields as arrays, their bytes in one buffer.

    A frame's bytes are ``buf[start:start + caplen]``; what lies between
    two frames (a pcap record header, say) is never read. At least PAD
    bytes follow the last frame. ``frame(i)`` builds the i-th ``Frame``
    only when the per-frame path asks for it.
    """

    buf: Buffer  # every frame's bytes, in order, then at least PAD bytes
    start: I64  # where each frame starts in ``buf``
    number: I64
    ts_ns: I64
    caplen: I64
    wirelen: I64
    linktype: I64
    given: tuple[Frame, ...] | None = None  # the frames it was made of, if any
    span: Span | None = None  # where its records sit in an uncompressed (or unpacked) file

    def __len__(self) -> int:
        return len(self.number)

    def frame(self, i: int) -> Frame:
        """The i-th frame of the batch."""
        if self.given is not None:
            return self.given[i]
        at, length = int(self.start[i]), int(self.caplen[i])
        return Frame(
            int(self.number[i]),
            int(self.ts_ns[i]),
            length,
            int(self.wirelen[i]),
            int(self.linktype[i]),
            self.buf[at : at + length],
        )

    def frames(self) -> Iterator[Frame]:
        """Every frame of the batch, in order (``frame(i)`` for each, its fields read once)."""
        if self.given is not None:
            yield from self.given
            return
        buf, new = self.buf, new_tuple  # Frame's own __new__ is Python: a quarter of the cost
        columns = (self.start, self.number, self.ts_ns, self.caplen, self.wirelen, self.linktype)
        for at, number, ts_ns, caplen, wirelen, linktype in zip(
            *(c.tolist() for c in columns), strict=True
        ):
            yield new(Frame, (number, ts_ns, caplen, wirelen, linktype, buf[at : at + caplen]))

    def views(self) -> list[memoryview]:
        """Every frame's bytes, viewed where they sit in ``buf`` (a copy writes them)."""
        mem = memoryview(self.buf)
        start, caplen = self.start.tolist(), self.caplen.tolist()
        return [mem[a : a + c] for a, c in zip(start, caplen, strict=True)]

    def release(self) -> None:
        """Let go of the pages its records occupy in a mapped capture file, once it is done
        with: they stay in the page cache (read again if touched), but no longer count in
        this process's memory, which stays flat however large the file."""
        span, mapped = self.span, self.buf
        if span is None or not isinstance(mapped, mmap.mmap):
            return
        first = span.file_at // mmap.PAGESIZE * mmap.PAGESIZE  # the page before is done with
        last = (span.file_at + span.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE  # the next's not
        drop_pages(mapped, first, last)

    @classmethod
    def of(cls, frames: tuple[Frame, ...]) -> FrameBatch:
        """The batch of ``frames``; raises OverflowError for a timestamp past 2^63 ns."""
        # The frames' fields as columns (a transpose in C), then their bytes in one buffer.
        number, ts_ns, caplen, wirelen, linktype, datas = zip(*frames, strict=True)
        fields = np.array((number, ts_ns, caplen, wirelen, linktype), np.int64)
        start = np.zeros(len(frames), np.int64)
        np.cumsum(fields[2][:-1], out=start[1:])
        # Zero bytes after the last frame: a masked-out read looks at offsets 0 to 3.
        buf = b"".join([*datas, bytes(PAD)])
        number, ts_ns, caplen, wirelen, linktype = fields
        return cls(buf, start, number, ts_ns, caplen, wirelen, linktype, frames)


@dataclass(frozen=True, slots=True)
class Layout:
    """How a pcap file's record headers read (draft-ietf-opsawg-pcap s4, s5)."""

    order: str  # "<" or ">"
    scale: int  # ns per unit of the fraction field (1000 for microseconds)
    linktype: int
    header_len: int = 16  # a record header's bytes (24 in the "modified" format)


@dataclass(frozen=True, slots=True)
class Span:
    """Where a batch's records sit in an uncompressed file: enough to read it again (in
    another process) as the very same batch.

    A pcap batch is read again from its record headers (``layout``); a pcapng batch
    carries its frames' columns (``columns``), so that a worker need not walk its blocks
    again (interfaces, sections and byte orders are the walker's business): five int64
    per frame in all.
    """

    path: str  # the file read (an unpacked copy of a compressed capture: capture/unpack.py)
    file_at: int  # offset of the batch's first byte (a record header, a block)
    nbytes: int  # from it to the end of the last record
    heads: I64  # each record header's offset from ``file_at`` (pcapng: each frame's data)
    first: int  # the number of the first frame
    layout: Layout | None  # pcap: how its record headers read
    columns: I64 | None = None  # pcapng: ts_ns, caplen, wirelen, linktype (4 rows)

    def read(self) -> FrameBatch:
        """The batch, read from the file again; OSError if it cannot be read."""
        mapped = _mapping(self.path)
        end = self.file_at + self.nbytes
        if end > len(mapped):
            raise OSError(f"{self.path}: the file is shorter than when it was first read")
        data: Buffer = mapped
        heads = self.heads + self.file_at
        if end + PAD > len(mapped):
            data, heads = mapped[self.file_at : end] + bytes(PAD), self.heads
        if self.columns is not None:
            return columns_batch(data, heads, self.first, self.columns, self)
        assert self.layout is not None  # a pcap span
        return records_batch(data, heads, self.first, self.layout, self)


_MAPPED: dict[str, mmap.mmap] = {}  # a worker's mapping of the capture (one per process)


def _mapping(path: str) -> mmap.mmap:
    mapped = _MAPPED.get(path)
    if mapped is None:
        with open(path, "rb") as fh:
            mapped = _MAPPED[path] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return mapped


RECORD_HEADER_LEN: Final = 16


def records_batch(
    joined: Buffer, heads: I64, first: int, layout: Layout, span: Span | None = None
) -> FrameBatch:
    """The batch of the pcap records whose headers sit at ``heads`` of ``joined`` (at
    least PAD bytes after the last), numbered from ``first``."""
    view = np.frombuffer(joined, np.uint8)
    fields = rows_at(view, heads, RECORD_HEADER_LEN).view(layout.order + "u4")
    sec, frac, caplen, wirelen = fields.astype(np.int64).T  # the first 16 of every layout
    n = len(heads)
    number = np.arange(first, first + n, dtype=np.int64)
    ts_ns = sec * 1_000_000_000 + frac * layout.scale  # at most 2^32 s: no overflow
    linktype = np.full(n, layout.linktype, np.int64)
    start = heads + layout.header_len
    return FrameBatch(joined, start, number, ts_ns, caplen, wirelen, linktype, None, span)


def columns_batch(
    joined: Buffer, start: I64, first: int, columns: I64, span: Span | None = None
) -> FrameBatch:
    """The batch of the frames whose bytes start at ``start`` of ``joined`` (at least PAD
    bytes after the last), numbered from ``first``; ``columns``: ts_ns, caplen, wirelen,
    linktype."""
    ts_ns, caplen, wirelen, linktype = columns
    number = np.arange(first, first + len(start), dtype=np.int64)
    return FrameBatch(joined, start, number, ts_ns, caplen, wirelen, linktype, None, span)


# A frame the pcapng walker gathered: its data's stream offset, ts_ns, caplen, wirelen,
# linktype.
Row = tuple[int, int, int, int, int]


class Gathered:
    """The frames of the batch a pcapng walker is gathering, a row of fields each.

    The walker appends each frame's row: its data's offset in the (uncompressed) stream,
    ts_ns, caplen, wirelen, linktype; ``piece`` keeps the bytes of a stream's buffer before
    it is refilled; ``take`` makes the batch. A mapped file's frames stay where they sit.
    """

    def __init__(self, source: ByteSource, mapped: mmap.mmap | None, as_frames: bool) -> None:
        """``as_frames``: ``take`` gives the frames (for the per-frame iteration)."""
        self._source, self._mapped, self._as_frames = source, mapped, as_frames
        self.rows: list[Row] = []
        self._pieces: list[memoryview] = []
        self._from = 0  # where the batch's bytes begin in the stream
        self._piece_from = 0  # and the bytes not yet kept in the walker's buffer
        self.numbered = 0  # frames taken in earlier batches

    def piece(self, buf: Buffer, stop: int) -> None:
        """Keep ``buf[..:stop]``: the walker refills its buffer from ``stop`` on."""
        if self.rows:
            self._pieces.append(memoryview(buf)[self._piece_from : stop])
        else:  # nothing gathered yet: the batch begins past the bytes let go
            self._from += stop - self._piece_from
        self._piece_from = 0

    def take(self, buf: Buffer, stop: int) -> FrameBatch | Iterator[Frame] | None:
        """The batch of the frames gathered, whose bytes end at ``buf[stop]`` (None if
        none): a FrameBatch, or its frames (as asked, or when a timestamp is out of int64's
        range)."""
        file_at, rows = self._from, self.rows
        joined, shift, nbytes = self._bytes(buf, stop)
        if not rows:
            return None
        first = self.numbered + 1
        self.numbered += len(rows)
        fields = None
        if not self._as_frames:  # the per-frame iteration makes no columns
            with contextlib.suppress(OverflowError):  # a timestamp past the year 2262
                fields = np.array(rows, np.int64).T.copy()  # a row per field
        if fields is None:  # the frames, for the per-frame path
            taken = rows.copy()
            rows.clear()  # in place: the walker holds its append
            return _frames(self._source, joined, shift, first, taken)
        rows.clear()
        rel, columns = fields[0] - file_at, fields[1:]
        span = None
        if self._source.compression is None:  # the same bytes can be read again where they sit
            span = Span(self._source.file, file_at, nbytes, rel, first, None, columns)
        return columns_batch(joined, fields[0] - shift, first, columns, span)

    def _bytes(self, buf: Buffer, stop: int) -> tuple[Buffer, int, int]:
        """The batch's bytes, ending at ``buf[stop]``: the buffer they are in, its stream
        offset, and their length; the next batch's begin there."""
        mapped, file_at = self._mapped, self._from
        if mapped is None:  # a stream: the pieces of the buffers it was read in
            pieces = [*self._pieces, memoryview(buf)[self._piece_from : stop]]
            nbytes = sum(len(p) for p in pieces)
        else:  # a mapped file: walked where it sits (its offsets are the file's)
            pieces, nbytes = [], stop - file_at
            self._source.bytes_read = max(self._source.bytes_read, file_at + nbytes)
        joined: Buffer = buf
        shift = file_at - self._piece_from  # the stream offset of buf[0]
        self._from, self._piece_from, self._pieces = file_at + nbytes, stop, []
        if self._as_frames or not self.rows:  # frames are copied from the walker's buffer
            assert len(pieces) <= 1  # the walker takes before it refills
        elif mapped is not None and file_at + nbytes + PAD <= len(mapped):
            joined, shift = mapped, 0
        else:  # the stream's pieces, or the file's last bytes, with PAD zero bytes after
            whole = [mapped[file_at : file_at + nbytes]] if mapped is not None else pieces
            joined, shift = b"".join([*whole, bytes(PAD)]), file_at
        return joined, shift, nbytes


def _frames(
    source: ByteSource, data: Buffer, shift: int, first: int, rows: list[Row]
) -> Iterator[Frame]:
    """The frames of ``rows`` numbered from ``first``, their bytes copied from ``data``
    (at stream offset ``shift``), one at a time; ``source.frames_read`` counts them."""
    new = new_tuple  # Frame's own __new__ is Python: a quarter of the cost
    for number, (at, ts_ns, caplen, wirelen, linktype) in enumerate(rows, first):
        i = at - shift
        source.frames_read = number
        yield new(Frame, (number, ts_ns, caplen, wirelen, linktype, data[i : i + caplen]))
