"""Before/after comparison of two analyses (a kernel without and with a patch).

In: two ``Summary`` values. Out: a ``Comparison``: one row per quantity
(frames, ESP packets, each verdict, each finding kind, throughput) with
both values, the change, and one sentence for each row that changed.
Raises nothing; reads no clock and no environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from espforensics.model import FindingKind, Verdict
from espforensics.narrative import UNITS
from espforensics.summary import Summary


@dataclass(frozen=True, slots=True)
class Row:
    """One quantity on both sides."""

    label: str
    before: str
    after: str
    change: str  # "", "+94", "-12", "+388%"
    sentence: str  # "" when unchanged


@dataclass(frozen=True, slots=True)
class Comparison:
    """Both sides, named, and their rows."""

    before: str
    after: str
    rows: tuple[Row, ...]


def esp_mbit_per_s(summary: Summary) -> float | None:
    """Wire throughput of all ESP packets over the capture's time span."""
    cap = summary.capture
    span = (cap.last_time or 0) - (cap.first_time or 0)
    total = sum(sa.wire_bytes for sa in summary.sas)
    return total * 8 / span / 1e6 if span > 0 else None


def _count_row(label: str, noun: str, a: int, b: int) -> Row:
    if a == b:
        return Row(label, str(a), str(b), "", "")
    verb = "rose" if b > a else "fell"
    return Row(label, str(a), str(b), f"{b - a:+d}", f"{noun} {verb} from {a} to {b}.")


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


def compare(before: Summary, after: Summary) -> Comparison:
    """Every row, in a fixed order."""
    rows = [
        _count_row("frames", "Frames", before.capture.frames, after.capture.frames),
        _count_row("ESP packets", "ESP packets", before.esp_packets, after.esp_packets),
    ]
    for v in Verdict:
        a, b = before.verdicts.get(v.value, 0), after.verdicts.get(v.value, 0)
        rows.append(_count_row(f"verdict {v.value}", f"Packets with verdict {v.value}", a, b))
    for k in FindingKind:
        a, b = before.findings.get(k.value, 0), after.findings.get(k.value, 0)
        noun = f"{UNITS.get(k, 'packets').capitalize()} in {k.value} findings"
        rows.append(_count_row(f"finding {k.value}", noun, a, b))
    rows.append(_rate_row(esp_mbit_per_s(before), esp_mbit_per_s(after)))
    return Comparison(*_names(before.capture.path, after.capture.path), tuple(rows))


def _names(a: str, b: str) -> tuple[str, str]:
    """Short names for both sides: the file names, with their folders if those are alike."""
    pa, pb = PurePath(a), PurePath(b)
    if pa.name != pb.name:
        return pa.name, pb.name
    return str(PurePath(*pa.parts[-2:])), str(PurePath(*pb.parts[-2:]))
