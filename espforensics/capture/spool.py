"""A capture read from standard input (``-``), copied once to a temporary file.

In: a binary stream (the process's standard input). Out: ``Spooled``, a
context manager whose ``path`` is a regular file holding the stream's bytes
as they came (compressed or not: the reader recognizes them by content), and
which is removed on leaving the block, however it is left. Raises
``CaptureError`` naming ``-`` when the stream cannot be read or the copy
cannot be written (no space left).

Why a copy rather than reading the pipe as it comes: every later stage takes a
regular file (the reader maps it, ``--jobs`` workers read their batches from
it, ``--annotate`` and ``--decrypted`` read it a second time, the summary
records its SHA-256), so a pipe gives the same results as the file it carries.
The copy lives in ``TMPDIR`` (else ``/tmp``) and costs the capture's size there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from types import TracebackType
from typing import BinaryIO

from espforensics.errors import CaptureError

STDIN = "-"  # the name a user gives for standard input, as tcpdump -r - and tshark -r -
_CHUNK = 1 << 20


class Spooled:
    """Standard input copied to a temporary file, removed on ``close``."""

    __slots__ = ("path",)

    def __init__(self, stream: BinaryIO) -> None:
        fd, self.path = tempfile.mkstemp(prefix="espforensics-stdin-", suffix=".capture")
        try:
            with os.fdopen(fd, "wb") as copy:
                shutil.copyfileobj(stream, copy, _CHUNK)
        except OSError as exc:
            self.close()
            raise CaptureError(STDIN, f"cannot copy standard input: {exc.strerror}") from exc
        except BaseException:  # a Ctrl-C while the pipe is read: no copy is left behind
            self.close()
            raise

    def close(self) -> None:
        """Remove the copy; safe to call twice."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __enter__(self) -> Spooled:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
