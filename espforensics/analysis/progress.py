"""Progress of one analysis: frames read, frames/s and the phase it is in.

In: calls from ``analyze_to_dir`` (analysis/__init__.py): ``reading(frames,
bytes_read)`` about every 4,096 frames (once a batch, for larger batches),
and ``phase(name)`` when the reading ends and each output stage starts
(writing tables, plots and reports after the last frame of a large capture
takes seconds, which should not pass without a word). Out: whatever the
``Meter`` does; ``LineMeter`` writes one line at most every ``every``
seconds of its clock, for logs that keep stderr (CI). The clock is
injected, so tests need no timing. Raises nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

UNPACKING = "decompressing for the workers"  # --jobs: a compressed capture's copy, first
READING = "reading"
TABLES = "writing tables"
COPIES = "writing the capture copies"
PLOTS = "drawing plots"
REPORTS = "writing reports"
DONE = "done"


class Meter(Protocol):
    """What ``analyze_to_dir`` tells about its progress."""

    def reading(self, frames: int, bytes_read: int) -> None: ...

    def phase(self, name: str) -> None: ...


def rate(frames: int, seconds: float) -> str:
    """Frames per second, as ``48,780 frames/s`` (``-`` before any time has passed)."""
    return f"{frames / seconds:,.0f} frames/s" if seconds > 0 else "- frames/s"


class LineMeter:
    """One progress line at most every ``every`` s, e.g.
    ``espforensics: reading: 1,228,800 frames, 48,780 frames/s, 61% of the capture``.

    A line is written when a call comes ``every`` s or more after the last
    line (or the start): a short run writes none, a long one one per period
    in each phase that lasts, and ``done`` ends it with the totals.
    """

    def __init__(
        self,
        write: Callable[[str], None],
        clock: Callable[[], float],
        size: int | None = None,
        every: float = 10.0,
    ) -> None:
        self._write, self._clock, self._size, self._every = write, clock, size, every
        self._start = self._last = self._since = clock()  # _since: the reading's start
        self._frames = self._bytes = 0
        self._phase = READING
        self._read_for = 0.0  # seconds the reading took, once it ended

    def reading(self, frames: int, bytes_read: int) -> None:
        self._frames, self._bytes = frames, bytes_read
        self._maybe()

    def phase(self, name: str) -> None:
        if self._phase == READING:
            self._read_for = self._clock() - self._since
        self._phase = name
        if name == READING:  # after the decompression: the frames/s and bytes count anew
            self._since, self._bytes = self._clock(), 0
            return
        if name == DONE:
            if self._last != self._start:  # a line was written: end with the totals
                self._write(self._line(self._clock()))
            return
        self._maybe()

    def _maybe(self) -> None:
        now = self._clock()
        if now - self._last >= self._every:
            self._last = now
            self._write(self._line(now))

    def _line(self, now: float) -> str:
        if self._phase == UNPACKING:  # the bytes: the compressed file's taken so far
            share = f": {100 * self._bytes // self._size}% of the capture" if self._size else ""
            return f"espforensics: {UNPACKING}{share}"
        if self._phase == READING:
            share = f", {100 * self._bytes // self._size}% of the capture" if self._size else ""
            speed = rate(self._frames, now - self._since)
            return f"espforensics: {READING}: {self._frames:,} frames, {speed}{share}"
        speed = rate(self._frames, self._read_for)
        took = f"{now - self._start:.0f} s"
        return f"espforensics: {self._phase}: {self._frames:,} frames read ({speed}), {took}"
