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
A packet the per-frame path takes between two of the lane's runs reads
the chunks by key (``get``) and joins them as a chunk of one (``put``):
the entries are built only when a key already in a chunk is put again,
and past ``MAX_CHUNKS`` chunks the chunks are joined into one (``_Joined``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

V = TypeVar("V")
MAX_CHUNKS = 8  # chunks searched by key before the window joins them into one


class _One(Generic[V]):
    """The value of a chunk of one entry."""

    __slots__ = ("value",)

    def __init__(self, value: V) -> None:
        self.value = value

    def __call__(self, _: int) -> V:
        return self.value


@dataclass(frozen=True, slots=True)
class _Chunk(Generic[V]):
    keys: npt.NDArray[np.uint64]
    make: Callable[[int], V]  # the value of the entry at a position of ``keys``


# A run of a chunk's entries: its ``make``, the first position taken and how many.
_Leaf = tuple[Callable[[int], V], int, int]


class _Joined(Generic[V]):
    """The ``make`` of chunks joined into one: each entry built by the chunk it came from."""

    __slots__ = ("_firsts", "_makes", "_starts", "leaves")

    def __init__(self, leaves: list[_Leaf[V]]) -> None:
        self.leaves = leaves
        self._makes = [make for make, _, _ in leaves]
        self._firsts = [first for _, first, _ in leaves]
        self._starts = np.cumsum([0] + [n for _, _, n in leaves])

    def __call__(self, i: int) -> V:
        k = int(np.searchsorted(self._starts, i, "right")) - 1
        return self._makes[k](self._firsts[k] + i - int(self._starts[k]))


def _leaves(chunk: _Chunk[V], skip: int) -> list[_Leaf[V]]:
    """The runs of ``chunk``'s entries from position ``skip`` on, joined ones unjoined."""
    make = chunk.make
    if not isinstance(make, _Joined):
        return [(make, skip, len(chunk.keys) - skip)]
    out: list[_Leaf[V]] = []
    for inner, first, n in make.leaves:
        if skip >= n:
            skip -= n
            continue
        out.append((inner, first + skip, n - skip))
        skip = 0
    return out


class RecentWindow(Generic[V]):
    """The latest ``size`` entries by key, oldest evicted first.

    Memory: an SA of a capture of many short-lived SAs puts one entry in each
    of its windows and no more; a window of at most one entry holds it in two
    slots, ``_key`` and ``_value`` (56 bytes less than a pair), and
    makes its OrderedDict (about 250 bytes) and chunk list only when it needs them.
    """

    __slots__ = ("_chunks", "_entries", "_key", "_pending", "_value", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        # Oldest first: an OrderedDict, or None when the window holds one entry at the
        # most: then ``_key`` is its key (None: no entry) and ``_value`` its value.
        self._entries: OrderedDict[int, V] | None = None
        self._key: int | None = None
        self._value: V | None = None
        # Newer than every entry, oldest first; a list, not a deque: few chunks at a time,
        # and an empty deque costs 600 bytes per window (two windows per SA). None: none.
        self._chunks: list[_Chunk[V]] | None = None
        self._pending = 0

    def __len__(self) -> int:
        entries = self._entries
        held = (self._key is not None) if entries is None else len(entries)
        return min(self.size, held + self._pending)

    def _many(self) -> OrderedDict[int, V]:
        """The entries as an OrderedDict, made from what the window holds."""
        entries = self._entries
        if entries is not None:
            return entries
        many: OrderedDict[int, V] = OrderedDict()
        if self._key is not None:
            many[self._key] = self._value  # type: ignore[assignment]  # set with the key
            self._key = self._value = None
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

    def _evict(self) -> None:
        """Drop the built entries that newer chunks pushed out of the window."""
        entries = self._entries
        if entries is None:
            if self._key is not None and 1 + self._pending > self.size:
                self._key = self._value = None
            return
        over = len(entries) + self._pending - self.size
        if over <= 0:
            return
        for _ in range(min(over, len(entries))):
            entries.popitem(last=False)

    def _in_chunks(self, key: int) -> tuple[_Chunk[V], int] | None:
        """The chunk and position of ``key`` among the chunks' entries in the window."""
        out = max(0, self._pending - self.size)  # the oldest chunk positions, evicted
        found = None
        for chunk in self._chunks or ():
            n = len(chunk.keys)
            if out >= n:
                out -= n
                continue
            hits = np.flatnonzero(chunk.keys[out:] == np.uint64(key))
            if len(hits):
                found = (chunk, out + int(hits[-1]))  # the newest, should a key repeat
            out = 0
        return found

    def get(self, key: int) -> V | None:
        if self._chunks:
            self._evict()
            found = self._in_chunks(key)
            if found is not None:
                chunk, at = found
                return chunk.make(at)
        entries = self._entries
        if entries is None:
            return self._value if self._key == key else None
        return entries.get(key)

    def pop(self, key: int) -> V | None:
        if self._chunks:
            self._catch_up()
        entries = self._entries
        if entries is None:
            if self._key != key:
                return None
            value, self._key, self._value = self._value, None, None
            return value
        return entries.pop(key, None)

    def put(self, key: int, value: V, renew: bool = True) -> None:
        """Set ``key``'s value; the oldest entry leaves when the window is full.

        ``renew``: a key already in the window becomes the newest (else it keeps its place).
        """
        if self._chunks:
            self._evict()
            if len(self._chunks) >= MAX_CHUNKS:
                self._join()
            if self._in_chunks(key) is not None:
                self._catch_up()
            elif self._put_after_chunks(key, value, renew):
                return
        if self.size >= 1 and self._entries is None and self._key in (None, key):
            self._key, self._value = key, value  # the only entry, old or new: renewed either way
            return
        entries = self._many()
        if renew:
            entries.pop(key, None)
        entries[key] = value
        if len(entries) > self.size:
            entries.popitem(last=False)

    def _join(self) -> None:
        """The chunks' entries in the window as one chunk, their values still unbuilt."""
        out = max(0, self._pending - self.size)
        keys: list[npt.NDArray[np.uint64]] = []
        leaves: list[_Leaf[V]] = []
        for chunk in self._chunks or ():
            n = len(chunk.keys)
            if out >= n:
                out -= n
                continue
            keys.append(chunk.keys[out:])
            leaves.extend(_leaves(chunk, out))
            out = 0
        joined = np.concatenate(keys)
        self._chunks, self._pending = [_Chunk(joined, _Joined(leaves))], len(joined)

    def _put_after_chunks(self, key: int, value: V, renew: bool) -> bool:
        """``put`` of a key no chunk holds while chunks wait: a chunk of one, unless the key
        keeps its place among the built entries (done: True either way)."""
        entries = self._entries
        if entries is None and self._key is not None and self._key == key:
            entries = self._many()
        if entries is not None and key in entries:
            if not renew:
                entries[key] = value
                return True
            del entries[key]
        self._add(_Chunk(np.array([key], np.uint64), _One(value)))
        self._evict()
        return True

    def put_many(self, keys: npt.NDArray[np.uint64], make: Callable[[int], V]) -> None:
        """Add entries whose keys are new to the window, oldest first, values built lazily."""
        if len(keys):
            self._add(_Chunk(keys, make))

    def _add(self, chunk: _Chunk[V]) -> None:
        if self._chunks is None:
            self._chunks = []
        self._chunks.append(chunk)
        self._pending += len(chunk.keys)
        chunks = self._chunks
        while len(chunks) > 1 and self._pending - len(chunks[0].keys) >= self.size:
            self._pending -= len(chunks.pop(0).keys)
        if self._pending >= self.size:
            # every entry is older than the window's newest size
            self._entries = self._key = self._value = None
