"""What a batch needs that no state decides, done ahead (in a worker process, with --jobs).

In: a ``FrameBatch``, the NAT-T ports, a ``KeyRing`` over the SAs of the
key files and, per SA (by ``sa_identity``), the ESN high half the engine
last saw it in. Out: ``Prefetch``: the batch's ``WireColumns`` and, for each
packet in a common layout whose SA the steady lane may take, the SA and the
seq64 it was opened with, whether its ICV verified and its decoded
columns (trailer, inner headers, inner checksums). Raises nothing.

Opening a packet and decoding its plaintext is a pure function of its
bytes, the SA's keys and its seq64 (RFC 4303 s3.4: the ICV covers the ESP
header and payload, plus the high half with ESN, RFC 4303 s2.2.1). So the
engine takes a prefetched result only where its own plan opens the same
rows with an SA of the same identity and, for an ESN SA, the same seq64
(``resolve``); anything else is opened again in the engine's process. The
outputs are the same bytes whichever process opened a packet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from espforensics.checks.context import usable_context
from espforensics.crypto import CipherContext, sa_identity
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.decode.inner import ntop
from espforensics.engine.plain import Decoded, PlainColumns, decode_plaintexts
from espforensics.engine.plan import (
    WIDE,
    Opening,
    cipher_heads,
    distinct_flows,
    flow_key,
    outer_of,
    unopenable,
)
from espforensics.engine.wire import I64, FrameBatch, WireColumns, parse
from espforensics.keys import SaTable
from espforensics.keys.sa import SecurityAssociation

U64 = npt.NDArray[np.uint64]


@dataclass(frozen=True, slots=True)
class Prefetch:
    """A batch's wire columns, and its packets opened and decoded ahead.

    Per batch row: ``sa`` indexes ``idents`` (-1: not opened), ``seq64`` the
    value it was opened with, ``col`` its row in ``columns`` when its ICV
    verified (else -1).
    """

    ports: frozenset[int]
    wire: WireColumns
    idents: tuple[bytes, ...]
    sa: I64
    seq64: U64
    col: I64
    columns: PlainColumns | None


@dataclass(slots=True)
class KeyRing:
    """The SAs of the key files, and each one's context built once (per process)."""

    table: SaTable
    _ctxs: dict[bytes, CipherContext] = field(default_factory=dict)

    def context(self, spi: int, src: bytes, dst: bytes) -> Keyed | None:
        """The SA of a flow, its identity and context, when the lane may take its packets."""
        sa = self.table.lookup(spi, src, dst)
        if sa is None:
            return None
        ident = sa_identity(sa)
        ctx = self._ctxs.get(ident)
        if ctx is None:
            found = usable_context(sa)
            if found is None or not found.lane:
                return None
            ctx = self._ctxs[ident] = found
        return Keyed(sa, ident, ctx)


@dataclass(frozen=True, slots=True)
class Keyed:
    """A flow's SA, its identity (``sa_identity``) and its context."""

    sa: SecurityAssociation
    ident: bytes
    ctx: CipherContext


def _start_hi(keyed: Keyed, hint: int | None) -> int:
    """The high half to open an ESN SA's packets with: where the engine saw it last, else
    the key file's; without ESN it is not in the ICV, so any will do."""
    if not keyed.ctx.esn:
        return 0
    if hint is not None and hint >= 0:
        return hint >> 32
    return keyed.sa.esn_hi


