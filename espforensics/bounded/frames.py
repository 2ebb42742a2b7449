"""Every frame a finding concerns, kept as runs of consecutive frame numbers.

In: frame numbers, one at a time (``with_frame``, in any order; ``frozen``) or all at
once (``Frames.of``). Out: ``Frames``, an immutable ``Sequence[int]`` of the
distinct frames, lowest first, and their texts: ``runs_text`` for
findings.csv (``20-24 30``), ``display_filter`` for Wireshark
(``frame.number in {20..24,30}``), ``frame_runs``/``from_runs`` for
summary.json (``[[20, 24], [30, 30]]``). Raises nothing.

Memory: per run of consecutive frames, not per frame (bounded/intervals.py): a
finding over a million back-to-back packets costs one run. A finding whose
frames never touch (every other frame) costs one run per frame, two int64;
that is the bound, and what findings.csv must list anyway.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from heapq import merge
from itertools import islice
from typing import overload

import numpy as np

from espforensics.bounded.intervals import I64, IntervalSet


class Frames(Sequence[int]):
    """Distinct frame numbers, lowest first, stored as runs ``(first, last)``: two arrays
    of int64, 16 bytes a run (a tuple of two ints was about 120: a keyless NULL
    capture's leak finding at 2,000,000 frames holds 330,000 runs, docs/performance.md,
    "The frames of a big finding")."""

    __slots__ = ("_ends", "_len", "_starts")

    def __init__(self, runs: Iterable[tuple[int, int]] = ()) -> None:
        starts, ends = array("q"), array("q")
        for a, b in runs:
            try:
                starts.append(int(a))
                ends.append(int(b))
            except OverflowError as exc:  # summary.json read back: a number beyond int64
                raise ValueError(f"frame run {a}-{b} out of range") from exc
        self._starts, self._ends = starts, ends
        self._len = sum(ends) - sum(starts) + len(starts)

    @classmethod
    def of_arrays(cls, starts: I64, ends: I64) -> Frames:
        """Runs given as their firsts and lasts, lowest first and apart, counted by their
        sums without a loop per run."""
        frames = cls.__new__(cls)
        frames._starts, frames._ends = array("q"), array("q")
        frames._starts.frombytes(np.ascontiguousarray(starts, np.int64).tobytes())
        frames._ends.frombytes(np.ascontiguousarray(ends, np.int64).tobytes())
        frames._len = int(ends.sum()) - int(starts.sum()) + len(starts)
        return frames

    @classmethod
    def of(cls, frames: Iterable[int]) -> Frames:
        """The frames of any iterable (repeats and order do not matter)."""
        if isinstance(frames, Frames):
            return frames
        runs = IntervalSet()
        for frame in frames:
            runs.add(frame)
        return frozen(runs)

    @classmethod
    def union(cls, parts: Iterable[Sequence[int]]) -> Frames:
        """The frames of all ``parts``, each once, their runs merged in numpy (a finding
        per SPI of a capture's interleaved SAs holds its frames in tens of thousands of
        runs: adding 200,000 frames one by one took 0.4 s, sorting and merging 60,000
        runs in Python 0.04 s)."""
        arrays = [Frames.of(p).run_arrays() for p in parts]
        if not any(len(firsts) for firsts, _ in arrays):
            return cls()
        firsts = np.concatenate([f for f, _ in arrays])
        lasts = np.concatenate([last for _, last in arrays])
        order = np.argsort(firsts, kind="stable")
        firsts, reach = firsts[order], np.maximum.accumulate(lasts[order])
        apart = firsts[1:] > reach[:-1] + 1  # a run that neither overlaps nor touches the last
        return cls.of_arrays(
            firsts[np.concatenate(([True], apart))], reach[np.concatenate((apart, [True]))]
        )

    def run_arrays(self) -> tuple[I64, I64]:
        """The runs' firsts and lasts, as read-only numpy views of the arrays (no copy:
        a ``Frames`` never changes)."""
        firsts, lasts = np.frombuffer(self._starts, np.int64), np.frombuffer(self._ends, np.int64)
        firsts.flags.writeable = lasts.flags.writeable = False
        return firsts, lasts

    def iter_runs(self) -> Iterator[tuple[int, int]]:
        """The runs, lowest first, one at a time (``runs`` makes them all)."""
        return zip(self._starts, self._ends, strict=True)

    def first_runs(self, n: int) -> Frames:
        """The frames of the first ``n`` runs."""
        firsts, lasts = self.run_arrays()
        return Frames.of_arrays(firsts[:n], lasts[:n])

    @property
    def runs(self) -> tuple[tuple[int, int], ...]:
        """Every run as a tuple, made at each call: ``iter_runs`` and ``run_arrays`` do not
        hold them all as objects."""
        return tuple(self.iter_runs())

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        for a, b in self.iter_runs():
            yield from range(a, b + 1)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...
    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step == 1 and start == 0:
                return tuple(islice(self, stop))
            return tuple(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("frame index out of range")
        for a, b in self.iter_runs():
            if index <= b - a:
                return a + index
            index -= b - a + 1
        raise IndexError("frame index out of range")  # unreachable: _len counts the runs

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Frames):
            return self._starts == other._starts and self._ends == other._ends
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._starts.tobytes(), self._ends.tobytes()))

    def __repr__(self) -> str:
        return f"Frames({runs_text(self) or 'none'})"


def with_frame(runs: IntervalSet | None, frame: int) -> IntervalSet:
    """``runs`` with ``frame`` added: a check's growing frames of one finding.

    A check keeps them in a field that is None until its first frame (one per SA
    and flow, and most SAs of a capture of many short-lived ones never name a
    frame: an object each was 40 bytes and one more for the collector to walk,
    bench_sas.py). ``frozen`` gives their ``Frames``.
    """
    if runs is None:
        runs = IntervalSet()
    runs.add(frame)
    return runs


def with_frames(runs: IntervalSet | None, frames: I64) -> IntervalSet:
    """``with_frame`` of each of ``frames`` (capture order), at once when they rise above
    every frame held (``IntervalSet.extend_above``)."""
    if runs is None:
        runs = IntervalSet()
    if len(frames) and runs.top() < int(frames[0]) and bool((np.diff(frames) > 0).all()):
        runs.extend_above(frames.astype(np.uint64))
    else:
        for frame in frames.tolist():
            runs.add(frame)
    return runs


def frozen(runs: IntervalSet | None) -> Frames:
    """The ``Frames`` of a check's frames (``with_frame``), none if it never named one.
    Its runs are copied as arrays and counted by their sums, with no object a run (a
    keyless NULL capture's leak finding names 168,000 frames in 30,000 runs a SPI)."""
    return Frames() if runs is None else Frames.of_arrays(*runs.run_arrays())


def _runs_of(frames: Sequence[int]) -> Iterator[tuple[int, int]]:
    return Frames.of(frames).iter_runs()


def runs_text(frames: Sequence[int], sep: str = " ", dash: str = "-") -> str:
    """``20-24 30``: every frame, a run of two or more as FIRST-LAST."""
    return sep.join(f"{a}" if a == b else f"{a}{dash}{b}" for a, b in _runs_of(frames))


def display_filter(frames: Sequence[int]) -> str:
    """Wireshark's display filter selecting exactly these frames: ``frame.number in
    {20..24,30}``, or ``!frame`` (no frame) for none.

    Set elements are separated by commas: Wireshark 4.0 and later refuse spaces
    (``"30" was unexpected in this context``; epan/dfilter/grammar.lemon has
    ``set_list ::= set_list COMMA set_element``), and ``a..b`` is a range, both
    ends included. The grammar bounds neither the elements nor the text (tshark 4.0
    takes 20,000 elements); on a command line the bound is the system's for one
    argument (Linux: 128 KiB for ``-Y FILTER``). No space after the commas: the
    filter is exactly as long as before them, so the reports show it where they did.
    """
    if not frames:
        return "!frame"  # ``in {}`` is a syntax error; every packet has ``frame``
    return f"frame.number in {{{runs_text(frames, sep=',', dash='..')}}}"


def frame_runs(frames: Sequence[int]) -> list[list[int]]:
    """summary.json's ``frames``: ``[[first, last], ...]``, every frame in a run."""
    return [[a, b] for a, b in _runs_of(frames)]


def from_runs(items: Iterable[int | Sequence[int]]) -> Frames:
    """``frame_runs`` read back; a plain frame number (summary.json before runs) is a run too."""
    return Frames((i, i) if isinstance(i, int) else (i[0], i[1]) for i in items)


def first_frames(groups: Iterable[Sequence[int]], n: int) -> tuple[int, ...]:
    """The ``n`` lowest distinct frames of several findings, without listing them all."""
    out: list[int] = []
    for frame in merge(*groups):
        if not out or frame != out[-1]:
            out.append(frame)
            if len(out) == n:
                break
    return tuple(out)
