"""ESN mismatch: packets encrypted with a high half their place rules out.

In: ``PacketContext`` of ESP packets of ESN SAs. Out: one ``esn_mismatch``
finding (high) per SA whose packets have verdict ``esn_mismatch`` (set by
the pipeline: the ICV verified only with a neighbouring high half while
the SA's earlier packets placed it on another). Raises nothing.

RFC 4303 s2.2.1 and A2.2: the receiver infers the high half from its
window and drops a packet whose ICV fails with it, so such a packet is
lost even though its bytes are sound. Its IV says more: seqiv builds the
IV from the 64-bit number the sender used (primer s4), so the IV is
related to the packet's number through ``iv_seq_delta``, which the IV
derivation check (it runs first) fills from the SA's seqiv constant by
the time findings are made; an SA without one (IVs not counter-derived)
gets no claim about its IV. When the IV encodes the high half the ICV verified with, the
SA will use that (key, nonce) pair again when its counter reaches that
value (hi + 1), or used it already (hi - 1).

A packet that verifies only with a high half below the key file's
``esn_hi`` (the high half the SA had when its keys were taken, Wireshark's
"ESN High Bits") is ``esn_mismatch`` too (analyzer/esn_place.py): a
receiver at ``esn_hi`` infers that one and drops the packet (RFC 4303
A2.2). Either the key file's high half is wrong, or the sender sealed with
a high half the receiver's state has left behind; its ``detail`` says it
is below the key file's, and the SA gets one ``esn_mismatch`` finding for
such packets, apart from the one for packets whose place rules them out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from espforensics.bounded.frames import frozen, with_frame
from espforensics.bounded.intervals import IntervalSet
from espforensics.checks.context import PacketContext
from espforensics.checks.coverage import NO_ICV, Seen
from espforensics.checks.perflow import PerFlow
from espforensics.model.enums import FindingKind, Severity, Verdict
from espforensics.model.evidence import EsnBelow, EsnEvent, EsnMismatch
from espforensics.model.records import Finding, PacketRecord

EXAMPLES = 5
NEAR = 16  # an IV that encodes a number this close to the one verified was built from it


@dataclass(frozen=True, slots=True)
class _Event:
    rec: PacketRecord  # its iv_seq_delta is filled by the IV derivation check, maybe later
    placed: int  # the seq64 its place implies
    verified: int  # the seq64 whose high half the ICV verified with

    @property
    def built_from(self) -> int | None:
        """The number the IV encodes, by the SA's seqiv constant (None without one)."""
        delta = self.rec.iv_seq_delta
        return None if delta is None else self.placed + delta


@dataclass(slots=True)
class _Sa:
    count: int = 0
    events: list[_Event] = field(default_factory=list)
    frames: IntervalSet | None = None  # every one, not only the events'
    below: int = 0  # verified only with a high half below the key file's esn_hi
    below_frames: IntervalSet | None = None
    below_his: set[int] = field(default_factory=set)
    esn_hi: int = 0


def _hl(seq64: int) -> str:
    return f"{seq64 >> 32:#x}:{seq64 & 0xFFFFFFFF:08x}"


def _iv_words(e: _Event) -> str:
    """What the packet's IV proves about the nonce, in a reviewer's words."""
    built = e.built_from
    if built is None:
        return "its SA's IVs follow no seqiv constant, so its IV proves no nonce"
    if abs(built - e.verified) >= NEAR:
        return f"its IV encodes seq {_hl(built)}, not the number it verified with"
    ahead = built - e.placed
    where = (
        f"which the SA reaches again {ahead} packets later: a nonce this key will use "
        "twice if the SA lives that long"
        if ahead > 0
        else f"which the SA used {-ahead} packets earlier: a nonce this key used twice"
    )
    return f"its IV encodes seq {_hl(built)}, {where}"


