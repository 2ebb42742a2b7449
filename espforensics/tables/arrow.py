"""Arrow arrays from numpy arrays and Python lists, built from their buffers.

In: numpy arrays (int64, uint64, bool, object arrays of ``str``) and lists of
Python values (``int``, ``bool``, ``str`` or None). Out: ``pa.Array`` values,
equal to what ``pa.array`` makes of the same values and type. Raises
``TypeError`` for a string column holding another type; a numeric column's
values are taken as numpy converts them (the records' fields are typed, so
they are not checked one by one as ``pa.array`` does).

Why not ``pa.array``: its first call imports pandas (pyarrow's pandas shim
asks whether the values are a pandas Series or Index, apache/arrow#34994),
0.15 s of CPU in every run of ``analyze`` that draws no plot. These build the
Arrow buffers (Arrow columnar format: a validity bitmap, least significant bit
first, and the values; for strings int32 offsets and UTF-8 bytes) and wrap them
with ``pa.Array.from_buffers``, which converts nothing. Used by tables/packets.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from espforensics.model.arrays import SpacedHex

Mask = npt.NDArray[np.bool_]


def _validity(present: Mask) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap of ``present`` (None when nothing is null) and the null count."""
    nulls = len(present) - int(np.count_nonzero(present))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(present, bitorder="little")), nulls


def _dtype(type: pa.DataType) -> type[np.generic]:
    """The numpy type of the values of a fixed-width Arrow type (timestamps: int64 ns)."""
    if pa.types.is_floating(type):
        return np.float64
    return np.uint64 if pa.types.is_uint64(type) else np.int64


def from_numpy(values: np.ndarray, type: pa.DataType, present: Mask | None = None) -> pa.Array:
    """A fixed-width array (int64, uint64, float64, timestamp[ns]) of ``values`` (cast to its
    width, as ``pa.array`` casts); null where not ``present``."""
    data = np.ascontiguousarray(values, dtype=_dtype(type))
    validity, nulls = (None, 0) if present is None else _validity(present)
    return pa.Array.from_buffers(type, len(data), [validity, pa.py_buffer(data)], nulls)


def bools(values: Mask, present: Mask | None = None) -> pa.Array:
    """A boolean array of ``values``; null where not ``present``."""
    bits = pa.py_buffer(np.packbits(values, bitorder="little"))
    validity, nulls = (None, 0) if present is None else _validity(present)
    return pa.Array.from_buffers(pa.bool_(), len(values), [validity, bits], nulls)


def strings(values: Sequence[str | None] | np.ndarray) -> pa.Array:
    """A string array of ``values`` (``str``, its subclasses or None).

    ASCII text (hex, addresses, names: nearly every column) is one join, and
    each value's length is its length in bytes: 0.64 ms for 4,096 values of
    97 characters, against 1.7 ms for the way other text goes. That is one
    join with NUL between the values, one encode, and the NUL bytes found and
    dropped by numpy (UTF-8 has no 0 byte in a multi-byte character); a value
    that holds NUL itself, or None, takes a slower path.
    """
    # str or None each; None makes the join raise (and is found then)
    items = cast(list[str], values.tolist() if isinstance(values, np.ndarray) else list(values))
    n = len(items)
    try:
        whole = "".join(items)
    except TypeError:  # None among them (another type raises below)
        return _with_nulls(items)
    if whole.isascii():
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(np.fromiter(map(len, items), np.int32, n), out=offsets[1:])
        return _string_array(n, None, offsets, whole.encode("ascii"))
    text = "\0".join(items)
    if text.count("\0") != n - 1:
        return _one_by_one(items, None)
    raw = np.frombuffer(text.encode(), np.uint8)
    sep = raw == 0
    offsets = np.empty(n + 1, np.int32)
    offsets[0] = 0
    offsets[1:n] = np.flatnonzero(sep) - np.arange(n - 1)
    offsets[n] = len(raw) - (n - 1)
    return _string_array(n, None, offsets, raw[~sep].tobytes())


def pick(values: Sequence[str], idx: npt.NDArray[np.int64]) -> pa.Array:
    """The string array of ``values[i]`` for each ``i`` of ``idx`` (no nulls).

    Laid out from the values' UTF-8 bytes: ``Array.take`` would import
    pyarrow.compute, 0.04 s of a run that needs nothing else of it. One
    value throughout (a steady run's protocol, verdict, empty columns) is
    its bytes repeated; several are joined in C from an object array.
    """
    n = len(idx)
    offsets = np.zeros(n + 1, np.int32)
    if n and (idx == idx[0]).all():
        one = values[int(idx[0])].encode()
        np.multiply(np.arange(1, n + 1, dtype=np.int32), len(one), out=offsets[1:])
        return _string_array(n, None, offsets, one * n)
    raw = [v.encode() for v in values]
    lengths = np.fromiter(map(len, raw), np.int32, len(raw))
    np.cumsum(lengths[idx], out=offsets[1:])
    table = np.empty(len(raw), object)
    table[:] = raw
    return _string_array(n, None, offsets, b"".join(table[idx].tolist()))


