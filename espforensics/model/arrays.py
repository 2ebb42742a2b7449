"""Column helpers shared by the bulk rules: numpy types and reads of many rows at once.

In: a buffer of many packets' bytes joined (``view``), each row's offset
into it and a mask of the rows to read. Out: one number per row (0 where
the mask is False). Raises nothing: a masked-out row reads offset 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]
Strs = npt.NDArray[np.object_]


def u8(view: U8, at: I64, ok: Mask) -> I64:
    """The byte at ``at`` of each row (0 where ``ok`` is False)."""
    return np.where(ok, view[np.where(ok, at, 0)], 0).astype(np.int64)


def rows_at(view: U8, at: I64, width: int) -> U8:
    """The ``width`` bytes at ``at`` (offsets, >= 0) of each row, one row each (a copy);
    raises IndexError past the end of ``view``, as ``view[at[:, None] + np.arange(width)]``
    does.

    The rows are taken from a window view of ``view`` (``windows``) by one index per
    row: 2 to 9 times faster than that gather of one index per byte (8 to 64 bytes,
    4,096 rows).
    """
    rows: U8 = (
        view[np.asarray(at)[:, None] + np.arange(width)]
        if not len(at) or len(view) < width
        else windows(view, width)[at]
    )
    return rows


def windows(view: U8, width: int) -> U8:
    """Every ``width`` bytes of ``view`` (at least ``width`` long) as a row, row i from
    byte i, read-only: ``sliding_window_view(view, width)``, not a copy. Made by the ndarray
    constructor when ``view`` is contiguous: 1-2 us against numpy's 11-15 us a call,
    which the steady lane pays for every run a per-frame packet splits off (a run of
    100 rows read its rows in 4 us against 15; docs/performance.md, "Short steady runs")."""
    if not view.flags.c_contiguous:
        return sliding_window_view(view, width)
    step = view.itemsize
    out = np.ndarray((len(view) - width + 1, width), view.dtype, view, 0, (step, step))
    out.flags.writeable = False  # as numpy's: a byte written would change several rows
    return out


def rows_within(view: U8, at: I64, width: int) -> U8:
    """``rows_at``, except that a row running past the end of ``view`` reads its last byte
    in place of the bytes beyond (bytes its caller masks out or never shows), where
    ``rows_at`` raises: the window view while every row fits, else one index a byte."""
    if not len(at) or int(at.max()) + width <= len(view):
        return rows_at(view, at, width)
    rows: U8 = view[np.minimum(at[:, None] + np.arange(width), len(view) - 1)]
    return rows


def _countable(values: I64) -> bool:
    """Small non-negative ints (flow and unit indices, protocol numbers): counted, not
    hashed or sorted, by ``distinct``."""
    return bool(len(values)) and values.min() >= 0 and values.max() <= 2 * len(values) + 256


def among(values: I64, chosen: Sequence[int], size: int) -> Mask:
    """``np.isin(values, chosen)`` for indices below ``size`` or -1 (none), by a lookup
    table: 2-3 us where ``np.isin`` costs 25 on the hundred rows of a short run."""
    table = np.zeros(size + 1, np.bool_)
    table[np.asarray(chosen, np.intp) + 1] = True
    found: Mask = table[values + 1]
    return found


def distinct(values: I64) -> I64:
    """``np.unique(values)``: sorted, each value once; by counting when ``_countable``,
    ten times faster on 4,096 rows than numpy's hash."""
    if not _countable(values):
        found: I64 = np.unique(values)
        return found
    return np.flatnonzero(np.bincount(values))


def distinct_inverse(values: I64) -> tuple[I64, I64]:
    """``np.unique(values, return_inverse=True)`` (flat): the distinct values, and each
    row's index among them; by counting when ``_countable``."""
    if not _countable(values):
        found, inverse = np.unique(values, return_inverse=True)
        return found, inverse.ravel()
    counts = np.bincount(values)
    found = np.flatnonzero(counts)
    at = np.cumsum(counts > 0) - 1  # a value's index among the distinct ones
    return found, at[values]


