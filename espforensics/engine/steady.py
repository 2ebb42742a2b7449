"""The steady lane: the packets of SAs in a steady state, checked over a batch's columns.

In: a ``FrameBatch`` and its ``WireColumns``, the ``FrameAnalyzer`` (its
flows, SA states and checks) and a pool that opens packets. Out: a
``Plan`` (which frames of the batch the lane takes, with everything their
rows need), and, per segment of the batch, ``apply`` commits the
segment's packets to the checks' state in bulk and returns the segment's
``SteadyRows``. Raises nothing.

A packet is the lane's only when every check would treat it as the plain
case, which the lane proves before it takes it (the rest of its SA's
packets in the batch then go through the per-frame path, the reference):
- its SA has a usable key that verified a packet already, is not waiting
  for its ESN place, and every check has seen the SA before;
- its seq64 is what RFC 4303 A2.2's inference gives from the SA's top,
  for every running top within the batch (one high half, no wrap);
- its sequence number is above every one its flow has seen (no duplicate,
  no reorder) and its IV, xor the key group's constant, above every one
  the group has seen (no reuse), the group still counting in runs;
- its IV was built from its own seq64 (or the SA's IVs follow no counter);
- its ICV verifies, its trailer is sound, its inner headers decode, and
  its ciphertext does not equal its plaintext (the leak check's test).
Plans are made per key group ("unit": the SAs that share one key) and
hold while no other frame reaches the group's SAs (``invalidate``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from espforensics.checks import Flow, SaState
from espforensics.checks.context import HEAD_LEN
from espforensics.checks.iv_derivation import IvDerivationCheck
from espforensics.checks.iv_reuse import IvGroup, IvReuseCheck, Uses
from espforensics.checks.keys import KeyCheck
from espforensics.checks.leaks import MIN_RUN
from espforensics.checks.sequence import SequenceCheck
from espforensics.crypto import IV_LEN, AeadContext
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.decode.inner import Inner, parse_inner
from espforensics.engine.wire import ADDR_LEN, I64, FrameBatch, Mask, WireColumns
from espforensics.errors import MalformedPacket
from espforensics.model import PacketRecord
from espforensics.pipeline import FrameAnalyzer
from espforensics.trailer import parse_trailer

_LOW = 0xFFFFFFFF
_HALF = 1 << 31
Opener = Callable[[Sequence[tuple[AeadContext, int, bytes, memoryview]]], list[bytes | None]]


@dataclass(frozen=True, slots=True)
class SteadyRows:
    """A run of a batch's frames in capture order: the lane's as columns, the others as records.

    ``records`` are the frames of the run that carry no ESP (processed per
    frame; they touch no state); the rest are the lane's, one array entry
    each. ``frame`` of both interleave by frame number.
    """

    records: tuple[PacketRecord, ...]
    flows: tuple[Flow, ...]  # the lane's flows; ``flow`` indexes this
    frame: I64
    ts_ns: I64
    caplen: I64
    wirelen: I64
    flow: I64
    ip_version: I64
    udp: Mask
    udp_sport: I64
    udp_dport: I64
    spi: I64
    seq: I64
    seq64: tuple[int, ...]
    esn: Mask  # seq_hi_verified is set (ESN SAs)
    iv: tuple[bytes, ...]
    esp_offset: I64
    esp_len: I64
    pad_len: I64
    next_header: I64
    payload_len: I64
    inner: tuple[Inner, ...]
    counter: Mask  # iv_seq_delta is 0 (else empty: the SA's IVs follow no counter)
    algorithm: tuple[str, ...]  # per flow

    @property
    def rows(self) -> int:
        return len(self.frame) + len(self.records)


@dataclass(slots=True, eq=False)
class _Unit:
    """The SAs of one key group in a batch, and the rows the lane takes of them."""

    group: IvGroup
    rows: list[int] = field(default_factory=list)  # batch rows, capture order
    cut: int = 0  # rows[:cut] are the lane's


@dataclass(slots=True)
class Plan:
    """Which rows of a batch the lane takes, and what their columns hold."""

    taken: list[bool]  # per batch row
    unit_of: dict[SaState, _Unit]
    row_unit: dict[int, _Unit]
    flow_of: dict[int, Flow]  # batch row -> flow, for the lane's rows
    seq64: dict[int, int]
    iv: dict[int, bytes]
    plain: dict[int, bytes]
    inner: dict[int, Inner]
    trailer: dict[int, tuple[int, int, int]]  # payload_len, pad_len, next_header
    counter: dict[int, bool]

    esp_at: list[int] = field(default_factory=list)  # per batch row: its ESP header in the buffer
    end: list[int] = field(default_factory=list)  # per batch row: its datagram's end

    def invalidate(self, unit: _Unit, after: int) -> None:
        """A frame outside the plan reached the unit's SAs: its rows after ``after`` go back."""
        for row in unit.rows[: unit.cut]:
            if row > after:
                self.taken[row] = False


