"""The words of the reports: sentences and rows computed from a ``Summary``.

In: a ``Summary`` (and for comparisons, two). Out: plain strings and
small frozen rows that the renderers only lay out; every count and every
sentence a report prints is made here, so text and Markdown say the same.
Raises nothing; reads no clock and no environment.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePath

from espforensics.bounded.frames import Frames, first_frames
from espforensics.checks.leaks import name_fields
from espforensics.model.enums import SEVERITY_RANK, FindingKind, Severity, Verdict
from espforensics.model.records import Finding
from espforensics.results.coverage import CheckCoverage, Tally
from espforensics.results.summary import MisplacedLayout, SaSummary, Summary

EXAMPLES = 5
LAYOUTS_SHOWN = 8  # misplaced layouts a report lists one by one
UNITS = {
    FindingKind.SEQ_GAP: "sequence numbers",
    FindingKind.SHARED_KEY: "SAs",
    FindingKind.ESN_WRAP: "wraps",
}


def plural(n: int, noun: str) -> str:
    """ "1 finding", "2 findings"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def group_unit(g: FindingGroup) -> str:
    """What a group's count counts: "packets", "1 packet" -> "packet", "SAs", ..."""
    unit = UNITS.get(g.kind, "packets")
    return unit.removesuffix("s") if g.count == 1 else unit


def group_line(g: FindingGroup) -> str:
    """One line per finding kind: severity, kind, how many, of what."""
    return f"{g.severity.value} {g.kind.value}: {group_tally(g)}"


def group_tally(g: FindingGroup) -> str:
    """How many findings of the kind, and how much they concern: "9 findings, 18 packets"."""
    return f"{plural(g.rows, 'finding')}, {g.count} {group_unit(g)}"


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


# The seconds since 1970 that ``datetime`` can hold: years 1 to 9999. A pcapng
# file can stamp a frame far outside (if_tsresol 0 with 2^64 ticks, a negative
# if_tsoffset; pcapng s4.2), and its report must still be written.
_FIRST_UTC = -62_135_596_800.0  # 0001-01-01 00:00:00 UTC
_LAST_UTC = 253_402_300_799.0  # 9999-12-31 23:59:59 UTC, excluded: it may round to 10000


def utc(t: float | None) -> str:
    """A capture timestamp as UTC text (deterministic, unlike local time).

    A time that no calendar date of years 1-9999 holds is given in seconds:
    "-100000000000.000000 s since the epoch (out of range)".
    """
    if t is None:
        return "-"
    if not _FIRST_UTC <= t < _LAST_UTC:  # also NaN
        return f"{t:.6f} s since the epoch (out of range)"
    when = datetime.fromtimestamp(t, UTC)
    return f"{when.year:04d}-{when:%m-%d %H:%M:%S.%f} UTC"  # %Y is not padded everywhere


def mbit(sa: SaSummary) -> str:
    """The SA's throughput, for a table cell."""
    rate = sa.mbit_per_s
    return "-" if rate is None else f"{rate:.2f}"


NO_KEY_WORDS = "no key"  # the reports' word for unknown_sa when no key was given at all


def no_key_given(summary: Summary) -> bool:
    """No SA in the key table: no key file, or none with a usable line, and no decryption
    secrets in the capture. Every SA seen then lacks a key, and none went unused."""
    return not summary.unused_sas and not any(sa.algorithm for sa in summary.sas)


def verdict_counts(counts: Mapping[str, int], no_key: bool, skip: str = "") -> str:
    """ "ok 6, esp_misplaced 12", the verdicts as they are counted (``skip``: one left out).
    ``no_key`` (``no_key_given``): ``unknown_sa`` reads "no key", as nothing was looked up;
    packets.csv and summary.json keep the verdict's value."""
    return ", ".join(
        f"{NO_KEY_WORDS if no_key and k == Verdict.UNKNOWN_SA else k} {v}"
        for k, v in counts.items()
        if v and k != skip
    )


def others(sa: SaSummary, no_key: bool = False) -> str:
    """The SA's verdicts other than ok, as "verdict n, ..." (``no_key``: as ``verdict_counts``)."""
    return verdict_counts(sa.verdicts, no_key, skip=Verdict.OK.value)


SAS_SHOWN = 20  # SAs a report lists one by one; sas.csv has every one


