"""arrow_arrays builds what ``pa.array`` builds, value for value and null for null.

The packets table's columns are built from buffers so that a run imports no
pandas (pyarrow's ``pa.array`` does); each builder is held equal to
``pa.array`` of the same values and type, on generated values (nulls, empty
lists, non-ASCII text, the ends of each integer range), and so is each column
of a real records table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.model.arrays import SpacedHex
from espforensics.model.enums import Proto, Verdict
from espforensics.model.records import PacketRecord
from espforensics.tables.arrow import (
    bools,
    from_list,
    from_numpy,
    hex_rows,
    pick,
    scalar,
    spaced_hex_column,
    strings,
    to_numpy,
)
from espforensics.tables.rows import records_to_table
from espforensics.tables.schema import TIME_TYPE, packet_schema

SETTINGS = settings(max_examples=200, deadline=None)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=12)  # any code point but surrogates: UTF-8 of 1 to 4 bytes


def _same(built: pa.Array, reference: pa.Array) -> None:
    built.validate(full=True)
    assert built.type == reference.type
    assert built.null_count == reference.null_count
    assert built.equals(reference)
    assert built.to_pylist() == reference.to_pylist()


@SETTINGS
@given(st.lists(st.one_of(st.none(), INT64), max_size=40))
def test_int_lists(values: list[int | None]) -> None:
    _same(from_list(values, pa.int64()), pa.array(values, pa.int64()))


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.integers(0, 2**64 - 1)), max_size=40))
def test_uint64_lists(values: list[int | None]) -> None:
    _same(from_list(values, pa.uint64()), pa.array(values, pa.uint64()))


@SETTINGS
@given(st.lists(st.one_of(st.none(), INT64), max_size=40))
def test_timestamp_lists(values: list[int | None]) -> None:
    _same(from_list(values, TIME_TYPE), pa.array(values, TIME_TYPE))


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.booleans()), max_size=40))
def test_bool_lists(values: list[bool | None]) -> None:
    _same(from_list(values, pa.bool_()), pa.array(values, pa.bool_()))


@SETTINGS
@given(st.lists(st.one_of(st.none(), TEXT), max_size=40))
def test_string_lists_and_object_arrays(values: list[str | None]) -> None:
    reference = pa.array(values, pa.string())
    _same(from_list(values, pa.string()), reference)
    _same(strings(np.array(values, dtype=object).reshape(-1)), reference)


@SETTINGS
@given(st.lists(TEXT, min_size=1, max_size=5), st.data())
def test_picked_values(values: list[str], data: st.DataObject) -> None:
    """``pick`` is ``values[i]`` for each index, one value repeated or several mixed."""
    idx = data.draw(st.lists(st.integers(0, len(values) - 1), max_size=40))
    picked = pick(values, np.array(idx, np.int64))
    _same(picked, pa.array([values[i] for i in idx], pa.string()))


@SETTINGS
@given(st.lists(st.tuples(st.binary(min_size=16, max_size=16), st.sampled_from([8, 16]))))
def test_hex_rows_are_bytes_hex(rows: list[tuple[bytes, int]]) -> None:
    """The IV column: each row's first 8 or 16 bytes as ``bytes.hex`` writes them."""
    block = np.frombuffer(b"".join(r for r, _ in rows), np.uint8).reshape(len(rows), 16)
    used = np.array([u for _, u in rows], np.int64)
    _same(hex_rows(block, used), pa.array([r[:u].hex() for r, u in rows], pa.string()))


@SETTINGS
@given(
    st.lists(st.binary(max_size=40), max_size=12),
    st.lists(st.binary(max_size=20), max_size=12),
    st.data(),
)
def test_a_leaked_hex_column_is_each_row_s_bytes_hex_with_spaces(
    first: list[bytes], second: list[bytes], data: st.DataObject
) -> None:
    """The ``leaked_hex`` column of a run: rows ``at`` (any order, a row given twice
    keeping the last) the text of their bytes as ``bytes.hex(" ")`` writes it, the other
    rows empty; from two parts of other widths joined, then some rows taken, as the lane
    passes them on. The reference: the column of ``str`` made row by row."""
    parts = [SpacedHex.of(first), SpacedHex.of(second)]
    rows = first + second
    hexes = SpacedHex.joined(parts)
    keep = np.array(
        data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows))), np.bool_
    )
    kept = [r for r, k in zip(rows, keep.tolist(), strict=True) if k]
    n = data.draw(st.integers(len(kept), len(kept) + 5))
    at = (
        np.array(
            data.draw(st.lists(st.integers(0, n - 1), min_size=len(kept), max_size=len(kept))),
            np.intp,
        )
        if n
        else np.zeros(0, np.intp)
    )
    column = np.full(n, "", object)
    column[at] = [r.hex(" ") for r in kept]
    _same(spaced_hex_column(n, at, hexes.take(keep)), strings(column))


