"""IV derivation: do the IVs follow the sequence numbers as Linux's seqiv promises?

In: ``PacketContext`` of ESP packets. Out: ``iv_seq_delta`` (0 when the
IV was built from the packet's own sequence number, the difference when
it was built from another one, empty when the SA's IVs are not
counter-derived, or when the IV encodes no sequence number within 2^32 of
the packet's own) and one ``iv_derivation`` finding per SA with deviating
packets. Raises nothing.

Primer s4: seqiv makes ``IV xor seq64`` one constant per SA. The constant
is settled by the first ``AGREE`` packets of the SA that share it, among
at most ``PROBE`` packets; until then those records are held (bounded),
so every record gets its column. An SA with no agreement within
``PROBE`` packets is reported as not counter-derived (e.g. echainiv's
random IVs with CBC), which is not a fault.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from espforensics.checks.context import Holds, PacketContext, PerFlow
from espforensics.model import Finding, FindingKind, PacketRecord, Severity, Verdict

AGREE = 2
NEARBY = 1 << 32  # a larger difference means the IV is unrelated to any nearby seq
PROBE = 16
_NOT_COUNTER = -1


@dataclass(slots=True)
class _Sa:
    const: int | None = None
    probe: list[tuple[PacketRecord, int]] = field(default_factory=list)
    packets: int = 0
    deviating: int = 0
    deltas: Counter[int] = field(default_factory=Counter)
    unrelated: int = 0
    frames: list[int] = field(default_factory=list)


class IvDerivationCheck:
    """Finds each SA's IV constant and the packets that do not fit it."""

    name = "iv_derivation"

    def __init__(self, holds: Holds) -> None:
        self._holds = holds
        holds.on_force(self._force)
        self._sas: PerFlow[_Sa] = PerFlow(_Sa)

    def observe(self, pkt: PacketContext) -> None:
        rec = pkt.rec
        if pkt.iv is None or rec.seq64 is None or rec.verdict is Verdict.AUTH_FAIL:
            return
        sa = self._sas.get(pkt.flow)
        sa.packets += 1
        c = pkt.iv ^ rec.seq64
        if sa.const is None:
            self._probe(sa, rec, c)
        else:
            self._judge(sa, rec, c)

    def _probe(self, sa: _Sa, rec: PacketRecord, c: int) -> None:
        sa.probe.append((rec, c))
        self._holds.hold(rec.frame)
        votes = Counter(x for _, x in sa.probe).most_common(1)[0]
        if votes[1] >= AGREE:
            self._settle(sa, votes[0])
        elif len(sa.probe) >= PROBE:
            self._settle(sa, _NOT_COUNTER)

    def _force(self, upto: int) -> None:
        """Settle, with what they have, the SAs still probing frames up to ``upto``."""
        for _key, sa in self._sas.items():
            if sa.const is None and sa.probe and sa.probe[0][0].frame <= upto:
                self._settle(sa, _NOT_COUNTER if len(sa.probe) > 1 else sa.probe[0][1])

    def _settle(self, sa: _Sa, const: int) -> None:
        sa.const = const
        for held, c in sa.probe:
            self._judge(sa, held, c)
            self._holds.release(held.frame)
        sa.probe = []

    def _judge(self, sa: _Sa, rec: PacketRecord, c: int) -> None:
        if sa.const == _NOT_COUNTER or sa.const is None or rec.seq64 is None:
            return
        built_from = (c ^ sa.const) ^ rec.seq64  # = IV xor const: the seq the IV encodes
        delta = built_from - rec.seq64
        if not delta:
            rec.iv_seq_delta = 0
            return
        sa.deviating += 1
        if abs(delta) < NEARBY:
            rec.iv_seq_delta = delta
            sa.deltas[delta] += 1
            note = f"IV built from seq {built_from} (seq{delta:+d})"
        else:
            sa.unrelated += 1  # the IV encodes no sequence number near this one
            note = "IV built from no nearby sequence number"
        rec.detail = f"{rec.detail}; {note}" if rec.detail else note
        if len(sa.frames) < 5:
            sa.frames.append(rec.frame)

    def finish(self) -> Iterator[Finding]:
        for (spi, src, dst), sa in self._sas.items():
            if sa.const is None:  # fewer packets than it takes to agree
                self._force(sa.probe[0][0].frame)
            if sa.const == _NOT_COUNTER:
                yield Finding(
                    FindingKind.IV_DERIVATION,
                    Severity.INFO,
                    spi,
                    (),
                    sa.packets,
                    f"{src} -> {dst}: IVs not counter-derived (no common IV xor seq)",
                    src,
                    dst,
                )
            elif sa.deviating:
                common = ", ".join(
                    [f"seq{d:+d} x{n}" for d, n in sa.deltas.most_common(4)]
                    + ([f"no nearby seq x{sa.unrelated}"] if sa.unrelated else [])
                )
                yield Finding(
                    FindingKind.IV_DERIVATION,
                    Severity.HIGH,
                    spi,
                    tuple(sa.frames),
                    sa.deviating,
                    f"{src} -> {dst}: {sa.deviating} of {sa.packets} IVs not built from their own "
                    f"sequence number (IV built from {common})",
                    src,
                    dst,
                )