def shown_sas(summary: Summary) -> tuple[tuple[SaSummary, ...], str]:
    """The SAs a report lists, and the sentence for those it leaves out ("" for none).

    A capture of a scan holds tens of thousands of SAs: the report lists
    those with a verdict other than ok first, then the busiest, in key order.
    """
    if len(summary.sas) <= SAS_SHOWN:
        return summary.sas, ""
    ranked = heapq.nsmallest(  # sorted(...)[:SAS_SHOWN], without sorting every SA
        SAS_SHOWN,
        summary.sas,
        key=lambda sa: (sa.verdicts.get(Verdict.OK.value, 0) == sa.packets, -sa.packets, sa.key),
    )
    rest = len(summary.sas) - SAS_SHOWN
    return (
        tuple(sorted(ranked, key=lambda sa: sa.key)),
        f"... and {plural(rest, 'more SA')}, fewer packets or all ok: every SA is in sas.csv",
    )


def finding_groups(summary: Summary) -> tuple[FindingGroup, ...]:
    """Findings grouped by kind, worst first."""
    by_kind: dict[FindingKind, list[Finding]] = defaultdict(list)
    for f in summary.finding_list:
        by_kind[f.kind].append(f)
    groups = []
    for kind, items in by_kind.items():
        worst = max(items, key=lambda f: SEVERITY_RANK[f.severity]).severity
        frames = first_frames([Frames.of(f.frames) for f in items], EXAMPLES)
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


# Why a packet whose ICV verified has no plaintext (verdict authentic_not_decrypted).
_NOT_OPENED = "a cipher this version does not decrypt"
# Verdicts of packets a key was tried on that did not decrypt at the expected offset.
NOT_AT_OFFSET_0 = (Verdict.ESP_MISPLACED, Verdict.AUTH_FAIL, Verdict.BAD_TRAILER)


def verdict_sentences(summary: Summary, t: Tally) -> tuple[str, ...]:
    """What a reviewer wants to read first: what was not checked, placement, clear text, IVs.

    Only packets a key was tried on are said to decrypt or not; the rest are
    "not checked", with why (``t``: the summary's coverage.tally, which the caller
    makes once for the whole report): without a key nothing was tried.
    """
    v, esp = summary.verdicts, summary.esp_layers
    unused = unused_sentences(summary)
    if esp == 0:
        return ("no ESP packet in this capture", *unused)
    # the key files' unused SAs matter where they may explain packets left unverified
    out = list(unused) if t.proven < esp else []
    if t.untried:
        whys = ", ".join(f"{n} {why}" for why, n in t.untried.items())
        out.append(f"{esp - t.tried} of {esp} ESP packets were not checked ({whys})")
    checked, tv = t.tried, t.verdicts
    bad_n = sum(tv.get(k, 0) for k in NOT_AT_OFFSET_0)
    esn = v.get(Verdict.ESN_MISMATCH, 0)
    every = "every ESP packet" if checked == esp else "every checked ESP packet"
    if not checked:
        out.append("no ESP packet was checked by decryption")
    elif not bad_n and not t.authentic:
        out.append(f"{every} decrypts at offset 0 ({checked} of {checked})")
    elif not bad_n and t.authentic == checked:  # nothing decrypted: the ICVs are the proof
        out.append(
            f"{every} verifies at offset 0 by its ICV ({checked} of {checked}); none was "
            f"decrypted: {_NOT_OPENED}"
        )
    elif not bad_n:
        out.append(
            f"{every} decrypts or verifies at offset 0 ({checked} of {checked}: "
            f"{checked - t.authentic} decrypted, {t.authentic} verified by their ICV only: "
            f"{_NOT_OPENED})"
        )
    else:
        bad = ", ".join(f"{tv[k]} {k}" for k in NOT_AT_OFFSET_0 if tv.get(k))
        out.append(f"{bad_n} of {checked} ESP packets do not decrypt at offset 0 ({bad})")
        if t.authentic:
            out.append(
                f"{t.authentic} of {checked} ESP packets verify at offset 0 by their ICV "
                f"but were not decrypted: {_NOT_OPENED}"
            )
    if esn:
        verb, its, it = ("verifies", "its", "it") if esn == 1 else ("verify", "their", "them")
        out.append(
            f"{plural(esn, 'ESP packet')} {verb} only with an ESN high half {its} place "
            f"rules out (esn_mismatch: a receiver drops {it})"
        )
    leaked = sum(sa.leaked for sa in summary.sas)
    examined = {c.name: c for c in summary.coverage}
    if leaked:
        out.append(f"{leaked} packets carry inner header bytes in clear")
    else:
        out.append(_clean("no inner header byte in clear", examined.get("cleartext_leak")))
    if summary.reused_ivs:
        packets = summary.findings.get(FindingKind.IV_REUSE.value, 0)
        out.append(f"{summary.reused_ivs} IVs reused under one key ({packets} packets)")
    else:
        out.append(_clean("no IV reused", examined.get("iv_reuse")))
    return tuple(out)