def be_at(view: U8, at: I64, width: int) -> I64:
    """The ``width``-byte big-endian number at ``at`` of each row (every row read)."""
    out = view[at].astype(np.int64)
    for k in range(1, width):
        out = (out << 8) | view[at + k]
    return out


def read_be(view: U8, at: I64, ok: Mask, width: int) -> I64:
    """``be_at`` of the rows ``ok`` (0 where it is False, whose offsets are not read)."""
    return np.where(ok, be_at(view, np.where(ok, at, 0), width), 0)


def strs(values: Sequence[str]) -> Strs:
    """``values`` as a one-dimensional array of ``str`` objects."""
    out: Strs = np.empty(len(values), object)
    out[:] = values
    return out


@dataclass(frozen=True, slots=True)
class SpacedHex:
    """Rows of bytes to be written as ``bytes.hex(" ")`` writes them ("45 00 05 dc"), kept
    as bytes until a table asks for their text: row ``i`` is ``got[i, :size[i]]`` (the
    bytes past it are never shown). The text of every row comes from one
    ``bytes.hex(" ")`` (``text``), straight into a column (tables/arrow.py
    ``spaced_hex_column``); ``texts`` makes a ``str`` a row, the reference."""

    got: U8  # (rows, width)
    size: I64

    def __len__(self) -> int:
        return len(self.size)

    @staticmethod
    def of(rows: Sequence[bytes]) -> SpacedHex:
        """The rows ``rows``, each its bytes."""
        size = np.array([len(r) for r in rows], np.int64)
        got = np.zeros((len(rows), int(size.max()) if len(rows) else 0), np.uint8)
        for i, r in enumerate(rows):
            got[i, : len(r)] = np.frombuffer(r, np.uint8)
        return SpacedHex(got, size)

    def take(self, keep: npt.NDArray[np.intp] | Mask) -> SpacedHex:
        """The rows ``keep`` (indices or a mask)."""
        return SpacedHex(self.got[keep], self.size[keep])

    @staticmethod
    def joined(parts: Sequence[SpacedHex]) -> SpacedHex:
        """``parts`` (at least one) one after the other; a narrower part's rows padded with
        zero bytes."""
        width = max(p.got.shape[1] for p in parts)
        got = np.zeros((sum(len(p) for p in parts), width), np.uint8)
        at = 0
        for p in parts:
            got[at : at + len(p), : p.got.shape[1]] = p.got
            at += len(p)
        return SpacedHex(got, np.concatenate([p.size for p in parts]))

    def text(self) -> tuple[bytes, I64]:
        """Every row's text back to back (ASCII), and each one's length (``3 * size - 1``,
        0 for no bytes): all written by one ``bytes.hex(" ")`` (a row of ``width`` bytes is
        then ``3 * width`` characters with the space after it), the characters past a
        row's last byte dropped. (A numpy table of each byte's three characters took
        3.0 ms for 3,447 rows of 32 bytes; one ``hex`` of them 1.0-1.1,
        docs/performance.md.)"""
        n, width = self.got.shape
        length = np.maximum(3 * self.size - 1, 0)  # a row of no bytes: no text
        if not n or not width:
            return b"", length
        text = bytearray(self.got.tobytes().hex(" ").encode("ascii"))
        text += b" "  # the last row's last space, as every other row has
        lines = np.frombuffer(text, np.uint8).reshape(n, 3 * width)
        if bool((self.size == width).all()):
            return lines[:, : 3 * width - 1].tobytes(), length
        return lines[np.arange(3 * width) < length[:, None]].tobytes(), length

    def texts(self) -> Strs:
        """Each row's text as a ``str``: ``bytes.hex(" ")`` of its bytes, one by one."""
        return strs(
            [
                row[:n].tobytes().hex(" ")
                for row, n in zip(self.got, self.size.tolist(), strict=True)
            ]
        )


def spaced_hex(view: U8, at: I64, size: I64) -> SpacedHex:
    """Per row, its ``size`` bytes (at least 1) at ``at``, to be written as ``bytes.hex(" ")``
    writes them: every row's bytes taken at the widest row's width (``rows_within``; a
    shorter row's bytes past its size are never shown)."""
    width = int(size.max()) if len(at) else 0
    return SpacedHex(rows_within(view, at, width), size)
