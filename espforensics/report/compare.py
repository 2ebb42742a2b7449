"""Before/after comparison of two analyses (a kernel without and with a patch).

In: two ``Summary`` values. Out: a ``Comparison``: one row per quantity
(frames, ESP packets, each verdict, each finding kind, throughput) with
both values, the change, one sentence for each row that changed, and
whether the row compares like with like. Raises nothing; reads no clock
and no environment.

Which SAs had a key decides what a side could check: an ESP packet
without one is ``unknown_sa`` where with one it would be ``ok`` or
``auth_fail``, and most checks see less of it (docs/checks.md). When the
two sides differ in that (``KeyCover``: every SA, some, none), the rows
that depend on keys are marked not comparable and ``notes`` says so
first, so that "ok fell from 593 to 0" is not read as a change of the
kernel. The names of both sides are kept as given; each renderer escapes
them for its format (render/compare.py escapes them for text).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePath

from espforensics.model.enums import FindingKind, Verdict
from espforensics.report.narrative import UNITS, plural
from espforensics.results.summary import Summary


class KeyCover(StrEnum):
    """Which of a side's SAs with ESP packets had a key."""

    ALL = "every SA"
    SOME = "some SAs"
    NONE = "no SA"


# Counted from the packets' structure alone, whatever the keys: these compare
# even when one side had no key. Everything else needs a verified (or failed)
# decryption, or the algorithm from the key file (docs/checks.md).
KEYLESS_VERDICTS = frozenset(
    {Verdict.NOT_ESP, Verdict.TRUNCATED, Verdict.UNDECODABLE, Verdict.FRAGMENT}
)
KEYLESS_FINDINGS = frozenset(
    {
        FindingKind.SEQ_DUPLICATE,
        FindingKind.SEQ_GAP,
        FindingKind.SEQ_REORDER,
        FindingKind.RESERVED_SPI,  # the SPI is in clear, as the sequence number
    }
)


@dataclass(frozen=True, slots=True)
class Row:
    """One quantity on both sides."""

    label: str
    before: str
    after: str
    change: str  # "", "+94", "-12", "+388%"
    sentence: str  # "" when unchanged
    comparable: bool = True  # False: a value depends on keys one side lacked
    finding: str = ""  # the finding kind the row counts, "" for other rows

    @property
    def zero(self) -> bool:
        """0 (or no value) on both sides: nothing to show in a report."""
        return self.before in ("0", "-") and self.after in ("0", "-")

    @property
    def changed(self) -> bool:
        return bool(self.change) or (self.before != self.after)


@dataclass(frozen=True, slots=True)
class Comparison:
    """Both sides, named, their key cover, their rows and what to read first."""

    before: str  # as given (a file name may hold anything): renderers escape it
    after: str
    rows: tuple[Row, ...]
    keys_before: KeyCover = KeyCover.ALL
    keys_after: KeyCover = KeyCover.ALL
    notes: tuple[str, ...] = ()  # said before anything else, e.g. keys for one side only

    @property
    def changed_findings(self) -> tuple[Row, ...]:
        """The finding rows that changed, to lead with: "esp_misplaced 94 -> 0"."""
        return tuple(r for r in self.rows if r.finding and r.changed)

    @property
    def shown(self) -> tuple[Row, ...]:
        """The rows a report lists: those not 0 on both sides."""
        return tuple(r for r in self.rows if not r.zero)


def esp_mbit_per_s(summary: Summary) -> float | None:
    """Wire throughput of all ESP packets over the capture's time span."""
    cap = summary.capture
    span = (cap.last_time or 0) - (cap.first_time or 0)
    total = sum(sa.wire_bytes for sa in summary.sas)
    return total * 8 / span / 1e6 if span > 0 else None


def key_cover(summary: Summary) -> KeyCover:
    """Every SA with ESP packets had a key, some did, or none did."""
    keyed = [bool(sa.algorithm) for sa in summary.sas if sa.packets]
    if not keyed or not any(keyed):
        return KeyCover.NONE
    return KeyCover.ALL if all(keyed) else KeyCover.SOME


