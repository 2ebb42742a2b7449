"""Compact sets of 64-bit values: runs of consecutive integers, and a set of any.

In: unsigned integers (sequence numbers, or IVs mapped to the counter they
encode). Out: ``IntervalSet.add`` and ``U64Set.add`` say whether a value
was already present. Raises nothing.

``IntervalSet`` costs memory per run of consecutive values, not per
value: a counter that never skips stays one run however long it gets.
``U64Set`` serves values that do not follow a counter (random IVs), where
runs would degenerate to one per value: those added one at a time go to an
open-addressing array of uint64 kept 50% to 75% full, 11 to 16 bytes per
value (fuller, linear probing's clusters grow long: at 87.5% placing and
probing a batch costs twice as much); those added a batch at a time go to
sorted arrays, 8 bytes per value and 1 to 2 of a filter.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


class IntervalSet:
    """Disjoint, sorted runs ``[start, end]`` of integers.

    Memory: while the set is one run (or empty) it is two ints, ``_a`` and
    ``_b``; the two arrays of runs are made at the second run. An SA of a
    capture of many short-lived SAs holds one packet (bench_sas.py): its sets
    of sequence numbers and IVs stay one run each. The arrays hold unsigned
    64-bit values, 16 bytes a run where lists of ints took 72: a keyless NULL
    capture's leak finding holds a run every few frames (docs/performance.md,
    "The frames of a big finding").
    """

    __slots__ = ("_a", "_b", "_ends", "_starts")

    def __init__(self) -> None:
        self._a: int | None = None  # the one run [_a, _b], while there is no list
        self._b = 0
        self._starts: array[int] | None = None  # every run, from the second on
        self._ends: array[int] | None = None

    def _lists(self) -> tuple[array[int], array[int]]:
        """The runs as two arrays, made from the one run the first time."""
        if self._starts is None or self._ends is None:
            a, self._a = self._a, None
            self._starts, self._ends = array("Q"), array("Q")
            if a is not None:
                self._starts.append(a)
                self._ends.append(self._b)
        return self._starts, self._ends

    def __len__(self) -> int:
        """Number of runs (not of values)."""
        if self._starts is None:
            return 0 if self._a is None else 1
        return len(self._starts)

    def __contains__(self, value: int) -> bool:
        if self._starts is None or self._ends is None:
            return self._a is not None and self._a <= value <= self._b
        i = bisect_right(self._starts, value) - 1
        return i >= 0 and value <= self._ends[i]

    def contains_many(self, values: U64) -> npt.NDArray[np.bool_]:
        """Which of ``values`` are held, for all at once (``in`` of each)."""
        if self._starts is None or self._ends is None:
            if self._a is None:
                return np.zeros(len(values), np.bool_)
            a, b = np.uint64(self._a), np.uint64(self._b)
            return (values >= a) & (values <= b)
        starts = np.frombuffer(self._starts, np.uint64).copy()
        ends = np.frombuffer(self._ends, np.uint64).copy()
        i = np.searchsorted(starts, values, side="right") - 1
        return (i >= 0) & (values <= ends[np.maximum(i, 0)])

    def add(self, value: int) -> bool:
        """Add ``value``; True if it was present already."""
        if self._starts is None:
            a = self._a
            if a is None:
                self._a = self._b = value
                return False
            if value == self._b + 1:  # the common case: the counter goes on
                self._b = value
                return False
            if a <= value <= self._b:
                return True
            if value == a - 1:
                self._a = value
                return False
        starts, ends = self._lists()
        n = len(starts)
        if n and value == ends[-1] + 1:  # the common case: the counter goes on
            ends[-1] = value
            return False
        i = bisect_right(starts, value) - 1
        if i >= 0 and value <= ends[i]:
            return True
        joins_left = i >= 0 and ends[i] + 1 == value
        joins_right = i + 1 < n and starts[i + 1] - 1 == value
        if joins_left and joins_right:
            ends[i] = ends[i + 1]
            del starts[i + 1], ends[i + 1]
        elif joins_left:
            ends[i] = value
        elif joins_right:
            starts[i + 1] = value
        else:
            starts.insert(i + 1, value)
            ends.insert(i + 1, value)
        return False

    def top(self) -> int:
        """The largest value held, or -1 when empty."""
        if self._ends is None:
            return -1 if self._a is None else self._b
        return self._ends[-1] if self._ends else -1

    def extend_above(self, values: U64) -> None:
        """Add rising ``values``, all above ``top()``: what ``add`` does one by one."""
        if not len(values):
            return
        low, high = int(values[0]), int(values[-1])
        if high - low == len(values) - 1:  # rising, so one run: most calls (a run's seqs)
            firsts, lasts = [low], [high]
        else:
            cut = np.flatnonzero(np.diff(values) != 1) + 1
            firsts = values[np.concatenate(([0], cut))].tolist()
            lasts = values[np.concatenate((cut - 1, [len(values) - 1]))].tolist()
        if self._starts is None and len(firsts) == 1:
            if self._a is None:
                self._a, self._b = firsts[0], lasts[0]
                return
            if firsts[0] == self._b + 1:
                self._b = lasts[0]
                return
        starts, ends = self._lists()
        if ends and firsts[0] == ends[-1] + 1:
            ends[-1] = lasts[0]
            firsts, lasts = firsts[1:], lasts[1:]
        starts.extend(firsts)
        ends.extend(lasts)

    def runs(self) -> Iterator[tuple[int, int]]:
        """The runs, lowest first."""
        if self._starts is None or self._ends is None:
            return iter(() if self._a is None else ((self._a, self._b),))
        return zip(self._starts, self._ends, strict=True)

    def run_arrays(self) -> tuple[I64, I64]:
        """The runs' firsts and lasts as int64 arrays (values below 2**63: frame numbers)."""
        if self._starts is None or self._ends is None:
            one = np.array(() if self._a is None else (self._a, self._b), np.int64)
            return one[:1], one[1:]
        return (
            np.frombuffer(self._starts, np.uint64).astype(np.int64),
            np.frombuffer(self._ends, np.uint64).astype(np.int64),
        )

    def gaps(self) -> Iterator[tuple[int, int]]:
        """The holes between runs, as closed ranges."""
        starts, ends = self._starts or array("Q"), self._ends or array("Q")
        for i in range(1, len(starts)):
            yield ends[i - 1] + 1, starts[i] - 1