def _clean(sentence: str, c: CheckCoverage | None) -> str:
    """``sentence`` (nothing found) of the packets the check examined: all of them, else
    how many and why not the rest (NULL and GMAC SAs have no clear text to find, NULL no
    IV), or that it examined none. A check never reads as clean for what it did not see."""
    if c is None or c.examined == c.esp_packets:
        return sentence
    whys = ", ".join(f"{n} {why}" for why, n in c.skipped.items())
    if not c.examined:
        return f"{c.name} not examined ({whys})"
    return f"{sentence} in the {c.examined} of {c.esp_packets} ESP packets examined ({whys})"


UNUSED_SHOWN = 3  # unused SAs of the key files a report names; summary.json has every one


def unused_sentences(summary: Summary) -> tuple[str, ...]:
    """The key files' SAs that matched no packet, each with the likely reason."""
    unused = summary.unused_sas
    out = [u.detail for u in unused[:UNUSED_SHOWN]]
    if len(unused) > UNUSED_SHOWN:
        rest = plural(len(unused) - UNUSED_SHOWN, "more SA")
        out.append(f"{rest} of the key file matched no packet (summary.json: unused_sas)")
    return tuple(out)


def damage_sentence(summary: Summary) -> str | None:
    """The first thing a report says about a damaged capture (None if it is whole)."""
    if not summary.error:
        return None
    error, path = summary.error, summary.capture.path
    if path and error.startswith(path + ":"):  # the file's name, as the header gives it
        error = PurePath(path).name + error[len(path) :]
    return (
        f"The capture is damaged: {error}. "
        "Everything below covers only what was read before the damage"
    )


# The inner header's length field, by IP version: RFC 791 s3.1 total
# length (bytes 2-3), RFC 8200 s3 payload length (bytes 4-5).
_LENGTH_BYTES = {4: (2, 3), 6: (4, 5)}


def _length_bytes(layout: MisplacedLayout) -> tuple[int, ...]:
    """Where the inner length field sits in the clear bytes, by their first byte's version."""
    first = layout.clear[0] if layout.clear else None
    return _LENGTH_BYTES.get((first or 0) >> 4, ())


def clear_bytes(layout: MisplacedLayout) -> str:
    """The clear bytes of a layout, e.g. "45 00 LL LL": LL is a byte of the
    inner length field that differs between packets, xx any other such byte."""
    if not layout.clear and layout.clear_prefix:  # a summary.json written before clear_hex
        return " ".join(layout.clear_prefix[i : i + 2] for i in (0, 2)) + " ..."
    lengths = _length_bytes(layout)
    return " ".join(
        ("LL" if i in lengths else "xx") if b is None else f"{b:02x}"
        for i, b in enumerate(layout.clear)
    )


def clear_fields(layout: MisplacedLayout) -> str:
    """The inner header fields the clear bytes are, and what LL / xx stand for."""
    if not layout.clear:  # none in clear, or only their prefix known
        return ""
    fields = name_fields(bytes(0 if b is None else b for b in layout.clear))
    lengths = _length_bytes(layout)
    varies = [i for i, b in enumerate(layout.clear) if b is None]
    notes = [
        note
        for shown, note in (
            (any(i in lengths for i in varies), "LL varies per packet"),
            (any(i not in lengths for i in varies), "xx varies per packet"),
        )
        if shown
    ]
    return "; ".join([fields, *notes])


def behind(layout: MisplacedLayout) -> str:
    """The words naming a layout's carriers (" behind vlan"), or "" when there are none."""
    return f" behind {layout.carriers}" if layout.carriers else ""


def layout_sentences(layout: MisplacedLayout) -> tuple[str, str]:
    """Where a layout's ESP header sat, and which inner bytes travelled in clear."""
    x = layout
    where = (
        f"SPI {x.spi:#010x} over IPv{x.ip_version} ({x.proto}){behind(x)}: "
        f"{plural(x.packets, 'packet')} "
        f"with the ESP header at byte {x.esp_offset} instead of {x.expected_offset}"
    )
    shown = clear_bytes(x)
    if not shown:
        return where, "no inner byte in clear in front of it"
    fields = clear_fields(x)
    return where, f"in clear at byte {x.clear_offset}: {shown}" + (f" ({fields})" if fields else "")


def worst_severity(summary: Summary) -> Severity | None:
    """The most severe finding, if any."""
    if not summary.finding_list:
        return None
    return max((f.severity for f in summary.finding_list), key=lambda s: SEVERITY_RANK[s])
