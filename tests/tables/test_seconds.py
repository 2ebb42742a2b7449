"""packets.csv's ``time`` in seconds: tables/packets.py's ns_to_seconds, made in numpy from the
buffers, gives what pyarrow.compute's cast and divide gave (and still give), bit for bit.

The reference is the former code, ``pc.divide(pc.cast(pc.cast(time, int64), float64,
safe=False), 1e9)``, on generated times (nulls, the ends of int64, chunked and sliced
columns, whose buffers start before their first value), and Python's own ``ns / 1e9``.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.tables.arrow import from_list
from espforensics.tables.schema import TIME_TYPE, ns_to_seconds

INT64 = st.integers(-(2**63), 2**63 - 1)
TIMES = st.one_of(st.none(), INT64, st.integers(0, 2**62), st.integers(-(10**19) // 10, 0))


def _reference(time: pa.Array | pa.ChunkedArray) -> pa.Array:
    one_e9 = from_list([1e9], pa.float64())[0]
    seconds = pc.divide(pc.cast(pc.cast(time, pa.int64()), pa.float64(), safe=False), one_e9)
    return seconds.combine_chunks() if isinstance(seconds, pa.ChunkedArray) else seconds


def _bits(array: pa.Array) -> list[int | None]:
    """Each value's float64 bits (so -0.0 and 0.0 differ), None where null."""
    values = np.array([0.0 if v is None else v for v in array.to_pylist()], np.float64)
    return [
        None if not ok else int(b)
        for b, ok in zip(values.view(np.int64), array.is_valid().to_pylist(), strict=True)
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(TIMES, max_size=40), st.lists(st.integers(0, 40), max_size=3), st.data())
def test_seconds_are_what_arrow_computed(
    values: list[int | None], cuts: list[int], data: st.DataObject
) -> None:
    column = from_list(values, TIME_TYPE)
    start = data.draw(st.integers(0, len(values)))
    sliced = column.slice(start)
    edges = sorted({0, len(sliced), *(min(c, len(sliced)) for c in cuts)})
    chunked = pa.chunked_array(
        [sliced.slice(a, b - a) for a, b in pairwise(edges)] or [sliced],
        TIME_TYPE,
    )
    for time in (column, sliced, chunked):
        got = ns_to_seconds(time)
        got.validate(full=True)
        assert got.type == pa.float64()
        reference = _reference(time)
        assert got.null_count == reference.null_count
        assert _bits(got) == _bits(reference)
    python = [None if v is None else v / 1e9 for v in values[start:]]
    assert ns_to_seconds(sliced).to_pylist() == python


def test_an_empty_and_an_all_null_column() -> None:
    assert ns_to_seconds(from_list([], TIME_TYPE)).to_pylist() == []
    assert ns_to_seconds(pa.nulls(3, TIME_TYPE)).to_pylist() == [None] * 3
    empty = pa.chunked_array([], TIME_TYPE)
    assert ns_to_seconds(empty).to_pylist() == []
