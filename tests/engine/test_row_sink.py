"""engine.deliver: each of the engine's rows reaches a RowSink by its kind.

A record of the per-frame path goes to ``observe``, a run of the steady lane
to ``observe_rows``; every frame of the capture reaches the sink once, in
capture order, so no consumer has to tell the two kinds apart.
"""

from __future__ import annotations

import random
from dataclasses import replace
from unittest import mock

import numpy as np
import pyarrow as pa

from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.checks.bulk import Leaks, LeakWords
from espforensics.engine import Engine, RowSink, SteadyRows, deliver
from espforensics.keys import SaTable
from espforensics.model.options import Options
from espforensics.model.records import PacketRecord
from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, SaFlow, make_sa
from espforensics.synth.scenarios_crypto import send_udp
from espforensics.synth.truth import Scenario
from espforensics.tables import rows as table_rows
from espforensics.tables.rows import RowGroups

PACKETS = 300  # per SA: past the first batches (per frame), the lane takes the rest


def _scenario(replays: tuple[int, ...] = ()) -> Scenario:
    """Two SAs; after each of ``replays``' sequence numbers, SA a's packet 10 again."""
    rng, cb = random.Random(7), CaptureBuilder(7)
    a = SaFlow(make_sa(rng, 0xE001, V4_A, V4_B), V4_A, V4_B)
    b = SaFlow(make_sa(rng, 0xE002, V4_B, V4_A), V4_B, V4_A)
    for seq in range(1, PACKETS + 1):
        send_udp(cb, a, seq)
        send_udp(cb, b, seq, outgoing=False)
        if seq in replays:
            send_udp(cb, a, 10)  # a duplicate: the per-frame path's
    return cb.scenario("row-sink", "two steady GCM SAs", (a.sealer, b.sealer))


class _Kept:
    """Which method each row reached, and the frames (layer 1) it carried."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def observe(self, rec: PacketRecord) -> None:
        self.calls.append(("observe", [rec.frame] if rec.layer == 1 else []))

    def observe_rows(self, rows: SteadyRows) -> None:
        frames = [r.frame for r in rows.records if r.layer == 1] + rows.frame.tolist()
        self.calls.append(("observe_rows", sorted(frames)))


def _deliver(sinks: list[RowSink], replays: tuple[int, ...] = ()) -> int:
    """Run the scenario through the engine, each row to every sink; its frame count."""
    sc = _scenario(replays)
    options = Options(batch_frames=128)
    engine = Engine(FrameAnalyzer(SaTable(sc.sas), options), options)
    try:
        for row in engine.iter_rows(sc.frames):
            for sink in sinks:
                deliver(row, sink)
    finally:
        engine.close()
    return len(sc.frames)


def test_every_frame_reaches_the_sink_once_by_its_kind() -> None:
    kept = _Kept()
    n = _deliver([kept])
    kinds = {kind for kind, _ in kept.calls}
    assert kinds == {"observe", "observe_rows"}  # both paths ran, each to its own method
    frames = [f for _, fs in kept.calls for f in fs]
    assert frames == list(range(1, n + 1))  # every frame once, in capture order
    lane = sum(len(fs) for kind, fs in kept.calls if kind == "observe_rows")
    assert 0 < lane < n


def test_the_packets_table_takes_both_kinds_as_a_sink() -> None:
    tables: list[pa.Table] = []
    groups = RowGroups(tables.append)
    n = _deliver([groups])
    groups.flush()
    table = pa.concat_tables(tables)
    assert table.column("frame").to_pylist() == list(range(1, n + 1))
    assert set(table.column("verdict").to_pylist()) == {"ok"}


def test_the_records_between_steady_runs_make_one_table_a_row_group() -> None:
    """The per-frame records of a row group, however many steady runs cut them into
    parts, become one Arrow table (``records_to_table`` costs about 1 ms a call, whatever
    its rows), then the parts again: the same rows, in capture order."""
    tables: list[pa.Table] = []
    groups = RowGroups(tables.append)
    kept = _Kept()
    with mock.patch.object(
        table_rows, "records_to_table", wraps=table_rows.records_to_table
    ) as made:
        n = _deliver([groups, kept], replays=(150, 200, 250))
        groups.flush()
    parts = sum(
        1
        for i, (kind, _) in enumerate(kept.calls)
        if kind == "observe" and (i == 0 or kept.calls[i - 1][0] != "observe")
    )
    assert parts >= 2  # records before, between and after steady runs
    assert made.call_count == len(tables) == 1  # n frames: one row group
    table = pa.concat_tables(tables)
    assert table.column("frame").to_pylist() == list(range(1, n + 1))


class _Parts:
    """The engine's rows as a row group's parts: each steady run, and the records between."""

    def __init__(self) -> None:
        self.parts: list[SteadyRows | list[PacketRecord]] = []

    def observe(self, rec: PacketRecord) -> None:
        if not self.parts or isinstance(self.parts[-1], SteadyRows):
            self.parts.append([])
        last = self.parts[-1]
        assert isinstance(last, list)
        last.append(rec)

    def observe_rows(self, rows: SteadyRows) -> None:
        self.parts.append(rows)


def _part_table(part: SteadyRows | list[PacketRecord]) -> pa.Table:
    """A part's table made alone, as each was before the row group made them at once."""
    if isinstance(part, SteadyRows):
        return table_rows.steady_table(part)
    return table_rows.records_to_table(part)


def test_the_steady_runs_of_a_row_group_make_one_table() -> None:
    """Runs the per-frame path cuts short (here by replays) become one lane table a row
    group, each run a slice of it: the same rows as each run's table made alone."""
    tables: list[pa.Table] = []
    groups, kept = RowGroups(tables.append), _Parts()
    lane_table = table_rows._lane_table
    with mock.patch.object(table_rows, "_lane_table", wraps=lane_table) as made:
        _deliver([groups, kept], replays=(100, 150, 200, 250))
        groups.flush()
    runs = [p for p in kept.parts if isinstance(p, SteadyRows)]
    assert len(runs) >= 4 and len(tables) == 1  # one row group
    assert made.call_count == 1
    expected = pa.concat_tables([_part_table(p) for p in kept.parts])
    assert pa.concat_tables(tables).equals(expected)


def test_joined_runs_keep_each_run_s_flows_and_leaks() -> None:
    """``joined``'s flows and leak rows counted past the runs before them: planted leak
    columns (checks/leaks.py's keyless leaks, possible and proven) land on the same rows
    as in each run's own table."""
    kept = _Parts()
    _deliver([kept], replays=(150,))
    first, second = [p for p in kept.parts if isinstance(p, SteadyRows)][:2]
    first = replace(first, leaks=Leaks.of(np.array([1], np.intp), [LeakWords("4500", "ip.v", 0)]))
    words = [LeakWords("60 00", "a", 2), LeakWords("45", "b", 0)]
    second = replace(second, leaks=Leaks.of(np.array([0, 2], np.intp), words))
    assert len(first.flows) == len(second.flows) == 2
    assert not first.records and not second.records
    both = table_rows._lane_table(table_rows.joined([first, second]))
    alone = pa.concat_tables([table_rows.steady_table(first), table_rows.steady_table(second)])
    assert both.equals(alone)
    leaked = both.column("leaked_hex").to_pylist()
    n = len(first.frame)
    assert [i for i, v in enumerate(leaked) if v] == [1, n, n + 2]
    proven = both.column("leaked").to_pylist()
    assert [(i, v) for i, v in enumerate(proven) if v is not None] == [(n, 2)]
    assert both.column("src").to_pylist() == alone.column("src").to_pylist()
