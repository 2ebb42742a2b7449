"""A bounded window of the latest entries by key, that takes entries in bulk.

In: entries one at a time (``put``), or a batch's worth at once
(``put_many``: keys new to the window, in arrival order, with one function
that builds an entry's value from its position). Out: ``get``/``pop`` of
the latest ``size`` entries, oldest evicted first. Raises nothing.

The checks keep the last few thousand packets of each SA as evidence
(IV reuse, duplicate sequence numbers) and read it only when something is
wrong. The steady lane (engine/steady.py) hands a batch's packets over as
one chunk; their values are built only if the window is read while they
are still in it, and a chunk that falls out unread costs nothing more.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class _Chunk(Generic[V]):
    keys: npt.NDArray[np.uint64]
    make: Callable[[int], V]  # the value of the entry at a position of ``keys``


class RecentWindow(Generic[V]):
    """The latest ``size`` entries by key, oldest evicted first.

    Memory: an SA of a capture of many short-lived SAs puts one entry in each
    of its windows and no more; a window of at most one entry holds it as a
    ``(key, value)`` pair, and makes its OrderedDict (about 250 bytes) and
    chunk list only when it needs them.
    """

    __slots__ = ("_chunks", "_entries", "_pending", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        # Oldest first: None when empty, a (key, value) pair for one entry, else an OrderedDict.
        self._entries: OrderedDict[int, V] | tuple[int, V] | None = None
        # Newer than every entry, oldest first; a list, not a deque: few chunks at a time,
        # and an empty deque costs 600 bytes per window (two windows per SA). None: none.
        self._chunks: list[_Chunk[V]] | None = None
        self._pending = 0

    def __len__(self) -> int:
        entries = self._entries
        held = 0 if entries is None else 1 if isinstance(entries, tuple) else len(entries)
        return held + self._pending

    def _many(self) -> OrderedDict[int, V]:
        """The entries as an OrderedDict, made from what the window holds."""
        entries = self._entries
        if isinstance(entries, OrderedDict):
            return entries
        many: OrderedDict[int, V] = OrderedDict()
        if entries is not None:
            many[entries[0]] = entries[1]
        self._entries = many
        return many

    def _catch_up(self) -> None:
        """Build the entries of the chunks still in the window."""
        entries = self._many()
        skip = max(0, len(entries) + self._pending - self.size)
        while skip and entries:
            entries.popitem(last=False)
            skip -= 1
        for chunk in self._chunks or ():
            keys = chunk.keys.tolist()
            for i in range(skip, len(keys)):
                entries[keys[i]] = chunk.make(i)
            skip = max(0, skip - len(chunk.keys))
        self._chunks = None
        self._pending = 0

    def get(self, key: int) -> V | None:
        if self._chunks:
            self._catch_up()
        entries = self._entries
        if isinstance(entries, tuple):
            return entries[1] if entries[0] == key else None
        return None if entries is None else entries.get(key)

    def pop(self, key: int) -> V | None:
        if self._chunks:
            self._catch_up()
        entries = self._entries
        if isinstance(entries, tuple):
            if entries[0] != key:
                return None
            self._entries = None
            return entries[1]
        return None if entries is None else entries.pop(key, None)

    def put(self, key: int, value: V, renew: bool = True) -> None:
        """Set ``key``'s value; the oldest entry leaves when the window is full.

        ``renew``: a key already in the window becomes the newest (else it keeps its place).
        """
        if self._chunks:
            self._catch_up()
        held = self._entries
        if self.size >= 1 and (held is None or (isinstance(held, tuple) and held[0] == key)):
            self._entries = (key, value)  # the only entry, old or new: renewed either way
            return
        entries = self._many()
        if renew:
            entries.pop(key, None)
        entries[key] = value
        if len(entries) > self.size:
            entries.popitem(last=False)

    def put_many(self, keys: npt.NDArray[np.uint64], make: Callable[[int], V]) -> None:
        """Add entries whose keys are new to the window, oldest first, values built lazily."""
        if not len(keys):
            return
        if self._chunks is None:
            self._chunks = []
        self._chunks.append(_Chunk(keys, make))
        self._pending += len(keys)
        chunks = self._chunks
        while len(chunks) > 1 and self._pending - len(chunks[0].keys) >= self.size:
            self._pending -= len(chunks.pop(0).keys)
        if self._pending >= self.size:
            self._entries = None  # every entry is older than the window's newest size
