"""Read pcap and pcapng captures, plain or compressed, as a stream of frames.

In: a path. Out: ``open_capture(path)`` returns a ``Capture``, a context
manager whose iteration streams ``Frame`` (and, from pcapng, ``DecryptionSecrets``)
in file order while memory stays flat; ``Capture.batches`` streams the
records as ``FrameBatch`` (columns, no ``Frame`` per record). The writers used by tests and by the
fixture builder are re-exported: ``write_pcap``, ``write_pcapng``,
``open_compressed_writer``.

Raises ``CaptureError`` from ``open_capture`` (cannot open, empty file, not a
pcap or pcapng file, damaged compressed stream) and, from inside iteration
after the frames before the fault were yielded, ``CaptureTruncated`` or
``CaptureError`` carrying ``frames_read``. See docs/capture-formats.md.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from types import TracebackType

import numpy as np
import numpy.typing as npt

from espforensics.capture.batch import FrameBatch
from espforensics.capture.compression import ByteSource, open_source
from espforensics.capture.pcap import PCAP_MAGICS, iter_pcap, iter_pcap_batches, known_batches
from espforensics.capture.pcapng import PCAPNG_MAGIC, iter_pcapng, iter_pcapng_batches
from espforensics.capture.unpack import Told, Unpacked, decompress_once, remove
from espforensics.capture.writer import open_compressed_writer, write_pcap, write_pcapng
from espforensics.errors import CaptureError
from espforensics.model.records import DecryptionSecrets, Frame

__all__ = [
    "Capture",
    "open_capture",
    "open_compressed_writer",
    "write_pcap",
    "write_pcapng",
]


class Capture:
    """An open capture file; iterate it once to stream its records.

    ``frames_read`` counts the packet records yielded so far and
    ``bytes_read`` the uncompressed bytes taken from the file (a chunk at a
    time), for progress reports. The file is closed when iteration ends,
    when ``close()`` is called, or on leaving a ``with`` block.
    """

    __slots__ = (
        "_closed",
        "_compression",
        "_copy",
        "_head",
        "_items",
        "_source",
        "format",
        "path",
    )

    def __init__(
        self, path: str, source: ByteSource, head: bytes, fmt: str, unpacked: Unpacked | None = None
    ) -> None:
        """``unpacked``: the compressed file's decompressed copy, read in ``source``'s place."""
        self.path = path
        self.format = fmt
        self._compression = source.compression
        self._copy: str | None = None
        if unpacked is not None:
            source, head, self._copy = unpacked.source, unpacked.head, unpacked.copy
        self._source = source
        self._head = head
        self._items: Generator[Frame | FrameBatch | DecryptionSecrets, None, None] | None = None
        self._closed = False

    @property
    def compression(self) -> str | None:
        """The compression found from the file's content: gzip, bzip2, xz, zstd or None."""
        return self._compression

    @property
    def unpacked(self) -> str | None:
        """The decompressed copy read in place of the compressed file, if any."""
        return self._copy

    @property
    def frames_read(self) -> int:
        """Packet records yielded so far."""
        return self._source.frames_read

    @property
    def bytes_read(self) -> int:
        """Uncompressed bytes taken from the file so far, a chunk at a time."""
        return self._source.bytes_read

    def __iter__(self) -> Iterator[Frame | DecryptionSecrets]:
        if self._items is not None or self._closed:
            raise CaptureError(self.path, "capture already read or closed; open it again")
        walk = iter_pcap if self.format == "pcap" else iter_pcapng
        items = walk(self._source, self._head)
        self._items, self._head = items, b""
        return items

    def batches(self, sizes: Iterator[int]) -> Iterator[Frame | FrameBatch | DecryptionSecrets]:
        """Iterate once as batches, each of at most the next of ``sizes`` frames; a pcapng
        file's ``DecryptionSecrets`` between them (each ends a batch), and as ``Frame`` the
        frames of a batch with a timestamp out of int64's range."""
        if self._items is not None or self._closed:
            raise CaptureError(self.path, "capture already read or closed; open it again")
        walk = iter_pcap_batches if self.format == "pcap" else iter_pcapng_batches
        self._items = walk(self._source, self._head, sizes)
        self._head = b""
        return self._items

    def known_batches(
        self, caplen: npt.NDArray[np.int64], frames: int
    ) -> Iterator[Frame | FrameBatch | DecryptionSecrets] | None:
        """``batches`` of at most ``frames`` frames, read without walking the records when
        their captured lengths ``caplen`` are known (capture/pcap.py ``known_batches``: a
        plain pcap file they fill exactly); else None, and the capture is not read yet."""
        if self._items is not None or self._closed:
            raise CaptureError(self.path, "capture already read or closed; open it again")
        if self.format != "pcap":
            return None
        items = known_batches(self._source, caplen, frames)
        if items is not None:
            self._items, self._head = items, b""
        return items

    def close(self) -> None:
        """Stop the iteration, if any, and close the file; safe to call twice."""
        self._closed = True
        try:
            if self._items is not None:
                self._items.close()
            self._source.close()
        finally:
            remove(self._copy)  # its pages stay readable while batches still view them

    def __enter__(self) -> Capture:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Capture {self.path!r} {self.format} compression={self.compression}>"


def _format_of(source: ByteSource, head: bytes) -> str:
    """'pcap' or 'pcapng' from the first four (decompressed) bytes."""
    magic = head[:4]
    if magic in PCAP_MAGICS:
        return "pcap"
    if magic == PCAPNG_MAGIC:
        return "pcapng"
    if not head:  # only a compressed file gets here empty; open_source caught the rest
        message = f"empty file, not a capture (the {source.compression} stream holds no data)"
        raise CaptureError(source.path, message)
    after = f" after {source.compression} decompression" if source.compression else ""
    message = f"not a pcap or pcapng file (first bytes 0x{magic.hex()}{after})"
    raise CaptureError(source.path, message)


def open_capture(
    path: str | os.PathLike[str], unpack_once: bool = False, told: Told | None = None
) -> Capture:
    """Open a capture, undo its compression and recognize its format.

    ``unpack_once``: a compressed capture is first decompressed to a temporary file, which
    is then read mapped, its batches carrying spans (for ``--jobs`` workers); if that
    fails it is read as a stream, as without (capture/unpack.py); ``told`` hears how far
    into the compressed file that decompression has got, after each chunk.
    """
    name = os.fspath(path)
    source = open_source(name)
    try:
        head = source.fill(b"", 4)
        fmt = _format_of(source, head)
    except CaptureError:
        source.close()
        raise
    if unpack_once and source.compression is not None:
        unpacked = decompress_once(source, head, "." + fmt, told)  # closes the stream
        if unpacked is None:
            return open_capture(name)  # the stream again: its error, if any, is its own
        try:
            return Capture(name, source, head, fmt, unpacked)
        except BaseException:  # a Ctrl-C before the Capture owns the copy
            unpacked.source.close()
            remove(unpacked.copy)
            raise
    return Capture(name, source, head, fmt)
