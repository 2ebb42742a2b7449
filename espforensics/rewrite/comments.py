"""The packet comments of ``analyze --annotate``: records and findings in, strings out.

In: one ``PacketRecord`` (a row of packets.parquet) and the findings that
list its frame. Out: its comments, each ``espforensics: KIND: what``,
where KIND is a verdict or a finding kind, so that Wireshark's
``frame.comment contains "espforensics: iv_reuse"`` selects exactly the
frames of one kind. ``FindingMarks`` maps frames to the findings that list
them and remembers, for IV reuse, the first frame of each reused IV;
``FindingMarks.quiet`` is the bulk form of its first test (which frames
get no comment at all), beside it. Raises nothing.

Which frames get one (docs/outputs.md "annotated capture"): every frame
whose verdict is neither ``ok`` nor ``not_esp`` (a frame that is not ESP
at all, ARP or IKE, is the analyzer's normal case, not a fault), and every
frame a finding counts: the per-packet columns say which (``leaked``,
``iv_reused``, ``iv_seq_delta``'s note in ``detail``, ``seq_anomaly``),
and the finding's listed frames add the first use of a reused IV and the
frames of kinds that have no column (``esn_wrap``, ``key_mismatch``).
Comments hold what is on the wire (SPI, sequence number, IV, offsets,
clear bytes' names) and never key bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from espforensics.model.enums import FindingKind, SeqAnomaly, Verdict
from espforensics.model.evidence import EsnWrap
from espforensics.model.records import Finding, PacketRecord

PREFIX = "espforensics: "
MAX_MARKED = 1 << 20  # frames listed by findings kept at the most (each lists a few)
_QUIET = frozenset({Verdict.OK, Verdict.NOT_ESP})
QUIET_VERDICTS = tuple(sorted(v.value for v in _QUIET))
# A row whose one of these columns is set (not empty, 0, False nor "") gets a comment.
MARKING = ("leaked", "leaked_fields", "iv_reused", "seq_anomaly")
DERIVED = "IV built from"  # iv_derivation's note in ``detail``
# Kinds whose every packet its row shows; a finding's list of frames adds nothing to them.
_ROW_KINDS = frozenset(
    {
        FindingKind.ESP_MISPLACED,
        FindingKind.CLEARTEXT_LEAK,
        FindingKind.IV_DERIVATION,
        FindingKind.SEQ_DUPLICATE,
        FindingKind.SEQ_REORDER,
        FindingKind.ESN_MISMATCH,
        FindingKind.UNSUPPORTED,
        FindingKind.NO_INTEGRITY,
    }
)


def _clause(detail: str, starts: str = "") -> str:
    """The first "; "-separated clause of ``detail`` (that starts with ``starts``)."""
    for part in detail.split("; "):
        if part.startswith(starts):
            return part
    return ""


def _spi(rec: PacketRecord) -> str:
    return f"SPI {rec.spi:#010x}" if rec.spi is not None else "no SPI"


def verdict_comment(rec: PacketRecord) -> str | None:
    """The comment of a frame's verdict; None for ``ok`` and ``not_esp``."""
    verdict = rec.verdict
    if verdict in _QUIET:
        return None
    if rec.misplaced:  # esp_misplaced, or truncated with its header found by layout
        text = f"ESP at {rec.esp_offset}, not {rec.expected_offset}"
        if rec.leaked:
            text += f"; {rec.leaked} inner bytes in clear"
        if verdict is Verdict.TRUNCATED:
            text += "; unproven (its ICV cut by the capture: found by layout)"
        elif "unproven" in rec.detail:
            text += "; unproven (no key: found by layout)"
    elif verdict is Verdict.AUTH_FAIL:
        text = f"ICV does not verify at offset {rec.esp_offset}, {_spi(rec)} seq {rec.seq}"
    else:
        text = _clause(rec.detail) or verdict.value
    return f"{PREFIX}{verdict.value}: {text}"


