"""The packets table on disk and in memory: packets.csv and packets.parquet.

In: batches of ``PacketRecord`` and the steady lane's ``SteadyRows``, made
row groups by tables/rows.py. Out: files in the output folder (the packets
table streamed in row groups, so memory does not grow with the capture),
the table read back, and pandas DataFrames for the library API. Raises
``OSError`` from the file system, which callers wrap.
With tables/schema.py and tables/rows.py (its columns, its tables),
tables/small.py (sas.csv, findings.csv), tables/arrow.py (the arrays,
built without ``pa.array``, which imports pandas) and plots/data.py (the
plots' data) the only modules that import pyarrow; pandas is imported only
by ``packets_frame`` and plots/data.py, for the library API and the plots.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from espforensics.model.enums import Proto, SeqAnomaly, Verdict
from espforensics.model.records import PacketRecord
from espforensics.tables.arrow import from_numpy, scalar
from espforensics.tables.rows import RowGroups
from espforensics.tables.schema import (
    CSV_SCHEMA,
    DICTIONARY_COLUMNS,
    ROW_GROUP,
    csv_table,
    packet_schema,
)

if TYPE_CHECKING:  # imported by packets_frame when called: 0.24 s of every run's start-up
    import pandas as pd

_QUEUED = 2  # row groups waiting for the writer thread at the most


# packets.csv formatted a row group at a time: batches of 1,024 rows (the default) cost
# 0.19 s of CPU per 200,000 rows of a steady run, one of 8,192 0.16 s; the same bytes.
_CSV_OPTIONS = pacsv.WriteOptions(batch_size=ROW_GROUP)


def _csv_writer(path: Path) -> pacsv.CSVWriter:
    return pacsv.CSVWriter(str(path), CSV_SCHEMA, write_options=_CSV_OPTIONS)


# Rows seen before the CSV's fate is projected from the bytes they came from.
_SAMPLE = 65_536


class PacketTableWriter(RowGroups):
    """Streams records to packets.parquet and packets.csv in row groups.

    The files are encoded and written on a thread (pyarrow releases the GIL
    there: 3.4 us per frame taken off the analyzing thread). At most
    ``_QUEUED`` row groups wait for it, so memory stays bounded. The
    caller names the files (analysis/__init__.py writes them under temporary names).
    ``csv_rows``: packets.csv is written while the capture has at most that
    many frames, and removed once it has more (``csv_dropped``); None: always
    written; 0: never.

    ``size``: the capture file's bytes, when known. ``reached`` is told how
    many of them were read; once the rows so far project to more than 5/4 of
    ``csv_rows``, the CSV stops being written (else a capture of 2M frames
    writes, then removes, 225 MB of it: 1.3-1.6 CPU s, benchmarks/bench_tables.py).
    Should the capture end with at most ``csv_rows`` frames after all, ``close``
    writes packets.csv from packets.parquet, the same bytes: the projection
    decides only the speed.
    """

    def __init__(
        self, parquet: Path, csv_path: Path, csv_rows: int | None = None, size: int | None = None
    ) -> None:
        self._parquet_path = parquet
        self._parquet = pq.ParquetWriter(
            parquet, packet_schema(), use_dictionary=DICTIONARY_COLUMNS
        )
        self._csv_path, self._csv_rows = csv_path, csv_rows
        self._rows_given = self._csv_written = 0  # rows handed to the thread; that it wrote
        self._csv = None if csv_rows == 0 else _csv_writer(csv_path)
        self._size, self._deferred = size, False
        self.csv_dropped = False
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="espforensics-tables")
        self._pending: deque[Future[None]] = deque()
        super().__init__(self._submit)

    def reached(self, at: int) -> None:
        """``at`` bytes of the capture are read (the rows given so far came from them)."""
        limit = self._csv_rows
        if self._csv is None or limit is None or self._deferred or not self._size or at <= 0:
            return
        if self._rows_given >= _SAMPLE and 4 * self._rows_given * self._size > 5 * limit * at:
            self._deferred = True  # the writer's thread closes the CSV between two row groups
            self._pending.append(self._pool.submit(self._drop_csv))

    def _submit(self, table: pa.Table) -> None:
        self._rows_given += table.num_rows
        self._pending.append(self._pool.submit(self._write_both, table))
        while len(self._pending) > _QUEUED or (self._pending and self._pending[0].done()):
            self._pending.popleft().result()  # raises the writer's error, if any

    def _write_both(self, table: pa.Table) -> None:
        self._parquet.write_table(table)
        if self._csv is None:
            return
        self._csv_written += table.num_rows
        if self._csv_rows is not None and self._csv_written > self._csv_rows:
            self._drop_csv()
            return
        self._csv.write_table(csv_table(table))

    def _drop_csv(self) -> None:
        if self._csv is not None:
            self._csv.close()
            self._csv = None
            self._csv_path.unlink()
            self.csv_dropped = True

    def _csv_from_parquet(self) -> None:
        """packets.csv as the writer would have written it: row group by row group."""
        with _csv_writer(self._csv_path) as out:
            parquet = pq.ParquetFile(self._parquet_path)
            for group in range(parquet.num_row_groups):
                out.write_table(csv_table(parquet.read_row_group(group, use_threads=False)))
        self.csv_dropped = False

    def close(self) -> None:
        """Flush and close both files."""
        try:
            self.flush()
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._pool.shutdown()
            self._parquet.close()
            if self._csv is not None:
                self._csv.close()
        limit = self._csv_rows
        if self._deferred and limit is not None and self._rows_given <= limit:
            self._csv_from_parquet()

    def __enter__(self) -> PacketTableWriter:
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def packets_frame(tables: Sequence[pa.Table]) -> pd.DataFrame:
    """The packets table as a pandas DataFrame (nullable integer columns)."""
    import pandas as pd  # noqa: PLC0415  # only here: see the TYPE_CHECKING import

    table = pa.concat_tables(tables) if tables else packet_schema().empty_table()
    frame: pd.DataFrame = table.to_pandas(types_mapper=pd.ArrowDtype)
    return frame


_RECORD_BATCH = 8192
_NO_NS = from_numpy(np.zeros(1, np.int64), pa.int64())[0]  # 0 as pa.scalar would, without pandas
_ALWAYS = ("frame", "time", "caplen", "len")  # PacketRecord's fields without a default
_ONE, _TRUE = scalar(1, pa.int64()), scalar(True, pa.bool_())  # pa.scalar imports pandas


def inner_layers(parquet: Path) -> dict[tuple[int, int], int]:
    """The ``layer`` of every row of a packets.parquet past a frame's outermost ESP packet
    (ESP inside ESP), by (frame, spi): where a finding about that SPI sits in that frame."""
    table = pq.read_table(parquet, columns=["frame", "spi", "layer"], filters=[("layer", ">", 1)])
    rows = zip(*(table.column(n).to_pylist() for n in ("frame", "spi", "layer")), strict=True)
    return {(frame, spi): layer for frame, spi, layer in rows if spi is not None}


def iter_packet_batches(
    parquet: Path, columns: Sequence[str], every_layer: bool = False
) -> Iterator[pa.RecordBatch]:
    """The rows of a packets.parquet as Arrow batches, in capture order.

    Only ``columns`` (and frame, time, caplen, len) are read, ``time`` as
    int64 ns (0 where null). For the passes that rewrite the capture
    (rewrite/), which walk it again beside its table: one row per frame,
    its outermost ESP layer's (the rows of ESP inside ESP, ``layer`` 2 on,
    are left out unless ``every_layer``).
    """
    import pyarrow.compute as pc  # noqa: PLC0415  # --annotate, --decrypted: not at start-up

    reader = pq.ParquetFile(parquet, pre_buffer=False)
    layered = "layer" in reader.schema_arrow.names  # tables written before it have one layer
    names = list(dict.fromkeys([*_ALWAYS, *columns, *(["layer"] if layered else [])]))
    for read in reader.iter_batches(_RECORD_BATCH, columns=names, use_threads=False):
        at = read.schema.get_field_index("time")
        ns = pc.fill_null(pc.cast(read.column(at), pa.int64()), _NO_NS)  # not read by rewrite/
        batch = read.set_column(at, "time", ns)
        if layered and not every_layer:
            layer = batch.column(batch.schema.get_field_index("layer"))
            outer = pc.fill_null(pc.less_equal(layer, _ONE), _TRUE)
            if not pc.all(outer).as_py():
                batch = batch.filter(outer)
        yield batch


def packet_record(row: dict[str, Any]) -> PacketRecord:
    """A row of ``iter_packet_batches`` (``to_pylist``) as a record; null fields keep
    their defaults."""
    if "verdict" in row:
        row["verdict"] = Verdict(row["verdict"])
    if "proto" in row:
        row["proto"] = Proto(row["proto"])
    if row.get("seq_anomaly") is not None:
        row["seq_anomaly"] = SeqAnomaly(row["seq_anomaly"])
    return PacketRecord(**{k: v for k, v in row.items() if v is not None})


def iter_packet_records(
    parquet: Path, columns: Sequence[str], every_layer: bool = False
) -> Iterator[PacketRecord]:
    """The rows of ``iter_packet_batches`` as records, a row group at a time."""
    for batch in iter_packet_batches(parquet, columns, every_layer):
        for row in batch.to_pylist():
            yield packet_record(row)
