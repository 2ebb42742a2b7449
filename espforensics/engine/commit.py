"""The steady lane's runs committed: the checks' state in bulk, and the run's columns.

In: a batch, its ``WireColumns``, the ``Plan`` the lane made for it
(engine/steady.py), the bulk checks, and a run's rows (batch rows in
capture order, every one the lane's) with the records of the run's other
frames. Out: ``commit_run`` commits the rows to each SA's ESN tracker,
each scope (a key group) and each check (their ``commit``, checks/bulk.py),
then returns the run's ``SteadyRows`` (engine/rows.py). Raises nothing.
``SteadyLane.apply`` is its caller; what the lane takes is decided before
(``SteadyLane.settle``), so nothing here refuses a row.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from espforensics.capture.batch import Buffer
from espforensics.checks.bulk import BulkCheck, Opened
from espforensics.checks.context import HEAD_LEN
from espforensics.decode.digest import DIGEST_LEN, esp_digests, kept_source
from espforensics.engine.plain import PlainColumns
from espforensics.engine.plan import Index, Plan, flow_rows, leaks_of, scope_rows, scopes
from espforensics.engine.rows import SteadyRows
from espforensics.engine.wire import I64, FrameBatch, WireColumns
from espforensics.model.arrays import Strs, distinct, distinct_inverse, rows_at
from espforensics.model.records import PacketRecord


def commit_run(
    checks: tuple[BulkCheck, ...],
    batch: FrameBatch,
    wire: WireColumns,
    plan: Plan,
    rows: list[int],
    records: tuple[PacketRecord, ...],
) -> SteadyRows:
    """Commit the lane's ``rows`` (batch rows, capture order) to the checks; their columns."""
    pos = plan.cand[rows]
    view = np.frombuffer(batch.buf, np.uint8)
    keyless = pos[plan.plain_at[pos] < 0]  # every keyed row the lane takes was opened
    if len(keyless) and kept_source(batch.buf) is None:  # else made when a check reads it
        _digest(plan, keyless, batch.buf)
    for u in distinct(plan.unit[pos]).tolist():
        mine = pos[plan.unit[pos] == u]
        for scope, own in scopes(plan, mine):
            scope.commit(scope_rows(plan, mine[own], batch.buf), _opened(plan, mine[own], view))
    flows = plan.flow[pos]
    for f in distinct(flows).tolist():
        own = pos[flows == f]
        state = plan.flows[f].state
        state.tracker.commit(int(plan.seq64[own[-1]]))
        if state.ctx is None:  # was its last whole packet clear? (PacketContext.clear_from_header)
            state.clear_whole = bool(plan.clear[own[-1]])
        mine = flow_rows(plan, own, view, batch.buf)
        for check in checks:
            check.commit(mine)
    return _columns(batch, wire, plan, rows, pos, records)


def _columns(
    batch: FrameBatch,
    wire: WireColumns,
    plan: Plan,
    rows: list[int],
    pos: I64,
    records: tuple[PacketRecord, ...],
) -> SteadyRows:
    idx = np.asarray(rows, np.intp)
    local, flow_idx = distinct_inverse(plan.flow[pos])
    flows = tuple(plan.flows[f] for f in local.tolist())
    at = plan.plain_at[pos]
    plain = _Plain(plan.columns, at)
    esn = np.array([f.state.ctx is not None and f.state.ctx.esn for f in flows], np.bool_)
    return SteadyRows(
        records=records,
        flows=flows,
        frame=batch.number[idx],
        ts_ns=batch.ts_ns[idx],
        caplen=batch.caplen[idx],
        wirelen=batch.wirelen[idx],
        flow=flow_idx.astype(np.int64),
        ip_version=wire.ip_version[idx],
        carriers=wire.carriers[idx],
        udp=wire.udp[idx],
        udp_sport=wire.udp_sport[idx],
        udp_dport=wire.udp_dport[idx],
        spi=wire.spi[idx],
        seq=wire.seq[idx],
        seq64=plan.seq64[pos],
        esn=esn[flow_idx],
        iv=plan.iv_bytes[pos],
        iv_len=plan.iv_len[pos],
        esp_offset=wire.esp_offset[idx],
        esp_len=wire.total_len[idx] - wire.esp_offset[idx],
        keyed=at >= 0,
        pad_len=plain.ints("pad_len"),
        next_header=plain.ints("next_header"),
        payload_len=plain.ints("payload_len"),
        inner_proto=plain.strs("inner_proto"),
        inner_src=plain.strs("inner_src"),
        inner_dst=plain.strs("inner_dst"),
        inner_sport=plain.ints("inner_sport"),
        inner_dport=plain.ints("inner_dport"),
        inner_checksum=plain.strs("checksum"),
        checksum_detail=plain.strs("checksum_detail"),
        tfc_len=plain.ints("tfc_len"),
        counter=plan.counter[pos],
        leaks=leaks_of(plan, pos),
        clear=plan.clear[pos],
        algorithm=tuple(f.state.sa.suite if f.state.sa else "" for f in flows),
    )


class _Plain:
    """The columns of the opened packets, per lane row: -1 or "" for a row without a key."""

    def __init__(self, columns: PlainColumns | None, at: I64) -> None:
        self._columns, self._keyed = columns, at >= 0
        self._at = np.where(self._keyed, at, 0)

    def ints(self, name: str) -> I64:
        if self._columns is None:
            return np.full(len(self._at), -1, np.int64)
        values: I64 = getattr(self._columns, name)
        return np.where(self._keyed, values[self._at], -1)

    def strs(self, name: str) -> Strs:
        if self._columns is None:
            return np.full(len(self._at), "", object)
        values: Strs = getattr(self._columns, name)
        if self._keyed.all():  # a run of keyed rows: no "" to put in
            mine: Strs = values[self._at]
            return mine
        picked: Strs = np.where(self._keyed, values[self._at], "").astype(object)
        return picked


def _digest(plan: Plan, rows: Index, buf: Buffer) -> None:
    """Each keyless row's digest (``PacketContext.digest``: a hash of its ESP bytes, how a
    replay is told from a new packet), in place of the ICV it has not got: made now for
    a batch in a buffer of its own, which no check's window is to keep (decode/digest.py)."""
    spans = zip(plan.esp_at[rows].tolist(), plan.end[rows].tolist(), strict=True)
    plan.icv[rows, :DIGEST_LEN] = esp_digests(memoryview(buf), spans)
    plan.icv_len[rows] = DIGEST_LEN


def _opened(plan: Plan, rows: Index, view: npt.NDArray[np.uint8]) -> Opened:
    """What opening a scope's rows showed; a keyless scope's: its ciphertext's first bytes."""
    at = plan.plain_at[rows]
    if plan.columns is None or (at < 0).all():
        return Opened(rows_at(view, plan.sealed_at[rows], HEAD_LEN), None)
    return Opened(plan.cts[at], plan.columns.heads[at])
