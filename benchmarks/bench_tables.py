"""What the packets table costs to write, side by side in one run: packets.parquet with
pyarrow's default encoding (every column dictionary-encoded) and with the writer's
(``tables.DICTIONARY_COLUMNS``: the text columns but ``iv``), and packets.csv.

Usage: python benchmarks/bench_tables.py PACKETS_PARQUET [--rounds 3]

PACKETS_PARQUET: the table of a run (``espforensics analyze ... --out DIR``; the
2M-frame bench capture's is the one docs/performance.md gives). Each round writes
the table again in the writer's row groups (``tables.ROW_GROUP`` rows) both ways, in
turn, then CSV of its rows up to ``tables.CSV_ROWS``, and prints CPU seconds (this
thread's: the writer's thread does the same work), the file sizes and the ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from espforensics.model.options import CSV_ROWS
from espforensics.tables.schema import (
    CSV_SCHEMA,
    DICTIONARY_COLUMNS,
    ROW_GROUP,
    csv_table,
    packet_schema,
)


def _cpu(write: Callable[[], None]) -> float:
    start = time.process_time()
    write()
    return time.process_time() - start


def _parquet(groups: list[pa.Table], out: Path, dictionary: bool | list[str]) -> None:
    with pq.ParquetWriter(out, packet_schema(), use_dictionary=dictionary) as writer:
        for table in groups:
            writer.write_table(table)


def _csv(groups: list[pa.Table], out: Path) -> None:
    with pacsv.CSVWriter(str(out), CSV_SCHEMA) as writer:
        rows = 0
        for table in groups:
            if rows >= CSV_ROWS:
                break
            writer.write_table(csv_table(table))
            rows += table.num_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parquet", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    table = pq.read_table(args.parquet).cast(packet_schema())
    groups = [pa.Table.from_batches([b]) for b in table.to_batches(ROW_GROUP)]
    print(f"{table.num_rows:,} rows in {len(groups)} row groups of {ROW_GROUP:,}")
    with tempfile.TemporaryDirectory() as tmp:
        every, text = Path(tmp) / "every.parquet", Path(tmp) / "text.parquet"
        for r in range(1, args.rounds + 1):
            a = _cpu(lambda: _parquet(groups, every, True))
            b = _cpu(lambda: _parquet(groups, text, DICTIONARY_COLUMNS))
            c = _cpu(lambda: _csv(groups, Path(tmp) / "packets.csv"))
            sa, sb = every.stat().st_size, text.stat().st_size
            print(
                f"round {r}: parquet, every column dictionary {a:.2f} CPU s {sa / 1e6:.1f} MB; "
                f"text columns but iv {b:.2f} CPU s {sb / 1e6:.1f} MB; "
                f"ratio {b / a:.2f} CPU, {sb / sa:.2f} size; "
                f"csv of {min(table.num_rows, CSV_ROWS):,} rows {c:.2f} CPU s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
