"""The steady lane's plan of a batch: which rows it takes, and their columns.

In: made by ``SteadyLane.prepare`` and ``settle`` (engine/steady.py). Out:
the views the bulk checks read (checks/bulk.py) of a flow's or a scope's
rows, and ``Plan.invalidate`` for the engine (engine/run.py). Raises nothing.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from espforensics.capture.batch import Buffer
from espforensics.checks import Flow, SaState
from espforensics.checks.bulk import FlowRows, Leaks, Outer, Scope, ScopeRows
from espforensics.checks.context import HEAD_LEN
from espforensics.crypto import IV_LEN, CipherContext
from espforensics.decode.digest import RowDigests, kept_source
from espforensics.engine.plain import PlainColumns
from espforensics.engine.wire import ADDR_LEN, I64, FrameBatch, Mask, WireColumns
from espforensics.model.arrays import among, distinct, rows_at

U64 = npt.NDArray[np.uint64]
Index = npt.NDArray[np.intp]
WIDE = 16  # CBC's IV (RFC 3602): the lane reads this many bytes after every ESP header


def outer_of(
    addrs: npt.NDArray[np.uint8], v4: Mask | None = None, udp: Mask | None = None
) -> Outer:
    """Per row: the outer addresses' 16-bit word sum (RFC 1071; IPv4's zero-padded), the rest."""
    words = addrs.copy().view(">u2").sum(axis=1, dtype=np.int64)
    empty = np.zeros(len(addrs), np.bool_)
    return Outer(words, empty if v4 is None else v4, empty if udp is None else udp)


@dataclass(slots=True, eq=False)
class Unit:
    """The flows of a batch that share a check's scope (a key group), and the rows the
    lane takes of them."""

    rows: list[int] = field(default_factory=list)  # candidate positions, capture order
    cut: int = 0  # rows[:cut] are the lane's
    keyless: bool = False  # its flows have no key: nothing to open (every flow's alike)
    resumed: int = 0  # how often its rest was planned again (``SteadyLane.resume``)


@dataclass(slots=True)
class Plan:
    """Which rows of a batch the lane takes, and what their columns hold.

    Arrays indexed by candidate position (``cand`` maps a batch row to it):
    the batch's frames in a common layout, in capture order.
    """

    taken: Mask  # per batch row
    cand: I64  # per batch row: its candidate position, or -1
    rows: Index = field(default_factory=lambda: np.zeros(0, np.intp))  # position -> batch row
    spi: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    flows: list[Flow] = field(default_factory=list)
    scopes: list[tuple[Scope | None, ...]] = field(default_factory=list)  # per flow, per check
    frame: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    flow: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # position -> flows index
    unit: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # position -> unit, or -1
    units: list[Unit] = field(default_factory=list)
    unit_of: dict[SaState, Unit] = field(default_factory=dict)
    # the units each scope (by identity) is shared by, made when first asked
    # (``SteadyLane.sharing``)
    by_scope: dict[int, list[Unit]] | None = None
    seq64: U64 = field(default_factory=lambda: np.zeros(0, np.uint64))
    placed: Mask = field(default_factory=lambda: np.zeros(0, np.bool_))  # seq64 inferred
    by_bytes: Mask = field(default_factory=lambda: np.zeros(0, np.bool_))  # a check refuses
    # the leak columns the checks' bytes rules gave (``BytesRule.leaks``, their rows made
    # positions), and per position its row among them all, or -1 (``add_leaks``)
    leaks: list[Leaks] = field(default_factory=list)
    leak_row: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    leak_rows: int = 0  # of them all
    # the positions clear from right after their ESP header on (``BytesRule.clear``): no IV
    clear: Mask = field(default_factory=lambda: np.zeros(0, np.bool_))
    iv: U64 = field(default_factory=lambda: np.zeros(0, np.uint64))  # a wide IV's fold
    iv_bytes: npt.NDArray[np.uint8] = field(  # WIDE bytes after the ESP header
        default_factory=lambda: np.zeros((0, WIDE), np.uint8)
    )
    iv_len: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # 0 (NULL), 8 or WIDE
    end: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # where the datagram ends
    ip_at: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # where it starts
    esp_at: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # its ESP header
    sealed_at: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # after the IV
    counter: Mask = field(default_factory=lambda: np.zeros(0, np.bool_))
    # per position: the digest (the ICV; without a key, 0 bytes: made when a check reads it,
    # or set by ``apply`` from a buffer not kept), in the first icv_len bytes of a row
    icv: npt.NDArray[np.uint8] = field(default_factory=lambda: np.zeros((0, 16), np.uint8))
    icv_len: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    plain_at: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # position -> opened
    cts: npt.NDArray[np.uint8] = field(  # per opened: the ciphertext's first HEAD_LEN bytes
        default_factory=lambda: np.zeros((0, HEAD_LEN), np.uint8)
    )
    columns: PlainColumns | None = None  # per opened
    outer: Outer = field(default_factory=lambda: outer_of(np.zeros((0, 2 * ADDR_LEN), np.uint8)))

    def unit_of_row(self, row: int) -> Unit | None:
        pos = int(self.cand[row])
        return self.units[int(self.unit[pos])] if pos >= 0 and self.unit[pos] >= 0 else None

    def invalidate(self, unit: Unit, after: int) -> None:
        """A frame outside the plan reached the unit's SAs: its rows after ``after`` go back.

        The unit's positions and ``rows`` both rise, so its rows after ``after`` are one
        slice of its positions (a loop over each position cost 0.1 ms a call).
        """
        first = int(np.searchsorted(self.rows, after, side="right"))  # the first row after
        later = unit.rows[bisect_left(unit.rows, first, 0, unit.cut) : unit.cut]
        if later:
            self.taken[self.rows[np.array(later, np.intp)]] = False


@dataclass(frozen=True, slots=True)
class OpenJob:
    """One SA's packets to open: its context, their seq64s, IVs (rows) and sealed bytes."""

    ctx: CipherContext
    seq64: U64
    ivs: npt.NDArray[np.uint8]
    sealed: list[memoryview]

    def open(self) -> list[bytes | None]:
        """Each packet's plaintext, or None where its ICV does not verify."""
        return self.ctx.open_many(self.seq64, self.ivs, self.sealed)

    def split(self, share: int) -> list[OpenJob]:
        """The job as parts of ``share`` packets (the last one fewer), in order."""
        return [
            OpenJob(
                self.ctx,
                self.seq64[i : i + share],
                self.ivs[i : i + share],
                self.sealed[i : i + share],
            )
            for i in range(0, len(self.sealed), share)
        ]


