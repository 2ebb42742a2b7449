"""model/arrays.py: the bulk rules' reads of many rows, against one read per row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from espforensics.model.arrays import (
    among,
    be_at,
    distinct,
    distinct_inverse,
    read_be,
    rows_at,
    rows_within,
    spaced_hex,
    windows,
)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(1, 16), st.data())
def test_rows_at_reads_the_bytes_at_each(buf: bytes, width: int, data: st.DataObject) -> None:
    """Each row is ``buf[at:at + width]``; an offset whose bytes run past the end raises
    IndexError, as the gather of one index per byte does."""
    view = np.frombuffer(buf, np.uint8)
    at = data.draw(st.lists(st.integers(0, len(buf) + 2), max_size=12))
    offsets = np.array(at, np.int64)
    if any(a + width > len(buf) for a in at):
        with pytest.raises(IndexError):
            rows_at(view, offsets, width)
        return
    rows = rows_at(view, offsets, width)
    assert rows.shape == (len(at), width)
    assert [row.tobytes() for row in rows] == [buf[a : a + width] for a in at]
    words = read_be(view, offsets, np.ones(len(at), np.bool_), min(width, 4))
    assert words.tolist() == [int.from_bytes(buf[a : a + min(width, 4)]) for a in at]
    assert be_at(view, offsets, min(width, 4)).tolist() == words.tolist()


@settings(max_examples=200, deadline=None)
@given(
    st.binary(min_size=1, max_size=64),
    st.integers(1, 16),
    st.integers(0, 8),
    st.integers(1, 3),
    st.sampled_from([np.uint8, np.uint16]),
    st.booleans(),
)
def test_windows_is_numpys_sliding_window_view(
    buf: bytes, width: int, skip: int, step: int, dtype: type[np.generic], writable: bool
) -> None:
    """The same rows and shape as ``sliding_window_view``, read-only as it is, for a
    buffer's view (read-only or not), a slice of it from any offset, a strided one
    (numpy's own then) and wider items."""
    whole = len(buf) // np.dtype(dtype).itemsize * np.dtype(dtype).itemsize
    base = np.frombuffer(bytearray(buf[:whole]) if writable else buf[:whole], dtype)
    view = base[skip::step]
    if len(view) < width:
        return
    got, want = windows(view, width), sliding_window_view(view, width)
    assert got.shape == want.shape
    assert got.tolist() == want.tolist()
    assert not got.flags.writeable and not want.flags.writeable


@given(st.integers(1, 12), st.data())
def test_among_is_np_isin(size: int, data: st.DataObject) -> None:
    """Indices below ``size`` or -1, and the chosen ones (repeats too): ``np.isin``'s rows."""
    values = np.array(data.draw(st.lists(st.integers(-1, size - 1), max_size=30)), np.int64)
    chosen = data.draw(st.lists(st.integers(0, size - 1), max_size=size + 2))
    assert among(values, chosen, size).tolist() == np.isin(values, chosen).tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 40), st.integers(-(2**63), 2**63 - 1)), max_size=40))
def test_distinct_is_np_unique(values: list[int]) -> None:
    """Counted (small non-negative ints) or not, the values and inverse of ``np.unique``."""
    array = np.array(values, np.int64)
    found, inverse = np.unique(array, return_inverse=True)
    assert distinct(array).tolist() == found.tolist()
    got, rows = distinct_inverse(array)
    assert got.tolist() == found.tolist()
    assert rows.tolist() == inverse.ravel().tolist()


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(1, 16), st.data())
def test_rows_within_reads_the_last_byte_past_the_end(
    buf: bytes, width: int, data: st.DataObject
) -> None:
    """Each row is ``buf[at:at + width]``, a row running past the end padded with the
    buffer's last byte; rows that fit are ``rows_at``'s."""
    view = np.frombuffer(buf, np.uint8)
    at = data.draw(st.lists(st.integers(0, len(buf) - 1), max_size=12))
    rows = rows_within(view, np.array(at, np.int64), width)
    assert rows.shape == (len(at), width)
    want = [(buf[a : a + width] + buf[-1:] * width)[:width] for a in at]
    assert [row.tobytes() for row in rows] == want


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=200), st.data())
def test_spaced_hex_is_bytes_hex_with_spaces(buf: bytes, data: st.DataObject) -> None:
    """Each row's bytes as ``bytes.hex(" ")`` writes them (the ``leaked_hex`` column), of
    any width from 1 byte, rows of several widths together, up to the buffer's last byte."""
    view = np.frombuffer(buf, np.uint8)
    spans = data.draw(
        st.lists(
            st.integers(0, len(buf) - 1).flatmap(
                lambda at: st.tuples(st.just(at), st.integers(1, len(buf) - at))
            ),
            max_size=12,
        )
    )
    at = np.array([a for a, _ in spans], np.int64)
    size = np.array([n for _, n in spans], np.int64)
    spaced = spaced_hex(view, at, size)
    want = [buf[a : a + n].hex(" ") for a, n in spans]
    assert spaced.texts().tolist() == want
    text, length = spaced.text()  # the fast path: every row's text back to back
    assert text == "".join(want).encode("ascii")
    assert length.tolist() == [len(w) for w in want]
