"""Sequence analysis per SA: duplicates, gaps, reordering, ESN wraps.

In: ``PacketContext`` of ESP packets whose sequence number is evidence:
verified ones (``ok``, ``bad_trailer``, ``esp_misplaced``, ``esn_mismatch``)
and unverified ones (``unknown_sa``, ``unsupported``, ``truncated``);
``auth_fail`` packets are not, their
header may be forged or damaged; nor are packets cut by the capture before
their header could be told from a misplaced one's
(``PacketContext.header_held``): a gap their numbers may fill is then
``info``, possible and not proven. Out: ``seq_anomaly`` per packet
("duplicate", "duplicate-identical", "reordered") and ``seq_duplicate``,
``seq_gap``, ``seq_reorder`` and ``esn_wrap`` findings per SA. Raises
nothing.

RFC 4303 s3.3.3: the sender's counter starts at 1 and increases by one
per packet, so within what the capture saw, a hole is loss (or capture
drop), a repeat is a replay or retransmission, and a value below the top
is reordering. Memory per SA is one ``IntervalSet`` (runs, not packets)
and a window of the last ``WINDOW`` packets' digests for telling a
byte-identical retransmission from a different packet.

A packet the capture cut (a snap length) is kept in that window as the ESP
bytes captured and its ESP length (``_Cut``: at most the snap length). Two
packets of one number either of which was cut are different when their
ESP lengths or the bytes both captured differ; else they are identical
only in the bytes captured, possibly retransmissions (the rest is not in
the capture), never "byte-identical"; and not compared at all when the
earlier one was whole and only its digest is kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from espforensics.bounded.frames import frozen, with_frame
from espforensics.bounded.intervals import IntervalSet
from espforensics.bounded.rare import Rare
from espforensics.bounded.window import RecentWindow
from espforensics.checks.bulk import BulkRules, FlowRows, Mask
from espforensics.checks.context import Flow, PacketContext
from espforensics.checks.coverage import Seen
from espforensics.checks.perflow import PerFlow
from espforensics.model.enums import FindingKind, SeqAnomaly, Severity, Verdict
from espforensics.model.evidence import EsnWrap, SeqDuplicates, SeqGaps, SeqRange, SeqReorder
from espforensics.model.records import Finding, SaKey

WINDOW = 4096
REPLAY_WINDOW = 64
_EVIDENCE = frozenset(
    {
        Verdict.OK,
        Verdict.BAD_TRAILER,
        Verdict.ESP_MISPLACED,
        Verdict.ESN_MISMATCH,  # its low half verified; its seq64 is the one its place implies
        Verdict.UNKNOWN_SA,
        Verdict.UNSUPPORTED,
        Verdict.TRUNCATED,
        Verdict.SHORT,  # whole, too short for its IV and ICV: its header is all there is
        Verdict.DECRYPTED_NO_ICV,  # no ICV: its header counts as a keyless one does
        Verdict.AUTHENTIC_NOT_DECRYPTED,  # its ICV verified the header
    }
)


@dataclass(slots=True)
class _Sa:
    """One flow's numbers seen, its top and its digest window. The counts of repeats and
    late arrivals, and their frames, are ``Rare`` fields (bounded/rare.py): most SAs have none.

    Until its second packet a flow's one number is ``top`` and its digest ``first``:
    the set of numbers and the window are made then (``numbers``, ``window``). A
    capture of many one-packet SAs keeps neither (144 + 128 bytes per SA).
    """

    top: int = -1
    first: bytes | _Cut | None = None  # the one packet's digest, while ``digests`` is None
    seen: IntervalSet | None = None
    digests: RecentWindow[bytes | _Cut] | None = None
    rare_fields: dict[str, Any] | None = None

    dup_frames = Rare[IntervalSet | None](None)  # every one
    duplicates = Rare(0)
    identical = Rare(0)
    captured = Rare(0)  # identical in the bytes captured of either, one of them cut
    captured_bytes = Rare((0, 0))  # the fewest and most bytes so compared
    uncompared = Rare(0)  # a cut one after one whose bytes are not kept (a whole one's digest)
    reorder_frames = Rare[IntervalSet | None](None)
    reordered = Rare(0)
    max_late = Rare(0)  # how far below the top the latest arrival was
    unread = Rare(0)  # cut packets whose header the capture did not show to be theirs
    # (frame, new high half); made at the first wrap: most SAs never wrap
    wraps = Rare[list[tuple[int, int]] | None](None)

    def numbers(self) -> IntervalSet:
        """The sequence numbers seen, made from ``top`` at the first ask."""
        seen = self.seen
        if seen is None:
            seen = self.seen = IntervalSet()
            if self.first is not None or self.digests is not None:
                seen.add(self.top)
        return seen

    def window(self) -> RecentWindow[bytes | _Cut]:
        """The digest window, made from ``first`` at the first ask."""
        digests = self.digests
        if digests is None:
            digests = self.digests = RecentWindow(WINDOW)
            if self.first is not None:
                digests.put(self.top, self.first)
                self.first = None
        return digests

    def gaps(self) -> Iterator[tuple[int, int]]:
        """The numbers missing between those seen (none while one is)."""
        return iter(()) if self.seen is None else self.seen.gaps()


@dataclass(frozen=True, slots=True)
class _Cut:
    """A packet the capture cut, as the window keeps it: what its bytes can still prove."""

    esp_len: int  # as its IP header gives it
    data: bytes  # the ESP bytes captured (at most the snap length)


class _Same(Enum):
    """What two packets of one sequence number were found to be."""

    IDENTICAL = "byte-identical"  # both whole, equal digests
    DIFFERENT = "different"  # proven: their digests, ESP lengths or captured bytes differ
    CAPTURED = "identical in the bytes captured"  # one cut: the rest is unknown
    UNCOMPARED = "not compared"  # a cut one after one whose bytes are not kept (whole)


def _compare(old: bytes | _Cut | None, new: bytes | _Cut, pkt: PacketContext) -> tuple[_Same, int]:
    """What the repeat ``new`` (of ``pkt``) is to the packet ``old`` of its number, and in
    how many bytes they were found equal when one was cut.

    An ``old`` out of the window (None) counts as different.
    """
    if not isinstance(old, _Cut) and not isinstance(new, _Cut):
        return (_Same.IDENTICAL if old == new else _Same.DIFFERENT), 0
    if not isinstance(old, _Cut):
        return _Same.UNCOMPARED, 0  # the earlier one's bytes are gone (whole: its digest kept)
    if not isinstance(new, _Cut):  # a whole one after a cut one: all its bytes are here
        new = _Cut(len(pkt.data) - (pkt.rec.esp_offset or 0), pkt.data[pkt.rec.esp_offset or 0 :])
    n = min(len(old.data), len(new.data))
    if old.esp_len != new.esp_len or old.data[:n] != new.data[:n]:
        return _Same.DIFFERENT, 0
    return _Same.CAPTURED, n


def _unproven(sa: _Sa) -> str:
    """The repeats the capture cut that are neither proven identical nor different."""
    out = ""
    if sa.captured:
        low, high = sa.captured_bytes
        span = f"{low}" if low == high else f"{low} to {high}"
        out += (
            f", {sa.captured} identical in the {span} bytes captured: possibly "
            "retransmissions, the rest of their bytes not captured"
        )
    if sa.uncompared:
        out += (
            f", {sa.uncompared} not compared: cut by the capture, the earlier copy's "
            "bytes no longer held"
        )
    return out


class SequenceCheck(BulkRules):
    """Per-SA sequence bookkeeping."""

    name = "sequence"

    def __init__(self) -> None:
        self._sas: PerFlow[_Sa] = PerFlow(_Sa)

    def observe(self, pkt: PacketContext) -> None:
        rec = pkt.rec
        if rec.seq64 is None or rec.spi is None:
            return
        if rec.verdict not in _EVIDENCE and rec.verdict is not Verdict.AUTH_FAIL:
            return
        if not pkt.header_is_evidence:
            if pkt.cut:  # its number may be one a gap lacks: the gap is then not proven
                self._sas.get(pkt.flow).unread += 1
            return
        sa = self._sas.get(pkt.flow)
        seq64, start = rec.seq64, rec.esp_offset or 0
        digest = _Cut(pkt.ip.total_len - start, pkt.data[start:]) if pkt.cut else pkt.digest
        if sa.top < 0 and sa.first is None and sa.digests is None:  # its first packet
            sa.top, sa.first = seq64, digest
            return
        seen, window = sa.numbers(), sa.window()  # both made from the first packet's top
        if seen.add(seq64):
            same, compared = _compare(window.get(seq64), digest, pkt)
            rec.seq_anomaly = (
                SeqAnomaly.DUPLICATE_IDENTICAL if same is _Same.IDENTICAL else SeqAnomaly.DUPLICATE
            )
            sa.duplicates += 1
            sa.identical += same is _Same.IDENTICAL
            sa.uncompared += same is _Same.UNCOMPARED
            if same is _Same.CAPTURED:
                sa.captured += 1
                low, high = sa.captured_bytes
                sa.captured_bytes = (min(low or compared, compared), max(high, compared))
            sa.dup_frames = with_frame(sa.dup_frames, rec.frame)
        elif seq64 < sa.top:
            rec.seq_anomaly = SeqAnomaly.REORDERED
            sa.reordered += 1
            sa.max_late = max(sa.max_late, sa.top - seq64)
            sa.reorder_frames = with_frame(sa.reorder_frames, rec.frame)
        if sa.top >= 0 and seq64 >> 32 > sa.top >> 32:
            if sa.wraps is None:
                sa.wraps = []
            sa.wraps.append((rec.frame, seq64 >> 32))
        sa.top = max(sa.top, seq64)
        window.put(seq64, digest, renew=False)

    # -- the steady lane's rules (checks/bulk.py) ------------------------------
    def admits(self, flow: Flow) -> bool:
        """The lane takes only flows this check has seen."""
        return self._sas.known(flow) is not None

    def refuses(self, rows: FlowRows) -> Mask:
        """Rows ``observe`` would not pass over in silence: a duplicate or reorder (at or
        below the previous number), or a new high half (an ``esn_wrap``)."""
        sa = self._sas.known(rows.flow)
        assert sa is not None  # admits
        top = np.uint64(sa.top)  # >= 0: the flow has been seen
        prev = np.concatenate(([top], rows.seq64[:-1]))
        wrong: Mask = (rows.seq64 <= prev) | (rows.seq64 >> np.uint64(32) != top >> np.uint64(32))
        return wrong

    def commit(self, rows: FlowRows) -> None:
        """What ``observe`` does for rising sequence numbers above the top, in one high half.

        None is a duplicate or a reorder, and no wrap is crossed: no column changes.
        """
        sa = self._sas.known(rows.flow)
        assert sa is not None  # admits
        seq64s = rows.seq64
        sa.numbers().extend_above(seq64s)  # both made from the first packet's top
        sa.window().put_many(seq64s, rows.digest)  # a digest made only if a repeat reads it
        sa.top = int(seq64s[-1])

    def counts(self) -> dict[SaKey, tuple[int, int, int]]:
        """(duplicates, missing, reordered) per SA, for the per-SA table."""
        return {
            k: (sa.duplicates, sum(b - a + 1 for a, b in sa.gaps()), sa.reordered)
            for k, sa in self._sas.by_sa()
        }

    def finish(self) -> Iterator[Finding]:
        for (spi, src, dst), sa in self._sas.items(_finds):
            where = f"{src} -> {dst}"
            if sa.duplicates:
                yield Finding(
                    FindingKind.SEQ_DUPLICATE,
                    Severity.MEDIUM,
                    spi,
                    frozen(sa.dup_frames),
                    sa.duplicates,
                    f"{where}: {sa.duplicates} repeated sequence numbers "
                    f"({sa.identical} byte-identical retransmissions, "
                    f"{sa.duplicates - sa.identical - sa.captured - sa.uncompared} "
                    f"different packets{_unproven(sa)})",
                    src,
                    dst,
                    SeqDuplicates(sa.duplicates, sa.identical, sa.captured + sa.uncompared),
                )
            gaps = list(sa.gaps())
            if gaps:
                missing = sum(b - a + 1 for a, b in gaps)
                shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in gaps[:5])
                unread = (
                    f"; possible, not proven: {sa.unread} packets cut by the capture "
                    "before their ESP header could be told from a misplaced one's "
                    "may carry them"
                    if sa.unread
                    else ""
                )
                yield Finding(
                    FindingKind.SEQ_GAP,
                    Severity.INFO if sa.unread else Severity.LOW,
                    spi,
                    (),
                    missing,
                    f"{where}: {missing} sequence numbers never seen in {len(gaps)} "
                    f"gaps ({shown}{', ...' if len(gaps) > 5 else ''}){unread}",
                    src,
                    dst,
                    SeqGaps(missing, len(gaps), tuple(SeqRange(a, b) for a, b in gaps[:5])),
                )
            if sa.reordered:
                # Within a 64-packet replay window (RFC 4303 s3.4.3 default) reordering is harmless.
                sev = Severity.INFO if sa.max_late < REPLAY_WINDOW else Severity.LOW
                yield Finding(
                    FindingKind.SEQ_REORDER,
                    sev,
                    spi,
                    frozen(sa.reorder_frames),
                    sa.reordered,
                    f"{where}: {sa.reordered} packets arrived after a "
                    f"higher sequence number, at most {sa.max_late} below it",
                    src,
                    dst,
                    SeqReorder(sa.reordered, sa.max_late),
                )
            for frame, hi in sa.wraps or ():
                yield Finding(
                    FindingKind.ESN_WRAP,
                    Severity.INFO,
                    spi,
                    (frame,),
                    1,
                    f"{where}: sequence number crossed into high half {hi:#x} at frame {frame}",
                    src,
                    dst,
                    EsnWrap(frame, hi),
                )


def _finds(sa: _Sa) -> bool:
    """Does ``finish`` report the SA (a duplicate, a gap, a reorder, an ESN wrap)?"""
    return bool(sa.duplicates or sa.reordered or sa.wraps or next(sa.gaps(), None))


def coverage(seen: Seen) -> str | None:
    """Examined: packets whose clear sequence number is evidence; else why not."""
    return None if seen.evidence else seen.why