def row_comments(rec: PacketRecord) -> list[str]:
    """The comments of the finding kinds the packet's own columns show."""
    out = []
    if rec.leaked:
        out.append(f"{rec.leaked} inner bytes in clear ({rec.leaked_fields})")
    elif rec.leaked_fields.startswith("possible: "):
        out.append(f"{rec.leaked_fields.removeprefix('possible: ')} in clear? (not proven)")
    texts = [f"{PREFIX}{FindingKind.CLEARTEXT_LEAK.value}: {t}" for t in out]
    derived = _clause(rec.detail, "IV built from")
    if derived:
        texts.append(f"{PREFIX}{FindingKind.IV_DERIVATION.value}: {derived}")
    if rec.seq_anomaly.duplicate:
        copy = rec.seq_anomaly is SeqAnomaly.DUPLICATE_IDENTICAL
        same = " (a byte-identical copy)" if copy else ""
        kind = FindingKind.SEQ_DUPLICATE.value
        texts.append(f"{PREFIX}{kind}: seq {rec.seq64} seen before{same}")
    elif rec.seq_anomaly is SeqAnomaly.REORDERED:
        kind = FindingKind.SEQ_REORDER.value
        texts.append(f"{PREFIX}{kind}: seq {rec.seq64} after a higher one")
    return texts


def iv_reuse_comment(rec: PacketRecord, other: int | None) -> str:
    """The comment of one use of a reused IV; ``other``: another frame that used it."""
    where = f"also in frame {other}" if other is not None else "used before"
    return f"{PREFIX}{FindingKind.IV_REUSE.value}: IV {rec.iv} {where} (same key)"


def finding_comment(finding: Finding) -> str:
    """A listed frame's comment for a kind no column shows (esn_wrap, key_mismatch, ...)."""
    kind = finding.kind.value
    if isinstance(wrap := finding.evidence, EsnWrap):  # checks/sequence.py
        return f"{PREFIX}{kind}: sequence number crossed into high half {wrap.high:#x}"
    spi = f" of SPI {finding.spi:#010x}" if finding.spi is not None else ""
    return f"{PREFIX}{kind}: {finding.severity.value}, {finding.count} packets{spi} (findings.csv)"


class FindingMarks:
    """The findings each frame is listed by, and the first frame of each reused IV.

    Memory: at most ``MAX_MARKED`` frames (the findings list a few frames
    each) plus one entry per reused IV met, never one per frame.
    """

    def __init__(self, findings: Iterable[Finding]) -> None:
        self._by_frame: dict[int, list[Finding]] = {}
        for finding in findings:
            for frame in finding.frames:
                if len(self._by_frame) < MAX_MARKED or frame in self._by_frame:
                    self._by_frame.setdefault(frame, []).append(finding)
        self._first_use: dict[str, int] = {}
        self._listed = np.array(sorted(self._by_frame), np.int64)

    def quiet(
        self, frames: npt.NDArray[np.int64], marked: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """``comments``'s first test over a batch's rows: the frames that get no comment.
        ``marked``: the rows whose verdict is not in ``QUIET_VERDICTS``, or one of
        ``MARKING`` is set, or whose detail holds ``DERIVED``."""
        listed = np.zeros(len(frames), np.bool_)
        if len(self._listed):
            at = np.minimum(np.searchsorted(self._listed, frames), len(self._listed) - 1)
            listed = self._listed[at] == frames
        out: npt.NDArray[np.bool_] = ~marked & ~listed
        return out

    def comments(self, rec: PacketRecord) -> tuple[str, ...]:
        """Every comment of ``rec``'s frame, verdict first, one per kind that applies."""
        if (
            rec.verdict in _QUIET
            and not (rec.leaked or rec.leaked_fields or rec.iv_reused or rec.seq_anomaly)
            and rec.frame not in self._by_frame
            and DERIVED not in rec.detail
        ):
            return ()  # the plain case, most frames: no string is built
        texts = []
        verdict = verdict_comment(rec)
        if verdict is not None:
            texts.append(verdict)
        texts.extend(row_comments(rec))
        listed = self._by_frame.get(rec.frame, [])
        reuse = [f for f in listed if f.kind is FindingKind.IV_REUSE and len(f.frames) > 1]
        if reuse or rec.iv_reused:
            texts.append(iv_reuse_comment(rec, self._other_use(rec, reuse)))
        seen = {FindingKind.IV_REUSE, *_ROW_KINDS}
        for finding in listed:
            if finding.kind not in seen:
                seen.add(finding.kind)
                texts.append(finding_comment(finding))
        return tuple(texts)

    def _other_use(self, rec: PacketRecord, reuse: list[Finding]) -> int | None:
        """Another frame with the IV: the finding's first (or second) listed, else remembered."""
        for finding in reuse:
            first = finding.frames[0]
            self._first_use.setdefault(rec.iv, first)
            return first if first != rec.frame else finding.frames[1]
        return self._first_use.get(rec.iv)