C = TypeVar("C")


class SteadyLane:
    """Plans and applies the steady lane for one analyzer."""

    def __init__(self, analyzer: FrameAnalyzer) -> None:
        self._an = analyzer
        checks = analyzer.checks
        self._ivr = _one(checks, IvReuseCheck)
        self._seq = _one(checks, SequenceCheck)
        self._ivd = _one(checks, IvDerivationCheck)
        self._key = _one(checks, KeyCheck)

    # -- planning -------------------------------------------------------------
    def plan(self, batch: FrameBatch, wire: WireColumns, opener: Opener) -> Plan:
        """The rows of ``batch`` the lane takes, opened with ``opener``."""
        plan = Plan([False] * len(batch.frames), {}, {}, {}, {}, {}, {}, {}, {}, {})
        rows = np.flatnonzero(wire.steady)
        if not len(rows):
            return plan
        l3 = batch.start + wire.l3
        plan.esp_at, plan.end = (l3 + wire.esp_offset).tolist(), (l3 + wire.total_len).tolist()
        units: dict[int, _Unit] = {}
        eligible: dict[SaState, _Unit | None] = {}
        for row, flow in zip(rows.tolist(), self._flows(wire, rows), strict=True):
            state = flow.state
            if state not in eligible:
                group = self._eligible(flow)
                unit = None if group is None else units.get(id(group))
                if group is not None and unit is None:
                    unit = units[id(group)] = _Unit(group)
                eligible[state] = unit
            unit = eligible[state]
            if unit is not None and self._seq.steady_sa(flow) is not None:
                unit.rows.append(row)
                plan.flow_of[row] = flow
        plan.unit_of = {s: u for s, u in eligible.items() if u is not None}
        jobs: list[tuple[AeadContext, int, bytes, memoryview]] = []
        opened: list[int] = []
        mv = memoryview(batch.buf)
        for unit in units.values():
            unit.cut = self._prefix(unit, plan, batch, wire)
            for row in unit.rows[: unit.cut]:
                ctx = plan.flow_of[row].state.ctx
                assert ctx is not None  # _eligible
                at = plan.esp_at[row] + ESP_HEADER_LEN + IV_LEN
                jobs.append((ctx, plan.seq64[row], plan.iv[row], mv[at : plan.end[row]]))
                opened.append(row)
        for row, plain in zip(opened, opener(jobs), strict=True):
            if plain is not None:
                plan.plain[row] = plain
        for unit in units.values():
            unit.cut = self._verified(unit, plan, batch, wire)
            for row in unit.rows[: unit.cut]:
                plan.taken[row] = True
                plan.row_unit[row] = unit
        return plan

    def _flows(self, wire: WireColumns, rows: npt.NDArray[np.intp]) -> list[Flow]:
        """The flow of each row: one lookup per distinct (SPI, version, addresses)."""
        key = np.empty((len(rows), 5 + 2 * ADDR_LEN), np.uint8)
        spi = wire.spi[rows]
        for k in range(4):
            key[:, k] = (spi >> (24 - 8 * k)) & 0xFF
        key[:, 4] = wire.ip_version[rows]
        key[:, 5:] = wire.addrs[rows]
        packed = key.view(np.dtype((np.void, key.shape[1]))).ravel()
        _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
        looked: list[Flow] = []
        for i in first.tolist():
            row = int(rows[i])
            width = 4 if wire.ip_version[row] == 4 else ADDR_LEN
            addrs = wire.addrs[row]
            src, dst = addrs[:width].tobytes(), addrs[ADDR_LEN : ADDR_LEN + width].tobytes()
            looked.append(self._an.flow_for(int(wire.spi[row]), src, dst))
        return [looked[u] for u in inverse.ravel().tolist()]

    def _eligible(self, flow: Flow) -> IvGroup | None:
        """The key group of a flow whose SA is in the steady state, else None."""
        state = flow.state
        if (
            state.ctx is None
            or state.sa is None
            or not state.proven
            or state.tentative is not None
            or not state.tracker.placed
            or not self._key.steady_known(state)
            or self._ivd.steady_sa(flow) is None
        ):
            return None
        return self._ivr.steady_group(state)

    def _prefix(self, unit: _Unit, plan: Plan, batch: FrameBatch, wire: WireColumns) -> int:
        """How many of the unit's rows pass the tests that need no decryption."""
        rows = unit.rows
        by_state: dict[SaState, list[int]] = {}
        for row in rows:
            by_state.setdefault(plan.flow_of[row].state, []).append(row)
        for state, own in by_state.items():
            top = state.tracker.top
            cands = [(top & ~_LOW) | int(wire.seq[row]) for row in own]
            # RFC 4303 A2.2 gives these very values for every running top in the batch:
            if max(*cands, top) - min(cands) > _HALF or max(cands) - top > _HALF:
                return 0  # near a wrap: the per-frame path places them one by one
            plan.seq64.update(zip(own, cands, strict=True))
        group = unit.group
        last_value = group.runs.top()
        tops: dict[Flow, int] = {}
        for pos, row in enumerate(rows):
            flow, seq64 = plan.flow_of[row], plan.seq64[row]
            seq_sa = self._seq.steady_sa(flow)
            ivd = self._ivd.steady_sa(flow)
            assert seq_sa is not None and ivd is not None  # the rows are of known flows
            if seq64 <= tops.get(flow, seq_sa.top) or seq64 >> 32 != seq_sa.top >> 32:
                return pos  # a duplicate, a reorder or a wrap: the sequence check's cases
            tops[flow] = seq64
            at = plan.esp_at[row] + ESP_HEADER_LEN
            iv = batch.buf[at : at + IV_LEN]
            iv_int = int.from_bytes(iv)
            if iv_int ^ group.const <= last_value:
                return pos  # maybe a reuse: the IV reuse check's case
            last_value = iv_int ^ group.const
            constant = IvDerivationCheck.steady_constant(ivd)
            if constant is not None and (iv_int & constant[1]) ^ constant[0] != seq64 & constant[1]:
                return pos  # not built from its own number: the IV derivation's case
            plan.iv[row] = iv
            plan.counter[row] = constant is not None
        return len(rows)

    def _verified(self, unit: _Unit, plan: Plan, batch: FrameBatch, wire: WireColumns) -> int:
        """How many of the unit's planned rows verified and decode as the plain case."""
        last, new_runs = unit.group.runs.top(), 0
        for pos, row in enumerate(unit.rows[: unit.cut]):
            plain = plan.plain.get(row)
            if plain is None:
                return pos
            trailer = parse_trailer(plain)
            if trailer.problem:
                return pos
            at = plan.esp_at[row] + ESP_HEADER_LEN + IV_LEN
            if batch.buf[at : at + MIN_RUN] == plain[:MIN_RUN]:
                return pos  # the leak check's case: ciphertext equals plaintext
            flow = plan.flow_of[row]
            try:
                payload = plain[: trailer.payload_len]
                inner = parse_inner(trailer.next_header, payload, flow.src, flow.dst)
            except MalformedPacket:
                return pos
            value = int.from_bytes(plan.iv[row]) ^ unit.group.const
            new_runs += value != last + 1 or not len(unit.group.runs)
            last = value
            if not IvReuseCheck.steady_room(unit.group, new_runs):
                return pos
            plan.inner[row] = inner
            plan.trailer[row] = (trailer.payload_len, trailer.pad_len, trailer.next_header)
        return unit.cut

    # -- applying -------------------------------------------------------------
    def apply(
        self,
        batch: FrameBatch,
        wire: WireColumns,
        plan: Plan,
        rows: list[int],
        records: tuple[PacketRecord, ...],
    ) -> SteadyRows:
        """Commit the lane's ``rows`` (capture order) to the checks; their columns."""
        by_flow: dict[Flow, list[int]] = {}
        by_unit: dict[int, list[int]] = {}
        for row in rows:
            by_flow.setdefault(plan.flow_of[row], []).append(row)
            by_unit.setdefault(id(plan.row_unit[row]), []).append(row)
        for own in by_unit.values():
            self._commit_unit(batch, wire, plan, own)
        for flow, own in by_flow.items():
            seq64s = [plan.seq64[r] for r in own]
            state = flow.state
            state.tracker.commit(seq64s[-1])
            seq_sa, ivd = self._seq.steady_sa(flow), self._ivd.steady_sa(flow)
            assert seq_sa is not None and ivd is not None
            SequenceCheck.observe_steady(seq_sa, seq64s, [_icv(batch, plan, r, flow) for r in own])
            IvDerivationCheck.observe_steady(ivd, len(own))
            self._key.observe_steady(state, len(own))
        return self._columns(batch, wire, plan, rows, records)

    def _commit_unit(
        self, batch: FrameBatch, wire: WireColumns, plan: Plan, rows: list[int]
    ) -> None:
        group = plan.row_unit[rows[0]].group
        ivs = [int.from_bytes(plan.iv[r]) for r in rows]
        cts = []
        for r in rows:
            at = plan.esp_at[r] + ESP_HEADER_LEN + IV_LEN
            cts.append(batch.buf[at : min(at + HEAD_LEN, plan.end[r])])
        uses = Uses(
            [batch.frames[r].number for r in rows],
            [int(wire.spi[r]) for r in rows],
            [plan.seq64[r] for r in rows],
            [_icv(batch, plan, r, plan.flow_of[r]) for r in rows],
            cts,
            [plan.plain[r][:HEAD_LEN] for r in rows],
        )
        IvReuseCheck.observe_steady(group, ivs, [iv ^ group.const for iv in ivs], uses)

    def _columns(
        self,
        batch: FrameBatch,
        wire: WireColumns,
        plan: Plan,
        rows: list[int],
        records: tuple[PacketRecord, ...],
    ) -> SteadyRows:
        idx = np.asarray(rows, np.intp)
        flows: dict[Flow, int] = {}
        flow_idx = [flows.setdefault(plan.flow_of[r], len(flows)) for r in rows]
        trailers = [plan.trailer[r] for r in rows]
        frames = batch.frames
        return SteadyRows(
            records=records,
            flows=tuple(flows),
            frame=np.fromiter((frames[r].number for r in rows), np.int64, len(rows)),
            ts_ns=np.fromiter((frames[r].ts_ns for r in rows), np.int64, len(rows)),
            caplen=batch.caplen[idx],
            wirelen=np.fromiter((frames[r].wirelen for r in rows), np.int64, len(rows)),
            flow=np.asarray(flow_idx, np.int64),
            ip_version=wire.ip_version[idx],
            udp=wire.udp[idx],
            udp_sport=wire.udp_sport[idx],
            udp_dport=wire.udp_dport[idx],
            spi=wire.spi[idx],
            seq=wire.seq[idx],
            seq64=tuple(plan.seq64[r] for r in rows),
            esn=np.fromiter((_esn(plan.flow_of[r]) for r in rows), np.bool_, len(rows)),
            iv=tuple(plan.iv[r] for r in rows),
            esp_offset=wire.esp_offset[idx],
            esp_len=wire.total_len[idx] - wire.esp_offset[idx],
            payload_len=np.fromiter((t[0] for t in trailers), np.int64, len(rows)),
            pad_len=np.fromiter((t[1] for t in trailers), np.int64, len(rows)),
            next_header=np.fromiter((t[2] for t in trailers), np.int64, len(rows)),
            inner=tuple(plan.inner[r] for r in rows),
            counter=np.fromiter((plan.counter[r] for r in rows), np.bool_, len(rows)),
            algorithm=tuple(f.state.sa.algorithm if f.state.sa else "" for f in flows),
        )


def _esn(flow: Flow) -> bool:
    ctx = flow.state.ctx
    return ctx is not None and ctx.esn


def _icv(batch: FrameBatch, plan: Plan, row: int, flow: Flow) -> bytes:
    """A verified packet's fingerprint, as ``PacketContext.digest`` gives it: its ICV."""
    ctx = flow.state.ctx
    assert ctx is not None
    end = plan.end[row]
    return batch.buf[end - ctx.icv_len : end]


def _one(checks: Sequence[object], cls: type[C]) -> C:
    for check in checks:
        if isinstance(check, cls):
            return check
    raise LookupError(cls.__name__)
