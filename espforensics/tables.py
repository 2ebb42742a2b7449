"""Tables on disk and in memory: packets.csv/.parquet, sas.csv, summary.json.

In: batches of ``PacketRecord`` and a ``Summary``. Out: files in the output
folder (the packets table streamed in row groups, so memory does not grow
with the capture) and pandas DataFrames for the library API. Raises
``OSError`` from the file system, which callers wrap. The only module
that imports pyarrow and pandas.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from espforensics.model import PACKET_COLUMNS, Finding, PacketRecord
from espforensics.summary import Summary

_INT_COLUMNS = frozenset(
    {
        "frame",
        "caplen",
        "len",
        "ip_version",
        "udp_sport",
        "udp_dport",
        "spi",
        "seq",
        "esp_offset",
        "expected_offset",
        "esp_len",
        "fragments",
        "pad_len",
        "next_header",
        "payload_len",
        "inner_sport",
        "inner_dport",
        "leaked",
        "iv_seq_delta",
    }
)
_UINT64_COLUMNS = frozenset({"seq64"})
_BOOL_COLUMNS = frozenset({"iv_reused"})
_FLOAT_COLUMNS = frozenset({"time"})


def _arrow_type(name: str) -> pa.DataType:
    if name in _INT_COLUMNS:
        return pa.int64()
    if name in _UINT64_COLUMNS:
        return pa.uint64()
    if name in _FLOAT_COLUMNS:
        return pa.float64()
    if name in _BOOL_COLUMNS:
        return pa.bool_()
    return pa.string()


PACKET_SCHEMA = pa.schema([pa.field(n, _arrow_type(n)) for n in PACKET_COLUMNS])
ROW_GROUP = 16384


def records_to_table(records: Sequence[PacketRecord]) -> pa.Table:
    """A columnar Arrow table of records (enums become their string values)."""
    columns = []
    for name in PACKET_COLUMNS:
        values = [getattr(r, name) for r in records]
        columns.append(pa.array(values, type=PACKET_SCHEMA.field(name).type))
    return pa.Table.from_arrays(columns, schema=PACKET_SCHEMA)


class PacketTableWriter:
    """Streams records to packets.parquet and packets.csv in row groups."""

    def __init__(self, out_dir: Path) -> None:
        self._parquet = pq.ParquetWriter(out_dir / "packets.parquet", PACKET_SCHEMA)
        self._csv = pacsv.CSVWriter(str(out_dir / "packets.csv"), PACKET_SCHEMA)
        self._batch: list[PacketRecord] = []

    def write(self, rec: PacketRecord) -> None:
        """Queue one record; a full row group is flushed to both files."""
        self._batch.append(rec)
        if len(self._batch) >= ROW_GROUP:
            self.flush()

    def flush(self) -> None:
        """Write the queued records as one row group."""
        if self._batch:
            table = records_to_table(self._batch)
            self._parquet.write_table(table)
            self._csv.write_table(table)
            self._batch = []

    def close(self) -> None:
        """Flush and close both files."""
        self.flush()
        self._parquet.close()
        self._csv.close()

    def __enter__(self) -> PacketTableWriter:
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


SA_COLUMNS = (
    "spi",
    "src",
    "dst",
    "algorithm",
    "packets",
    "ok",
    "auth_fail",
    "other_verdicts",
    "first_seq64",
    "last_seq64",
    "first_time",
    "last_time",
    "wire_bytes",
    "leaked",
    "iv_reused",
    "iv_deviating",
    "duplicates",
    "reordered",
    "missing",
)


def write_sas_csv(path: Path, summary: Summary) -> None:
    """``sas.csv``: one row per SA seen."""
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(SA_COLUMNS)
        for sa in summary.sas:
            others = ";".join(
                f"{k}={v}" for k, v in sa.verdicts.items() if k not in ("ok", "auth_fail")
            )
            out.writerow(
                [
                    f"{sa.spi:#010x}",
                    sa.src,
                    sa.dst,
                    sa.algorithm,
                    sa.packets,
                    sa.verdicts.get("ok", 0),
                    sa.verdicts.get("auth_fail", 0),
                    others,
                    sa.first_seq64,
                    sa.last_seq64,
                    f"{sa.first_time:.9f}",
                    f"{sa.last_time:.9f}",
                    sa.wire_bytes,
                    sa.leaked,
                    sa.iv_reused,
                    sa.iv_deviating,
                    sa.duplicates,
                    sa.reordered,
                    sa.missing,
                ]
            )


FINDING_COLUMNS = ("kind", "severity", "spi", "src", "dst", "count", "frames", "detail")


def write_findings_csv(path: Path, findings: Sequence[Finding]) -> None:
    """``findings.csv``: one row per finding, most severe first."""
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(FINDING_COLUMNS)
        for f in findings:
            out.writerow(
                [
                    f.kind.value,
                    f.severity.value,
                    "" if f.spi is None else f"{f.spi:#010x}",
                    f.src,
                    f.dst,
                    f.count,
                    " ".join(map(str, f.frames)),
                    f.detail,
                ]
            )


def write_summary_json(path: Path, summary: Summary) -> None:
    """``summary.json``, indented, keys in a stable order."""
    path.write_text(json.dumps(summary.to_json(), indent=2) + "\n")


def read_summary_json(path: Path) -> Summary:
    """Read back a ``summary.json``."""
    return Summary.from_json(json.loads(path.read_text()))


def packets_frame(tables: Sequence[pa.Table]) -> pd.DataFrame:
    """The packets table as a pandas DataFrame (nullable integer columns)."""
    table = pa.concat_tables(tables) if tables else PACKET_SCHEMA.empty_table()
    frame: pd.DataFrame = table.to_pandas(types_mapper=pd.ArrowDtype)
    return frame
