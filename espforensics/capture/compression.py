"""Open a capture file and hand out its (decompressed) bytes in large chunks.

In: a path. Out: a ``ByteSource`` whose ``read``/``fill`` return the bytes of
the capture after undoing gzip, bzip2, xz or zstd compression, which is
recognized by the first bytes of the file, never by its name. The source also
carries the progress counters (``bytes_read``, ``frames_read``) that the record
walkers advance, so every error can say how far the read got.

Raises ``CaptureError`` (cannot open, not a regular file, empty file, read
failure, damaged compressed stream) and ``CaptureTruncated`` (compressed stream cut short).
Every foreign exception of the decompressors is wrapped here.

This is the only module that imports ``zstandard`` (house style rule 6). Its
``stream_reader`` returns end-of-file silently when the input stops inside a
frame, which would hide a truncated capture, so zstd is read frame by frame
with ``decompressobj`` and an unfinished frame at end of input is an error.
"""

from __future__ import annotations

import io
import mmap
import os
import zlib
from typing import TYPE_CHECKING, BinaryIO, Protocol, cast

if TYPE_CHECKING:  # each decompressor is imported when a capture needs it: not at start-up
    import zstandard

from espforensics.capture.regular import check_regular, kind_of
from espforensics.errors import CaptureError, CaptureTruncated

CHUNK_SIZE = 1 << 20  # bytes asked of the stream per read: few calls, bounded memory

# zstd input is fed in small pieces so that one call cannot expand without
# bound: a zstd block of 128 KiB can be encoded in 4 bytes (RFC 8878 s3.1.1.2).
_ZSTD_FEED = 1 << 13

# Magic numbers: RFC 1952 s2.3.1 (gzip), the bzip2 "BZh" stream header, the
# xz file format s2.1.1.1, RFC 8878 s3.1.1 (zstd frame magic 0xFD2FB528, LE).
_MAGICS: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)


def _decompression_errors() -> tuple[type[Exception], ...]:
    """What the decompressors raise on bad or short input. gzip raises
    BadGzipFile (an OSError) or zlib.error; bz2 raises OSError; all three
    raise EOFError when the stream ends before its end marker."""
    import lzma  # noqa: PLC0415  # a compressed capture's: imported when one is read

    import zstandard  # noqa: PLC0415

    return (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError)


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...

    def close(self) -> None: ...


def sniff_compression(head: bytes) -> str | None:
    """Name the compression whose magic starts ``head``, or None."""
    for magic, name in _MAGICS:
        if head.startswith(magic):
            return name
    return None


class _ZstdReader:
    """Concatenated zstd frames as a byte stream; EOFError if a frame is cut."""

    __slots__ = ("_dctx", "_frame", "_out", "_pending", "_pos", "_raw")

    def __init__(self, raw: _Readable) -> None:
        import zstandard  # noqa: PLC0415  # a zstd capture's: imported when one is read

        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._frame: zstandard.ZstdDecompressionObj | None = None
        self._pending = b""  # compressed bytes not yet fed
        self._out = b""  # decompressed bytes not yet returned
        self._pos = 0

    def read(self, size: int, /) -> bytes:
        while self._pos >= len(self._out):
            if not self._feed():
                return b""
        chunk = self._out[self._pos : self._pos + size]
        self._pos += len(chunk)
        return chunk

    def _feed(self) -> bool:
        """Decompress one piece of input; False at a clean end of input."""
        if not self._pending:
            self._pending = self._raw.read(CHUNK_SIZE)
            if not self._pending:
                if self._frame is not None:
                    raise EOFError("input ends inside a zstd frame")
                return False
        if self._frame is None:
            self._frame = self._dctx.decompressobj()
        piece = self._pending[:_ZSTD_FEED]
        self._pending = self._pending[_ZSTD_FEED:]
        self._out = self._frame.decompress(piece)
        self._pos = 0
        if self._frame.eof:  # RFC 8878 s3.1: frames follow one another
            self._pending = self._frame.unused_data + self._pending
            self._frame = None
        return True

    def close(self) -> None:
        self._raw.close()


def _decompressor(raw: BinaryIO, kind: str) -> _Readable:
    """The stream of ``kind``; its module imported now (an uncompressed capture needs none)."""
    if kind == "gzip":
        import gzip  # noqa: PLC0415

        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "bzip2":
        import bz2  # noqa: PLC0415

        return bz2.BZ2File(raw, "rb")
    if kind == "xz":
        import lzma  # noqa: PLC0415

        return lzma.LZMAFile(raw, "rb")
    return _ZstdReader(raw)


