"""The small tables of a run: sas.csv, findings.csv, and plain rows as CSV and Parquet.

In: a ``Summary``, its findings, or rows of plain values (a batch run's
captures table). Out: the files. Raises ``OSError`` from the file system,
which callers wrap. The packets table, streamed by the row group, is
tables/packets.py's.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from espforensics.bounded.frames import Frames, runs_text
from espforensics.bounded.intervals import I64
from espforensics.model.records import Finding
from espforensics.results.summary import SaSummary, Summary
from espforensics.tables.arrow import from_numpy

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
    "icmp_quoted",
)


def seconds(ns: int, digits: int) -> str:
    """Seconds since the epoch with ``digits`` decimals, exactly: 1795993350343337000 ns of a
    microsecond capture is "1795993350.343337" (a float would print ...343337059)."""
    whole, frac = divmod(abs(ns), 10**9)
    sign = "-" if ns < 0 else ""
    return f"{sign}{whole}" + (f".{frac:09d}"[: digits + 1] if digits else "")


def write_sas_csv(path: Path, summary: Summary) -> None:
    """``sas.csv``: one row per SA seen (the rows made as the writer asks, in one call)."""
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(SA_COLUMNS)
        out.writerows(_sa_row(sa, summary.capture.time_digits) for sa in summary.sas)


def _sa_row(sa: SaSummary, digits: int) -> list[object]:
    verdicts = sa.verdicts
    others = ";".join(f"{k}={v}" for k, v in verdicts.items() if k not in _SHOWN_APART)
    return [
        sa.spi,
        f"{sa.spi:#010x}",
        sa.src,
        sa.dst,
        sa.algorithm,
        sa.packets,
        verdicts.get("ok", 0),
        verdicts.get("auth_fail", 0),
        others,
        sa.first_seq64,
        sa.last_seq64,
        seconds(sa.first_ns, digits),
        seconds(sa.last_ns, digits),
        sa.wire_bytes,
        sa.leaked,
        sa.iv_reused,
        sa.iv_deviating,
        sa.duplicates,
        sa.reordered,
        sa.missing,
        sa.tfc_packets,
        sa.tfc_bytes,
        ";".join(f"{k}={v}" for k, v in sa.tfc_padded_to.items()) if sa.tfc_padded_to else "",
        ";".join(f"{k}={v}" for k, v in sa.inner_checksums.items()) if sa.inner_checksums else "",
        sa.iv_scheme,
        sa.icmp_quoted,
    ]


_SHOWN_APART = frozenset(("ok", "auth_fail"))  # sas.csv's columns of their own


# ``spi`` an integer in every table (the key packets, sas and findings join on), ``spi_hex``
# the same as people read it (0x00001001). ``id``: the finding's number, 1 for the first row,
# which finding_frames.csv's ``finding`` names.
FINDING_COLUMNS = (
    "id",
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
        for number, f in enumerate(findings, 1):
            out.writerow(
                [
                    number,
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


FINDING_FRAME_COLUMNS = ("finding", "frame", "layer")
_LINK_SCHEMA = pa.schema([(name, pa.int64()) for name in FINDING_FRAME_COLUMNS])
_LINK_ROWS = 1 << 16  # rows of finding_frames.parquet per record batch


def every_frame(frames: Sequence[int], rows: int) -> Iterator[I64]:
    """The frames of ``frames`` as int64 arrays of ``rows`` frames (the last fewer), from
    its runs without a loop per frame. Each array is made of the runs it spans alone: a
    keyless NULL capture's leak finding names 1.7 million frames of 2 million in 330,000
    runs: made whole at once, they and their temporaries raised the run's peak
    (docs/performance.md, "The frames of a big finding")."""
    firsts, lasts = Frames.of(frames).run_arrays()
    lengths = lasts - firsts + 1
    ends = np.cumsum(lengths)  # each run's end, counted in frames from the first
    total = int(ends[-1]) if len(ends) else 0
    for start in range(0, total, rows):
        stop = min(start + rows, total)
        first, last = np.searchsorted(ends, [start, stop - 1], side="right").tolist()
        a, b = firsts[first : last + 1].copy(), lasts[first : last + 1].copy()
        a[0] += start - int(ends[first] - lengths[first])  # from the frame at start
        b[-1] -= int(ends[last]) - stop  # to the frame before stop
        counts = b - a + 1
        offsets = np.repeat(np.cumsum(counts) - counts, counts)
        every: I64 = np.arange(stop - start, dtype=np.int64)
        every += np.repeat(a, counts) - offsets
        yield every


def finding_frames(
    findings: Sequence[Finding], layers: Mapping[tuple[int, int], int]
) -> Iterator[pa.RecordBatch]:
    """finding_frames' rows, a finding at a time (split past ``_LINK_ROWS`` frames).

    ``layers``: the ESP layer (packets' ``layer`` column) of each (frame, spi) that is not
    a frame's outermost; every other frame a finding names is its layer 1.
    """
    for number, f in enumerate(findings, 1):
        for part in every_frame(f.frames, _LINK_ROWS):
            layer = np.ones(len(part), np.int64)
            if layers and f.spi is not None:
                spi = f.spi
                layer = np.fromiter((layers.get((int(n), spi), 1) for n in part), np.int64)
            numbers = np.full(len(part), number, np.int64)
            yield pa.RecordBatch.from_arrays(
                [from_numpy(column, pa.int64()) for column in (numbers, part, layer)],
                schema=_LINK_SCHEMA,
            )


def write_finding_frames(
    csv_path: Path,
    parquet_path: Path,
    findings: Sequence[Finding],
    layers: Mapping[tuple[int, int], int],
) -> None:
    """``finding_frames.csv`` and ``.parquet``: one row per (finding, frame, layer), so
    findings join packets on ``frame`` and ``layer`` without parsing runs of frames."""
    with (
        pq.ParquetWriter(parquet_path, _LINK_SCHEMA) as parquet,
        csv_path.open("wb") as fh,
    ):
        fh.write(",".join(FINDING_FRAME_COLUMNS).encode() + b"\r\n")
        for batch in finding_frames(findings, layers):
            parquet.write_batch(batch)
            fh.write(_csv_rows(batch))


# integers only: nothing to quote; ``csv.writer``'s line ends, which the file always had
_LINK_CSV = pacsv.WriteOptions(include_header=False, quoting_style="none")


def _csv_rows(batch: pa.RecordBatch) -> bytes:
    """``batch``'s rows as ``csv.writer`` writes them (a row "1,2,1" and CRLF), by Arrow's
    CSV writer: 0.03 s for 200,000 rows, against 0.18 s through ``writerows``."""
    sink = pa.BufferOutputStream()
    pacsv.write_csv(batch, sink, _LINK_CSV)
    rows: bytes = sink.getvalue().to_pybytes()
    return rows.replace(b"\n", b"\r\n")


def read_finding_frames(parquet: Path) -> dict[tuple[int, int], list[int]]:
    """The finding ids of each (frame, layer) finding_frames.parquet names."""
    table = pq.read_table(parquet, columns=list(FINDING_FRAME_COLUMNS))
    on: dict[tuple[int, int], list[int]] = {}
    columns = (table.column(name).to_pylist() for name in FINDING_FRAME_COLUMNS)
    for finding, frame, layer in zip(*columns, strict=True):
        on.setdefault((frame, layer), []).append(finding)
    return on


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
