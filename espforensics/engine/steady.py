"""The steady lane: the packets of SAs in a steady state, checked over a batch's columns.

In: a ``FrameBatch`` and its ``WireColumns``, the ``FrameAnalyzer`` (its
flows, SA states and checks), and the packets ``prepare`` asked to open,
opened. Out: a ``Plan`` (which frames of the batch the lane takes, with their columns),
and per run of the batch, ``apply`` commits the run's packets to the
checks' state in bulk and returns the run's ``SteadyRows``. Raises nothing.

A packet is the lane's only when every check would treat it as the plain
case, which the lane proves before it takes it (from the first packet that
is not, the rest of its key group's packets in the batch go through the
per-frame path, the reference):
- its SA has a usable key that verified a packet already, is not waiting
  for its ESN place, is not below the key file's ESN high half (the ESN
  mismatch check's case), and every check has seen the SA before;
- its seq64 is what RFC 4303 A2.2's inference gives from the SA's top,
  for every running top within the batch (one high half, no wrap);
- its sequence number is above every one its flow has seen (no duplicate,
  no reorder) and its IV, xor the key group's constant, above every one
  the group has seen (no reuse), the group still counting in runs; or,
  with CBC's 16-byte IVs, its IV's 64-bit fold new to the group's hash set
  and to the batch, and its ciphertext whole 16-byte blocks;
- its IV was built from its own seq64 by its SA's counter scheme, seqiv's
  xor or an additive counter (or the SA follows neither, checks/ivscheme.py);
  with CBC, its IV is not the last ciphertext block of the SA's previous
  packet;
- its ICV verifies, its trailer is sound, its inner headers decode, and
  its ciphertext does not equal its plaintext (plain.py).
Plans are made per key group ("unit": the SAs that share one key) and
hold while no other frame reaches the group's SAs (``Plan.invalidate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from espforensics.checks import Flow, SaState
from espforensics.checks.context import HEAD_LEN
from espforensics.checks.iv_derivation import IvDerivationCheck
from espforensics.checks.iv_reuse import RUNS_BEFORE_HASH, IvGroup, IvReuseCheck, Uses
from espforensics.checks.keys import KeyCheck
from espforensics.checks.sequence import SequenceCheck
from espforensics.crypto import IV_LEN, CipherContext, EncAuthContext
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.decode.inner import l4_name
from espforensics.decode.ip import PROTO_ESP
from espforensics.decode.ipcomp import PROTO_IPCOMP
from espforensics.engine.plain import Outer, PlainColumns, decode_plaintexts
from espforensics.engine.rows import SteadyRows
from espforensics.engine.wire import ADDR_LEN, I64, FrameBatch, Mask, WireColumns
from espforensics.model import PacketRecord
from espforensics.pipeline import FrameAnalyzer

C = TypeVar("C")
U64 = npt.NDArray[np.uint64]
Index = npt.NDArray[np.intp]
_LOW = 0xFFFFFFFF
_HALF = 1 << 31
# One SA's packets to open: its context, their seq64s, IVs (rows) and sealed bytes.
OpenJob = tuple[CipherContext, npt.NDArray[np.uint64], npt.NDArray[np.uint8], list[memoryview]]
_SEALED = HEAD_LEN  # ciphertext and ICV bytes the lane needs at the least (the evidence)
_WIDE = 16  # CBC's IV (RFC 3602): the lane reads this many bytes after every ESP header


def _outer_of(
    addrs: npt.NDArray[np.uint8], v4: Mask | None = None, udp: Mask | None = None
) -> Outer:
    """Per row: the outer addresses' 16-bit word sum (RFC 1071; IPv4's zero-padded), the rest."""
    words = addrs.copy().view(">u2").sum(axis=1, dtype=np.int64)
    empty = np.zeros(len(addrs), np.bool_)
    return Outer(words, empty if v4 is None else v4, empty if udp is None else udp)


@dataclass(slots=True, eq=False)
class _Unit:
    """The SAs of one key group in a batch, and the rows the lane takes of them."""

    group: IvGroup
    rows: list[int] = field(default_factory=list)  # candidate positions, capture order
    cut: int = 0  # rows[:cut] are the lane's

    @property
    def wide(self) -> bool:
        """A CBC key group: 16-byte IVs, hashed as folds, chaining tested per flow."""
        return self.group.wide


@dataclass(slots=True)
class Plan:
    """Which rows of a batch the lane takes, and what their columns hold.

    Arrays indexed by candidate position (``cand`` maps a batch row to it):
    the batch's frames in a common layout, in capture order.
    """

    taken: list[bool]  # per batch row
    cand: I64  # per batch row: its candidate position, or -1
    rows: Index = field(default_factory=lambda: np.zeros(0, np.intp))  # position -> batch row
    spi: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    flows: list[Flow] = field(default_factory=list)
    flow: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # position -> flows index
    unit: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # position -> unit, or -1
    units: list[_Unit] = field(default_factory=list)
    unit_of: dict[SaState, _Unit] = field(default_factory=dict)
    seq64: U64 = field(default_factory=lambda: np.zeros(0, np.uint64))
    iv: U64 = field(default_factory=lambda: np.zeros(0, np.uint64))  # a wide IV's fold
    iv_bytes: npt.NDArray[np.uint8] = field(  # _WIDE bytes after the ESP header
        default_factory=lambda: np.zeros((0, _WIDE), np.uint8)
    )
    iv_wide: Mask = field(default_factory=lambda: np.zeros(0, np.bool_))
    end: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # where the datagram ends
    counter: Mask = field(default_factory=lambda: np.zeros(0, np.bool_))
    # per position: the ICV (the digest), in the first icv_len bytes of a row
    icv: npt.NDArray[np.uint8] = field(default_factory=lambda: np.zeros((0, 16), np.uint8))
    icv_len: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    plain_at: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # position -> opened
    cts: npt.NDArray[np.uint8] = field(  # per opened: the ciphertext's first HEAD_LEN bytes
        default_factory=lambda: np.zeros((0, HEAD_LEN), np.uint8)
    )
    columns: PlainColumns | None = None  # per opened
    outer: Outer = field(default_factory=lambda: _outer_of(np.zeros((0, 2 * ADDR_LEN), np.uint8)))

    def unit_of_row(self, row: int) -> _Unit | None:
        pos = int(self.cand[row])
        return self.units[int(self.unit[pos])] if pos >= 0 and self.unit[pos] >= 0 else None

    def invalidate(self, unit: _Unit, after: int) -> None:
        """A frame outside the plan reached the unit's SAs: its rows after ``after`` go back."""
        for pos in unit.rows[: unit.cut]:
            row = int(self.rows[pos])
            if row > after:
                self.taken[row] = False


