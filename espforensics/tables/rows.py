"""The packets table's rows as Arrow tables: per-frame records, the steady lane's runs.

In: ``PacketRecord`` values and ``SteadyRows`` (engine/rows.py), in capture
order. Out: Arrow tables of the packets table's schema (tables/schema.py);
``RowGroups`` hands them on a full row group at a time (to the writer of
tables/packets.py, or a list). Raises nothing.

A table costs about 0.5 ms however few its rows (one Arrow array a
column), so ``RowGroups`` makes its row group's parts at once: the records
of every part one table, the steady runs of every part one table, then
each part a slice of them. A capture whose stray packets cut the lane's
runs short (a new SA's first packet among bulk traffic) made one a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, cast

import numpy as np
import pyarrow as pa

from espforensics.analyzer.crypto import no_key
from espforensics.checks.bulk import Leaks
from espforensics.engine import SteadyRows
from espforensics.engine.wire import CARRIERS
from espforensics.model.arrays import Mask, Strs
from espforensics.model.records import PACKET_COLUMNS, PacketRecord
from espforensics.tables.arrow import (
    bools,
    from_list,
    from_numpy,
    hex_rows,
    pick,
    spaced_hex_column,
    strings,
)
from espforensics.tables.schema import ROW_GROUP, TIME_TYPE, arrow_type, packet_schema

# The ns an int64 holds (1677-09-21 to 2262-04-11); a frame stamped outside has no ``time``.
_NS_MIN, _NS_MAX = -(2**63), 2**63 - 1


_TYPES = {name: arrow_type(name) for name in PACKET_COLUMNS}


def _time_ns(ns: int) -> int | None:
    return ns if _NS_MIN <= ns <= _NS_MAX else None


def records_to_table(records: Sequence[PacketRecord]) -> pa.Table:
    """A columnar Arrow table of records (enums become their string values)."""
    columns = []
    for name in PACKET_COLUMNS:
        values = [getattr(r, name) for r in records]
        if name == "time":
            values = [_time_ns(ns) for ns in values]
        columns.append(from_list(values, _TYPES[name]))
    return pa.Table.from_arrays(columns, schema=packet_schema())


def _nullable(values: np.ndarray, present: np.ndarray) -> pa.Array:
    return from_numpy(values, pa.int64(), present)


def _repeat(value: str, n: int) -> pa.Array:
    return pick([value], np.zeros(n, np.int64))


def steady_table(rows: SteadyRows) -> pa.Table:
    """The packets table of a steady run: its ``ok`` packets' columns and its records,
    interleaved by frame number (every column as ``records_to_table`` makes it)."""
    table = _lane_table(rows)
    if not rows.records:
        return table
    import pyarrow.compute as pc  # noqa: PLC0415  # the steady lane's: not at start-up

    both = pa.concat_tables([table, records_to_table(rows.records)])
    return both.take(pc.sort_indices(both, [("frame", "ascending")]))


def _lane_table(rows: SteadyRows) -> pa.Table:
    """The rows of a run's ``ok`` packets (its records left out)."""
    n = len(rows.frame)
    flow, flows = rows.flow, rows.flows
    seq64 = rows.seq64
    cols: dict[str, pa.Array] = {
        "frame": from_numpy(rows.frame, pa.int64()),
        "time": from_numpy(rows.ts_ns, TIME_TYPE),
        "caplen": from_numpy(rows.caplen, pa.int64()),
        "len": from_numpy(rows.wirelen, pa.int64()),
        "proto": pick(["esp", "esp-udp"], rows.udp.astype(np.int64)),
        "ip_version": from_numpy(rows.ip_version, pa.int64()),
        "src": pick([f.src for f in flows], flow),
        "dst": pick([f.dst for f in flows], flow),
        "udp_sport": _nullable(rows.udp_sport, rows.udp),
        "udp_dport": _nullable(rows.udp_dport, rows.udp),
        "spi": from_numpy(rows.spi, pa.int64()),
        "algorithm": pick(list(rows.algorithm), flow),
        "seq": from_numpy(rows.seq, pa.int64()),
        "seq64": from_numpy(seq64, pa.uint64()),
        "seq_hi_verified": _nullable((seq64 >> np.uint64(32)).astype(np.int64), rows.esn),
        "iv": hex_rows(rows.iv, rows.iv_len),
        "esp_offset": from_numpy(rows.esp_offset, pa.int64()),
        "expected_offset": from_numpy(rows.esp_offset, pa.int64()),
        "esp_len": from_numpy(rows.esp_len, pa.int64()),
        "pad_len": _nullable(rows.pad_len, rows.keyed),
        "next_header": _nullable(rows.next_header, rows.keyed),
        "payload_len": _nullable(rows.payload_len, rows.keyed),
        "inner_proto": _texts(rows.inner_proto, rows.keyed),
        "inner_src": _texts(rows.inner_src, rows.keyed),
        "inner_dst": _texts(rows.inner_dst, rows.keyed),
        "inner_sport": _nullable(rows.inner_sport, rows.inner_sport >= 0),
        "inner_dport": _nullable(rows.inner_dport, rows.inner_dport >= 0),
        "iv_reused": bools(np.zeros(n, np.bool_), (rows.iv_len > 0) & ~rows.clear),  # NULL
        "iv_seq_delta": _nullable(np.zeros(n, np.int64), rows.counter),
        "inner_checksum": _texts(rows.inner_checksum, rows.keyed),
        "detail": _details(rows),
        "tfc_len": _nullable(rows.tfc_len, rows.tfc_len >= 0),
    }
    for name in ("leaked_hex", "leaked_fields", "seq_anomaly", "quoted_src", "quoted_dst"):
        cols[name] = _repeat("", n)
    if rows.leaks is not None:  # keyless leaks, proven or possible (checks/leaks.py)
        leaks = rows.leaks
        cols["leaked_hex"] = spaced_hex_column(n, leaks.at, leaks.hex)
        column: Strs = np.full(n, "", object)
        column[leaks.at] = leaks.fields
        cols["leaked_fields"] = strings(column)
        leaked = np.zeros(n, np.int64)
        leaked[leaks.at] = leaks.leaked
        cols["leaked"] = _nullable(leaked, leaked > 0)
    keyed = rows.keyed.astype(np.int64)
    cols["verdict"] = pick(["unknown_sa", "ok"], keyed)
    # the receiver check refuses every other row; a run without keys predicts nothing
    cols["receiver"] = pick(["", "accept"], keyed)
    cols["layer"] = from_numpy(np.ones(n, np.int64), pa.int64())  # the lane takes no nested ESP
    cols["carriers"] = pick(list(CARRIERS), rows.carriers)
    arrays = [cols[name] if name in cols else pa.nulls(n, _TYPES[name]) for name in PACKET_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=packet_schema())


