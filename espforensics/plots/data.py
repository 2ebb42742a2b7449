"""The plots' data: five small tables from one columnar pass over packets.parquet.

In: the packets.parquet of a run and its ``Summary``. Out: ``plot_frames``
returns the five DataFrames of ``plots.PlotData`` (column contract there).
Raises ``OSError`` from the file system, which callers wrap.

Why a pass over the table and not accumulators filled during the run
(docs/plots.md, "Where the plot data comes from"): three of the five
tables depend on what is known only once the last frame is read: the
verdict bins are a 60th of the capture's span (first to last frame), the
throughput bins a 60th of its earliest-to-latest range, and the IV plot
keeps every ``esp_packets // 2000``-th conforming IV. Memory bounded by SAs
and bins cannot give these exactly. The pass reads nine columns in
batches of ``_PLOT_BATCH`` rows, as numpy arrays (no pandas per batch), and
keeps per batch only aggregates bounded by bins and SAs (the IV sample
and the sequence events aside, bounded by ``IV_POINTS`` plus deviations
and by anomalies).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from espforensics.results.summary import Summary
from espforensics.tables.packets import ns_to_seconds

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

_PLOT_COLUMNS = [
    "time",
    "len",
    "verdict",
    "spi",
    "src",
    "dst",
    "seq64",
    "esp_offset",
    "expected_offset",
    "iv_seq_delta",
    "iv_reused",
    "seq_anomaly",
]
_DICTIONARY = ["verdict", "src", "dst", "seq_anomaly"]  # few values: read as codes
TIME_BINS = 60
# The sequence plot's evidence (checks/sequence.py): auth_fail headers may be forged.
_SEQ_EVIDENCE = (
    "ok",
    "bad_trailer",
    "esp_misplaced",
    "esn_mismatch",
    "unknown_sa",
    "truncated",
    "short",
    "unsupported",
    "decrypted_no_icv",
    "authentic_not_decrypted",
)
IV_POINTS = 2000  # conforming IVs drawn at most per capture (all deviating ones are drawn)
# Rows per batch of the plot pass: numpy arrays of a few MB; the batch size changes no value.
_PLOT_BATCH = 65536


class _Bins(NamedTuple):
    """Throughput bins: ``width`` s each from the earliest frame time ``low``,
    their starts given in s since the first frame ``t0`` (the plots' origin).

    Taken from the earliest and the latest frame, not the first and the
    last: one frame stamped decades before the rest then widens the
    TIME_BINS bins, rather than adding a bin per ``width`` in between
    (48 TiB of them for one frame of 1970 in a capture of 2026).
    """

    t0: float
    low: float
    width: float

    def starts(self, time: F64) -> F64:
        starts: F64 = ((time - self.low) // self.width) * self.width + (self.low - self.t0)
        return starts


def _throughput_bins(reader: pq.ParquetFile, t0: float) -> _Bins:
    low, high = _time_range(reader, t0)
    span = high - low
    return _Bins(t0, low, span / TIME_BINS if span > 0 else 1.0)


def _time_range(reader: pq.ParquetFile, t0: float) -> tuple[float, float]:
    """The earliest and latest frame time in s: the row groups' statistics, else a read.

    A frame without a time (stamped outside what int64 ns holds) counts as ``t0``.
    """
    meta = reader.metadata
    column = meta.schema.names.index("time")
    stats = [meta.row_group(i).column(column).statistics for i in range(meta.num_row_groups)]
    if not stats:
        return t0, t0
    if all(st is not None and st.has_min_max and not st.null_count for st in stats):
        return min(st.min_raw for st in stats) / 1e9, max(st.max_raw for st in stats) / 1e9
    times = _seconds(reader.read(columns=["time"], use_threads=False).column("time"), t0)
    low, high = pc.min_max(times).values()
    return float(low.as_py()), float(high.as_py())


def _seconds(time: pa.Array | pa.ChunkedArray, missing: float) -> pa.Array | pa.ChunkedArray:
    """A ``time`` column as float seconds since the epoch; ``missing`` where it is empty."""
    return pc.fill_null(ns_to_seconds(time), missing)


def _strings(column: pa.Array) -> tuple[I64, list[str]]:
    """A dictionary column as (codes, values); an empty cell has the code of "" (one code)."""
    values = [str(v) for v in column.dictionary.to_pylist()]
    if "" not in values:
        values.append("")
    codes = column.indices.fill_null(values.index("")).to_numpy(zero_copy_only=False)
    return codes.astype(np.int64), values


def _floats(column: pa.Array) -> F64:
    """An integer column as float64, NaN where empty (what pandas made of it)."""
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


class _Batch:
    """One batch of the plot pass as numpy arrays; ``esp`` selects the rows with an SPI."""

    def __init__(self, batch: pa.RecordBatch, t0: float) -> None:
        col = batch.column
        self.time: F64 = _seconds(col("time"), t0).to_numpy(zero_copy_only=False)
        self.length: I64 = col("len").to_numpy(zero_copy_only=False).astype(np.int64)
        self.verdict, self.verdicts = _strings(col("verdict"))
        self.esp: Mask = col("spi").is_valid().to_numpy(zero_copy_only=False)
        self.sa, self.labels = _sa_codes(batch, self.esp)
        self.seq_valid: Mask = col("seq64").is_valid().to_numpy(zero_copy_only=False)
        self.seq64: I64 = col("seq64").fill_null(0).to_numpy().astype(np.int64)
        self.anomaly, self.anomalies = _strings(col("seq_anomaly"))


def _sa_codes(batch: pa.RecordBatch, esp: Mask) -> tuple[I64, list[str]]:
    """Each row's SA label code (-1 without an SPI) and the labels, such as
    0x00001001 192.0.2.1>192.0.2.2, in the order the SAs first appear."""
    spi = batch.column("spi").fill_null(0).to_numpy().astype(np.int64)
    src, srcs = _strings(batch.column("src"))
    dst, dsts = _strings(batch.column("dst"))
    codes = np.full(len(spi), -1, np.int64)
    if not esp.any():
        return codes, []
    spis, spi_values = _factor(spi[esp])  # hashed, in order of first appearance
    key = (spis * len(srcs) + src[esp]) * len(dsts) + dst[esp]
    codes[esp], keys = _factor(key)
    labels = []
    for k in keys.tolist():
        rest, d = divmod(int(k), len(dsts))
        at, s = divmod(rest, len(srcs))
        labels.append(f"{int(spi_values[at]):#010x} {srcs[s]}>{dsts[d]}")
    return codes, labels


def _add_counts(into: dict[Any, int], keys: list[Any], values: npt.NDArray[Any]) -> None:
    for key, value in zip(keys, values.tolist(), strict=True):
        into[key] += value


def _factor(values: npt.NDArray[Any]) -> tuple[I64, npt.NDArray[Any]]:
    """Each value's code and the distinct values, in order of first appearance (hashed)."""
    codes, uniques = pd.factorize(values)
    return codes.astype(np.int64), np.asarray(uniques)


def _grouped(time_bins: F64, codes: I64, n_codes: int) -> tuple[I64, F64, I64]:
    """Distinct (bin, code) pairs of the rows: each row's pair index, the bins, the codes."""
    at, starts = _factor(time_bins)
    pair = at * n_codes + codes
    return pair, starts, np.arange(len(starts) * n_codes, dtype=np.int64)


class _PlotAcc:
    """Small per-plot aggregates, filled batch by batch from packets.parquet."""

    def __init__(self, t0: float, width: float, esp_packets: int, bins: _Bins) -> None:
        self.t0, self.width, self.bins = t0, width, bins
        self.stride = max(1, esp_packets // IV_POINTS)
        self.seen_esp = 0
        self.verdicts: defaultdict[tuple[float, str], int] = defaultdict(int)
        self.offsets: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.bytes: defaultdict[tuple[float, str], int] = defaultdict(int)
        self.iv: list[pd.DataFrame] = []
        self.events: list[pd.DataFrame] = []
        self.tops: dict[str, int] = {}
        self.holes: dict[str, list[list[float]]] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        b = _Batch(batch, self.t0)
        bins = ((b.time - self.t0) // self.width) * self.width
        self._count(self.verdicts, bins, b.verdict, b.verdicts)
        if not b.esp.any():
            return
        esp = b.esp
        for kind, name in (("expected", "expected_offset"), ("found", "esp_offset")):
            values = _floats(batch.column(name))[esp]
            at, offsets = _factor(values[~np.isnan(values)])
            counts = np.bincount(at, minlength=len(offsets))
            _add_counts(self.offsets, [(kind, int(o)) for o in offsets.tolist()], counts)
        self._bytes(b)
        self._iv(b, batch)
        self._anomalies(b)
        self._events(b)

    @staticmethod
    def _count(into: dict[Any, int], bins: F64, codes: I64, names: list[str]) -> None:
        """Rows per (bin, name of their code), added to ``into``."""
        pair, starts, pairs = _grouped(bins, codes, len(names))
        counts = np.bincount(pair, minlength=len(pairs))
        hit = np.flatnonzero(counts)
        keys = [(float(starts[k // len(names)]), names[k % len(names)]) for k in hit.tolist()]
        _add_counts(into, keys, counts[hit])

    def _bytes(self, b: _Batch) -> None:
        """Wire bytes per (throughput bin, SA)."""
        esp = b.esp
        pair, starts, pairs = _grouped(self.bins.starts(b.time[esp]), b.sa[esp], len(b.labels))
        sums = np.bincount(pair, weights=b.length[esp], minlength=len(pairs))
        hit = np.flatnonzero(sums)
        n = len(b.labels)
        keys = [(float(starts[k // n]), b.labels[k % n]) for k in hit.tolist()]
        _add_counts(self.bytes, keys, np.rint(sums[hit]).astype(np.int64))

    def _iv(self, b: _Batch, batch: pa.RecordBatch) -> None:
        esp = b.esp
        index = np.arange(self.seen_esp, self.seen_esp + int(esp.sum()))
        self.seen_esp += len(index)
        delta = _floats(batch.column("iv_seq_delta"))[esp]
        reused = batch.column("iv_reused").fill_null(False).to_numpy(zero_copy_only=False)[esp]
        known = ~np.isnan(delta)
        deviating = known & (delta != 0)  # NaN: not counter-derived, drawn only when reused
        keep = (deviating | reused | ((index % self.stride == 0) & known)) & b.seq_valid[esp]
        if not keep.any():
            return
        self.iv.append(
            pd.DataFrame(
                {
                    "sa": [b.labels[c] for c in b.sa[esp][keep].tolist()],
                    "seq64": b.seq64[esp][keep],
                    "delta": delta[keep],
                    "reused": reused[keep].astype(bool),
                }
            )
        )

    def _anomalies(self, b: _Batch) -> None:
        """One event per packet the sequence check marked (its ``seq_anomaly``)."""
        rows = np.flatnonzero(b.esp & (b.anomaly != b.anomalies.index("")))
        if not len(rows):
            return
        self.events.append(
            pd.DataFrame(
                {
                    "t": b.time[rows] - self.t0,
                    "sa": [b.labels[c] for c in b.sa[rows].tolist()],
                    "event": [
                        b.anomalies[c].replace("-identical", "") for c in b.anomaly[rows].tolist()
                    ],
                    "count": 1,
                }
            )
        )

    def _events(self, b: _Batch) -> None:
        """Walk each SA's sequence numbers of the batch, SAs in order of first appearance."""
        wanted = [i for i, v in enumerate(b.verdicts) if v in _SEQ_EVIDENCE]
        evidence = np.flatnonzero(b.esp & b.seq_valid & np.isin(b.verdict, wanted))
        sas = b.sa[evidence]
        for code in pd.unique(sas).tolist():  # in order of first appearance
            rows = evidence[sas == code]
            self._gaps(b.labels[code], b.seq64[rows], b.time[rows])

    def _gaps(self, sa: str, seqs: I64, times: F64) -> None:
        """Holes in the SA's sequence: opened by a jump, narrowed by late packets.

        Only the rows that jump or come late are walked in Python; the running
        top of the sequence is computed for the whole batch at once.
        """
        start = self.tops.get(sa, int(seqs[0]) - 1)
        tops = np.maximum.accumulate(np.concatenate(([start], seqs)))[:-1]
        odd = np.flatnonzero((seqs > tops + 1) | (seqs < tops))
        holes = self.holes.setdefault(sa, [])
        for i in odd.tolist():
            seq, top = int(seqs[i]), int(tops[i])
            if seq > top + 1:
                holes.append([top + 1, seq - 1, float(times[i]) - self.t0])
            else:
                _fill(holes, seq)
        self.tops[sa] = max(start, int(seqs.max()))

    def gap_events(self) -> pd.DataFrame:
        """One event per hole still open at the end (the sequence check's gaps)."""
        rows = [
            (t, sa, "gap", end - start + 1)
            for sa, holes in self.holes.items()
            for start, end, t in holes
        ]
        return pd.DataFrame(rows, columns=["t", "sa", "event", "count"])


def _fill(holes: list[list[float]], seq: int) -> None:
    """Take ``seq`` out of the hole that holds it, splitting the hole if needed."""
    for i, (start, end, t) in enumerate(holes):
        if start <= seq <= end:
            pieces = [[start, seq - 1, t], [seq + 1, end, t]]
            holes[i : i + 1] = [p for p in pieces if p[0] <= p[1]]
            return


def _cat(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def _table(counts: dict[Any, int], columns: list[str]) -> pd.DataFrame:
    """``counts`` as rows sorted by key (what a pandas groupby gives)."""
    rows = [(*key, value) for key, value in sorted(counts.items())]
    return pd.DataFrame(rows, columns=columns).astype({columns[-1]: "int64"})


def _batches(reader: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
    """The plot columns in batches of ``_PLOT_BATCH`` rows: a batch never spans two row
    groups, so the row groups (8,192 rows) are joined here (their dictionaries unified)."""
    parts: list[pa.RecordBatch] = []
    rows = 0
    for batch in reader.iter_batches(_PLOT_BATCH, columns=_PLOT_COLUMNS, use_threads=False):
        parts.append(batch)
        rows += batch.num_rows
        if rows >= _PLOT_BATCH:
            yield from pa.Table.from_batches(parts).combine_chunks().to_batches()
            parts, rows = [], 0
    if parts:
        yield from pa.Table.from_batches(parts).combine_chunks().to_batches()


def plot_frames(parquet: Path, summary: Summary) -> dict[str, pd.DataFrame]:
    """The small tables the plots draw, read in batches from packets.parquet."""
    t0 = summary.capture.first_time or 0.0
    span = (summary.capture.last_time or t0) - t0
    width = span / TIME_BINS if span > 0 else 1.0
    # One thread: pyarrow's reader pool held 6 MB more RSS to save 0.1 s on 2M frames.
    reader = pq.ParquetFile(parquet, pre_buffer=False, read_dictionary=_DICTIONARY)
    bins = _throughput_bins(reader, t0)
    acc = _PlotAcc(t0, width, summary.esp_packets, bins)
    for batch in _batches(reader):
        acc.add(batch)
    throughput = _table(acc.bytes, ["t", "sa", "len"])
    throughput["mbit_s"] = throughput["len"] * 8 / bins.width / 1e6
    throughput["width"] = bins.width
    return {
        "verdicts": _table(acc.verdicts, ["t", "verdict", "packets"]),
        "offsets": _table(acc.offsets, ["kind", "offset", "packets"]),
        "iv": _cat(acc.iv, ["sa", "seq64", "delta", "reused"]),
        "throughput": throughput.loc[:, ["t", "sa", "mbit_s", "width"]],
        "sequence": _cat([*acc.events, acc.gap_events()], ["t", "sa", "event", "count"]),
    }
