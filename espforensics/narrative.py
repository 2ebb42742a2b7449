"""The words of the reports: sentences and rows computed from a ``Summary``.

In: a ``Summary`` (and for comparisons, two). Out: plain strings and
small frozen rows that the renderers only lay out; every count and every
sentence a report prints is made here, so text and Markdown say the same.
Raises nothing; reads no clock and no environment.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from espforensics.model import SEVERITY_RANK, Finding, FindingKind, Severity, Verdict
from espforensics.summary import SaSummary, Summary

EXAMPLES = 5
UNITS = {
    FindingKind.SEQ_GAP: "sequence numbers",
    FindingKind.SHARED_KEY: "SAs",
    FindingKind.ESN_WRAP: "wraps",
}


def plural(n: int, noun: str) -> str:
    """ "1 finding", "2 findings"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def group_line(g: FindingGroup) -> str:
    """One line per finding kind: severity, kind, how many, of what."""
    unit = UNITS.get(g.kind, "packets")
    return f"{g.severity.value} {g.kind.value}: {plural(g.rows, 'finding')}, {g.count} {unit}"


@dataclass(frozen=True, slots=True)
class FindingGroup:
    """All findings of one kind: how many, how bad, where to look."""

    kind: FindingKind
    severity: Severity  # the worst among them
    rows: int
    count: int  # packets (or values) concerned, summed
    spis: tuple[int, ...]
    frames: tuple[int, ...]  # a few example frames
    detail: str  # the first finding's detail


def utc(t: float | None) -> str:
    """A capture timestamp as UTC text (deterministic, unlike local time)."""
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def mbit(sa: SaSummary) -> str:
    """The SA's throughput, for a table cell."""
    rate = sa.mbit_per_s
    return "-" if rate is None else f"{rate:.2f}"


def others(sa: SaSummary) -> str:
    """The SA's verdicts other than ok, as "verdict n, ..."."""
    return ", ".join(f"{k} {v}" for k, v in sa.verdicts.items() if k != Verdict.OK and v)


def finding_groups(summary: Summary) -> tuple[FindingGroup, ...]:
    """Findings grouped by kind, worst first."""
    by_kind: dict[FindingKind, list[Finding]] = defaultdict(list)
    for f in summary.finding_list:
        by_kind[f.kind].append(f)
    groups = []
    for kind, items in by_kind.items():
        worst = max(items, key=lambda f: SEVERITY_RANK[f.severity]).severity
        frames = sorted({n for f in items for n in f.frames})[:EXAMPLES]
        spis = tuple(sorted({f.spi for f in items if f.spi is not None}))
        groups.append(
            FindingGroup(
                kind,
                worst,
                len(items),
                sum(f.count for f in items),
                spis,
                tuple(frames),
                items[0].detail,
            )
        )
    return tuple(sorted(groups, key=lambda g: (-SEVERITY_RANK[g.severity], g.kind.value)))


def verdict_sentences(summary: Summary) -> tuple[str, ...]:
    """What a reviewer wants to read first: placement, clear text, IV reuse."""
    v, esp = summary.verdicts, summary.esp_packets
    ok = v.get(Verdict.OK, 0)
    unverified = v.get(Verdict.UNKNOWN_SA, 0) + v.get(Verdict.TRUNCATED, 0)
    checked = esp - unverified
    if esp == 0:
        return ("no ESP packet in this capture",)
    out = []
    if ok == checked:
        out.append(f"every ESP packet decrypts at offset 0 ({ok} of {ok})")
    else:
        bad = ", ".join(
            f"{v[k]} {k}"
            for k in (Verdict.ESP_MISPLACED, Verdict.AUTH_FAIL, Verdict.BAD_TRAILER)
            if v.get(k)
        )
        out.append(f"{checked - ok} of {checked} ESP packets do not decrypt at offset 0 ({bad})")
    leaked = sum(sa.leaked for sa in summary.sas)
    out.append(
        "no inner header byte in clear"
        if not leaked
        else f"{leaked} packets carry inner header bytes in clear"
    )
    if not summary.reused_ivs:
        out.append("no IV reused")
    else:
        packets = summary.findings.get(FindingKind.IV_REUSE.value, 0)
        out.append(f"{summary.reused_ivs} IVs reused under one key ({packets} packets)")
    if unverified:
        out.append(f"{unverified} ESP packets could not be verified (no key or truncated)")
    return tuple(out)


def worst_severity(summary: Summary) -> Severity | None:
    """The most severe finding, if any."""
    if not summary.finding_list:
        return None
    return max((f.severity for f in summary.finding_list), key=lambda s: SEVERITY_RANK[s])
