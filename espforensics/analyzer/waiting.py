"""Records that leave in capture order, once nothing before them is held.

In: every record of a frame processed while some record is held (``push``),
a run of frames whose records the caller keeps (``push_run``: the steady
lane's, engine/run.py), and the ``Holds`` that the fragments, ESN placement
and the IV derivation check keep. Out: the records and runs free to leave,
oldest first (``release``). How long a held record may keep the rest
waiting is the caller's to bound (analyzer/frame.py: ``MAX_WAITING``,
``MAX_BEHIND_CHECK``), counted in records, a run's included. Raises nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from espforensics.checks.perflow import Holds
from espforensics.model.records import PacketRecord


@dataclass(frozen=True, slots=True)
class Run:
    """A run of frames whose records the caller keeps, waiting in line as one item.

    ``frame``: its first frame; ``records``: how many records it stands for (one
    a frame); ``part``: 0, or the number of a later part of a run cut where a bound
    gave up a hold inside it (the caller's rows leave with part 0). None of its
    frames is held: it leaves once nothing before it is.
    """

    frame: int
    records: int
    part: int = 0


class Waiting:
    """The records (and runs) waiting behind a held one, in capture order."""

    __slots__ = ("_count", "_holds", "_queue")

    def __init__(self, holds: Holds) -> None:
        self._holds = holds
        self._queue: deque[PacketRecord | Run] = deque()
        self._count = 0  # records waiting, a run's each counted

    def __bool__(self) -> bool:
        """Is a record held or waiting? Then later records must wait in turn."""
        return bool(self._holds or self._queue)

    def __len__(self) -> int:
        """Records waiting, each of a run's counted."""
        return self._count

    @property
    def head(self) -> int:
        """The frame of the oldest record waiting (the queue is not empty)."""
        return self._queue[0].frame

    def push(self, records: Sequence[PacketRecord]) -> None:
        """Records of the frame just processed, at the end of the line."""
        self._queue.extend(records)
        self._count += len(records)

    def push_run(self, run: Run) -> None:
        """A run of frames after the last record, at the end of the line."""
        self._queue.append(run)
        self._count += run.records

    def release(self) -> Iterator[PacketRecord | Run]:
        """The records and runs before the first held record, removed, oldest first."""
        queue, holds = self._queue, self._holds
        while queue and queue[0].frame not in holds:
            item = queue.popleft()
            self._count -= item.records if isinstance(item, Run) else 1
            yield item
