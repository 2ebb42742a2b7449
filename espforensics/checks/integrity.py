"""The integrity check: SAs whose packets no ICV protects, or whose ICVs were not checked.

In: every ESP packet of a keyed SA. Out: one ``no_integrity`` finding (high)
per SA whose context decrypts without checking an ICV (``verifies`` False):
either the SA has no integrity at all, which RFC 4303 s3.2 allows but warns
against (confidentiality without integrity is open to cut-and-paste and
bit-flipping attacks, RFC 4303 s3.2 and s6; Bellovin, "Problem Areas for
the IP Security Protocols", USENIX Security 1996), or its ICVs travel on the
wire but the key source gave no key or algorithm to check them with (tcpdump
``-E`` ``-hmac96`` secrets, Wireshark's "ANY n bit authentication"). No
column of its own. Raises nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from espforensics.bounded.frames import frozen, with_frame
from espforensics.bounded.intervals import IntervalSet
from espforensics.checks.context import PacketContext, SaState
from espforensics.keys.sa import SecurityAssociation
from espforensics.model.enums import FindingKind, Severity, Verdict
from espforensics.model.evidence import NoIntegrity
from espforensics.model.records import Finding


@dataclass(slots=True)
class _Sa:
    sa: SecurityAssociation
    why: str
    packets: int = 0
    sound: int = 0  # decrypted_no_icv: trailer and inner header sound
    frames: IntervalSet | None = None  # every frame, as runs


class IntegrityCheck:
    """Counts the packets of each SA decrypted without an ICV check."""

    name = "integrity"

    def __init__(self) -> None:
        self._sas: dict[SaState, _Sa] = {}

    def observe(self, pkt: PacketContext) -> None:
        state = pkt.flow.state
        ctx, sa = state.ctx, state.sa
        if ctx is None or sa is None or ctx.verifies:
            return
        acc = self._sas.get(state)
        if acc is None:
            acc = self._sas[state] = _Sa(sa, ctx.unchecked)
        acc.packets += 1
        if pkt.rec.verdict is Verdict.DECRYPTED_NO_ICV:
            acc.sound += 1
        acc.frames = with_frame(acc.frames, pkt.rec.frame)

    def finish(self) -> Iterator[Finding]:
        for acc in self._sas.values():
            sa = acc.sa
            if acc.why.startswith("no integrity"):
                what = (
                    f"SPI {sa.spi:#010x} ({sa.suite}) has no integrity algorithm (RFC 4303 "
                    "s3.2): its packets can be cut, pasted and bit-flipped undetected "
                    "(RFC 4303 s3.2, Bellovin 1996)"
                )
            else:
                what = f"SPI {sa.spi:#010x} ({sa.suite}): {acc.why}"
            yield Finding(
                FindingKind.NO_INTEGRITY,
                Severity.HIGH,
                sa.spi,
                frozen(acc.frames),
                acc.packets,
                f"{what}; {acc.sound} of {acc.packets} packets decrypted to a sound trailer "
                "and inner header, none proven authentic",
                str(sa.src or ""),
                str(sa.dst or ""),
                NoIntegrity(acc.packets, acc.sound),
            )