def joined(runs: Sequence[SteadyRows]) -> SteadyRows:
    """The ``ok`` packets of ``runs`` (none with records of its own) as one run, in order:
    each column concatenated, the flows one after the other (each run's ``flow`` moved
    past the flows before it), the possible leaks' rows moved past the rows before them."""
    if len(runs) == 1:
        return runs[0]
    flows = np.cumsum([0, *(len(r.flows) for r in runs[:-1])])
    starts = np.cumsum([0, *(len(r.frame) for r in runs[:-1])])
    made: dict[str, object] = {
        "records": (),
        "flows": tuple(f for r in runs for f in r.flows),
        "algorithm": tuple(a for r in runs for a in r.algorithm),
        "flow": np.concatenate([r.flow + k for r, k in zip(runs, flows.tolist(), strict=True)]),
        "leaks": _leaks(runs, starts.tolist()),
    }
    for field in fields(SteadyRows):
        if field.name not in made:
            made[field.name] = np.concatenate([getattr(r, field.name) for r in runs])
    return SteadyRows(**cast("dict[str, Any]", made))


def _leaks(runs: Sequence[SteadyRows], starts: list[int]) -> Leaks | None:
    """The runs' leaks, their rows counted from the first run's first row."""
    mine = [(r.leaks, k) for r, k in zip(runs, starts, strict=True) if r.leaks is not None]
    return Leaks.joined([leaks.at_rows(leaks.at + k) for leaks, k in mine])


