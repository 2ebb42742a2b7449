"""Progress on a terminal's stderr: the analyze bar and the batch bar (rich, imported only then).

In: the capture's size, then the frames read and each phase (analysis/progress.py's
``Meter``); for a batch, each capture done. Out: a transient rich bar.
Raises nothing. Off a terminal cli/__init__.py uses analysis/progress.py's ``LineMeter``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from time import monotonic
from typing import TYPE_CHECKING

from espforensics.analysis.progress import DONE, READING, rate

if TYPE_CHECKING:  # the batch modules are imported by the batch command only
    from espforensics.batch.run import BatchProgress
    from espforensics.batch.task import CaptureResult


class _BarMeter:
    """A bar on a terminal's stderr: the phase, the capture read, frames and frames/s, and
    where the capture's size is known the share read and the time left, as the lines off a
    terminal give them ("48% of the capture")."""

    def __init__(self, size: int | None) -> None:
        from rich.progress import (  # noqa: PLC0415 (only for terminals)
            BarColumn,
            ProgressColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bar  # noqa: PLC0415

        columns = ("{task.description}", "{task.fields[frames]} frames, {task.fields[rate]}")
        known: tuple[ProgressColumn, ...] = ()
        if size:  # a stream of unknown length has no share and no time left
            known = (TaskProgressColumn(), TimeRemainingColumn())
        self._bar = Bar(
            TextColumn(columns[0]),
            BarColumn(),
            *known,
            TextColumn(columns[1]),
            TimeElapsedColumn(),
            transient=True,
        )
        self._size, self._start = size, monotonic()
        self._task = self._bar.add_task(READING, total=size, frames="0", rate="")
        self._bar.start()

    def reading(self, frames: int, bytes_read: int) -> None:
        self._bar.update(
            self._task,
            completed=min(bytes_read, self._size or bytes_read),
            frames=f"{frames:,}",
            rate=rate(frames, monotonic() - self._start),
        )

    def phase(self, name: str) -> None:
        if name == READING:  # after the decompression: the frames/s count from here
            self._start = monotonic()
        self._bar.update(self._task, description=name)
        if name == DONE:
            self.stop()

    def stop(self) -> None:
        self._bar.stop()


def _batch_progress(quiet: bool) -> tuple[BatchProgress | None, Callable[[], None]]:
    """A bar over captures (with the frames done so far) on a terminal's stderr."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import Progress as Bar  # noqa: PLC0415 (only for terminals)

    bar = Bar(transient=True)
    task = bar.add_task("captures", total=None)
    frames = [0]
    bar.start()

    def update(result: CaptureResult, done: int, total: int) -> None:
        frames[0] += result.frames
        bar.update(
            task, completed=done, total=total, description=f"captures ({frames[0]:,} frames)"
        )

    return update, bar.stop
