"""The small tables of a run: sas.csv, findings.csv, and plain rows as CSV and Parquet.

In: a ``Summary``, its findings, or rows of plain values (a batch run's
captures table). Out: the files. Raises ``OSError`` from the file system,
which callers wrap. The packets table, streamed by the row group, is
tables.py's.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from espforensics.frames import runs_text
from espforensics.model import Finding
from espforensics.summary import Summary

SA_COLUMNS = (
    "spi",
    "spi_hex",
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
    "tfc_packets",
    "tfc_bytes",
    "tfc_padded_to",
    "inner_checksums",
    "iv_scheme",
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
                    sa.spi,
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
                    sa.tfc_packets,
                    sa.tfc_bytes,
                    ";".join(f"{k}={v}" for k, v in sa.tfc_padded_to.items()),
                    ";".join(f"{k}={v}" for k, v in sa.inner_checksums.items()),
                    sa.iv_scheme,
                ]
            )


# ``spi`` an integer in every table (the key packets, sas and findings join on), ``spi_hex``
# the same as people read it (0x00001001).
FINDING_COLUMNS = (
    "kind",
    "severity",
    "spi",
    "spi_hex",
    "src",
    "dst",
    "count",
    "frames",
    "detail",
)


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
                    "" if f.spi is None else f.spi,
                    "" if f.spi is None else f"{f.spi:#010x}",
                    f.src,
                    f.dst,
                    f.count,
                    runs_text(f.frames),
                    f.detail,
                ]
            )


def write_rows(stem: Path, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """``STEM.csv`` and ``STEM.parquet`` from plain rows (types inferred per column)."""
    data = {name: [row[i] for row in rows] for i, name in enumerate(columns)}
    table = (
        pa.table(data) if rows else pa.table({name: pa.array([], pa.string()) for name in columns})
    )
    pq.write_table(table, stem.with_suffix(".parquet"))
    with stem.with_suffix(".csv").open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(columns)
        out.writerows(rows)