def _texts(values: Strs, keyed: Mask) -> pa.Array:
    """A column of the opened packets' words: "" in every row of a run without a key."""
    return strings(values) if keyed.any() else _repeat("", len(values))


def _details(rows: SteadyRows) -> pa.Array:
    """The ``detail`` column: a keyed row's checksum detail, else the words of ``no key``."""
    if rows.keyed.all():
        return strings(rows.checksum_detail)
    words = [no_key(f.spi) for f in rows.flows]
    if not rows.keyed.any():  # a run without keys: its flow's words in each row
        return pick(words, rows.flow)
    details = np.where(rows.keyed, rows.checksum_detail, np.array(words, object)[rows.flow])
    return strings(details.astype(object))


@dataclass(frozen=True, slots=True)
class _Records:
    """Per-frame records queued between two steady runs, made a table at the spill."""

    records: tuple[PacketRecord, ...]


class RowGroups:
    """Gathers rows and hands each full row group, as an Arrow table, to ``emit``."""

    def __init__(self, emit: Callable[[pa.Table], None]) -> None:
        self._emit = emit
        self._batch: list[PacketRecord] = []
        # Steady runs and the records between them, made tables at ``_spill``; first, the
        # rows a spill left (a table)
        self._parts: list[pa.Table | SteadyRows | _Records] = []
        self._rows = 0  # in ``_parts``

    def observe(self, rec: PacketRecord) -> None:
        """Queue one record; a full row group is emitted."""
        self._batch.append(rec)
        if len(self._batch) + self._rows >= ROW_GROUP:
            self._spill()

    def observe_rows(self, rows: SteadyRows) -> None:
        """Queue a steady run of the engine; full row groups are emitted."""
        self._part()
        self._parts.append(rows)
        self._rows += rows.rows
        if self._rows >= ROW_GROUP:
            self._spill()

    def _part(self) -> None:
        if self._batch:
            self._parts.append(_Records(tuple(self._batch)))
            self._rows += len(self._batch)
            self._batch = []

    def _tables(self) -> list[pa.Table]:
        """The parts as tables: the records of them all one table, the steady runs with
        no records of their own one table (``joined``), each part a slice of its table.

        A table costs about 0.5 ms however few its rows: a capture whose steady runs
        the per-frame path breaks often made one per part (random IVs without keys: 95
        ``records_to_table`` a 200,000-frame run, 94 of them for fewer than 5 records;
        every 100th frame a new SA: 600 ``steady_table``, 0.27 s of a 1.4 s run).
        """
        records = [p.records for p in self._parts if isinstance(p, _Records)]
        runs = [p for p in self._parts if isinstance(p, SteadyRows) and not p.records]
        made = records_to_table([rec for part in records for rec in part]) if records else None
        lane = _lane_table(joined(runs)) if runs else None
        tables, at, lane_at = [], 0, 0
        for part in self._parts:
            if isinstance(part, _Records) and made is not None:
                tables.append(made.slice(at, len(part.records)))
                at += len(part.records)
            elif isinstance(part, SteadyRows) and part.records:
                tables.append(steady_table(part))  # its records among its rows
            elif isinstance(part, SteadyRows) and lane is not None:
                tables.append(lane.slice(lane_at, len(part.frame)))
                lane_at += len(part.frame)
            elif isinstance(part, pa.Table):
                tables.append(part)
        return tables

    def _spill(self) -> None:
        """Emit every full row group queued; keep the rest."""
        self._part()
        if not self._parts:
            return
        table = pa.concat_tables(self._tables())
        whole = table.num_rows // ROW_GROUP * ROW_GROUP
        for at in range(0, whole, ROW_GROUP):
            self._emit(table.slice(at, ROW_GROUP).combine_chunks())
        rest = table.slice(whole)
        self._parts, self._rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)

    def flush(self) -> None:
        """Emit everything queued (the last row group may be short)."""
        self._spill()
        if self._rows:
            self._emit(pa.concat_tables(self._tables()).combine_chunks())
            self._parts, self._rows = [], 0
