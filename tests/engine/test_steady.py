"""The steady lane's planning (engine/steady.py), through the bulk check protocol only.

Two GCM SAs, 120 packets each, interleaved: the first 160 frames go per
frame (each SA's IV scheme is settled after 64), the last 80 are one batch.
With the real bulk checks the lane takes every frame of the batch; stub
checks (checks/bulk.py's defaults, one rule changed) show how the plan
follows what a check says: a refused row sends the rest of its unit per
frame, a scope shared by two SAs makes them one unit, a flow not admitted
is not planned, and a check's columns and commits see exactly the rows
the lane takes.
"""

from __future__ import annotations

import ast
import random
from functools import cache
from pathlib import Path

import numpy as np

from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.checks import BULK, Flow
from espforensics.checks.bulk import (
    BulkColumns,
    BulkRules,
    BytesRule,
    FlowRows,
    Mask,
    Opened,
    Scope,
    ScopeRows,
)
from espforensics.engine.steady import MAX_RESUMES, Plan, SteadyLane
from espforensics.engine.wire import FrameBatch, WireColumns, parse
from espforensics.keys import SaTable
from espforensics.model.options import Options
from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, SaFlow, make_sa
from espforensics.synth.scenarios_crypto import send_udp
from espforensics.synth.truth import Scenario

PACKETS, WARM = 120, 160
A, B = 0xD001, 0xD002


@cache
def _scenario() -> Scenario:
    rng, cb = random.Random(5), CaptureBuilder(5)
    a = SaFlow(make_sa(rng, A, V4_A, V4_B), V4_A, V4_B)
    b = SaFlow(make_sa(rng, B, V4_B, V4_A), V4_B, V4_A)
    for seq in range(1, PACKETS + 1):
        send_udp(cb, a, seq)
        send_udp(cb, b, seq, outgoing=False)
    return cb.scenario("steady-two", "two steady GCM SAs", (a.sealer, b.sealer))


def _warm() -> tuple[FrameAnalyzer, FrameBatch, WireColumns]:
    """The analyzer after the first WARM frames per frame, and the rest as one batch."""
    sc = _scenario()
    an = FrameAnalyzer(SaTable(sc.sas), Options())
    for frame in sc.frames[:WARM]:
        an.process(frame)
    assert not an.busy
    batch = FrameBatch.of(sc.frames[WARM:])
    return an, batch, parse(batch, an.natt_ports)


def _plan(lane: SteadyLane, batch: FrameBatch, wire: WireColumns) -> Plan:
    opening = lane.prepare(batch, wire)
    opened = [job.open() for job in opening.jobs]
    return lane.settle(opening, lane.decode(opening, batch, opened))


def _spis(wire: WireColumns) -> list[int]:
    return [int(s) for s in wire.spi]


def _lane(an: FrameAnalyzer, *extra: BulkRules) -> SteadyLane:
    real = tuple(c for c in an.checks.order if isinstance(c, BULK))
    return SteadyLane(an, (*real, *extra))


class _Shared:
    """A scope that refuses no row and keeps nothing."""

    def refuses(self, rows: ScopeRows) -> Mask:
        return np.zeros(len(rows), np.bool_)

    def commit(self, rows: ScopeRows, opened: Opened) -> None:
        pass


class _Refuse(BulkRules):
    """Refuses one frame; with ``shared``, one scope for every flow."""

    def __init__(self, frame: int, shared: Scope | None = None) -> None:
        self.frame, self.shared = frame, shared

    def scope(self, flow: Flow) -> Scope | None:
        return self.shared

    def refuses(self, rows: FlowRows) -> Mask:
        return np.asarray(rows.frames == self.frame, np.bool_)


class _NotA(BulkRules):
    def admits(self, flow: Flow) -> bool:
        return flow.spi != A