@SETTINGS
@given(st.lists(st.tuples(INT64, st.booleans()), max_size=40))
def test_numpy_values_with_a_mask(pairs: list[tuple[int, bool]]) -> None:
    values = np.array([v for v, _ in pairs], np.int64)
    present = np.array([p for _, p in pairs], np.bool_)
    _same(from_numpy(values, pa.int64(), present), pa.array(values, pa.int64(), mask=~present))
    _same(from_numpy(values, pa.int64()), pa.array(values, pa.int64()))
    _same(bools(present), pa.array(present, pa.bool_()))
    _same(bools(present, present), pa.array(present, pa.bool_(), mask=~present))


def test_numpy_values_are_cast_to_the_width_of_the_type() -> None:
    """As ``pa.array`` casts: an int32 column, a uint64 one, float seconds."""
    _same(from_numpy(np.array([1, -2], np.int32), pa.int64()), pa.array([1, -2], pa.int64()))
    top = np.array([2**64 - 1, 0], np.uint64)
    _same(from_numpy(top, pa.uint64()), pa.array(top, pa.uint64()))
    _same(from_numpy(np.array([1e9]), pa.float64()), pa.array([1e9], pa.float64()))
    _same(from_numpy(np.array([5], np.int64), TIME_TYPE), pa.array([5], TIME_TYPE))


@SETTINGS
@given(st.lists(st.text(st.characters(max_codepoint=127), max_size=12), max_size=40))
def test_ascii_string_lists(values: list[str]) -> None:
    """ASCII text, NUL included, as nearly every column holds (their own path: each value's
    length is its length in bytes)."""
    reference = pa.array(values, pa.string())
    _same(strings(values), reference)
    _same(strings(np.array([*values, "x"], dtype=object)[:-1]), reference)


def test_a_string_column_refuses_a_value_of_another_type() -> None:
    with pytest.raises(TypeError):
        strings(["ok", 3])  # type: ignore[list-item]


def test_a_records_table_is_the_one_pa_array_builds() -> None:
    """Every column of the packets table, enums, nulls and text of several widths in it."""
    records = [
        PacketRecord(frame=1, time=1_700_000_000_123_456_789, caplen=98, len=98),
        PacketRecord(
            frame=2,
            time=0,
            caplen=1514,
            len=1514,
            verdict=Verdict.OK,
            proto=Proto.ESP_UDP,
            ip_version=4,
            src="192.0.2.1",
            dst="198.51.100.7",
            udp_sport=4500,
            udp_dport=4500,
            spi=0x1001,
            algorithm="rfc4106(gcm(aes))",
            seq=7,
            seq64=2**32 + 7,
            seq_hi_verified=1,
            iv="00000000000000a7",
            iv_reused=False,
            detail="pad byte 3 is 0x07, expected 0x03 — «non-ASCII»",
        ),
        PacketRecord(frame=3, time=2, caplen=60, len=60, iv_reused=True, seq64=2**64 - 1),
    ]
    table = records_to_table(records)
    assert table.schema.equals(packet_schema(), check_metadata=True)
    for name in table.column_names:
        values = [getattr(r, name) for r in records]
        _same(table.column(name).chunk(0), pa.array(values, packet_schema().field(name).type))


@SETTINGS
@given(st.lists(INT64, max_size=40), st.lists(st.booleans(), max_size=40), st.data())
def test_to_numpy_reads_what_pa_array_holds(
    ints: list[int], flags: list[bool], data: st.DataObject
) -> None:
    """``to_numpy`` (the copies' reader of packets.parquet, rewrite/rows.py) gives the
    values, from any offset of the column (a slice of a batch) and across its chunks;
    ``scalar`` is ``pa.scalar``."""
    for values, type_ in ((ints, pa.int64()), (flags, pa.bool_())):
        column = pa.array(values, type_)
        at = data.draw(st.integers(0, len(values)))
        part = column.slice(at)
        assert to_numpy(part).tolist() == values[at:]
        chunked = pa.chunked_array([column.slice(0, at), part], type_)
        assert to_numpy(chunked).tolist() == values
    assert to_numpy(pa.array([2**64 - 1], pa.uint64())).tolist() == [2**64 - 1]
    for value, type_ in ((7, pa.int64()), (True, pa.bool_()), ("x", pa.string())):
        assert scalar(value, type_).equals(pa.scalar(value, type_))
    with pytest.raises(ValueError, match="without nulls"):
        to_numpy(pa.array([1, None], pa.int64()))