class EsnMismatchCheck:
    """Collects the ``esn_mismatch`` packets per SA and says what they mean."""

    name = "esn_mismatch"

    def __init__(self) -> None:
        self._sas: PerFlow[_Sa] = PerFlow(_Sa)

    def observe(self, pkt: PacketContext) -> None:
        rec = pkt.rec
        if rec.verdict is not Verdict.ESN_MISMATCH or rec.seq64 is None or self._below(pkt):
            return
        sa = self._sas.get(pkt.flow)
        sa.count += 1
        sa.frames = with_frame(sa.frames, rec.frame)
        if len(sa.events) < EXAMPLES and rec.seq_hi_verified is not None:
            verified = rec.seq_hi_verified << 32 | rec.seq64 & 0xFFFFFFFF
            sa.events.append(_Event(rec, rec.seq64, verified))

    def _below(self, pkt: PacketContext) -> bool:
        """An ``esn_mismatch`` packet verified with a high half below the key file's
        ``esn_hi``: say so, and count it apart (True)."""
        hi, sa_keys = pkt.rec.seq_hi_verified, pkt.flow.state.sa
        if hi is None or sa_keys is None or hi >= sa_keys.esn_hi:
            return False
        rec = pkt.rec
        note = f"{hi:#x} is below the key file's esn_hi {sa_keys.esn_hi:#x}"
        rec.detail = f"{rec.detail}; {note}" if rec.detail else note
        sa = self._sas.get(pkt.flow)
        sa.below += 1
        sa.below_his.add(hi)
        sa.esn_hi = sa_keys.esn_hi
        sa.below_frames = with_frame(sa.below_frames, rec.frame)
        return True

    def finish(self) -> Iterator[Finding]:
        for (spi, src, dst), sa in self._sas.items():
            if sa.below:
                yield self._below_finding(spi, src, dst, sa)
        for (spi, src, dst), sa in self._sas.items():
            if not sa.count:
                continue
            events = "; ".join(
                f"frame {e.rec.frame} (seq {_hl(e.placed)}) verifies only with ESN high half "
                f"{e.verified >> 32:#x}, where its place in the sequence implies "
                f"{e.placed >> 32:#x}: {_iv_words(e)}"
                for e in sa.events
            )
            more = f"; {sa.count - len(sa.events)} more" if sa.count > len(sa.events) else ""
            yield Finding(
                FindingKind.ESN_MISMATCH,
                Severity.HIGH,
                spi,
                frozen(sa.frames),
                sa.count,
                f"{src} -> {dst}: {sa.count} packet{'s' if sa.count > 1 else ''} sealed with "
                f"the wrong ESN high half, which a receiver drops (RFC 4303 A2.2): "
                f"{events}{more}",
                src,
                dst,
                EsnMismatch(
                    tuple(
                        EsnEvent(e.rec.frame, e.placed, e.verified, e.built_from) for e in sa.events
                    )
                ),
            )

    @staticmethod
    def _below_finding(spi: int, src: str, dst: str, sa: _Sa) -> Finding:
        his = ", ".join(f"{hi:#x}" for hi in sorted(sa.below_his))
        n = sa.below
        return Finding(
            FindingKind.ESN_MISMATCH,
            Severity.HIGH,
            spi,
            frozen(sa.below_frames),
            n,
            f"{src} -> {dst}: {n} packet{'s' if n > 1 else ''} verify only with ESN high half "
            f"{his}, below the {sa.esn_hi:#x} the key file gives (esn_hi): the key file's "
            f"high half is wrong, or the sender seals with one a receiver at {sa.esn_hi:#x} "
            f"has left behind and drops (RFC 4303 A2.2)",
            src,
            dst,
            EsnBelow(tuple(sorted(sa.below_his)), sa.esn_hi),
        )


def coverage(seen: Seen) -> str | None:
    """Examined: packets whose ICV verified (only a verified ICV proves a high half)."""
    return None if seen.verified else seen.why or NO_ICV
