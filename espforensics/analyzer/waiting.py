"""Records that leave in capture order, once nothing before them is held.

In: every record of a frame processed while some record is held (``push``),
and the ``Holds`` that the fragments, ESN placement and the IV derivation
check keep. Out: the records free to leave, oldest first (``release``).
How long a held record may keep the rest waiting is the caller's to bound
(analyzer/frame.py: ``MAX_WAITING``, ``MAX_BEHIND_CHECK``). Raises nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from espforensics.checks.context import Holds
from espforensics.model.records import PacketRecord


class Waiting:
    """The records waiting behind a held one, in capture order."""

    __slots__ = ("_holds", "_queue")

    def __init__(self, holds: Holds) -> None:
        self._holds = holds
        self._queue: deque[PacketRecord] = deque()

    def __bool__(self) -> bool:
        """Is a record held or waiting? Then later records must wait in turn."""
        return bool(self._holds or self._queue)

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def head(self) -> int:
        """The frame of the oldest record waiting (the queue is not empty)."""
        return self._queue[0].frame

    def push(self, records: Iterable[PacketRecord]) -> None:
        """Records of the frame just processed, at the end of the line."""
        self._queue.extend(records)

    def release(self) -> Iterator[PacketRecord]:
        """The records before the first held one, removed, oldest first."""
        queue, holds = self._queue, self._holds
        while queue and queue[0].frame not in holds:
            yield queue.popleft()