def prefetch(
    batch: FrameBatch, ports: frozenset[int], ring: KeyRing, hints: dict[bytes, int]
) -> Prefetch:
    """Parse ``batch`` and open and decode every packet the lane may take."""
    wire = parse(batch, ports)
    n = len(batch)
    sa_of, seq64, col = np.full(n, -1, np.int64), np.zeros(n, np.uint64), np.full(n, -1, np.int64)
    rows = np.flatnonzero(wire.steady)
    first, inverse = distinct_flows(wire, rows)
    order = np.argsort(inverse, kind="stable")  # per flow, its rows in capture order
    bounds = np.searchsorted(inverse[order], np.arange(len(first) + 1))
    idents: dict[bytes, int] = {}
    opened: list[tuple[I64, CipherContext, str, str, list[bytes | None], I64]] = []
    mv, view = memoryview(batch.buf), np.frombuffer(batch.buf, np.uint8)
    for f, i in enumerate(first.tolist()):
        spi, src, dst = flow_key(wire, int(rows[i]))
        keyed = ring.context(spi, src, dst)
        if keyed is None:
            continue
        ident, ctx = keyed.ident, keyed.ctx
        own = rows[order[bounds[f] : bounds[f + 1]]]
        at = batch.start[own] + wire.l3[own] + wire.esp_offset[own]
        sealed_at = at + ESP_HEADER_LEN + ctx.iv_len
        end = batch.start[own] + wire.l3[own] + wire.total_len[own]
        wide = np.full(len(own), ctx.iv_len == WIDE)
        keep = ~unopenable(end - sealed_at, np.full(len(own), ctx.icv_len), wide)
        own, at, sealed_at, end = own[keep], at[keep], sealed_at[keep], end[keep]
        if not len(own):
            continue
        hi = _start_hi(keyed, hints.get(ident))
        seq64[own] = wire.seq[own].astype(np.uint64) | np.uint64(hi << 32)
        sa_of[own] = idents.setdefault(ident, len(idents))
        ivs = view[(at + ESP_HEADER_LEN)[:, None] + np.arange(ctx.iv_len)]
        sealed = [mv[a:b] for a, b in zip(sealed_at.tolist(), end.tolist(), strict=True)]
        plains = ctx.open_many(seq64[own], ivs, sealed)
        opened.append((own, ctx, ntop(src), ntop(dst), plains, sealed_at))
    columns = _decode(batch, wire, opened, col)
    return Prefetch(ports, wire, tuple(idents), sa_of, seq64, col, columns)  # dict order


def _decode(
    batch: FrameBatch,
    wire: WireColumns,
    opened: list[tuple[I64, CipherContext, str, str, list[bytes | None], I64]],
    col: I64,
) -> PlainColumns | None:
    """Decode the verified plaintexts of ``opened`` at once; ``col`` says where each went."""
    rows: list[I64] = []
    texts: list[bytes] = []
    srcs: list[str] = []
    dsts: list[str] = []
    clear: list[bool] = []
    heads: list[I64] = []
    for own, ctx, src, dst, plains, sealed_at in opened:
        good = np.fromiter((p is not None for p in plains), np.bool_, len(plains))
        rows.append(own[good])
        heads.append(sealed_at[good])
        texts.extend(p for p in plains if p is not None)
        k = int(good.sum())
        srcs += [src] * k
        dsts += [dst] * k
        clear += [ctx.clear] * k
    if not texts:
        return None
    at = np.concatenate(rows)
    col[at] = np.arange(len(at))
    outer = outer_of(wire.addrs[at], wire.ip_version[at] == 4, wire.udp[at])
    names = (np.array(srcs, dtype=object), np.array(dsts, dtype=object))
    cts = cipher_heads(batch, np.concatenate(heads))
    return decode_plaintexts(texts, *names, cts, np.array(clear, np.bool_), outer)


def resolve(pre: Prefetch, opening: Opening, idents: list[bytes]) -> Decoded | None:
    """The prefetched opening of the packets ``opening`` asks to open, when every one of
    them was opened ahead as the plan would open it; else None (open them here). The
    caller takes ``pre`` only if it was made with its NAT-T ports.

    ``idents``: the SA identity of each of the plan's flows.
    """
    plan = opening.plan
    pos = opening.opened
    rows = plan.rows[pos]
    index = {ident: k for k, ident in enumerate(pre.idents)}
    want = np.array([index.get(ident, -2) for ident in idents], np.int64)
    if not (pre.sa[rows] == want[plan.flow[pos]]).all():
        return None
    esn = np.array([f.state.ctx is not None and f.state.ctx.esn for f in plan.flows], np.bool_)
    esn = esn[plan.flow[pos]]
    if not ((pre.seq64[rows] == plan.seq64[pos]) | ~esn).all():
        return None
    at = pre.col[rows]
    ok = at >= 0
    if pre.columns is None:  # none verified: the plan's own opening says how each failed
        return None
    return Decoded(pos[ok], pre.columns.take(at[ok]))
