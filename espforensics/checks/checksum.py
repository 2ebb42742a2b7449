"""Inner checksums: what a decrypted packet's own checksums say, and its TFC padding.

In: ``PacketContext`` of every ESP packet. Out: the ``inner_checksum`` and
``tfc_len`` columns of each packet whose plaintext verified (empty for the
others), and per SA one ``inner_checksum`` finding (high) for packets
whose inner checksum does not verify and one (medium) for packets that
carry a partial checksum. Raises nothing.

The ICV proves that the plaintext is what the sender sealed, so an inner
TCP/UDP/ICMP or inner IPv4 header checksum that does not verify under a
verified ICV proves the packet was damaged before encryption (in the
sender's stack, a qdisc, a driver), not on the wire. A stored checksum
equal to the folded pseudo-header sum is what checksum offload leaves
(Linux CHECKSUM_PARTIAL) for the NIC to complete; sealed under a verified
ICV nothing completes it later (a NIC that encrypts in hardware leaves
no ICV that verifies in a capture), so it reaches the receiver as it is.
What cannot be verified is ``not_checked``, and ``detail`` says why:
NAT-T transport mode (RFC 3948 s3.1.2), inner fragments, protocols
without a checksum verified here, misplaced headers, unsound trailers.
The steady lane fills the same columns for the packets it takes
(engine/plain.py) and takes no packet this check makes a finding of.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from espforensics.checks.context import PacketContext, PerFlow
from espforensics.checks.coverage import NOT_DECRYPTED, Seen
from espforensics.decode.inner import (
    NATT_TRANSPORT,
    NOT_CHECKED,
    OUTER_EXTENSIONS,
    Checked,
    check_inner,
)
from espforensics.evidence import BadChecksums
from espforensics.frames import FrameRuns
from espforensics.model import (
    Finding,
    FindingKind,
    InnerChecksum,
    PacketRecord,
    Proto,
    Severity,
    Verdict,
)

_REASONS = {
    Verdict.ESP_MISPLACED: NOT_CHECKED + "the ESP header is misplaced (the plaintext may not "
    "start where its next header says)",
    Verdict.BAD_TRAILER: NOT_CHECKED + "the trailer is unsound, so where the payload ends is "
    "unknown",
}


@dataclass(slots=True)
class _Kind:
    count: int = 0
    frames: FrameRuns = field(default_factory=FrameRuns)  # every frame, as runs
    first: str = ""  # the first packet's detail, as evidence

    def add(self, rec: PacketRecord, detail: str) -> None:
        self.count += 1
        self.frames.add(rec.frame)
        if not self.first:
            self.first = f"frame {rec.frame} (seq {rec.seq}): {detail}"


@dataclass(slots=True)
class _Sa:
    bad: _Kind = field(default_factory=_Kind)
    partial: _Kind = field(default_factory=_Kind)


def checked(pkt: PacketContext) -> Checked | None:
    """The inner checksums of a packet, or None when no plaintext of it verified."""
    rec = pkt.rec
    if pkt.plain_head is None:
        return None
    reason = _REASONS.get(rec.verdict)
    payload, nh = pkt.payload, pkt.inner_next  # after IPComp, the inflated packet's
    if payload is None or nh is None:
        reason = _REASONS[Verdict.BAD_TRAILER]
    if reason is not None or payload is None or nh is None:
        return Checked(InnerChecksum.NOT_CHECKED, reason or "", None)
    why_not = ""
    if rec.proto is Proto.ESP_UDP:
        why_not = NATT_TRANSPORT
    elif pkt.ip.version == 6 and pkt.ip.header_len != 40:
        why_not = OUTER_EXTENSIONS
    return check_inner(nh, payload, pkt.ip.src, pkt.ip.dst, why_not)


class InnerChecksumCheck:
    """Fills ``inner_checksum`` and ``tfc_len``; collects bad and partial checksums per SA."""

    name = "inner_checksum"

    def __init__(self) -> None:
        self._sas: PerFlow[_Sa] = PerFlow(_Sa)

    def observe(self, pkt: PacketContext) -> None:
        found = checked(pkt)
        if found is None:
            return
        rec = pkt.rec
        rec.inner_checksum, rec.tfc_len = found.status, found.tfc_len
        if found.detail:
            rec.detail = f"{rec.detail}; {found.detail}" if rec.detail else found.detail
        if found.status is InnerChecksum.BAD:
            self._sas.get(pkt.flow).bad.add(rec, found.detail)
        elif found.status is InnerChecksum.PARTIAL:
            self._sas.get(pkt.flow).partial.add(rec, found.detail)

    def finish(self) -> Iterator[Finding]:
        for (spi, src, dst), sa in self._sas.items():
            if sa.bad.count:
                yield _finding(
                    InnerChecksum.BAD,
                    Severity.HIGH,
                    (spi, src, dst),
                    sa.bad,
                    ("carries", "carry"),
                    "an inner packet whose checksum does not verify: it was damaged before "
                    "encryption, which the ICV cannot show, and a receiver drops it after "
                    "decrypting it",
                )
            if sa.partial.count:
                yield _finding(
                    InnerChecksum.PARTIAL,
                    Severity.MEDIUM,
                    (spi, src, dst),
                    sa.partial,
                    ("carries", "carry"),
                    "a partial inner checksum, the pseudo-header sum alone that checksum "
                    "offload leaves (CHECKSUM_PARTIAL): not damage, a checksum never "
                    "completed and sealed as it was, so no NIC completed it later; a "
                    "receiver that verifies it drops the packet",
                )


def _finding(
    status: InnerChecksum,
    severity: Severity,
    key: tuple[int, str, str],
    kind: _Kind,
    verb: tuple[str, str],
    what: str,
) -> Finding:
    spi, src, dst = key
    n = kind.count
    subject = "1 packet whose ICV verifies" if n == 1 else f"{n} packets whose ICV verifies"
    return Finding(
        FindingKind.INNER_CHECKSUM,
        severity,
        spi,
        kind.frames.freeze(),
        n,
        f"{src} -> {dst}: {subject} {verb[n > 1]} {what}. First: {kind.first}",
        src,
        dst,
        BadChecksums(status, kind.first),
    )


def coverage(seen: Seen) -> str | None:
    """Examined: packets whose plaintext the checks saw (``inner_checksum`` says per packet
    when their checksums could not be verified, e.g. NAT-T transport mode)."""
    return None if seen.decrypted else (seen.why or NOT_DECRYPTED)
