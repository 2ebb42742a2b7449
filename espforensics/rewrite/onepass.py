"""One pass over the capture and its packets.parquet, for one copy or several.

In: the capture, its packets.parquet and the copies to write (``BatchCopy``:
rewrite/bulk.py's ``DecryptedCopy``, rewrite/annotate.py's ``AnnotatedCopy``),
each with the columns it reads and its own stream. Out: every copy written
a batch at a time: the capture read once (``Capture.known_batches`` where
packets.parquet's captured lengths allow, else ``Capture.batches``), the
table's rows once (the union of the copies' columns; each copy sees its
own only, so that its records are those it reads alone), each batch handed
to every copy in turn. ``copy_batches`` returns what each copy ended with:
None, or the exception that stopped it.

The copies are given in the order they would be written one after another
(rewrite/__init__.py's ``WRITERS``): a copy that raises is stopped there,
and so is every copy after it (one after another, they would not have been
written), which ends with the same exception; the copies before it go on
to the end. An error of the capture (a damaged record, a file changed since
the analysis) or of the table against it (a frame number that is not the
capture's: a bug) ends every copy still going, as each would have met it.
A copy that ends with an exception is not closed, as when it raises alone.
Raises nothing of its own: only what is not an ``Exception`` (Ctrl-C).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from espforensics.capture import open_capture
from espforensics.capture.batch import FrameBatch
from espforensics.capture.writer import Data
from espforensics.model.arrays import I64
from espforensics.model.records import DecryptionSecrets, Frame, PacketRecord
from espforensics.rewrite.rows import PacketRows, RowSlice, same_frame, table_caplens

Outcome = Exception | None


class BatchCopy(Protocol):
    """A copy written a batch at a time, to its own stream."""

    @property
    def columns(self) -> tuple[str, ...]:
        """The packets.parquet columns it reads."""
        ...

    @property
    def frames(self) -> int:
        """The frames written so far."""
        ...

    def secrets(self, item: DecryptionSecrets) -> None:
        """A Decryption Secrets Block met between batches (pcapng)."""

    def frame(self, frame: Frame, rec: PacketRecord) -> None:
        """One frame and its row (a frame out of a batch, or the end of a damaged capture)."""

    def run(self, batch: FrameBatch, rows: RowSlice, views: Sequence[Data]) -> None:
        """A batch of frames and their rows, the same frames; ``views``: each frame's bytes
        (``FrameBatch.views``, made once for every copy: not to be changed)."""

    def close(self) -> None:
        """Every frame is written: end the file."""


class _Going:
    """The copies still going: the first ``count`` of them, in order."""

    def __init__(self, copies: Sequence[BatchCopy]) -> None:
        self.copies = list(copies)
        self.count = len(copies)
        self.ended: list[Outcome] = [None] * len(copies)

    def __iter__(self) -> Iterator[tuple[int, BatchCopy]]:
        """Each copy still going, with its index (``count`` read again after each)."""
        k = 0
        while k < self.count:
            yield k, self.copies[k]
            k += 1

    @contextlib.contextmanager
    def kept(self, k: int) -> Iterator[None]:
        """Copy ``k`` raising in the block ends there, and the copies after it with it."""
        try:
            yield
        except Exception as exc:  # kept, raised by the caller in the copies' order
            self.stop(k, exc)

    def stop(self, first: int, exc: Exception) -> None:
        """Copies ``first`` on end with ``exc``."""
        for k in range(first, self.count):
            self.ended[k] = exc
        self.count = min(self.count, first)


def _same_frames(rows: RowSlice, number: I64) -> None:
    """The table and the capture are one analysis's: a bug if a row is not its frame's."""
    found = rows.ints("frame", -1)
    if not (found == number).all():
        bad = int(np.flatnonzero(found != number)[0])
        same_frame(int(found[bad]), int(number[bad]))


def copy_batches(
    capture: Path, parquet: Path, copies: Sequence[BatchCopy], batch: int
) -> list[Outcome]:
    """Write ``copies`` in one pass, in batches of ``batch`` frames; how each ended."""
    going = _Going(copies)
    union = list(dict.fromkeys(c for copy in copies for c in copy.columns))
    others = [[c for c in union if c not in copy.columns] for copy in copies]
    rows = PacketRows(parquet, union)

    def own(k: int, mine: RowSlice) -> RowSlice:
        return mine.without(others[k])

    try:
        with open_capture(capture) as cap:
            known = cap.known_batches(table_caplens(parquet), batch)
            for item in known or cap.batches(iter(lambda: batch, 0)):
                if isinstance(item, DecryptionSecrets):
                    for k, copy in going:
                        with going.kept(k):
                            copy.secrets(item)
                    continue
                size = 1 if isinstance(item, Frame) else len(item)
                mine = rows.take(size)
                if isinstance(item, Frame):  # a timestamp out of a batch's range
                    if not len(mine):
                        break
                    _same_frames(mine, np.array([item.number]))
                    for k, copy in going:
                        with going.kept(k):
                            copy.frame(item, own(k, mine).records([0])[0])
                    continue
                if len(mine) < size:  # the analysis stopped inside this batch (damaged)
                    _stop_inside(item, mine, going, own)
                    break
                _same_frames(mine, item.number)
                views = item.views()
                for k, copy in going:
                    with going.kept(k):
                        copy.run(item, own(k, mine), views)
                item.release()
                if not going.count:
                    break
    except Exception as exc:  # every copy still going meets it
        going.stop(0, exc)
    for k, copy in going:
        with going.kept(k):
            copy.close()
    return going.ended


def copy_alone(capture: Path, parquet: Path, copy: BatchCopy, batch: int) -> int:
    """``copy_batches`` of one copy: the frames it wrote; raises what stopped it."""
    ended = copy_batches(capture, parquet, [copy], batch)[0]
    if ended is not None:
        raise ended
    return copy.frames


def _stop_inside(
    batch: FrameBatch,
    mine: RowSlice,
    going: _Going,
    own: Callable[[int, RowSlice], RowSlice],
) -> None:
    """The batch's first ``len(mine)`` frames, a frame at a time, each checked first."""
    records = [own(k, mine).records(range(len(mine))) for k in range(going.count)]
    for i in range(len(mine)):
        _same_frames(mine.slice(i, 1), batch.number[i : i + 1])
        frame = batch.frame(i)
        for k, copy in going:
            with going.kept(k):
                copy.frame(frame, records[k][i])
