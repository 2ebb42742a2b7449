"""The steady lane: the packets of SAs in a steady state, checked over a batch's columns.

In: a ``FrameBatch`` and its ``WireColumns``, the ``FrameAnalyzer`` (its
flows, SA states and checks), and the packets ``prepare`` asked to open,
opened. Out: a ``Plan`` (which frames of the batch the lane takes, with their columns),
and per run of the batch, ``apply`` commits the run's packets to the
checks' state in bulk and returns the run's ``SteadyRows`` (engine/commit.py).
Raises nothing.

A packet is the lane's only when every check would treat it as the plain
case, which the lane proves before it takes it (from the first packet that
is not, the rest of its unit's packets in the batch go through the
per-frame path, the reference):
- its SA has a usable key that verified a packet already, is not waiting
  for its ESN place, is not below the key file's ESN high half (the ESN
  mismatch check's case), and every bulk check admits its flow; or the
  run has no key at all (the keyless lane: an ``unknown_sa`` packet, read
  by its clear bytes only, nothing opened) and its SA has a packet already;
- its seq64 is what RFC 4303 A2.2's inference gives from the SA's top,
  for every running top within the batch (``EsnTracker.nearest_run``);
- no bulk check refuses it (checks/bulk.py: each check's rules sit in its
  own module, the registry is ``checks.BULK``), nor its flow's rows, nor
  its scope's (a key group's);
- with 16-byte CBC IVs, its ciphertext is whole 16-byte blocks;
- with a key: its ICV verifies, its trailer is sound, its inner headers
  decode, and its ciphertext does not equal its plaintext (plain.py);
  without: at least 16 bytes follow its 8-byte IV (the IV reuse check's
  evidence), and the placement and leak checks' keyless rules find nothing
  to search (checks/placement.py, checks/leaks.py).
Plans are made per unit (the flows that share a check's scope, such as
the SAs of one key) and hold while no other frame reaches the unit's SAs
(``Plan.invalidate``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from itertools import chain
from typing import cast

import numpy as np
import numpy.typing as npt

from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.capture.batch import Buffer
from espforensics.checks import Flow, SaState, bulk_checks
from espforensics.checks.bulk import BulkCheck, Outer, Scope, first_refused
from espforensics.checks.context import HEAD_LEN
from espforensics.crypto import IV_LEN, CipherContext
from espforensics.decode.esn import EsnTracker
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.engine.commit import commit_run
from espforensics.engine.plain import Decoded, decode_plaintexts
from espforensics.engine.plan import (
    WIDE,
    Index,
    Opening,
    OpenJob,
    Plan,
    Unit,
    add_leaks,
    cipher_heads,
    distinct_flows,
    flow_key,
    flow_rows,
    outer_of,
    scope_rows,
    scopes,
    unopenable,
)
from espforensics.engine.rows import SteadyRows
from espforensics.engine.wire import I64, FrameBatch, Mask, WireColumns
from espforensics.model.arrays import among, distinct, rows_at, rows_within
from espforensics.model.options import Selection
from espforensics.model.records import PacketRecord

__all__ = ["Decoded", "OpenJob", "Opening", "Plan", "SteadyLane"]

MAX_RESUMES = 16  # plans of a unit's rest, per batch, after packets the lane refused


def _selected(select: Selection, batch: FrameBatch, wire: WireColumns) -> Mask:
    """The rows ``--spi`` and ``--frames`` select: the lane never takes another (the
    per-frame path makes it a ``not_selected`` row)."""
    chosen = np.ones(len(batch), np.bool_)
    if select.frames is not None:
        chosen &= (batch.number >= select.frames[0]) & (batch.number <= select.frames[1])
    if select.spis:
        chosen &= np.isin(wire.spi, np.fromiter(select.spis, np.int64))
    return chosen


class SteadyLane:
    """Plans and applies the steady lane for one analyzer."""

    def __init__(
        self, analyzer: FrameAnalyzer, checks: tuple[BulkCheck, ...] | None = None
    ) -> None:
        """``checks``: the bulk checks (by default the analyzer's, by ``checks.BULK``)."""
        self._an = analyzer
        self._checks = bulk_checks(analyzer.checks.order) if checks is None else checks

    # -- planning -------------------------------------------------------------
    def prepare(self, batch: FrameBatch, wire: WireColumns) -> Opening:
        """Which rows of ``batch`` the lane may take, and the packets to open for them."""
        n = len(batch)
        plan = Plan(np.zeros(n, np.bool_), np.full(n, -1, np.int64))
        rows = np.flatnonzero(wire.steady & _selected(self._an.options.select, batch, wire))
        plan.rows = rows
        plan.spi = wire.spi[rows]
        plan.frame = batch.number[rows]
        plan.outer = outer_of(wire.addrs[rows], wire.ip_version[rows] == 4, wire.udp[rows])
        plan.cand[rows] = np.arange(len(rows))
        at = batch.start[rows] + wire.l3[rows] + wire.esp_offset[rows]
        end = batch.start[rows] + wire.l3[rows] + wire.total_len[rows]
        none = np.zeros(0, np.intp)
        nothing = Opening(plan, (), none, at + ESP_HEADER_LEN + IV_LEN, end, batch.buf)
        if not len(rows):
            return nothing
        plan.flows, plan.flow = self._flows(wire, rows)
        self._units(plan)
        if not plan.units:
            return nothing
        ctxs = [f.state.ctx for f in plan.flows]
        iv_len = np.array([IV_LEN if c is None else c.iv_len for c in ctxs], np.int64)[plan.flow]
        plan.icv_len = np.array([0 if c is None else c.icv_len for c in ctxs], np.int64)[plan.flow]
        sealed_at = at + ESP_HEADER_LEN + iv_len
        plan.end, plan.esp_at, plan.sealed_at = end, at, sealed_at
        plan.ip_at = batch.start[rows] + wire.l3[rows]
        plan.plain_at = np.full(len(rows), -1, np.int64)
        view = np.frombuffer(batch.buf, np.uint8)  # 16 zero bytes end it: WIDE may overrun
        width = max(HEAD_LEN, int(plan.icv_len.max()))  # an HMAC-SHA-512 ICV is 32 bytes
        icv_from = end - plan.icv_len
        plan.icv = rows_within(view, icv_from, width)  # past an ICV: bytes not read
        plan.iv_bytes = rows_at(view, at + ESP_HEADER_LEN, WIDE)
        halves = plan.iv_bytes.view(">u8").astype(np.uint64)
        plan.iv_len = iv_len
        plan.iv = np.where(iv_len == WIDE, halves[:, 0] ^ halves[:, 1], halves[:, 0])
        plan.counter = np.zeros(len(rows), np.bool_)
        plan.clear = np.zeros(len(rows), np.bool_)
        plan.seq64 = np.zeros(len(rows), np.uint64)
        plan.placed = np.zeros(len(rows), np.bool_)
        plan.by_bytes = self._by_bytes(plan, view, batch.buf)
        for unit in plan.units:
            unit.cut = self._prefix(unit.rows, plan, wire, view, batch.buf)
        # Every keyed row that can be opened is: after a refused row the lane may resume.
        shut = unopenable(end - sealed_at, plan.icv_len, plan.iv_len) | ~plan.placed
        parts: list[tuple[CipherContext, Index]] = []
        for unit in plan.units:
            if unit.keyless:
                continue  # nothing to open
            pos = np.asarray(unit.rows, np.intp)
            pos = pos[~shut[pos]]
            flow = plan.flow[pos]
            parts.extend(
                (ctx, pos[flow == f])
                for f in distinct(flow).tolist()
                if (ctx := plan.flows[f].state.ctx) is not None
            )
        opened = np.concatenate([own for _, own in parts]) if parts else np.zeros(0, np.intp)
        return Opening(plan, tuple(parts), opened, sealed_at, end, batch.buf)

    def decode(
        self, opening: Opening, batch: FrameBatch, opened: list[list[bytes | None]]
    ) -> Decoded | None:
        """The packets ``prepare`` asked to open, opened (one list per job): those that
        verified and their columns (None: there were none to open)."""
        plan = opening.plan
        if not opening.parts:
            return None
        plains = list(chain.from_iterable(opened))
        if None in plains:  # an ICV failed: only the verified packets are decoded
            good = np.flatnonzero(np.fromiter((p is not None for p in plains), np.bool_))
            texts: list[bytes] = [p for p in plains if p is not None]
        else:
            good, texts = np.arange(len(plains)), cast(list[bytes], plains)
        at_good = opening.opened[good]
        # Per flow, then per row: the outer names, GMAC (clear by design) and the ICV length.
        ctxs = [f.state.ctx for f in plan.flows]
        names = np.array([(f.src, f.dst) for f in plan.flows], dtype=object)[plan.flow[at_good]]
        clear = np.array([c is not None and c.clear for c in ctxs], np.bool_)[plan.flow[at_good]]
        outer = Outer(plan.outer.words[at_good], plan.outer.v4[at_good], plan.outer.natt[at_good])
        cts = cipher_heads(batch, opening.sealed_at[at_good])
        columns = decode_plaintexts(texts, names[:, 0], names[:, 1], cts, clear, outer)
        return Decoded(at_good, columns)

    def settle(self, opening: Opening, decoded: Decoded | None) -> Plan:
        """The plan, once its packets are opened and decoded (None: there were none to open)."""
        plan = opening.plan
        if not plan.units:
            return plan
        if decoded is not None:
            plan.plain_at[decoded.good] = np.arange(len(decoded.good))
            plan.cts = decoded.columns.cipher_heads
            plan.columns = decoded.columns
        for unit in plan.units:
            if not unit.keyless:
                unit.cut = min(unit.cut, self._verified(np.asarray(unit.rows, np.intp), plan))
            plan.taken[plan.rows[unit.rows[: unit.cut]]] = True
        return plan

    def _flows(self, wire: WireColumns, rows: Index) -> tuple[list[Flow], I64]:
        """The distinct flows of the rows, and each row's: one lookup per distinct key."""
        first, inverse = distinct_flows(wire, rows)
        flows = [self._an.flow_for(*flow_key(wire, int(rows[i]))) for i in first.tolist()]
        return flows, inverse

    def _units(self, plan: Plan) -> None:
        """Each eligible flow's unit: the flows that share its SA or a check's scope."""
        root = list(range(len(plan.flows)))

        def find(f: int) -> int:
            while root[f] != f:
                f = root[f]
            return f

        owner: dict[int, int] = {}  # id of a shared state -> a flow that has it
        for f, flow in enumerate(plan.flows):
            scopes = self._eligible(flow)
            plan.scopes.append(scopes or ())
            if scopes is None:
                root[f] = -1
                continue
            for shared in (flow.state, *scopes):
                if shared is not None:
                    root[find(f)] = find(owner.setdefault(id(shared), f))
        unit_of_flow = np.full(len(plan.flows), -1, np.int64)
        by_root: dict[int, int] = {}
        for f, flow in enumerate(plan.flows):
            if root[f] >= 0:
                u = unit_of_flow[f] = by_root.setdefault(find(f), len(by_root))
                if u == len(plan.units):
                    plan.units.append(Unit(keyless=True))
                plan.units[u].keyless &= (
                    flow.state.ctx is None
                )  # mixed: opened, the keyless refused
                plan.unit_of[flow.state] = plan.units[u]
        plan.unit = unit_of_flow[plan.flow]
        order = np.argsort(plan.unit, kind="stable")  # per unit, its rows in capture order
        bounds = np.searchsorted(plan.unit[order], np.arange(len(plan.units) + 1))
        for u, unit in enumerate(plan.units):
            unit.rows = order[bounds[u] : bounds[u + 1]].tolist()

    def _eligible(self, flow: Flow) -> tuple[Scope | None, ...] | None:
        """The checks' scopes of a flow whose SA is in the steady state, else None."""
        state, ctx = flow.state, flow.state.ctx
        if ctx is None:
            return self._keyless(flow)
        if (
            not ctx.lane  # a suite the lane does not take (crypto/encauth.py): the per-frame path
            or state.sa is None
            or not state.proven
            or state.tentative is not None
            or not state.tracker.placed
            or state.tracker.top >> 32 < state.sa.esn_hi  # below the key file's: a finding
            or not all(check.admits(flow) for check in self._checks)
        ):
            return None
        return tuple(check.scope(flow) for check in self._checks)

    def _keyless(self, flow: Flow) -> tuple[Scope | None, ...] | None:
        """The checks' scopes of a flow of a run without keys, once its SA had a packet.

        A run with keys sends its keyless packets one by one: the placement check
        searches them for the known SAs' headers and the receiver counts them.
        """
        state = flow.state
        if (
            state.sa is not None  # a key the tool cannot use (``unsupported``)
            or len(self._an.sas)
            or not state.tracker.placed
            or not all(check.admits(flow) for check in self._checks)
        ):
            return None
        return tuple(check.scope(flow) for check in self._checks)

    def sharing(self, plan: Plan, row: int, states: Iterable[SaState]) -> list[Unit]:
        """The units of ``plan`` that the per-frame packet of batch row ``row``, which
        reached ``states``, may have changed through a scope they share with an SA the
        plan has no unit for (the IV reuse check's key group: a flow without a key from
        another source, an SA with the same key, its first packets held meanwhile).

        An SA outside the plan's units that is not the row's own flow (an inner layer's,
        a frame in no common layout): every unit, its scopes cannot be told here.
        """
        if not plan.units:
            return []
        outside = [state for state in states if state not in plan.unit_of]
        if not outside:
            return []
        pos = int(plan.cand[row])
        flow = plan.flows[int(plan.flow[pos])] if pos >= 0 else None
        if flow is None or any(state is not flow.state for state in outside):
            return list(plan.units)
        if plan.by_scope is None:  # once a plan: each scope its units share, by identity
            plan.by_scope = {}
            for f, scopes in enumerate(plan.scopes):
                unit = plan.unit_of.get(plan.flows[f].state)
                if unit is None:
                    continue
                for scope in scopes:
                    if scope is None:
                        continue
                    units = plan.by_scope.setdefault(id(scope), [])
                    if not any(unit is u for u in units):
                        units.append(unit)
        shared: list[Unit] = []
        for check in self._checks:
            scope = check.scope(flow)
            for unit in plan.by_scope.get(id(scope), ()) if scope is not None else ():
                if not any(unit is u for u in shared):
                    shared.append(unit)
        return shared

    def resume(
        self, plan: Plan, unit: Unit, batch: FrameBatch, wire: WireColumns, row: int
    ) -> bool:
        """After the per-frame path took batch row ``row``, one of ``unit``'s: plan the unit's
        rows after it again, from its SAs' state now (True: the lane takes some).

        The row is one the plan refused, or one it took that went per frame because the
        analyzer was busy. A packet that breaks its SA's scheme (a reuse, a gap, a clear
        header) goes per frame, not the rest of its SA's batch. The plan before is
        dropped first, so rows it took after ``row`` are taken again only if the new
        plan takes them. At most ``MAX_RESUMES`` times a batch per unit, then the rest
        of it goes per frame: each costs its rest.
        """
        plan.invalidate(unit, row)
        if unit.resumed >= MAX_RESUMES:
            unit.cut = 0
            return False
        unit.resumed += 1
        rest = unit.rows[bisect_right(unit.rows, int(plan.cand[row])) :]  # positions, in order
        unit.rows, unit.cut = rest, 0
        flows = distinct(plan.flow[rest]).tolist()
        if not rest or any(self._eligible(plan.flows[f]) != plan.scopes[f] for f in flows):
            return False  # the frame changed what the checks admit: the rest goes per frame
        pos = np.asarray(rest, np.intp)
        sealed_with = plan.seq64[pos]  # what the keyed rows were opened with
        view = np.frombuffer(batch.buf, np.uint8)
        cut = self._prefix(rest, plan, wire, view, batch.buf)
        if not unit.keyless:
            esn = np.array([f.state.ctx is not None and f.state.ctx.esn for f in plan.flows])
            moved = esn[plan.flow[pos]] & (plan.seq64[pos] != sealed_with)  # another AAD
            cut = min(cut, first_refused(moved), self._verified(pos, plan))
        unit.cut = cut
        plan.taken[plan.rows[rest[:cut]]] = True
        return cut > 0

    def _prefix(
        self,
        rows: list[int],
        plan: Plan,
        wire: WireColumns,
        view: npt.NDArray[np.uint8],
        raw: Buffer,
    ) -> int:
        """How many of a unit's rows (candidate positions, capture order) pass the tests
        that need no decryption, from its SAs' state now; their seq64s inferred."""
        pos = np.asarray(rows, np.intp)
        flow = plan.flow[pos]
        seq = wire.seq[plan.rows[pos]].astype(np.uint64)
        states: dict[SaState, list[int]] = {}
        for f in distinct(flow).tolist():
            states.setdefault(plan.flows[f].state, []).append(f)
        for state, own_flows in states.items():
            mine = among(flow, own_flows, len(plan.flows))
            seq64 = EsnTracker.nearest_run(state.tracker.top, seq[mine])
            if seq64 is None:
                return 0  # near a wrap: the per-frame path places them one by one
            plan.seq64[pos[mine]] = seq64
            plan.placed[pos[mine]] = True
        plan.counter[pos] = False
        sealed = plan.end[pos] - plan.sealed_at[pos]
        fixed = unopenable(sealed, plan.icv_len[pos], plan.iv_len[pos]) | plan.by_bytes[pos]
        # Refused whatever the state: the cut is at most the first such row, and a check's
        # rule for a row reads only the rows before it, so none reads further. After the
        # per-frame path takes that row, ``resume`` reads on to the next.
        pos = pos[: first_refused(fixed)]
        flow = flow[: len(pos)]
        bad = np.zeros(len(pos), np.bool_)
        for f in distinct(flow).tolist():
            at = np.flatnonzero(flow == f)
            flow_view = flow_rows(plan, pos[at], view, raw)
            for check in self._checks:
                bad[at] |= check.refuses(flow_view)
                counter = check.columns(flow_view).counter
                if counter is not None:
                    plan.counter[pos[at]] |= counter
        for scope, at in scopes(plan, pos):
            bad[at] |= scope.refuses(scope_rows(plan, pos[at], raw))
        return first_refused(bad)

    def _by_bytes(self, plan: Plan, view: npt.NDArray[np.uint8], raw: Buffer) -> Mask:
        """Per candidate of the units, whether a check refuses it by its bytes alone; the
        columns the checks' bytes rules give the others kept in the plan (``leaks``), and
        the rows they find clear from their header on (``clear``)."""
        refused = np.zeros(len(plan.rows), np.bool_)
        plan.leaks, plan.leak_row, plan.leak_rows = [], np.zeros(0, np.int64), 0
        pos = np.flatnonzero(plan.unit >= 0)
        flow = plan.flow[pos]
        for f in distinct(flow).tolist():
            own = pos[flow == f]
            rows = flow_rows(plan, own, view, raw)
            for check in self._checks:
                rule = check.refuses_bytes(rows)
                refused[own] |= rule.refused
                if rule.leaks is not None:  # its rows made positions
                    add_leaks(plan, rule.leaks.at_rows(own[rule.leaks.at]))
                if rule.clear is not None:
                    plan.clear[own] |= rule.clear
        return refused

    @staticmethod
    def _verified(pos: Index, plan: Plan) -> int:
        """How many of the rows ``pos`` (a unit's, capture order) verified and decode as
        the plain case."""
        cols = plan.columns
        if cols is None or not len(cols.plain):  # none verified: there is no row 0 to read
            return 0
        at = plan.plain_at[pos]
        bad = (at < 0) | ~cols.plain[np.where(at < 0, 0, at)]
        return first_refused(bad)

    # -- applying -------------------------------------------------------------
    def apply(
        self,
        batch: FrameBatch,
        wire: WireColumns,
        plan: Plan,
        rows: list[int],
        records: tuple[PacketRecord, ...],
    ) -> SteadyRows:
        """Commit the lane's ``rows`` (batch rows, capture order) to the checks; their
        columns (engine/commit.py)."""
        return commit_run(self._checks, batch, wire, plan, rows, records)