class _ByBytes(BulkRules):
    """Refuses frames by their bytes alone; keeps the frames its ``refuses`` was asked about."""

    def __init__(self, *frames: int) -> None:
        self.frames, self.read = frames, list[int]()

    def refuses_bytes(self, rows: FlowRows) -> BytesRule:
        return BytesRule(np.isin(rows.frames, self.frames))

    def refuses(self, rows: FlowRows) -> Mask:
        self.read += rows.frames.tolist()
        return np.zeros(len(rows), np.bool_)


class _Even(BulkRules):
    """Says iv_seq_delta 0 for even sequence numbers; keeps what it is given."""

    def __init__(self) -> None:
        self.committed: list[tuple[int, list[int]]] = []

    def columns(self, rows: FlowRows) -> BulkColumns:
        return BulkColumns(counter=np.asarray(rows.seq64 % np.uint64(2) == 0, np.bool_))

    def commit(self, rows: FlowRows) -> None:
        self.committed.append((rows.flow.spi, rows.frames.tolist()))


def test_the_real_checks_take_every_frame_of_two_steady_sas() -> None:
    an, batch, wire = _warm()
    plan = _plan(SteadyLane(an), batch, wire)
    assert plan.taken.tolist() == [True] * (2 * PACKETS - WARM)
    assert len(plan.units) == 2  # one key each: two units
    rows = SteadyLane(an).apply(batch, wire, plan, list(range(len(plan.taken))), ())
    assert rows.frame.tolist() == list(range(WARM + 1, 2 * PACKETS + 1))
    assert rows.seq64.tolist() == [WARM // 2 + 1 + i // 2 for i in range(2 * PACKETS - WARM)]
    assert rows.counter.all()  # seqiv IVs built from their own numbers: iv_seq_delta 0


def test_a_refused_row_sends_the_rest_of_its_unit_per_frame() -> None:
    an, batch, wire = _warm()
    frame = WARM + 21  # an A frame (odd frames are A's)
    plan = _plan(_lane(an, _Refuse(frame)), batch, wire)
    frames = batch.number.tolist()
    want = [spi == B or f < frame for spi, f in zip(_spis(wire), frames, strict=True)]
    assert plan.taken.tolist() == want
    assert plan.taken.tolist().count(False) == (2 * PACKETS - frame + 1) // 2


def test_a_failed_icv_sends_the_rest_of_its_sa_per_frame() -> None:
    """One A packet's ICV damaged (its last byte): the packets before it are the lane's,
    it and A's later ones go per frame, B's are all the lane's, each decoded."""
    an, _, _ = _warm()
    frame = WARM + 21  # an A frame (odd frames are A's)
    frames = list(_scenario().frames[WARM:])
    bad = frames[frame - WARM - 1]
    assert bad.number == frame
    frames[frame - WARM - 1] = bad._replace(data=bad.data[:-1] + bytes([bad.data[-1] ^ 1]))
    batch = FrameBatch.of(tuple(frames))
    wire = parse(batch, an.natt_ports)
    plan = _plan(SteadyLane(an), batch, wire)
    numbers = batch.number.tolist()
    want = [s == B or f < frame for s, f in zip(_spis(wire), numbers, strict=True)]
    assert plan.taken.tolist() == want
    opened = plan.plain_at[plan.cand[np.flatnonzero(plan.taken)]]
    assert (opened >= 0).all() and len(set(opened.tolist())) == len(opened)  # decoded, once
    assert int(plan.plain_at[plan.cand[frame - WARM - 1]]) == -1  # not decoded


def test_the_checks_read_a_units_rows_up_to_the_next_row_refused_by_its_bytes() -> None:
    """A row refused by its bytes alone (or unopenable) is refused whatever the checks'
    state: the plan, and the plan of the rest after the per-frame path took that row,
    ask the checks about the unit's rows before it only, each row once."""
    an, batch, wire = _warm()
    first, second = WARM + 21, WARM + 61  # A frames (odd frames are A's)
    stub = _ByBytes(first, second)
    lane = _lane(an, stub)
    plan = _plan(lane, batch, wire)
    frames, spis = batch.number.tolist(), _spis(wire)
    a_frames = [f for f, s in zip(frames, spis, strict=True) if s == A]
    b_frames = [f for f, s in zip(frames, spis, strict=True) if s == B]
    assert plan.taken.tolist() == [s == B or f < first for s, f in zip(spis, frames, strict=True)]
    assert sorted(stub.read) == sorted(b_frames + [f for f in a_frames if f < first])
    row = frames.index(first)
    lane.apply(batch, wire, plan, [r for r in range(row) if plan.taken[r]], ())
    stub.read.clear()
    an.process(batch.frame(row))
    unit = plan.unit_of_row(row)
    assert unit is not None and lane.resume(plan, unit, batch, wire, row)
    assert stub.read == [f for f in a_frames if first < f < second]
    assert [f for f, t in zip(frames, plan.taken.tolist(), strict=True) if t and f > first] == [
        f for f in frames[row + 1 :] if f in b_frames or f < second
    ]


def test_a_unit_given_up_leaves_none_of_its_later_rows_taken() -> None:
    """A row the plan took goes per frame while the analyzer is busy, and the unit has
    been planned again ``MAX_RESUMES`` times: its rows after that row go per frame too,
    none left taken by the plan before; the other unit's rows stay the lane's."""
    an, batch, wire = _warm()
    lane = SteadyLane(an)
    plan = _plan(lane, batch, wire)
    frames, spis = batch.number.tolist(), _spis(wire)
    row = frames.index(WARM + 21)  # an A frame, taken
    assert plan.taken[row]
    an.process(batch.frame(row))
    unit = plan.unit_of_row(row)
    assert unit is not None
    unit.resumed = MAX_RESUMES
    assert not lane.resume(plan, unit, batch, wire, row)
    taken_after = [s for s, t in zip(spis[row + 1 :], plan.taken[row + 1 :], strict=True) if t]
    assert taken_after == [B] * spis[row + 1 :].count(B)


def test_a_scope_shared_by_two_sas_makes_them_one_unit() -> None:
    an, batch, wire = _warm()
    frame = WARM + 21
    plan = _plan(_lane(an, _Refuse(frame, shared=_Shared())), batch, wire)
    assert len(plan.units) == 1
    assert plan.taken.tolist() == [f < frame for f in batch.number.tolist()]


def test_a_flow_a_check_does_not_admit_is_not_planned() -> None:
    an, batch, wire = _warm()
    plan = _plan(_lane(an, _NotA()), batch, wire)
    assert plan.taken.tolist() == [spi == B for spi in _spis(wire)]
    assert plan.taken.tolist().count(True) == (2 * PACKETS - WARM) // 2


def test_a_checks_columns_and_commit_see_the_rows_the_lane_takes() -> None:
    an, batch, wire = _warm()
    even = _Even()
    lane = SteadyLane(an, (even,))  # the only bulk check: the counter column is its alone
    plan = _plan(lane, batch, wire)
    rows = [r for r, t in enumerate(plan.taken) if t][:30]  # a run of the batch
    out = lane.apply(batch, wire, plan, rows, ())
    assert out.counter.tolist() == [s % 2 == 0 for s in out.seq64.tolist()]
    frames = batch.number[rows].tolist()
    spis = [_spis(wire)[r] for r in rows]
    committed = dict(even.committed)
    assert sorted(committed) == [A, B]
    for spi in (A, B):
        assert committed[spi] == [f for f, s in zip(frames, spis, strict=True) if s == spi]


def test_the_engine_imports_no_concrete_check() -> None:
    """engine/ knows the checks through the registries, checks/bulk.py's protocol and the
    packet context's types only: no check module, none of a check's rules or constants."""
    engine = Path(__file__).resolve().parents[2] / "espforensics" / "engine"
    modules = {
        node.module or ""
        for p in engine.glob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("espforensics.checks")
    }
    protocol = {"espforensics.checks", "espforensics.checks.bulk", "espforensics.checks.context"}
    assert modules == protocol