@dataclass(frozen=True, slots=True)
class Opening:
    """A plan whose packets are to be opened: per SA its context and its packets (candidate
    positions), and where each packet sits."""

    plan: Plan
    parts: tuple[tuple[CipherContext, Index], ...]
    opened: Index  # the candidate position of each packet of the parts, in their order
    sealed_at: I64  # per candidate: where its ciphertext starts in the batch buffer
    end: I64  # per candidate: where its datagram ends
    buf: Buffer  # the batch's bytes

    @property
    def jobs(self) -> tuple[OpenJob, ...]:
        """The packets to open, one job per SA; their sealed bytes are viewed only now (a
        batch a worker opened never needs them)."""
        mv = memoryview(self.buf)
        jobs: list[OpenJob] = []
        for ctx, own in self.parts:
            spans = zip(self.sealed_at[own].tolist(), self.end[own].tolist(), strict=True)
            ivs = self.plan.iv_bytes[own, : ctx.iv_len]
            jobs.append(OpenJob(ctx, self.plan.seq64[own], ivs, [mv[a:b] for a, b in spans]))
        return tuple(jobs)


def distinct_flows(wire: WireColumns, rows: Index) -> tuple[Index, I64]:
    """The first of ``rows`` of each distinct (SPI, IP version, addresses), and each row's,
    in the order of those keys' bytes (the SPI's first, big endian).

    Most batches have one flow per SPI: the SPIs alone are sorted (as numbers, the
    order of their bytes), and the rest of each row's key compared with its SPI's first
    row's; only a batch where they differ sorts the whole keys (37 bytes a row).
    """
    spi = wire.spi[rows]
    rest = np.empty((len(rows), 1 + 2 * ADDR_LEN), np.uint8)
    rest[:, 0] = wire.ip_version[rows]
    rest[:, 1:] = wire.addrs[rows]
    _, first, inverse = np.unique(spi, return_index=True, return_inverse=True)
    inverse = inverse.ravel().astype(np.int64)
    if (rest == rest[first[inverse]]).all():
        return first, inverse
    key = np.empty((len(rows), 4 + rest.shape[1]), np.uint8)
    for k in range(4):
        key[:, k] = (spi >> (24 - 8 * k)) & 0xFF
    key[:, 4:] = rest
    packed = key.view(np.dtype((np.void, key.shape[1]))).ravel()
    _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
    return first, inverse.ravel().astype(np.int64)


def flow_key(wire: WireColumns, row: int) -> tuple[int, bytes, bytes]:
    """A row's (SPI, packed outer source, packed outer destination)."""
    width = 4 if wire.ip_version[row] == 4 else ADDR_LEN
    addrs = wire.addrs[row]
    return int(wire.spi[row]), addrs[:width].tobytes(), addrs[ADDR_LEN : ADDR_LEN + width].tobytes()


