"""The rows of a packets.parquet beside the capture's batches: the copies' columns.

In: a packets.parquet and the columns a copy reads. Out: ``PacketRows``
hands out its rows (one per frame, the outermost ESP layer's, as
``tables.iter_packet_batches`` reads them) a batch at a time, as a
``RowSlice`` whose columns read as numpy arrays and whose rows read as
``PacketRecord`` (``tables.packet_record``, the per-frame writers' form)
where a copy needs one; ``table_caplens`` gives every frame's captured
length, with which ``Capture.known_batches`` reads the capture again
without walking its records. Raises nothing of its own (pyarrow's errors on a
damaged table: the analysis wrote it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from espforensics.model.arrays import I64, Mask
from espforensics.model.records import PacketRecord
from espforensics.tables.arrow import from_numpy, scalar, strings, to_numpy
from espforensics.tables.packets import iter_packet_batches, packet_record


@dataclass(frozen=True, slots=True)
class RowSlice:
    """Consecutive rows of the table."""

    table: pa.Table

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def ints(self, name: str, null: int) -> I64:
        """An integer column, ``null`` where it is empty."""
        column = pc.fill_null(self.table.column(name), scalar(null, pa.int64()))
        return np.asarray(to_numpy(column), np.int64)

    def u64(self, name: str) -> npt.NDArray[np.uint64]:
        """An unsigned 64-bit column (seq64), 0 where it is empty."""
        column = pc.fill_null(self.table.column(name), scalar(0, pa.uint64()))
        return np.asarray(to_numpy(column), np.uint64)

    def nulls(self, name: str) -> Mask:
        return np.asarray(to_numpy(pc.is_null(self.table.column(name))), np.bool_)

    def is_in(self, name: str, values: Iterable[str]) -> Mask:
        """The rows whose ``name`` is one of ``values`` (never an empty one)."""
        found = pc.is_in(self.table.column(name), value_set=strings(list(values)))
        return _mask(found)

    def contains(self, name: str, text: str) -> Mask:
        """The rows whose string ``name`` holds ``text`` (never an empty one)."""
        return _mask(pc.match_substring(self.table.column(name), text))

    def truthy(self, name: str) -> Mask:
        """The rows whose ``name`` is neither empty, 0, False nor ""."""
        column = self.table.column(name)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            set_ = pc.not_equal(column, scalar("", pa.string()))
        elif pa.types.is_boolean(column.type):
            set_ = column
        else:
            set_ = pc.not_equal(column, scalar(0, column.type))
        return _mask(set_)

    def without(self, names: Sequence[str]) -> RowSlice:
        """These rows without the columns ``names`` (another copy's, in a read of both)."""
        return RowSlice(self.table.drop_columns(list(names))) if names else self

    def slice(self, first: int, count: int) -> RowSlice:
        return RowSlice(self.table.slice(first, count))

    def records(self, rows: Sequence[int]) -> list[PacketRecord]:
        """These rows as records, as the per-frame writers read them."""
        taken = self.table.take(from_numpy(np.asarray(rows, np.int64), pa.int64()))
        return [packet_record(row) for row in taken.to_pylist()]


def table_caplens(parquet: Path) -> I64:
    """Every frame's captured length, in capture order (``Capture.known_batches``)."""
    parts = [
        to_numpy(b.column(b.schema.get_field_index("caplen")))
        for b in iter_packet_batches(parquet, ())
    ]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def _mask(found: pa.ChunkedArray) -> Mask:
    """A boolean column as a mask, False where it is empty."""
    return np.asarray(to_numpy(pc.fill_null(found, scalar(False, pa.bool_()))), np.bool_)


class PacketRows:
    """A packets.parquet's rows, handed out ``take(n)`` at a time, in capture order."""

    def __init__(self, parquet: Path, columns: Sequence[str]) -> None:
        self._batches = iter_packet_batches(parquet, columns)
        self._pending: list[pa.RecordBatch] = []
        self._have = 0
        self._schema: pa.Schema | None = None

    def take(self, n: int) -> RowSlice:
        """The next ``n`` rows (fewer at the table's end)."""
        while self._have < n:
            batch = next(self._batches, None)
            if batch is None:
                break
            self._schema = batch.schema
            self._pending.append(batch)
            self._have += batch.num_rows
        if self._schema is None:  # an empty table: no row to give
            return RowSlice(pa.table({"frame": from_numpy(np.zeros(0, np.int64), pa.int64())}))
        table = pa.Table.from_batches(self._pending, self._schema)
        rest = table.slice(n)
        self._pending, self._have = rest.to_batches(), rest.num_rows
        return RowSlice(table.slice(0, n))


def same_frame(table_frame: int, capture_frame: int) -> None:
    """The table and the capture are one analysis's: a bug if a row is not its frame's."""
    if table_frame != capture_frame:
        raise RuntimeError(f"packets table row {table_frame} met capture frame {capture_frame}")