def _count_row(label: str, noun: str, a: int, b: int, comparable: bool, kind: str = "") -> Row:
    if a == b:
        return Row(label, str(a), str(b), "", "", comparable, kind)
    verb = "rose" if b > a else "fell"
    sentence = f"{noun} {verb} from {a} to {b}."
    if not comparable:
        sentence = f"{noun}: {a} before, {b} after, not comparable (keys differ)."
    return Row(label, str(a), str(b), f"{b - a:+d}", sentence, comparable, kind)


def _rate_row(a: float | None, b: float | None) -> Row:
    fa = "-" if a is None else f"{a:.2f}"
    fb = "-" if b is None else f"{b:.2f}"
    if a is None or b is None or fa == fb:
        return Row("ESP Mbit/s", fa, fb, "", "")
    pct = f"{(b - a) / a * 100:+.0f}%" if a else ""
    verb = "rose" if b > a else "fell"
    return Row(
        "ESP Mbit/s",
        fa,
        fb,
        pct,
        f"ESP throughput {verb} from {fa} to {fb} Mbit/s" + (f" ({pct})." if pct else "."),
    )


def compare(before: Summary, after: Summary, names: tuple[str, str] | None = None) -> Comparison:
    """Every row, in a fixed order; key-dependent rows marked when the keys differ.

    ``names``: what to call the two sides, as the user typed them (the command line's
    BEFORE and AFTER); without them, short names from the captures' paths."""
    kb, ka = key_cover(before), key_cover(after)
    same_keys = kb == ka
    rows = [
        _count_row("frames", "Frames", before.capture.frames, after.capture.frames, True),
        _count_row("ESP packets", "ESP packets", before.esp_packets, after.esp_packets, True),
    ]
    for v in Verdict:
        a, b = before.verdicts.get(v.value, 0), after.verdicts.get(v.value, 0)
        ok = same_keys or v in KEYLESS_VERDICTS
        rows.append(_count_row(f"verdict {v.value}", f"Packets with verdict {v.value}", a, b, ok))
    for k in FindingKind:
        a, b = before.findings.get(k.value, 0), after.findings.get(k.value, 0)
        noun = f"{UNITS.get(k, 'packets').capitalize()} in {k.value} findings"
        ok = same_keys or k in KEYLESS_FINDINGS
        rows.append(_count_row(f"finding {k.value}", noun, a, b, ok, k.value))
    rows.append(_rate_row(esp_mbit_per_s(before), esp_mbit_per_s(after)))
    if names is None:
        names = _names(before.capture.path, after.capture.path)
    return Comparison(*names, tuple(rows), kb, ka, _notes(kb, ka, before, after))


def _notes(kb: KeyCover, ka: KeyCover, before: Summary, after: Summary) -> tuple[str, ...]:
    """What to read before the numbers: the two sides were not checked alike."""
    if kb is KeyCover.NONE and ka is KeyCover.NONE:
        return ("No keys for either side: only what the packets show without keys compares.",)
    if kb == ka:
        return ()
    if {kb, ka} == {KeyCover.ALL, KeyCover.NONE}:
        lead = f"Keys for {'BEFORE' if kb is KeyCover.ALL else 'AFTER'} only"
    else:
        lead = f"Keys differ: BEFORE had keys for {kb}, AFTER for {ka}"
    missing = "; ".join(
        f"{side} had no key for {_unkeyed(s)}"
        for side, s, cover in (("BEFORE", before, kb), ("AFTER", after, ka))
        if cover is not KeyCover.ALL
    )
    return (
        f"{lead}: {missing}. Rows that depend on keys are marked not comparable: "
        "their change may be the keys, not the kernel. Give keys for both sides "
        "(--sa-before, --sa-after) to compare them.",
    )


def _unkeyed(summary: Summary) -> str:
    """ "251 ESP packets in 2 SAs": what a side left unkeyed."""
    sas = [sa for sa in summary.sas if sa.packets and not sa.algorithm]
    packets = sum(sa.packets for sa in sas)
    return f"{plural(packets, 'ESP packet')} in {plural(len(sas), 'SA')}"


def _names(a: str, b: str) -> tuple[str, str]:
    """Short names for both sides: the file names, with their folders if those are alike."""
    pa, pb = PurePath(a), PurePath(b)
    if pa.name != pb.name:
        return pa.name, pb.name
    return str(PurePath(*pa.parts[-2:])), str(PurePath(*pb.parts[-2:]))
