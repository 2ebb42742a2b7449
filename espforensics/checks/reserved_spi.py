"""Reserved SPIs: ESP packets whose SPI RFC 4303 s2.1 keeps off the wire.

In: ``PacketContext`` of ESP packets, keyed or not. Out: one
``reserved_spi`` finding per flow (SPI, source, destination) whose
packets carry an SPI below 256: ``medium`` for SPI 0, ``info`` for 1..255.
No column of its own. Raises nothing.

RFC 4303 s2.1: "The SPI value of zero (0) is reserved for local,
implementation-specific use and MUST NOT be sent on the wire", and "the
set of SPI values in the range 1 through 255 are reserved by the Internet
Assigned Numbers Authority (IANA) for future use" (IANA has assigned
none). A sender of SPI 0 breaks a MUST: a receiver may drop its packets
or take them for something local, so the SA works only between peers that
agree to bend the rule (medium: a fault of the sender, not of the
cryptography). An SPI in 1..255 breaks no MUST, only IANA's reservation,
and nothing breaks unless IANA assigns one (info: a fact worth knowing;
hand-keyed lab SAs use such SPIs). The SPI is in
clear, so no key is needed; a header under a key that verifies other
packets of the SA but fails its own ICV may be forged and is not counted
(``header_is_evidence``, as the sequence check). The steady lane never
takes such a flow (``admits``), so ``observe`` sees each packet.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from espforensics.bounded.frames import frozen, with_frame
from espforensics.bounded.intervals import IntervalSet
from espforensics.checks.bulk import BulkRules
from espforensics.checks.context import Flow, PacketContext
from espforensics.checks.perflow import PerFlow
from espforensics.keys.sa import RESERVED_SPIS
from espforensics.model.enums import FindingKind, Severity
from espforensics.model.evidence import ReservedSpi
from espforensics.model.records import Finding


@dataclass(slots=True)
class _Flow:
    packets: int = 0
    frames: IntervalSet | None = None  # every one, as runs


class ReservedSpiCheck(BulkRules):
    """Counts the packets of each flow whose SPI is reserved."""

    name = "reserved_spi"

    def __init__(self) -> None:
        self._flows: PerFlow[_Flow] = PerFlow(_Flow)

    def observe(self, pkt: PacketContext) -> None:
        if pkt.flow.spi >= RESERVED_SPIS or not pkt.header_is_evidence:
            return
        acc = self._flows.get(pkt.flow)
        acc.packets += 1
        acc.frames = with_frame(acc.frames, pkt.rec.frame)

    def admits(self, flow: Flow) -> bool:
        """A flow of a reserved SPI goes per frame, where ``observe`` counts it."""
        return flow.spi >= RESERVED_SPIS

    def finish(self) -> Iterator[Finding]:
        for (spi, src, dst), acc in self._flows.items():
            if not acc.packets:
                continue
            n = acc.packets
            why = (
                "SPI 0 is reserved for local use and must not be sent on the wire"
                if spi == 0
                else "SPIs 1..255 are reserved by IANA for future use"
            )
            yield Finding(
                FindingKind.RESERVED_SPI,
                Severity.MEDIUM if spi == 0 else Severity.INFO,
                spi,
                frozen(acc.frames),
                n,
                f"{src} -> {dst}: {n} ESP packet{'s' if n > 1 else ''} with SPI {spi:#010x}: "
                f"{why} (RFC 4303 s2.1); a receiver may drop them",
                src,
                dst,
                ReservedSpi(spi, n),
            )