class ByteSource:
    """The decompressed bytes of one capture file, with progress counters.

    ``frames_read`` is advanced by the record walkers (it is what an error
    reports as "read N complete frames"); ``bytes_read`` counts the
    uncompressed bytes taken from the stream, a chunk at a time.
    """

    __slots__ = (
        "_errors",
        "_mapped",
        "_raw",
        "_stream",
        "_unmappable",
        "bytes_read",
        "compression",
        "file",
        "frames_read",
        "path",
    )

    def __init__(
        self, path: str, raw: BinaryIO, compression: str | None, file: str | None = None
    ) -> None:
        self.path = path  # what errors name
        self.file = path if file is None else file  # the file read (capture/unpack.py)
        self.compression = compression
        self.bytes_read = 0
        self.frames_read = 0
        self._raw = raw
        self._stream: _Readable = raw if compression is None else _decompressor(raw, compression)
        self._errors = (OSError,) if compression is None else _decompression_errors()
        self._mapped: mmap.mmap | None = None
        self._unmappable = False

    def read(self, size: int = CHUNK_SIZE) -> bytes:
        """Up to ``size`` bytes (fewer is not the end); b"" at the end."""
        try:
            chunk = self._stream.read(size)
        except self._errors as exc:
            raise self._read_error(exc) from exc
        self.bytes_read += len(chunk)
        return chunk

    def fill(self, tail: bytes, need: int) -> bytes:
        """``tail`` extended by reads until it holds ``need`` bytes or the input ends."""
        parts = [tail]
        have = len(tail)
        while have < need:
            chunk = self.read(max(CHUNK_SIZE, need - have))
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        return tail if len(parts) == 1 else b"".join(parts)

    def truncated(self, where: str) -> CaptureTruncated:
        """The error for a capture that ends inside ``where``."""
        n = self.frames_read
        return CaptureTruncated(
            self.path, f"capture ends inside {where}: read {n} complete frames", frames_read=n
        )

    def damaged(self, what: str, offset: int, why: str) -> CaptureError:
        """The error for a structure that cannot be right; ``offset`` is uncompressed."""
        n = self.frames_read
        return CaptureError(
            self.path,
            f"damaged {what} at byte offset {offset}: {why}; read {n} complete frames",
            frames_read=n,
        )

    def _read_error(self, exc: Exception) -> CaptureError:
        n = self.frames_read
        detail = " ".join(str(exc).split()) or type(exc).__name__
        if self.compression is None:
            message = f"read failed: {detail}; read {n} complete frames"
            return CaptureError(self.path, message, frames_read=n)
        message = (
            f"compressed stream ({self.compression}) is damaged or truncated ({detail}): "
            f"read {n} complete frames"
        )
        if isinstance(exc, EOFError):
            return CaptureTruncated(self.path, message, frames_read=n)
        return CaptureError(self.path, message, frames_read=n)

    @property
    def file_position(self) -> int:
        """How far into the file (its compressed bytes, if compressed) the reads have got."""
        return self._raw.tell()

    def mapped(self) -> mmap.mmap | None:
        """The whole file mapped read-only, when it is not compressed (else None)."""
        if self.compression is not None or self._unmappable:
            return None
        if self._mapped is None:
            try:
                self._mapped = mmap.mmap(self._raw.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # a file that cannot be mapped is read as a stream
                self._unmappable = True
        return self._mapped

    def close(self) -> None:
        """Close the decompressor and the file; safe to call twice."""
        try:
            self._stream.close()
        finally:
            self._raw.close()
            # The mapping is not closed: batches read ahead still view it. It is unmapped
            # when the last of them is gone.
            self._mapped = None


def _open_regular(path: str) -> io.BufferedReader:
    """``path`` opened for reading, if it is a regular file (capture/regular.py says why).

    Opened with ``O_NONBLOCK`` (no effect on a regular file) so that a path
    swapped for a FIFO after the check cannot block; its descriptor is
    checked again with ``fstat`` before anything is read.
    """
    check_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise CaptureError(path, f"cannot open: {exc.strerror or exc}") from exc
    kind = kind_of(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise CaptureError(path, f"not a regular file: {kind}")
    os.set_blocking(fd, True)
    return open(fd, "rb")  # owned and closed by the ByteSource


def open_source(path: str) -> ByteSource:
    """Open ``path`` (a regular file only) and sniff its compression from its first bytes."""
    raw = _open_regular(path)
    try:
        head = raw.peek(6)[:6]
    except OSError as exc:
        raw.close()
        raise CaptureError(path, f"cannot read: {exc.strerror or exc}") from exc
    if not head:
        raw.close()
        raise CaptureError(path, "empty file, not a capture")
    return ByteSource(path, raw, sniff_compression(head))


def open_zstd_writer(path: str) -> BinaryIO:
    """A zstd-compressing file (with content checksums) that closes ``path`` on close."""
    import zstandard  # noqa: PLC0415  # a zstd output's: imported when one is written

    raw = open(path, "wb")  # noqa: SIM115 -- closed by the stream writer (closefd)
    compressor = zstandard.ZstdCompressor(write_checksum=True)
    return cast(BinaryIO, compressor.stream_writer(raw, closefd=True))