_FREE = 0xFFFFFFFFFFFFFFFF  # marks a free slot; that value itself is kept aside
_MIX = 0x9E3779B97F4A7C15  # Fibonacci hashing multiplier (Knuth 6.4)
_MAX_LOAD = 0.75  # linear probing stays short below this with a mixing hash
_GROWTH = 1.5  # load after growth 0.5: 11 to 16 bytes per value, never above 16
_FEW = 16  # values left to place from which one Python loop beats the numpy rounds
# A sorted level is merged into the one before it while that one is at most this many
# times its size: each level more than twice the next, so at most log2(n / batch) levels.
_LEVEL_RATIO = 2
# Bits of the filter over the levels' values, per value: 8 to 16 (doubled when below 8), one
# hash each, so 6-12% of the values not held pass it to the levels' binary searches.
_FILTER_BITS = 8


class U64Set:
    """A set of 64-bit unsigned integers: a flat hash table for the values added one at
    a time (``add``, 11 to 16 B/value), sorted arrays for those added a batch at a time
    (``add_new``, 8 B/value, and 1 to 2 B/value of a filter).

    The sorted arrays are levels of a log-structured merge: a batch becomes a level,
    merged into the level before it while that one is not more than ``_LEVEL_RATIO``
    times its size, so a value is copied O(log n) times in all and a probe searches
    O(log n) levels; a bit filter (one hash a value, ``_FILTER_BITS``) spares those
    searches most values not held. A batch takes the hash table's values into its
    level, so a bulk probe seldom has a table to probe. Probing batches and adding them
    that way cost a sixth of the hash table's bulk probes and inserts at 200,000
    values, under a third at 2 million (docs/performance.md, "Random IVs (issue 35)").
    A merge holds the merged level and its two parts for a moment, as a growing hash
    table held the old table and the new.
    """

    __slots__ = ("_filter", "_has_free", "_held", "_levels", "_limit", "_n", "_size", "_table")

    def __init__(self, capacity: int = 1024) -> None:
        self._n = 0  # values in the hash table (and ``_has_free``)
        self._has_free = False
        self._levels: list[U64] = []  # sorted, disjoint, largest first
        self._held = 0  # values in the levels
        self._filter = np.zeros(0, np.uint8)  # bits over the levels' values
        self._alloc(max(16, int(capacity / _MAX_LOAD) + 1))

    def _alloc(self, size: int) -> None:
        self._table = array("Q", [_FREE]) * size
        self._size = size
        self._limit = int(size * _MAX_LOAD)

    def __len__(self) -> int:
        return self._n + self._held

    def add(self, value: int) -> bool:
        """Add ``value``; True if it was present already."""
        if self._held and self._leveled(value):
            return True
        if value == _FREE:
            seen, self._has_free = self._has_free, True
            self._n += 0 if seen else 1
            return seen
        if self._insert(value):
            return True
        self._n += 1
        if self._n > self._limit:
            self._grow()
        return False

    def _leveled(self, value: int) -> bool:
        """Is ``value`` in one of the sorted levels?"""
        bit = ((value * _MIX) & _FREE) >> (64 - self._filter_log2())
        if not self._filter[bit >> 3] >> (bit & 7) & 1:
            return False
        v = np.uint64(value)
        for level in self._levels:
            i = int(level.searchsorted(v))
            if i < len(level) and level[i] == v:
                return True
        return False

    def _slots(self, values: U64) -> npt.NDArray[np.intp]:
        """Each value's home slot, as ``_insert`` computes it."""
        size = np.uint64(self._size)
        with np.errstate(over="ignore"):
            h = values * np.uint64(_MIX)  # & _FREE: uint64 arithmetic wraps
        # Lemire's reduction (h * size) >> 64, the 128-bit product taken in 32-bit halves.
        lo32, hi32 = h & np.uint64(0xFFFFFFFF), h >> np.uint64(32)
        return ((hi32 * size + ((lo32 * size) >> np.uint64(32))) >> np.uint64(32)).astype(np.intp)

    def contains_many(self, values: U64) -> npt.NDArray[np.bool_]:
        """Which of ``values`` are in the set, probed for all at once (as ``add`` would)."""
        out = self._hashed_many(values)
        if not self._held or not len(values):
            return out
        at = np.flatnonzero(self._maybe(values))  # the filter passes 6-12% of the others
        wanted = values[at]
        order = np.argsort(wanted)  # sorted keys: each search starts where the last ended
        wanted = wanted[order]
        found = np.zeros(len(wanted), np.bool_)
        for level in self._levels:
            i = level.searchsorted(wanted)
            np.minimum(i, len(level) - 1, out=i)
            found |= level[i] == wanted
        out[at[order]] |= found
        return out

    def _hashed_many(self, values: U64) -> npt.NDArray[np.bool_]:
        """Which of ``values`` the hash table holds, probed for all at once."""
        out = np.zeros(len(values), np.bool_)
        if not len(values) or not self._n:
            return out
        table = np.frombuffer(self._table, np.uint64)
        pending = np.flatnonzero(values != np.uint64(_FREE))
        out[values == np.uint64(_FREE)] = self._has_free
        slot = self._slots(values)[pending]
        while len(pending):
            held = table[slot]
            want = values[pending]
            out[pending[held == want]] = True
            go_on = (held != want) & (held != np.uint64(_FREE))
            pending, slot = pending[go_on], slot[go_on] + 1
            slot[slot == self._size] = 0
        return out

    def add_new(self, values: U64) -> None:
        """Add ``values``, distinct and none in the set yet (``contains_many`` said so), at
        once: a sorted level with the hash table's values, merged with the levels before
        it no more than ``_LEVEL_RATIO`` times its size."""
        if not len(values):
            return
        run, levels = values, self._levels
        if self._n:  # the table's values join the level: bulk probes skip the table
            table = np.frombuffer(self._table, np.uint64)
            free = np.array([_FREE] if self._has_free else [], np.uint64)
            run = np.concatenate((run, table[table != np.uint64(_FREE)], free))
            self._n, self._has_free = 0, False
            self._alloc(16)
        run = np.sort(run)
        self._held += len(run)
        self._mark(run)
        while levels and len(levels[-1]) <= _LEVEL_RATIO * len(run):
            run = np.concatenate((levels.pop(), run))
            # Two sorted runs end to end: timsort ("stable") merges them in one pass,
            # where the default introsort sorts them again (2 million values added in
            # batches of 700: 0.20 against 0.91 s; docs/performance.md, "Merging sorted
            # levels").
            run.sort(kind="stable")
        levels.append(run)

    def _filter_log2(self) -> int:
        return (8 * len(self._filter)).bit_length() - 1

    def _mark(self, values: U64) -> None:
        """Set the filter's bits of ``values``, new in the levels; a filter of fewer than
        ``_FILTER_BITS`` bits a value is made again, twice as large, from all of them."""
        bits = 8 * len(self._filter)
        if self._held * _FILTER_BITS > bits:
            bits = max(1024, bits)
            while self._held * _FILTER_BITS > bits:
                bits *= 2
            self._filter = np.zeros(bits // 8, np.uint8)
            values = np.concatenate([*self._levels, values])
        where = self._bits(values)
        one = np.uint8(1) << (where & np.uint64(7)).astype(np.uint8)
        np.bitwise_or.at(self._filter, where >> np.uint64(3), one)

    def _bits(self, values: U64) -> U64:
        """Each value's bit in the filter (Fibonacci hashing: the product's top bits)."""
        with np.errstate(over="ignore"):
            return (values * np.uint64(_MIX)) >> np.uint64(64 - self._filter_log2())

    def _maybe(self, values: U64) -> npt.NDArray[np.bool_]:
        """Which of ``values`` the filter passes: every one the levels hold, and a few."""
        where = self._bits(values)
        byte = self._filter[where >> np.uint64(3)]
        passed: npt.NDArray[np.bool_] = (byte >> (where & np.uint64(7)).astype(np.uint8)) & 1 == 1
        return passed

    def _place(self, values: U64) -> None:
        """Put distinct values absent from the table into free slots by linear probing.

        All at once while many are left; the last few, whose probes run long (a
        batch of 2,048 took 134 rounds of the loop on average), one by one as
        ``add`` places them.
        """
        table = np.frombuffer(self._table, np.uint64)
        pending = np.arange(len(values))
        slot = self._slots(values)
        free = np.uint64(_FREE)
        while len(pending) > _FEW:
            at = np.flatnonzero(table[slot] == free)
            # Of several values written to one free slot, one stays (which one does not
            # matter: each probed only taken slots before it); the rest move on.
            table[slot[at]] = want = values[pending[at]]
            won = np.zeros(len(pending), np.bool_)
            won[at] = table[slot[at]] == want
            pending, slot = pending[~won], slot[~won] + 1  # each one's slot is taken now
            slot[slot == self._size] = 0
        for value in values[pending].tolist():
            self._insert(value)

    def _insert(self, value: int) -> bool:
        table, size = self._table, self._size
        # Lemire's multiply-shift maps the mixed hash onto any table size.
        i = (((value * _MIX) & _FREE) * size) >> 64
        while True:
            slot = table[i]
            if slot == value:
                return True
            if slot == _FREE:
                table[i] = value
                return False
            i += 1
            if i == size:
                i = 0

    def _grow(self) -> None:
        """A larger table (by ``_GROWTH``), values rehashed."""
        old = np.frombuffer(self._table, np.uint64)
        size = int(self._size * _GROWTH) + 1
        kept = old[old != np.uint64(_FREE)].copy()
        self._alloc(size)
        self._place(kept)
