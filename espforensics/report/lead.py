"""The first two sentences of every report: what was checked, and what is wrong.

In: a ``Summary``. Out: ``lead(summary) -> (checked, wrong)``, the two
sentences the short summary, report.txt, report.md and the KTAP
diagnostics give right after the capture's name. Raises nothing; reads no
clock and no environment.

What is wrong starts with the key doctor's proven fix when it has one
(checks/keys.py: a variant of the key file whose ICVs verify), because a
wrong key file makes every later sentence about the packets moot; then
the worst findings. Without a key nothing is said to "not decrypt": what
was not tried is only counted, with why.
"""

from __future__ import annotations

from dataclasses import dataclass

from espforensics.checks.coverage import NO_KEY
from espforensics.model.enums import SEVERITY_RANK, FindingKind, KeyFix, Severity
from espforensics.model.evidence import KeyMismatch
from espforensics.model.records import Finding
from espforensics.report.narrative import FindingGroup, finding_groups, group_unit, plural
from espforensics.results.coverage import Tally, tally
from espforensics.results.summary import Summary

SPIS_NAMED = 3  # SPIs a sentence names before "and N more"
GROUPS_NAMED = 2  # finding kinds the second sentence names at least (every critical one)


@dataclass(frozen=True, slots=True)
class _Fix:
    what: str  # "a 128-bit ICV (the key file says 96)"
    packets: int  # packets that verify with it
    spis: tuple[int, ...]
    fix: KeyFix | None  # the mistake it undoes


def spi_list(spis: tuple[int, ...]) -> str:
    """ "SPI 0x00001001", "SPIs 0x00001001, 0x00001002", "... and 3 more"."""
    shown = ", ".join(f"{s:#010x}" for s in spis[:SPIS_NAMED])
    more = f" and {len(spis) - SPIS_NAMED} more" if len(spis) > SPIS_NAMED else ""
    return f"{'SPI' if len(spis) == 1 else 'SPIs'} {shown}{more}"


def checked_sentence(summary: Summary, t: Tally) -> str:
    """What was checked, and the key file's SAs that matched nothing when nothing verified."""
    text = _checked(summary, t)
    n = len(summary.unused_sas)
    if n and not t.proven:
        text += f"; {plural(n, 'SA')} of the key file matched no packet"
        ports = sorted({u.port for u in summary.unused_sas if u.port is not None})
        if ports:  # checks/unused.py saw their SPIs at the start of UDP payloads
            text += f": ESP-in-UDP on port {ports[0]}; run with --natt-port {ports[0]}"
    return text


def _checked(summary: Summary, t: Tally) -> str:
    """How many ESP packets a key proved, and why not the rest."""
    esp = summary.esp_layers
    if esp == 0:
        return "no ESP packet in this capture: nothing was checked"
    sas = plural(len(summary.sas), "SA")
    inner = summary.inner_esp_packets
    packets = f"ESP packets ({inner} inside other ESP packets)" if inner else "ESP packets"
    if t.proven == esp:
        return f"all {esp} {packets} {_proof(t)} ({sas})"
    why = "; ".join(
        f"{n} {reason}" + (f" ({spi_list(spis)})" if (spis := t.untried_spis.get(reason)) else "")
        for reason, n in t.untried.items()
    )
    failing = t.tried - t.proven
    fails = f"{failing} fail their ICV" if failing else ""
    rest = "; ".join(x for x in (fails, why) if x)
    if t.proven == 0:
        if not t.tried and len(t.untried) == 1 and next(iter(t.untried)) == NO_KEY:
            return f"{esp} {packets}, none decrypted: no key ({sas})"
        return f"{esp} {packets}, none verified: {rest}"
    return f"{t.proven} of {esp} {packets} {_proof(t)}; not: {rest}"


def _proof(t: Tally) -> str:
    """What a key proved of the ``t.proven`` packets: an ICV is "verified", a packet of
    an SA without integrity is only "decrypted" (RFC 4303 s3.4.4)."""
    if t.verified == t.proven:
        return "verified with their keys"
    if t.verified == 0:
        return "decrypted with their keys, none with an ICV to verify"
    if not t.authentic:
        return f"decrypted with their keys, {t.verified} of them verified by their ICV"
    # some verified packets were not decrypted (a cipher not opened): say which is which
    return (
        f"verified or decrypted with their keys: {t.verified} verified by their ICV "
        f"({t.authentic} of them not decrypted), {t.proven - t.verified} decrypted with no "
        f"ICV to verify"
    )