def unopenable(sealed: I64, icv_len: I64, iv_len: I64) -> Mask:
    """Rows the lane does not open: fewer sealed bytes than the evidence needs (HEAD_LEN),
    or with 16-byte CBC IVs a ciphertext that is not whole AES blocks (RFC 3602 s3)."""
    ct_len = sealed - icv_len  # CBC: whole AES blocks, as long as the IV, else a trailer's
    cut: Mask = (ct_len < WIDE) | (ct_len % WIDE != 0)
    wide: Mask = iv_len == WIDE
    return (wide & cut) | (sealed < HEAD_LEN)


def cipher_heads(batch: FrameBatch, sealed_at: I64) -> npt.NDArray[np.uint8]:
    """Per row, the first HEAD_LEN bytes of its ciphertext (the leak check's evidence)."""
    view = np.frombuffer(batch.buf, np.uint8)
    return rows_at(view, sealed_at, HEAD_LEN)


def flow_rows(plan: Plan, own: Index, view: npt.NDArray[np.uint8], raw: Buffer) -> FlowRows:
    """One flow's rows ``own`` (candidate positions, capture order), as its checks see them.

    Without a key the IV is read as 8 bytes and the ICV's length is unknown (0)."""
    flow = plan.flows[int(plan.flow[own[0]])]
    ctx = flow.state.ctx
    iv_len, icv_len = (IV_LEN, 0) if ctx is None else (ctx.iv_len, ctx.icv_len)
    return FlowRows(
        flow,
        plan.frame[own],
        plan.seq64[own],
        plan.iv[own],
        plan.iv_bytes[own, :iv_len],
        digests(plan, own, raw),
        view,
        plan.end[own] - icv_len,
        plan.ip_at[own],
        plan.esp_at[own],
        raw,
        leaks_of(plan, own),
        plan.clear[own],
    )


def add_leaks(plan: Plan, leaks: Leaks) -> None:
    """Keeps the leak columns ``leaks`` of the positions ``leaks.at``."""
    if not len(plan.leak_row):
        plan.leak_row = np.full(len(plan.rows), -1, np.int64)
    first, plan.leak_rows = plan.leak_rows, plan.leak_rows + len(leaks.at)
    plan.leak_row[leaks.at] = np.arange(first, plan.leak_rows)
    plan.leaks.append(leaks)


def leaks_of(plan: Plan, own: Index) -> Leaks | None:
    """The leak columns of the rows ``own`` (candidate positions), if any has them."""
    if not plan.leaks:
        return None
    row = plan.leak_row[own]
    at = np.flatnonzero(row >= 0)
    if not len(at):
        return None
    every = Leaks.joined(plan.leaks)
    assert every is not None  # not empty
    if len(plan.leaks) > 1:
        plan.leaks[:] = [every]  # joined once, however many flows ask
    return every.take(row[at]).at_rows(at)


def scope_rows(plan: Plan, own: Index, raw: Buffer) -> ScopeRows:
    return ScopeRows(
        plan.frame[own],
        plan.spi[own],
        plan.seq64[own],
        plan.iv[own],
        plan.iv_bytes[own],
        digests(plan, own, raw),
    )


def digests(plan: Plan, own: Index, raw: Buffer) -> RowDigests:
    """The digests of the rows ``own``: an ICV, a digest the lane made (a keyless row of a
    buffer not kept), else made from ``raw`` when a check reads it (decode/digest.py)."""
    made_len = plan.icv_len[own]
    if made_len.all():  # every one made: a keyed run's rows (no spans to keep)
        return RowDigests(plan.icv[own], made_len, None, None)
    source = kept_source(raw)
    spans = np.empty((len(own), 2), np.int64)  # np.stack costs 5 us more a call
    spans[:, 0], spans[:, 1] = plan.esp_at[own], plan.end[own]
    if source is not None and not made_len.any():  # none made: a run without keys
        return RowDigests(None, None, source, spans)
    return RowDigests(plan.icv[own], made_len, source, spans)


def scopes(plan: Plan, pos: Index) -> list[tuple[Scope, Index]]:
    """Per check, in the registry's order, and per scope of it among the rows ``pos``:
    (scope, which rows). A row clear from its header on (``clear``) holds no IV: it is in
    no scope (a key group's IVs)."""
    flow = plan.flow[pos]
    if plan.clear[pos].any():
        flow = np.where(plan.clear[pos], -1, flow)
    flows = distinct(flow[flow >= 0]).tolist()
    out: list[tuple[Scope, Index]] = []
    for k in range(len(plan.scopes[flows[0]]) if flows else 0):
        shared: dict[int, tuple[Scope, list[int]]] = {}
        for f in flows:
            scope = plan.scopes[f][k]
            if scope is not None:
                shared.setdefault(id(scope), (scope, []))[1].append(f)
        for scope, own_flows in shared.values():
            out.append((scope, np.flatnonzero(among(flow, own_flows, len(plan.flows)))))
    return out
