"""Packets as the per-frame path and as the steady lane see them, for the bulk rule tests.

One ``Pkt`` gives both a ``PacketContext`` (a datagram: a 20-byte outer
IPv4 header, the ESP header, the IV, the ciphertext, the ICV) for a
check's ``observe``, and its row of the ``FlowRows`` / ``ScopeRows`` views
(checks/bulk.py) over the same bytes, for the check's bulk rules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from espforensics.checks.bulk import FlowRows, Opened, ScopeRows
from espforensics.checks.context import HEAD_LEN, Flow, KeyedSaState, PacketContext
from espforensics.decode.digest import RowDigests
from espforensics.decode.ip import OuterIp
from espforensics.keys import SecurityAssociation
from espforensics.keys.sa import Secret
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord

IP = OuterIp(4, bytes(4), bytes(4), 50, 20, 0, None, 0, False, 20, 9)
OUTER = 20  # the outer IPv4 header's length: where the ESP header starts
M64 = (1 << 64) - 1


@dataclass(frozen=True)
class Pkt:
    """One ESP packet: its frame, seq64, IV, ciphertext, ICV and plaintext's first bytes."""

    frame: int
    seq64: int
    iv: bytes
    ct: bytes
    icv: bytes
    head: bytes = bytes(HEAD_LEN)
    verdict: Verdict = Verdict.OK


def keyed(sa: SecurityAssociation, src: str = "192.0.2.1", dst: str = "192.0.2.2") -> Flow:
    """A flow of an SA whose key verified its packets."""
    state = KeyedSaState(sa)
    state.proven = True
    return Flow(sa.spi, src, dst, state)


def sa_of(spi: int, algorithm: str, key: bytes, auth: str | None = None) -> SecurityAssociation:
    if auth is None:
        return SecurityAssociation(spi, algorithm, Secret(key))
    return SecurityAssociation(
        spi, algorithm, Secret(key), auth_algorithm=auth, auth_key=Secret(bytes(32))
    )


def datagram(flow: Flow, p: Pkt) -> bytes:
    esp = flow.spi.to_bytes(4) + (p.seq64 & 0xFFFFFFFF).to_bytes(4)
    return bytes(OUTER) + esp + p.iv + p.ct + p.icv


def context(flow: Flow, p: Pkt) -> PacketContext:
    """``p`` as the per-frame path hands it to the checks (its ICV verified, unless its
    verdict says otherwise)."""
    data = datagram(flow, p)
    rec = PacketRecord(
        p.frame,
        0,
        len(data),
        len(data),
        p.verdict,
        spi=flow.spi,
        seq=p.seq64 & 0xFFFFFFFF,
        seq64=p.seq64,
        esp_offset=OUTER,
    )
    head = p.head if p.verdict is Verdict.OK else None
    return PacketContext(rec, data, IP, flow, int.from_bytes(p.iv), plain_head=head)


def _fold(iv: bytes) -> int:
    value = int.from_bytes(iv)
    return (value >> 64 ^ value) & M64 if len(iv) > 8 else value


def flow_rows(flow: Flow, pkts: list[Pkt]) -> FlowRows:
    """The lane's view of one flow's packets, over one buffer of their datagrams."""
    grams = [datagram(flow, p) for p in pkts]
    starts = np.cumsum([0] + [len(g) for g in grams])[:-1]
    ends = [int(s) + len(g) - len(p.icv) for s, g, p in zip(starts, grams, pkts, strict=True)]
    raw = b"".join(grams)
    return FlowRows(
        flow,
        np.array([p.frame for p in pkts], np.int64),
        np.array([p.seq64 for p in pkts], np.uint64),
        np.array([_fold(p.iv) for p in pkts], np.uint64),
        np.array([list(p.iv) for p in pkts], np.uint8).reshape(len(pkts), -1),
        made([p.icv for p in pkts]),
        np.frombuffer(raw, np.uint8),
        np.array(ends, np.int64),
        starts.astype(np.int64),
        starts.astype(np.int64) + OUTER,
        raw,
    )


def scope_rows(rows: list[tuple[Flow, Pkt]]) -> ScopeRows:
    """The lane's view of a key group's packets (of several flows), capture order."""
    return ScopeRows(
        np.array([p.frame for _, p in rows], np.int64),
        np.array([f.spi for f, _ in rows], np.int64),
        np.array([p.seq64 for _, p in rows], np.uint64),
        np.array([_fold(p.iv) for _, p in rows], np.uint64),
        np.array([list((p.iv + p.ct)[:16]) for _, p in rows], np.uint8).reshape(len(rows), 16),
        made([p.icv for _, p in rows]),
    )


def made(icvs: list[bytes]) -> RowDigests:
    """Digests given whole (each packet's ICV): rows as wide as the widest, each its own
    length first."""
    width = max(HEAD_LEN, *map(len, icvs)) if icvs else HEAD_LEN
    rows = np.array([list(icv.ljust(width, b"\0")) for icv in icvs], np.uint8)
    lens = np.array([len(icv) for icv in icvs], np.int64)
    return RowDigests(rows.reshape(len(icvs), width), lens, None, None)


def opened(pkts: list[Pkt]) -> Opened:
    """What opening the packets showed: their ciphertext's and plaintext's first bytes."""
    return Opened(
        np.array([list(p.ct[:HEAD_LEN]) for p in pkts], np.uint8).reshape(len(pkts), HEAD_LEN),
        np.array([list(p.head) for p in pkts], np.uint8).reshape(len(pkts), HEAD_LEN),
    )


def first(mask: list[bool] | npt.NDArray[np.bool_]) -> int:
    """The index of the first True, or the length."""
    flags = [bool(x) for x in mask]
    return flags.index(True) if True in flags else len(flags)