def _fixes(findings: tuple[Finding, ...]) -> list[_Fix]:
    """The key doctor's proven variants, one per variant with the SPIs it fixes."""
    by_what: dict[str, tuple[int, list[int], KeyFix | None]] = {}
    for f in findings:
        if f.kind is not FindingKind.KEY_MISMATCH or f.spi is None:
            continue
        ev = f.evidence  # checks/keys.py _mismatch: the variant that verifies them, if any
        if not isinstance(ev, KeyMismatch) or not ev.cure:
            continue
        n, spis, _ = by_what.get(ev.cure, (0, [], ev.fix))
        by_what[ev.cure] = (n + ev.cured, [*spis, f.spi], ev.fix)
    return [_Fix(what, n, tuple(sorted(spis)), fix) for what, (n, spis, fix) in by_what.items()]


def _no_cure(f: Finding) -> bool:
    """A key_mismatch no usual mistake explains (its key's length fits its algorithm)."""
    ev = f.evidence
    return isinstance(ev, KeyMismatch) and not ev.cure and not ev.key_unusable


def _key_sentence(summary: Summary) -> str:
    """The key file's fault, proven or not, or "" when the key doctor found none."""
    esp = summary.esp_layers
    fixes = _fixes(summary.finding_list)
    swapped = [x for x in fixes if x.fix is KeyFix.OTHER_DIRECTION]
    if len(swapped) > 1 and len(swapped) == len(fixes):  # each verifies with the other's key
        spis = tuple(sorted(s for x in swapped for s in x.spis))
        return (
            f"{sum(x.packets for x in swapped)} of {esp} ESP packets fail their ICV with the key "
            f"file and verify with the key given for the other direction: the directions' keys "
            f"are swapped, fix the key file for {spi_list(spis)}"
        )
    if fixes:
        return "; ".join(
            f"{x.packets} of {esp} ESP packets fail their ICV with the key file and verify "
            f"with {x.what}: fix the key file for {spi_list(x.spis)}"
            for x in fixes
        )
    other = [f for f in summary.finding_list if f.kind is FindingKind.KEY_MISMATCH]
    if not other:
        return ""
    spis = tuple(sorted({f.spi for f in other if f.spi is not None}))
    if all(_no_cure(f) for f in other):
        n = sum(f.count for f in other)
        return (
            f"{n} of {esp} ESP packets verify with no key of the key file, nor with its usual "
            f"mistakes ({spi_list(spis)}): is the key file this capture's?"
        )
    return other[0].detail


def wrong_sentence(summary: Summary, made: tuple[FindingGroup, ...] | None = None) -> str:
    """What is wrong: the key file's proven fix first, then the worst findings of the capture
    (``made``: the summary's finding groups, when the caller has them)."""
    key = _key_sentence(summary)
    low = SEVERITY_RANK[Severity.LOW]
    groups = [
        g
        for g in (finding_groups(summary) if made is None else made)
        if SEVERITY_RANK[g.severity] >= low and g.kind is not FindingKind.KEY_MISMATCH
    ]
    if key:
        return key + (f"; also found: {_named(_shown(groups, 1))}" if groups else "")
    if not groups:
        return (
            "nothing wrong found in what was checked"
            if summary.esp_packets
            else "nothing to find without ESP packets"
        )
    shown = _shown(groups, GROUPS_NAMED)
    more = len(groups) - len(shown)
    return f"found: {_named(shown)}" + (
        f"; {plural(more, 'more kind')} of finding" if more > 0 else ""
    )


def _shown(groups: list[FindingGroup], at_least: int) -> list[FindingGroup]:
    """The groups a sentence names (worst first): every critical kind, however many, and
    the next worst up to ``at_least``; a first screen never hides a critical kind."""
    critical = sum(1 for g in groups if g.severity is Severity.CRITICAL)
    return groups[: max(at_least, critical)]


def _named(groups: list[FindingGroup]) -> str:
    return "; ".join(
        f"{g.severity.value} {g.kind.value} ({g.count} {group_unit(g)})" for g in groups
    )


def lead(
    summary: Summary,
    tallied: Tally | None = None,
    groups: tuple[FindingGroup, ...] | None = None,
) -> tuple[str, str]:
    """The two sentences that follow the capture's name in every report (``tallied``: the
    summary's ``coverage.tally``, ``groups``: its finding groups, when the caller has them)."""
    t = tally(summary.sas, summary.esp_layers) if tallied is None else tallied
    return checked_sentence(summary, t), wrong_sentence(summary, groups)
