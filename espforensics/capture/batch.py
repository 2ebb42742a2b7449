"""A batch of captured frames as columns, their bytes in one buffer.

In: the frames of a batch (``FrameBatch.of``), or a capture reader's
records as they sit in its buffer (capture/pcap.py). Out: a
``FrameBatch``, which the engine parses as columns (engine/wire.py) and
whose ``frame(i)`` the per-frame path takes. Raises ``OverflowError``
(``of``) for a timestamp past 2^63 ns.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from espforensics.model import Frame, new_tuple

I64 = npt.NDArray[np.int64]
# What a batch's bytes sit in: a buffer of their own, or the capture file mapped.
Buffer = bytes | mmap.mmap
_CAN_DROP = hasattr(mmap.mmap, "madvise") and hasattr(mmap, "MADV_DONTNEED")  # Linux, BSDs
PAD: Final = 16  # zero bytes after the last frame: a masked-out read, an ICV's 16-byte gather


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
    span: Span | None = None  # where its records sit in an uncompressed pcap file

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

    def release(self) -> None:
        """Let go of the pages its records occupy in a mapped capture file, once it is done
        with: they stay in the page cache (read again if touched), but no longer count in
        this process's memory, which stays flat however large the file."""
        span, mapped = self.span, self.buf
        if span is None or not isinstance(mapped, mmap.mmap) or not _CAN_DROP:
            return
        first = span.file_at // mmap.PAGESIZE * mmap.PAGESIZE  # the page before is done with
        last = (span.file_at + span.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE  # the next's not
        if last > first:
            mapped.madvise(mmap.MADV_DONTNEED, first, last - first)

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


@dataclass(frozen=True, slots=True)
class Span:
    """Where a batch's records sit in an uncompressed pcap file: enough to read it again
    (in another process) as the very same batch."""

    path: str
    file_at: int  # offset of the first record header
    nbytes: int  # from it to the end of the last record
    heads: I64  # each record header's offset from ``file_at``
    first: int  # the number of the first frame
    layout: Layout

    def read(self) -> FrameBatch:
        """The batch, read from the file again; OSError if it cannot be read."""
        mapped = _mapping(self.path)
        end = self.file_at + self.nbytes
        if end > len(mapped):
            raise OSError(f"{self.path}: the file is shorter than when it was first read")
        if end + PAD <= len(mapped):
            return records_batch(mapped, self.heads + self.file_at, self.first, self.layout, self)
        data = mapped[self.file_at : end] + bytes(PAD)
        return records_batch(data, self.heads, self.first, self.layout, self)


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
    fields = view[heads[:, None] + np.arange(RECORD_HEADER_LEN)].view(layout.order + "u4")
    sec, frac, caplen, wirelen = fields.astype(np.int64).T
    n = len(heads)
    number = np.arange(first, first + n, dtype=np.int64)
    ts_ns = sec * 1_000_000_000 + frac * layout.scale  # at most 2^32 s: no overflow
    linktype = np.full(n, layout.linktype, np.int64)
    start = heads + RECORD_HEADER_LEN
    return FrameBatch(joined, start, number, ts_ns, caplen, wirelen, linktype, None, span)