@dataclass(frozen=True, slots=True)
class Opening:
    """A plan whose packets are to be opened: the jobs (one per SA), and where each sits."""

    plan: Plan
    jobs: tuple[OpenJob, ...]
    opened: Index  # the candidate position of each packet of the jobs, in job order
    sealed_at: I64  # per candidate: where its ciphertext starts in the batch buffer


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
    def prepare(self, batch: FrameBatch, wire: WireColumns) -> Opening:
        """Which rows of ``batch`` the lane may take, and the packets to open for them."""
        n = len(batch.frames)
        plan = Plan([False] * n, np.full(n, -1, np.int64))
        rows = np.flatnonzero(wire.steady)
        plan.rows = rows
        plan.spi = wire.spi[rows]
        plan.outer = _outer_of(wire.addrs[rows], wire.ip_version[rows] == 4, wire.udp[rows])
        plan.cand[rows] = np.arange(len(rows))
        at = batch.start[rows] + wire.l3[rows] + wire.esp_offset[rows]
        end = batch.start[rows] + wire.l3[rows] + wire.total_len[rows]
        nothing = Opening(plan, (), np.zeros(0, np.intp), at + ESP_HEADER_LEN + IV_LEN)
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
        plan.end = end
        view = np.frombuffer(batch.buf, np.uint8)  # 16 zero bytes end it: _WIDE may overrun
        plan.iv_bytes = view[(at + ESP_HEADER_LEN)[:, None] + np.arange(_WIDE)]
        halves = plan.iv_bytes.copy().view(">u8").astype(np.uint64)
        plan.iv_wide = iv_len == _WIDE
        plan.iv = np.where(plan.iv_wide, halves[:, 0] ^ halves[:, 1], halves[:, 0])
        plan.counter = np.zeros(len(rows), np.bool_)
        plan.seq64 = np.zeros(len(rows), np.uint64)
        for unit in plan.units:
            unit.cut = self._prefix(unit, plan, wire, view, (sealed_at, end))
        parts: list[Index] = []
        jobs: list[OpenJob] = []
        mv = memoryview(batch.buf)
        for unit in plan.units:
            pos = np.asarray(unit.rows[: unit.cut], np.intp)
            flow = plan.flow[pos]
            for f in np.unique(flow).tolist():
                own = pos[flow == f]
                spans = zip(sealed_at[own].tolist(), end[own].tolist(), strict=True)
                sealed_views = [mv[a:b] for a, b in spans]
                ctx = _ctx(plan.flows[f])
                ivs = plan.iv_bytes[own, : ctx.iv_len]
                jobs.append((ctx, plan.seq64[own], ivs, sealed_views))
                parts.append(own)
        opened = np.concatenate(parts) if parts else np.zeros(0, np.intp)
        return Opening(plan, tuple(jobs), opened, sealed_at)

    def settle(self, opening: Opening, batch: FrameBatch, opened: list[list[bytes | None]]) -> Plan:
        """The plan, once its packets are opened (one list per job, as ``prepare`` made them)."""
        plan = opening.plan
        if not opening.jobs:
            return plan
        plains = [p for part in opened for p in part]
        good = np.flatnonzero(np.fromiter((p is not None for p in plains), np.bool_, len(plains)))
        at_good = opening.opened[good]
        plan.plain_at = np.full(len(plan.rows), -1, np.int64)
        plan.plain_at[at_good] = np.arange(len(good))
        texts = [p for p in plains if p is not None]
        view = np.frombuffer(batch.buf, np.uint8)
        plan.cts = view[opening.sealed_at[at_good][:, None] + np.arange(HEAD_LEN)]
        # Per flow, then per row: the outer names, GMAC (clear by design) and the ICV length.
        ctxs = [f.state.ctx for f in plan.flows]
        names = np.array([(f.src, f.dst) for f in plan.flows], dtype=object)[plan.flow[at_good]]
        clear = np.array([c is not None and c.clear for c in ctxs], np.bool_)[plan.flow[at_good]]
        outer = Outer(plan.outer.words[at_good], plan.outer.v4[at_good], plan.outer.natt[at_good])
        plan.columns = decode_plaintexts(texts, names[:, 0], names[:, 1], plan.cts, clear, outer)
        width = max(HEAD_LEN, int(plan.icv_len.max()))  # an HMAC-SHA-512 ICV is 32 bytes
        icv_at = (plan.end - plan.icv_len)[:, None] + np.arange(width)
        plan.icv = view[np.minimum(icv_at, len(view) - 1)]  # past an ICV: bytes not read
        for unit in plan.units:
            unit.cut = self._verified(unit, plan)
            for p in unit.rows[: unit.cut]:
                plan.taken[int(plan.rows[p])] = True
        return plan

    def _flows(self, wire: WireColumns, rows: Index) -> tuple[list[Flow], I64]:
        """The distinct flows of the rows, and each row's: one lookup per distinct key."""
        key = np.empty((len(rows), 5 + 2 * ADDR_LEN), np.uint8)
        spi = wire.spi[rows]
        for k in range(4):
            key[:, k] = (spi >> (24 - 8 * k)) & 0xFF
        key[:, 4] = wire.ip_version[rows]
        key[:, 5:] = wire.addrs[rows]
        packed = key.view(np.dtype((np.void, key.shape[1]))).ravel()
        _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
        flows: list[Flow] = []
        for i in first.tolist():
            row = int(rows[i])
            width = 4 if wire.ip_version[row] == 4 else ADDR_LEN
            addrs = wire.addrs[row]
            src, dst = addrs[:width].tobytes(), addrs[ADDR_LEN : ADDR_LEN + width].tobytes()
            flows.append(self._an.flow_for(int(wire.spi[row]), src, dst))
        return flows, inverse.ravel().astype(np.int64)

    def _units(self, plan: Plan) -> None:
        """Each flow's unit (its key group, when its SA is in the steady state)."""
        by_group: dict[int, int] = {}
        unit_of_flow = np.full(len(plan.flows), -1, np.int64)
        for f, flow in enumerate(plan.flows):
            group = self._eligible(flow)
            if group is None:
                continue
            u = by_group.get(id(group))
            if u is None:
                u = by_group[id(group)] = len(plan.units)
                plan.units.append(_Unit(group))
            unit_of_flow[f] = u
            plan.unit_of[flow.state] = plan.units[u]
        plan.unit = unit_of_flow[plan.flow]
        for pos, u in enumerate(plan.unit.tolist()):
            if u >= 0:
                plan.units[u].rows.append(pos)

    def _eligible(self, flow: Flow) -> IvGroup | None:
        """The key group of a flow whose SA is in the steady state, else None.

        Counter IVs (the AEADs, AES-CTR) and CBC's 16-byte IVs; not 3DES's 8-byte
        CBC IVs (random, yet too narrow to fold), nor NULL (no IV).
        """
        state, ctx = flow.state, flow.state.ctx
        if (
            ctx is None
            or not ctx.lane  # issue 20 algorithms (crypto/encauth.py): the per-frame path
            or state.sa is None
            or not state.proven
            or state.tentative is not None
            or not state.tracker.placed
            or state.tracker.top >> 32 < state.sa.esn_hi  # below the key file's: a finding
            or not self._key.steady_known(state)
            or self._seq.steady_sa(flow) is None
            or self._ivd.steady_sa(flow) is None
        ):
            return None
        counter = ctx.counter and ctx.iv_len == IV_LEN  # the AEADs, AES-CTR
        cbc = ctx.iv_len == _WIDE  # cbc(aes)
        return self._ivr.steady_group(state) if counter or cbc else None

    def _prefix(
        self,
        unit: _Unit,
        plan: Plan,
        wire: WireColumns,
        view: npt.NDArray[np.uint8],
        spans: tuple[I64, I64],
    ) -> int:
        """How many of the unit's rows pass the tests that need no decryption.

        ``spans``: per candidate, where its ciphertext starts and its datagram ends.
        """
        pos = np.asarray(unit.rows, np.intp)
        sealed_at, end = spans
        sealed = end - sealed_at
        flow = plan.flow[pos]
        seq = wire.seq[plan.rows[pos]].astype(np.uint64)
        bad = np.zeros(len(pos), np.bool_)
        states: dict[SaState, list[int]] = {}
        for f in np.unique(flow).tolist():
            states.setdefault(plan.flows[f].state, []).append(f)
        for state, own_flows in states.items():
            mine = np.isin(flow, own_flows)
            top = state.tracker.top
            cand = seq[mine] | np.uint64(top & ~_LOW)
            high, low = int(cand.max()), int(cand.min())
            # RFC 4303 A2.2 gives these very values for every running top in the batch:
            if max(high, top) - low > _HALF or high - top > _HALF:
                return 0  # near a wrap: the per-frame path places them one by one
            plan.seq64[pos[mine]] = cand
        for f in np.unique(flow).tolist():
            mine = flow == f
            fl = plan.flows[f]
            cand = plan.seq64[pos[mine]]
            seq_sa = self._seq.steady_sa(fl)
            assert seq_sa is not None  # _eligible
            top64 = np.uint64(seq_sa.top)  # >= 0: the flow has been seen
            prev = np.concatenate(([top64], cand[:-1]))
            # No duplicate, no reorder, no wrap: the sequence check's plain case.
            wrong = (cand <= prev) | (cand >> np.uint64(32) != top64 >> np.uint64(32))
            if unit.wide:
                wrong |= self._chained(fl, plan, pos[mine], view, end)
                wrong |= self._not_echainiv(fl, plan, pos[mine], cand)
            else:
                ivd = self._ivd.steady_sa(fl)
                assert ivd is not None  # _eligible
                constant = IvDerivationCheck.steady_constant(ivd)
                if constant is not None:  # the IV built from its own number
                    c, m = np.uint64(constant[0]), np.uint64(constant[1])
                    ivs = plan.iv[pos[mine]] & m
                    # seqiv: IV xor c; an additive counter: IV - c (mod 2^64, then the mask)
                    built = (ivs - c) & m if constant[2] else ivs ^ c
                    wrong |= built != (cand & m)
                    plan.counter[pos[mine]] = True
            bad[np.flatnonzero(mine)[wrong]] = True
        if unit.wide:
            bad |= self._folds_seen(unit, plan.iv[pos])
            ct_len = sealed[pos] - plan.icv_len[pos]  # whole AES blocks, as long as the IV:
            bad |= (ct_len < _WIDE) | (ct_len % _WIDE != 0)  # else the trailer check's case
        else:
            value = plan.iv[pos] ^ np.uint64(unit.group.const)
            prev_v = np.concatenate(([np.uint64(unit.group.runs.top())], value[:-1]))
            bad |= value <= prev_v  # maybe a reuse: the IV reuse check's case
        bad |= sealed[pos] < _SEALED
        return int(np.argmax(bad)) if bad.any() else len(pos)

    def _chained(
        self, flow: Flow, plan: Plan, own: Index, view: npt.NDArray[np.uint8], end: I64
    ) -> Mask:
        """Which of a CBC flow's rows carry the previous packet's last ciphertext block as IV."""
        ivd = self._ivd.steady_sa(flow)
        assert ivd is not None  # _eligible
        icv_len = _ctx(flow).icv_len
        last = view[(end[own] - icv_len - _WIDE)[:, None] + np.arange(_WIDE)]
        before = np.empty_like(last)
        before[1:] = last[:-1]
        before[0] = np.frombuffer(ivd.last.ljust(_WIDE, b"\0"), np.uint8)
        same: Mask = (plan.iv_bytes[own] == before).all(axis=1)
        if len(ivd.last) != _WIDE:
            same[0] = False  # no packet of the flow had a whole block yet
        return same

    def _not_echainiv(self, flow: Flow, plan: Plan, own: Index, seq64: U64) -> Mask:
        """Which of a CBC flow's rows have an IV echainiv did not build from their own seq64.

        The IVs decrypted as blocks give words that, times the SA's inverse
        multipliers (mod 2^64), must all be the packet's seq64 (checks/echainiv.py).
        """
        ivd = self._ivd.steady_sa(flow)
        assert ivd is not None  # _eligible
        inverses = IvDerivationCheck.steady_multipliers(ivd)
        if inverses is None:  # not echainiv's IVs: nothing to compare with
            return np.zeros(len(own), np.bool_)
        ctx = _ctx(flow)
        assert isinstance(ctx, EncAuthContext)  # a CBC flow
        words = ctx.iv_words(plan.iv_bytes[own].tobytes())
        wrong = np.zeros(len(own), np.bool_)
        with np.errstate(over="ignore"):
            for i, inverse in enumerate(inverses):
                wrong |= words[:, i] * np.uint64(inverse) != seq64
        plan.counter[own] = True  # iv_seq_delta 0, as the per-frame path sets it
        return wrong

    @staticmethod
    def _folds_seen(unit: _Unit, folds: U64) -> Mask:
        """Which folds the group's hash set holds, or an earlier row of the unit has."""
        hashed = unit.group.hashed
        assert hashed is not None  # a wide group hashes from its first packet
        seen = hashed.contains_many(folds)
        _, first = np.unique(folds, return_index=True)
        again = np.ones(len(folds), np.bool_)
        again[first] = False
        return seen | again

    def _verified(self, unit: _Unit, plan: Plan) -> int:
        """How many of the unit's planned rows verified and decode as the plain case."""
        cols = plan.columns
        assert cols is not None
        pos = np.asarray(unit.rows[: unit.cut], np.intp)
        if not len(pos):
            return 0
        at = plan.plain_at[pos]
        bad = (at < 0) | ~cols.plain[np.where(at < 0, 0, at)]
        bad |= _carries(cols, np.where(at < 0, 0, at))
        if unit.wide:  # hashed: no runs to make room for
            return int(np.argmax(bad)) if bad.any() else len(pos)
        value = plan.iv[pos] ^ np.uint64(unit.group.const)
        runs = unit.group.runs
        fresh = np.concatenate(([value[0] != np.uint64(runs.top() + 1)], np.diff(value) != 1))
        bad |= len(runs) + np.cumsum(fresh) > RUNS_BEFORE_HASH
        return int(np.argmax(bad)) if bad.any() else len(pos)

    # -- applying -------------------------------------------------------------
    def apply(
        self,
        batch: FrameBatch,
        wire: WireColumns,
        plan: Plan,
        rows: list[int],
        records: tuple[PacketRecord, ...],
    ) -> SteadyRows:
        """Commit the lane's ``rows`` (batch rows, capture order) to the checks; their columns."""
        pos = plan.cand[rows]
        for u in np.unique(plan.unit[pos]).tolist():
            self._commit_unit(batch, plan, plan.units[u], pos[plan.unit[pos] == u])
        flows = plan.flow[pos]
        for f in np.unique(flows).tolist():
            own = pos[flows == f]
            flow = plan.flows[f]
            seq64s = plan.seq64[own]
            flow.state.tracker.commit(int(seq64s[-1]))
            seq_sa = self._seq.steady_sa(flow)
            assert seq_sa is not None
            SequenceCheck.observe_steady(seq_sa, seq64s, plan.icv[own, : plan.icv_len[own[0]]])
            self._derivation(batch, plan, flow, own)
            self._key.observe_steady(flow.state, len(own))
        return self._columns(batch, wire, plan, rows, pos, records)

    def _derivation(self, batch: FrameBatch, plan: Plan, flow: Flow, own: I64) -> None:
        """The IV derivation check's bulk update: its counts, and a CBC SA's last block."""
        ivd = self._ivd.steady_sa(flow)
        assert ivd is not None  # _eligible
        IvDerivationCheck.observe_steady(ivd, len(own))
        if _ctx(flow).iv_len != _WIDE:
            return
        last = int(own[-1])
        cut = int(plan.end[last]) - int(plan.icv_len[last])  # the ciphertext's end
        block = bytes(memoryview(batch.buf)[cut - _WIDE : cut])
        IvDerivationCheck.observe_steady_cbc(ivd, block, int(batch.number[plan.rows[last]]))

    def _commit_unit(self, batch: FrameBatch, plan: Plan, unit: _Unit, pos: I64) -> None:
        cols = plan.columns
        assert cols is not None
        at = plan.plain_at[pos]
        width = _WIDE if unit.wide else IV_LEN
        uses = Uses(
            batch.number[plan.rows[pos]],
            plan.iv_bytes[pos, :width],
            plan.spi[pos],
            plan.seq64[pos],
            (plan.icv[pos], plan.icv_len[pos]),
            plan.cts[at],
            cols.heads[at],
        )
        ivs = plan.iv[pos]
        if unit.wide:
            IvReuseCheck.observe_steady_wide(unit.group, ivs, uses)  # ivs: the folds
        else:
            IvReuseCheck.observe_steady(unit.group, ivs, ivs ^ np.uint64(unit.group.const), uses)

    def _columns(
        self,
        batch: FrameBatch,
        wire: WireColumns,
        plan: Plan,
        rows: list[int],
        pos: I64,
        records: tuple[PacketRecord, ...],
    ) -> SteadyRows:
        idx = np.asarray(rows, np.intp)
        local, flow_idx = np.unique(plan.flow[pos], return_inverse=True)
        flows = tuple(plan.flows[f] for f in local.tolist())
        cols = plan.columns
        assert cols is not None
        at = plan.plain_at[pos]
        esn = np.array([_ctx(f).esn for f in flows], np.bool_)
        return SteadyRows(
            records=records,
            flows=flows,
            frame=batch.number[idx],
            ts_ns=batch.ts_ns[idx],
            caplen=batch.caplen[idx],
            wirelen=batch.wirelen[idx],
            flow=flow_idx.ravel().astype(np.int64),
            ip_version=wire.ip_version[idx],
            udp=wire.udp[idx],
            udp_sport=wire.udp_sport[idx],
            udp_dport=wire.udp_dport[idx],
            spi=wire.spi[idx],
            seq=wire.seq[idx],
            seq64=plan.seq64[pos],
            esn=esn[flow_idx.ravel()],
            iv=plan.iv_bytes[pos],
            iv_wide=plan.iv_wide[pos],
            esp_offset=wire.esp_offset[idx],
            esp_len=wire.total_len[idx] - wire.esp_offset[idx],
            pad_len=cols.pad_len[at],
            next_header=cols.next_header[at],
            payload_len=cols.payload_len[at],
            inner_proto=cols.inner_proto[at],
            inner_src=cols.inner_src[at],
            inner_dst=cols.inner_dst[at],
            inner_sport=cols.inner_sport[at],
            inner_dport=cols.inner_dport[at],
            inner_checksum=cols.checksum[at],
            checksum_detail=cols.checksum_detail[at],
            tfc_len=cols.tfc_len[at],
            counter=plan.counter[pos],
            algorithm=tuple(f.state.sa.suite if f.state.sa else "" for f in flows),
        )


_CARRIED = (l4_name(PROTO_ESP), l4_name(PROTO_IPCOMP))  # inner_proto of ESP, IPComp


def _carries(cols: PlainColumns, at: I64) -> Mask:
    """Rows whose plaintext carries ESP or IPComp, in transport or tunnel mode: the
    per-frame path's (it analyzes the inner ESP layer, inflates IPComp)."""
    nh = cols.next_header[at]
    inner = np.isin(cols.inner_proto[at].astype(str), _CARRIED)
    return np.asarray(np.isin(nh, (PROTO_ESP, PROTO_IPCOMP)) | inner, np.bool_)


def _ctx(flow: Flow) -> CipherContext:
    ctx = flow.state.ctx
    assert ctx is not None  # the lane takes only SAs with a usable key
    return ctx


def _one(checks: Sequence[object], cls: type[C]) -> C:
    for check in checks:
        if isinstance(check, cls):
            return check
    raise LookupError(cls.__name__)
