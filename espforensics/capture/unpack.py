"""Decompress a compressed capture once, to a temporary file the ``--jobs`` workers read.

In: the ``ByteSource`` of a compressed capture and the first bytes already
taken from it. Out: ``decompress_once`` returns an ``Unpacked``: a ``ByteSource``
reading the decompressed copy (mapped, its batches handed out in spans like
a plain file's: ``ByteSource.file`` is the copy, ``path`` the original
file, which every error names) and the copy's path, which its owner
(``Capture.close``) removes. Returns None, the copy removed, when the
stream cannot be decompressed (damaged, truncated) or the copy cannot be
written (ENOSPC, a read-only TMPDIR): the caller then reads the original as
a stream, so its outputs and its error are those of one process. A Ctrl-C
while it decompresses removes the copy too.

The copy goes where ``tempfile`` puts it: TMPDIR, else /tmp. It never
takes the last tenth of that file system (``RESERVE``): a capture of tens
of gigabytes would otherwise fill it (a tmpfs /tmp is half the memory) and
fail every other program writing there; it is given up then, as for
ENOSPC. Only a SIGKILL leaves it behind (``espforensics-*.pcap`` or
``.pcapng`` there).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Final

from espforensics.capture.compression import CHUNK_SIZE, ByteSource
from espforensics.errors import CaptureError

Told = Callable[[int], None]  # the compressed bytes decompressed so far
RESERVE: Final = 0.1  # of the copy's file system, left free: the copy is given up first


@dataclass(frozen=True, slots=True)
class Unpacked:
    """A compressed capture's decompressed copy, and the source that reads it."""

    source: ByteSource  # path: the original file; file: the copy
    head: bytes  # its first bytes, as open_capture took them
    copy: str  # the temporary file, removed by its owner


def decompress_once(
    source: ByteSource, head: bytes, suffix: str, told: Told | None = None
) -> Unpacked | None:
    """Decompress the rest of ``source`` after ``head`` to a temporary file (named
    ``espforensics-*{suffix}``); close ``source``. None when that fails (nothing left).
    ``told``: called after each chunk with the compressed bytes taken so far (progress:
    a capture of tens of gigabytes takes minutes)."""
    copy: str | None = None
    try:
        fd, copy = tempfile.mkstemp(prefix="espforensics-", suffix=suffix)
        with open(fd, "wb") as out:
            chunk = head  # what open_capture read already: up to a chunk
            while chunk:
                _check_room(out, len(chunk))
                out.write(chunk)
                if told is not None:
                    told(source.file_position)
                chunk = source.read(CHUNK_SIZE)
        raw = open(copy, "rb")  # noqa: SIM115 -- owned and closed by the ByteSource
        unpacked = ByteSource(source.path, raw, None, file=copy)
        try:
            taken = Unpacked(unpacked, unpacked.fill(b"", len(head)), copy)
        except CaptureError:
            unpacked.close()
            raise
        copy = None  # kept: its owner removes it
        return taken
    except (CaptureError, OSError):  # a damaged stream, no room: read it as a stream
        return None
    finally:
        source.close()
        remove(copy)  # a failure, or a Ctrl-C while decompressing


def _check_room(out: BinaryIO, more: int) -> None:
    """Raise ENOSPC before ``more`` bytes would leave less than ``RESERVE`` of the copy's
    file system free."""
    fs = os.fstatvfs(out.fileno())
    if (fs.f_bavail * fs.f_frsize - more) < RESERVE * fs.f_blocks * fs.f_frsize:
        raise OSError(errno.ENOSPC, "the copy would leave under a tenth of its file system")


def remove(copy: str | None) -> None:
    """Remove the decompressed copy, if any (safe to call twice)."""
    if copy is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(copy)
