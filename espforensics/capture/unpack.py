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

The copy goes where ``tempfile`` puts it: TMPDIR, else /tmp. Only a
SIGKILL leaves it behind (``espforensics-*.pcap`` or ``.pcapng`` there).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass

from espforensics.capture.compression import CHUNK_SIZE, ByteSource
from espforensics.errors import CaptureError


@dataclass(frozen=True, slots=True)
class Unpacked:
    """A compressed capture's decompressed copy, and the source that reads it."""

    source: ByteSource  # path: the original file; file: the copy
    head: bytes  # its first bytes, as open_capture took them
    copy: str  # the temporary file, removed by its owner


def decompress_once(source: ByteSource, head: bytes, suffix: str) -> Unpacked | None:
    """Decompress the rest of ``source`` after ``head`` to a temporary file (named
    ``espforensics-*{suffix}``); close ``source``. None when that fails (nothing left)."""
    copy: str | None = None
    try:
        fd, copy = tempfile.mkstemp(prefix="espforensics-", suffix=suffix)
        with open(fd, "wb") as out:
            out.write(head)
            while chunk := source.read(CHUNK_SIZE):
                out.write(chunk)
        raw = open(copy, "rb")  # noqa: SIM115 -- owned and closed by the ByteSource
        unpacked = ByteSource(source.path, raw, None, file=copy)
        try:
            taken = Unpacked(unpacked, unpacked.fill(b"", len(head)), copy)
        except CaptureError:
            unpacked.close()
            raise
        copy = None  # kept: its owner removes it
        return taken
    except (CaptureError, OSError):  # a damaged stream, no space left: read it as a stream
        return None
    finally:
        source.close()
        remove(copy)  # a failure, or a Ctrl-C while decompressing


def remove(copy: str | None) -> None:
    """Remove the decompressed copy, if any (safe to call twice)."""
    if copy is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(copy)
