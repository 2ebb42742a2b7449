"""A binary stream written on a thread of its own, beside the code that fills it.

In: an open binary file. Out: ``Aside``, a stream whose ``write`` hands the
bytes to a thread that writes them to the file, in order. The file's write
calls (the kernel copying each piece into the page cache) run without the
GIL, so they overlap the caller building its next piece. Used where
several copies of a capture are written in one pass (rewrite/__init__.py's
``_one_pass``): there the writes were the largest single cost on the
analyzing thread, and the copies take less time for the same CPU; a copy
written alone did not gain, for more system time (docs/performance.md,
"The copies' writes on a thread of their own").
Writes smaller than ``GATHER`` bytes are gathered into one piece first; at
most ``DEPTH`` pieces wait, so memory stays bounded whatever the file's
speed.

Errors: the file's first error (an ``OSError``: a full disk, a quota) is
raised by the next ``write`` or by ``close``, as the file's own call would
have raised it, only later; nothing is written after it. ``close`` writes
every piece handed over before it, waits for the thread and raises that
error; it leaves the file open (its owner closes it).
"""

from __future__ import annotations

import queue
import threading

from espforensics.capture.writer import Bytes, Writable

Piece = bytes | bytearray

GATHER = 1 << 20
DEPTH = 2


class Aside:
    """``out`` written on a thread of its own; ``close`` before closing ``out``."""

    def __init__(self, out: Writable) -> None:
        self._out = out
        self._small = bytearray()
        self._pieces: queue.Queue[Piece | None] = queue.Queue(DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="aside", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        """The thread: write each piece until ``None``; after an error, take and drop them
        (the caller never waits on a full queue)."""
        while (piece := self._pieces.get()) is not None:
            if self._error is None:
                try:
                    self._out.write(piece)
                except BaseException as exc:  # raised on the caller's thread
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _hand_small(self) -> None:
        if self._small:
            self._pieces.put(self._small)
            self._small = bytearray()

    def write(self, data: Bytes, /) -> int:
        """Hand ``data`` to the thread (a copy of it if it is not ``bytes``: the caller may
        change it or let its memory go); the number of bytes taken."""
        self._raise()
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        if size < GATHER:
            self._small += data
            if len(self._small) >= GATHER:
                self._hand_small()
        else:
            self._hand_small()
            self._pieces.put(data if isinstance(data, bytes) else bytes(data))
        return size

    def close(self) -> None:
        """Write what is left, wait for the thread; raise the file's first error."""
        if self._thread.is_alive():
            self._hand_small()
            self._pieces.put(None)
            self._thread.join()
        self._raise()
