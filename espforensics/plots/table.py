"""``Table``: the plots' small input tables, named numpy columns of one length.

In: columns as numpy arrays, lists or scalars (a scalar is repeated to the
length of the other columns). Out: a frozen ``Table`` whose columns are
read-only numpy arrays: numbers as int64, float64 (NaN where empty) or bool,
text as object arrays of ``str``. Raises ``ValueError`` when the columns'
lengths differ or every column is a scalar.

Why not pandas DataFrames: the plots read a few columns of tables of at most
some thousands of rows; pandas cost 0.25 s of import in every run that draws
plots (docs/performance.md, "The plots without pandas (issue 35)").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, cast

import numpy as np
import numpy.typing as npt

Column = npt.NDArray[Any]


def _column(values: object) -> Column:
    """``values`` (an array or an iterable) as a read-only numpy column of its own (a
    copy); integers as int64, text as an object array of ``str`` (kept whole: a numpy
    string array would drop trailing NULs)."""
    items = values if isinstance(values, np.ndarray) else list(cast(Iterable[object], values))
    if isinstance(items, list) and items and all(isinstance(v, str) for v in items):
        column = np.empty(len(items), dtype=object)
        column[:] = items
    else:
        column = np.array(items)
        if column.dtype.kind in "US":
            column = column.astype(object)
        elif column.dtype.kind in "iu":
            column = column.astype(np.int64)
    column.flags.writeable = False
    return column


def _scalar(value: object) -> bool:
    return isinstance(value, str | bytes | int | float | bool | np.generic) or value is None


class Table:
    """Named columns of one length each (read-only numpy arrays), in the given order."""

    __slots__ = ("_columns", "_rows")

    _columns: Mapping[str, Column]
    _rows: int

    def __init__(self, columns: Mapping[str, object] | None = None, /, **more: object) -> None:
        given = {**(columns or {}), **more}
        arrays = {name: _column(v) for name, v in given.items() if not _scalar(v)}
        lengths = {len(a) for a in arrays.values()}
        if len(lengths) > 1:
            raise ValueError(f"table columns of different lengths: {sorted(lengths)}")
        if given and not arrays:
            raise ValueError("a table needs at least one column that is not a scalar")
        rows = lengths.pop() if lengths else 0
        built = {
            name: arrays[name] if name in arrays else _column([value] * rows)
            for name, value in given.items()
        }
        object.__setattr__(self, "_columns", MappingProxyType(built))
        object.__setattr__(self, "_rows", rows)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Table is frozen")

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, name: str) -> Column:
        return self._columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self.names)})"

    def __eq__(self, other: object) -> bool:
        """Same names in the same order, same dtypes and values (NaN equals NaN)."""
        if not isinstance(other, Table) or self.names != other.names or len(self) != len(other):
            return False
        return all(_same(self[n], other[n]) for n in self.names)

    __hash__ = None  # type: ignore[assignment]  # mutable-looking arrays: no hash

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._columns)

    @property
    def empty(self) -> bool:
        """No rows or no columns (as a DataFrame's ``empty``)."""
        return not self._rows or not self._columns

    def take(self, rows: npt.NDArray[Any] | slice) -> Table:
        """The rows selected by a boolean mask, indices or a slice, in that order."""
        return Table({name: column[rows] for name, column in self._columns.items()})

    def replace(self, **columns: object) -> Table:
        """A copy with ``columns`` replaced or added (a scalar is repeated)."""
        return Table({**self._columns, **columns})


def _same(a: Column, b: Column) -> bool:
    if a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))