def hex_rows(rows: npt.NDArray[np.uint8], used: npt.NDArray[np.int64]) -> pa.Array:
    """The string array of each row's first ``used`` bytes in lowercase hex (what
    ``bytes.hex`` gives), from one ``hex`` of the rows (a cast from fixed-width binary
    would import pyarrow.compute, as ``pick`` says)."""
    n = len(rows)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(2 * used.astype(np.int32), out=offsets[1:])
    if n and (used == used[0]).all():  # one width: the hex of those bytes of every row
        same = np.ascontiguousarray(rows[:, : int(used[0])])
        return _string_array(n, None, offsets, same.tobytes().hex().encode())
    text = np.frombuffer(np.ascontiguousarray(rows).tobytes().hex().encode(), np.uint8)
    keep = np.arange(2 * rows.shape[1]) < 2 * used[:, None]
    return _string_array(n, None, offsets, text.reshape(n, 2 * rows.shape[1])[keep].tobytes())


def spaced_hex_column(n: int, at: npt.NDArray[np.intp], hexes: SpacedHex) -> pa.Array:
    """The string array of ``n`` rows, row ``at[i]`` the text of ``hexes``'s row ``i``
    (``SpacedHex.text``: "45 00 05 dc"), every other row empty; of a row given twice, the
    last. The text goes into the array's buffer as one ``hex`` writes it: no ``str`` a
    row (the ``leaked_hex`` column of a steady run; docs/performance.md, "The leak
    columns' text as bytes")."""
    if len(at) > 1 and not bool((np.diff(at) > 0).all()):
        order = np.argsort(at, kind="stable")
        ranked = at[order]
        last = np.ones(len(order), np.bool_)
        last[:-1] = ranked[1:] != ranked[:-1]
        at, hexes = ranked[last], hexes.take(order[last])
    data, length = hexes.text()
    lengths = np.zeros(n, np.int32)
    lengths[at] = length
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return _string_array(n, None, offsets, data)


def _with_nulls(raw: Sequence[str | None]) -> pa.Array:
    present = np.fromiter((v is not None for v in raw), np.bool_, len(raw))
    return _one_by_one(["" if v is None else v for v in raw], present)


def _one_by_one(items: list[str], present: Mask | None) -> pa.Array:
    """The string array of ``items`` from each one's UTF-8 length."""
    data = "".join(items).encode()
    lengths = np.fromiter((len(v.encode()) for v in items), np.int32, len(items))
    offsets = np.zeros(len(items) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return _string_array(len(items), present, offsets, data)


def _string_array(n: int, present: Mask | None, offsets: np.ndarray, data: bytes) -> pa.Array:
    validity, nulls = (None, 0) if present is None else _validity(present)
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), n, buffers, nulls)


def from_list(values: Sequence[object], type: pa.DataType) -> pa.Array:
    """The array of a list of Python values (None is null), of a type of the packets table."""
    if pa.types.is_string(type):
        return strings(values)  # type: ignore[arg-type]  # a str column holds str
    n = len(values)
    nulls = values.count(None)
    if nulls == n:
        return pa.nulls(n, type)
    boolean = pa.types.is_boolean(type)
    if not nulls:  # numpy converts the ints (or bools) itself
        if boolean:
            return bools(np.fromiter(values, np.bool_, n))
        return from_numpy(np.fromiter(values, _dtype(type), n), type)
    items = np.fromiter(values, object, n)
    present = items != None  # noqa: E711  # elementwise: numpy compares each item
    if boolean:
        return bools(items.astype(np.bool_), present)  # None is False, and masked
    items[~present] = 0
    return from_numpy(items.astype(_dtype(type)), type, present)


def scalar(value: int | bool | str, type: pa.DataType) -> pa.Scalar:
    """``value`` as an Arrow scalar of ``type`` (int64, uint64, bool or string), as
    ``pa.scalar`` makes it: pyarrow.compute turns a Python value into one through
    ``pa.scalar``, which imports pandas as ``pa.array`` does."""
    if pa.types.is_string(type):
        return strings([str(value)])[0]
    if pa.types.is_boolean(type):
        return bools(np.array([bool(value)]))[0]
    return from_numpy(np.array([value]), type)[0]


def to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an int64, uint64 or boolean column without nulls, as numpy: read
    from its buffers (``to_numpy`` imports pandas, as ``pa.array`` does)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        raise ValueError("to_numpy takes a column without nulls (fill them first)")
    n, offset = len(array), array.offset
    data = array.buffers()[1]
    if pa.types.is_boolean(array.type):
        if data is None or not n:
            return np.zeros(n, np.bool_)
        bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
        return bits[offset : offset + n].astype(np.bool_)
    dtype = _dtype(array.type)
    if data is None or not n:
        return np.zeros(n, dtype)
    return np.frombuffer(data, dtype, count=n, offset=offset * np.dtype(dtype).itemsize)
