"""Walk the records of a classic pcap file.

In: a ``ByteSource`` and the first bytes already taken from it (at least the
4-byte magic). Out: batches of records (``FrameBatch``: header fields as
columns, the frames' bytes in one buffer), or the same records one
``Frame`` at a time, with integer-nanosecond timestamps, numbered from 1.
The file is read in ~1 MiB chunks and a batch holds as many frames as
the caller asks for (at most about BATCH_BYTES), so memory does not grow
with the file.

``known_batches`` reads the same batches from a mapped file without walking
its records, when their captured lengths are known already (a packets
table of an earlier walk: the capture copies, rewrite/).

Raises (from inside iteration, after the frames before the fault were
yielded) ``CaptureTruncated`` when the file ends inside the file header or a
record, and ``CaptureError`` for a record whose captured length is absurd
(``known_batches``: a record header that no longer says the length known).

Format: draft-ietf-opsawg-pcap (the pcap file format), s3-s5.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Generator, Iterator
from itertools import repeat

import numpy as np
import numpy.typing as npt

from espforensics.capture.batch import (
    PAD,
    Buffer,
    FrameBatch,
    Layout,
    Span,
    records_batch,
)
from espforensics.capture.compression import ByteSource
from espforensics.errors import CaptureError
from espforensics.model.records import Frame

# draft-ietf-opsawg-pcap s4: the magic decides the byte order and whether the
# second timestamp field counts microseconds or nanoseconds (values: the
# nanoseconds per unit of that field). The "modified" format of Alexey
# Kuznetzov's Linux patches (Red Hat's libpcap of the FreeS/WAN years, read by
# libpcap and Wireshark) has its own magic and 8 more bytes per record header
# (interface index, protocol, packet type, padding), which are skipped.
_MAGICS: dict[bytes, tuple[str, int, int]] = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000, 16),
    b"\xa1\xb2\xc3\xd4": (">", 1000, 16),
    b"\x4d\x3c\xb2\xa1": ("<", 1, 16),
    b"\xa1\xb2\x3c\x4d": (">", 1, 16),
    b"\x34\xcd\xb2\xa1": ("<", 1000, 24),
    b"\xa1\xb2\xcd\x34": (">", 1000, 24),
}
PCAP_MAGICS = frozenset(_MAGICS)

FILE_HEADER_LEN = 24
MAX_CAPLEN = 256 << 20  # larger than any link's frame; beyond it the header is garbage
BATCH_FRAMES = 4096  # frames of a batch read for the per-frame iteration
BATCH_BYTES = 16 << 20  # a batch ends past this many bytes (8,192 frames of 1,500 bytes fit)

# draft-ietf-opsawg-pcap s4: the LinkType field also carries FCS information
# in its upper bits; like libpcap's LT_LINKTYPE(), keep the lower 26 bits.
_LINKTYPE_MASK = 0x03FFFFFF

_HEADERS = {order: struct.Struct(order + "IHHiIII") for order in "<>"}
_RECORDS = {order: struct.Struct(order + "IIII") for order in "<>"}


def _parse_file_header(source: ByteSource, buf: Buffer) -> tuple[struct.Struct, Layout]:
    """(the record header's first 16 bytes, how records read) from the file header."""
    if len(buf) < FILE_HEADER_LEN:
        raise source.truncated(f"the pcap file header ({len(buf)} of {FILE_HEADER_LEN} bytes)")
    order, scale, header_len = _MAGICS[buf[:4]]
    linktype = _HEADERS[order].unpack_from(buf)[6] & _LINKTYPE_MASK
    return _RECORDS[order], Layout(order, scale, linktype, header_len)


def iter_pcap(source: ByteSource, buf: bytes) -> Generator[Frame, None, None]:
    """Yield every record of the pcap file as a ``Frame``; close the source at the end."""
    for batch in iter_pcap_batches(source, buf, repeat(BATCH_FRAMES)):
        for frame in batch.frames():
            source.frames_read = frame.number
            yield frame
        batch.release()  # each frame was a copy


def iter_pcap_batches(
    source: ByteSource, buf: bytes, sizes: Iterator[int]
) -> Generator[FrameBatch, None, None]:
    """Yield the records of the pcap file as batches, each of at most the next of ``sizes``
    frames (and about BATCH_BYTES); close the source at the end.

    Each record is walked once (its captured length); the batch's header fields are then
    read as columns and its frames' bytes stay where they sit, between the record headers.
    """
    try:
        mapped = source.mapped()  # a plain file: walked where it sits, the batches not copied
        data: Buffer = source.fill(buf, FILE_HEADER_LEN) if mapped is None else mapped
        record, layout = _parse_file_header(source, data)
        caplen_of = struct.Struct(record.format[0] + "8xI").unpack_from
        pending = _Pending(source, layout)
        header_len = layout.header_len
        off = FILE_HEADER_LEN
        base = 0  # file offset of data[0]
        size = next(sizes)
        while True:
            end, first = len(data), off
            offs, off = _walk(data, off, end, size - pending.count, caplen_of, header_len)
            if offs:
                pending.add(data, first, off, offs, base + first)
            if pending.count >= size or pending.nbytes >= BATCH_BYTES:
                yield pending.take()
                size = next(sizes)
                continue
            source.frames_read = pending.walked  # what an error says was read
            try:  # a damaged record or a failed read: the frames before it first
                need = _bytes_needed(source, record, data, off, base, header_len)
                if not isinstance(data, mmap.mmap):
                    base += off
                    data = source.fill(data[off:], need)
                    off = 0
            except CaptureError:
                if pending.count:
                    yield pending.take()
                raise
            if len(data) - off < need:  # the file ends: whole, or inside a record
                if pending.count:
                    yield pending.take()
                if len(data) > off:
                    raise source.truncated(f"frame {source.frames_read + 1}")
                return
    finally:
        source.close()


def known_batches(
    source: ByteSource, caplen: npt.NDArray[np.int64], frames: int
) -> Generator[FrameBatch, None, None] | None:
    """The batches ``iter_pcap_batches`` reads, of at most ``frames`` frames and about
    BATCH_BYTES, from records whose captured lengths ``caplen`` an earlier walk of the
    file found: each batch's record headers are read as columns where the lengths put
    them, with no walk. None when that cannot be: a file that is not mapped (compressed),
    or lengths that do not fill it exactly (a damaged file, which the walk reads up to
    its damage). Closes the source at the end of the iteration."""
    mapped = source.mapped()
    if mapped is None or len(mapped) < FILE_HEADER_LEN or not len(caplen):
        return None
    _, layout = _parse_file_header(source, mapped)
    sizes = layout.header_len + caplen
    if (caplen < 0).any() or (caplen > MAX_CAPLEN).any():
        return None
    if FILE_HEADER_LEN + int(sizes.sum()) != len(mapped):
        return None
    heads = np.zeros(len(caplen), np.int64)
    np.cumsum(sizes[:-1], out=heads[1:])
    return _known(source, mapped, layout, heads + FILE_HEADER_LEN, caplen, frames)


def _known(
    source: ByteSource,
    mapped: mmap.mmap,
    layout: Layout,
    heads: npt.NDArray[np.int64],
    caplen: npt.NDArray[np.int64],
    frames: int,
) -> Generator[FrameBatch, None, None]:
    try:
        n, at = len(heads), 0
        ends = heads + layout.header_len + caplen
        while at < n:
            stop = min(n, at + frames, int(np.searchsorted(ends, heads[at] + BATCH_BYTES)) + 1)
            end = int(ends[stop - 1])
            begin, rel = int(heads[at]), heads[at:stop] - heads[at]
            # where its records sit, so that ``release`` lets their pages go
            span = Span(source.file, begin, end - begin, rel, at + 1, layout)
            if end + PAD <= len(mapped):
                batch = records_batch(mapped, heads[at:stop], at + 1, layout, span)
            else:  # the file's last bytes, with PAD zero bytes after
                joined = mapped[begin:end] + bytes(PAD)
                batch = records_batch(joined, rel, at + 1, layout, span)
            moved = np.flatnonzero(batch.caplen != caplen[at:stop])
            if len(moved):
                k = at + int(moved[0])
                raise CaptureError(
                    source.path,
                    f"changed since it was read: frame {k + 1}'s record says "
                    f"{int(batch.caplen[k - at])} bytes, not {int(caplen[k])}",
                    frames_read=k,
                )
            source.frames_read, source.bytes_read = stop, end
            yield batch
            at = stop
    finally:
        source.close()


def _walk(
    data: Buffer,
    off: int,
    end: int,
    room: int,
    caplen_of: Callable[[Buffer, int], tuple[int]],
    header_len: int,
) -> tuple[list[int], int]:
    """The offsets of up to ``room`` whole records from ``off`` (before ``end``), and the
    offset after them. The hot loop of the reader: one unpack per record."""
    offs: list[int] = []
    append, last = offs.append, end - header_len
    for _ in range(room):
        if off > last:
            break
        caplen = caplen_of(data, off)[0]
        stop = off + header_len + caplen
        if stop > end or caplen > MAX_CAPLEN:
            break
        append(off)
        off = stop
    return offs, off


class _Pending:
    """The records of the batch being gathered: pieces of the reader's buffers."""

    def __init__(self, source: ByteSource, layout: Layout) -> None:
        self._source, self._layout = source, layout
        self._pieces: list[memoryview] = []
        self._offs: list[int] = []  # each record header's offset in the joined pieces
        self._file_at = 0  # the file offset of the first piece (when not compressed)
        self.count = self.nbytes = self._numbered = 0

    @property
    def walked(self) -> int:
        """Frames walked so far, this batch's included."""
        return self._numbered + self.count

    def add(self, buf: Buffer, first: int, stop: int, offs: list[int], file_at: int) -> None:
        """Records at ``offs`` of ``buf``, which fill ``buf[first:stop]`` (at ``file_at``)."""
        if not self._pieces:
            self._file_at = file_at
        shift = self.nbytes - first
        self._offs.extend([o + shift for o in offs])
        self._pieces.append(memoryview(buf)[first:stop])
        self.count += len(offs)
        self.nbytes += stop - first

    def take(self) -> FrameBatch:
        """The batch gathered; the source's ``frames_read`` then counts its frames too."""
        source = self._source
        heads = np.array(self._offs, np.int64)
        first = self._numbered + 1
        span = None
        if source.compression is None:  # the same bytes can be read again where they sit
            span = Span(source.file, self._file_at, self.nbytes, heads, first, self._layout)
        mapped = source.mapped()
        if mapped is not None and self._file_at + self.nbytes + PAD <= len(mapped):
            batch = records_batch(mapped, heads + self._file_at, first, self._layout, span)
        else:  # the reader's buffers, or the file's last bytes, with PAD zero bytes after
            joined = b"".join([*self._pieces, bytes(PAD)])
            batch = records_batch(joined, heads, first, self._layout, span)
        source.bytes_read = max(source.bytes_read, self._file_at + self.nbytes)
        self._numbered += self.count
        source.frames_read = self._numbered
        self._pieces, self._offs = [], []
        self.count = self.nbytes = 0
        return batch


def _bytes_needed(
    source: ByteSource, record: struct.Struct, buf: Buffer, off: int, base: int, header_len: int
) -> int:
    """Bytes the record at ``off`` occupies (its header's if that is incomplete)."""
    if off + header_len > len(buf):
        return header_len
    caplen: int = record.unpack_from(buf, off)[2]
    if caplen > MAX_CAPLEN:
        raise source.damaged(
            f"pcap record header of frame {source.frames_read + 1}",
            base + off,
            f"captured length {caplen} exceeds the 256 MiB limit",
        )
    return header_len + caplen
