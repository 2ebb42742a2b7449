"""The report's content: one typed value built once from a ``Summary``.

In: a ``Summary``; optionally the ``--fail-on`` threshold (which checks a
KTAP line calls ``not ok``) and the plot images (PNG bytes by the path
``summary.plots`` names). Out: ``report_content(summary) -> Report``, a
frozen value holding the header, the verdict sentences, the SA rows, the
finding groups with their frames, every finding, the misplaced layouts
and their tcpdump filter, the likely causes, one result per check and the
plots. Raises nothing; reads no clock and no environment.

Every count and every sentence a report prints is made here, with the
words of ``narrative`` and the table of ``causes``; the renderers (text,
Markdown, JSON, HTML, KTAP) only lay this value out and never call back,
so all five say the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from espforensics.bounded.frames import Frames, display_filter
from espforensics.model.enums import SEVERITY_RANK, FindingKind, Severity, Verdict
from espforensics.model.records import Finding
from espforensics.receiver import words
from espforensics.report import narrative
from espforensics.report.captions import Caption, caption
from espforensics.report.causes import CAUSES, LikelyCause, likely_causes
from espforensics.report.check_results import CheckResult, _checks
from espforensics.report.filters import HEADING, filter_note, misplaced_filter
from espforensics.report.lead import lead
from espforensics.results.coverage import tally
from espforensics.results.summary import MisplacedLayout, SaSummary, Summary

FINDINGS_SHOWN = 2000  # finding rows a report lists one by one; findings.csv has every one
FILTER_SHOWN = 60  # a Wireshark filter longer than this is left to findings.csv


def frames_text(
    frames: Sequence[int],
    shown: int = narrative.EXAMPLES,
    listed: str = "findings.csv lists them",
) -> str:
    """The first frames, then how many more and where all of them are ``listed``:
    ``20 21 22 23 24 ... and 89 more (findings.csv lists them)``, or the Wireshark
    filter selecting them all when it is short."""
    every = Frames.of(frames)
    text = " ".join(map(str, every[:shown]))
    if len(every) <= shown:
        return text
    where = frames_filter(every, shown)
    where = f"Wireshark: {where}" if where else listed
    return f"{text} ... and {len(every) - shown} more ({where})"


def frames_filter(frames: Frames, shown: int = narrative.EXAMPLES) -> str:
    """The Wireshark filter ``frames_text`` gives after the first frames, or "" for none:
    all of them are shown, or the filter is too long to print."""
    if len(frames) <= shown:
        return ""
    # A run adds a number and a comma at the least: the filter of the first FILTER_SHOWN
    # runs is the whole filter, or already too long (a leak finding over a keyless NULL
    # capture has 30,000 runs a SPI: their whole filter, made four times, took 0.04 s).
    where = display_filter(frames.first_runs(FILTER_SHOWN))
    return where if len(where) <= FILTER_SHOWN else ""


@dataclass(frozen=True, slots=True)
class Header:
    """Which capture, how big, when."""

    title: str  # "espforensics 0.1.0 report"
    path: str  # as analyzed (the short summary shows it; report.txt only the name)
    name: str
    size: int
    sha256: str
    first: str  # UTC text
    last: str
    span: str  # "0.004 s"
    frames: int
    esp_packets: int
    esp_more: str  # "", or with ESP inside ESP " (and 8 inside them)"
    sa_count: int
    verdicts: str  # "ok 13, esp_misplaced 12", or "none"; "no key 593" for unknown_sa
    # when no key was given at all (narrative.verdict_counts)

    @property
    def esp_count(self) -> str:
        """The ESP packets as a table cell gives them: "8", "8 (and 8 inside them)"."""
        return f"{self.esp_packets}{self.esp_more}"


@dataclass(frozen=True, slots=True)
class SaRow:
    """One SA as the reports list it."""

    spi: str  # "0x00001001"
    src: str
    dst: str
    algorithm: str  # "no key" without one
    mode: str  # "" when unknown
    packets: int
    ok: int
    others: str  # the verdicts other than ok, "esp_misplaced 12", or ""
    verdicts: str  # every verdict seen, "ok 6, esp_misplaced 12"
    mbit: str  # "39.07", or "-"
    notes: tuple[str, ...] = ()  # TFC padding, inner checksums that do not verify
    iv_scheme: str = ""  # how the sender builds its IVs (sas.csv iv_scheme), "" if not known


@dataclass(frozen=True, slots=True)
class GroupRow:
    """All findings of one kind."""

    kind: str
    severity: str
    rows: int
    count: int
    unit: str  # what ``count`` counts: "packets", "sequence numbers", ...
    line: str  # "critical iv_reuse: 9 findings, 18 packets"
    spis: tuple[str, ...]
    frames: tuple[int, ...]  # a few example frames
    detail: str  # the first finding's
    frames_text: str = ""  # those, how many more and where all are (frames_text)
    tally: str = ""  # the line after its kind: "9 findings, 18 packets"
    # The Wireshark filter ``frames_text`` ends with, "" when it names none: a text
    # renderer keeps it whole on its line
    frames_filter: str = ""


@dataclass(frozen=True, slots=True)
class FindingRow:
    """One finding (a row of findings.csv) with its frames."""

    kind: str
    severity: str
    spi: str  # "" when the finding is about no single SPI
    src: str
    dst: str
    count: int
    frames: tuple[int, ...]  # the first few (findings.csv and summary.json have every one)
    detail: str
    frames_text: str = ""  # those, how many more and where all are (frames_text)


@dataclass(frozen=True, slots=True)
class LayoutRow:
    """One way misplaced ESP headers sat."""

    spi: str
    outer: str  # "IPv6 esp"
    packets: int
    expected_offset: int
    esp_offset: int
    clear_offset: int
    clear_bytes: str  # "45 00 LL LL", "" when none
    fields: str  # the inner header fields those bytes are, "" when unknown
    where: str  # the sentence: where the header sat
    clear: str  # the sentence: what was in clear


@dataclass(frozen=True, slots=True)
class PlotRow:
    """One plot: its file and image, or why it was not drawn."""

    name: str
    file: str  # the first file, relative to the output folder; "" when skipped
    skipped: str
    png: bytes  # the PNG, when the caller gave the images; b"" otherwise
    caption: Caption  # what it shows, how to read it (captions.py)


@dataclass(frozen=True, slots=True)
class CoverageRow:
    """One check in the reports' Coverage tables: SKIP and why, or what it examined."""

    check: str
    examined: str


@dataclass(frozen=True, slots=True)
class Report:
    """Everything a report says, in the order the reports say it."""

    summary: Summary  # the source, for summary.json
    header: Header
    verdict: tuple[str, ...]
    sas: tuple[SaRow, ...]
    sas_rest: str  # "... and 5 more SAs, ...", or ""
    groups: tuple[GroupRow, ...]
    findings: tuple[FindingRow, ...]  # at most FINDINGS_SHOWN, most severe first
    findings_rest: int  # findings not in ``findings``
    layouts: tuple[LayoutRow, ...]
    layouts_rest: str  # "2 more layouts", or ""
    tcpdump: str  # the filter selecting the misplaced packets, or ""
    tcpdump_note: str  # a sentence under it, or why misplaced headers get none, or ""
    causes: tuple[LikelyCause, ...]
    causes_note: str  # when findings match no cause: says so; else ""
    checks: tuple[CheckResult, ...]
    plots: tuple[PlotRow, ...]
    # What is wrong with the capture itself (its damage), what was checked, what is wrong
    # in it: right after the capture's name, in every format.
    lead: tuple[str, ...] = ()
    # The receiver model's lines (receiver/words.py); a line starting with two spaces
    # belongs to the one before it. Empty without a key file.
    receiver: tuple[str, ...] = ()
    coverage: tuple[CoverageRow, ...] = ()  # one per check, as ``checks``
    tcpdump_heading: str = ""  # the line above ``tcpdump``, "" when there is no filter
    receiver_heading: str = ""  # the heading of ``receiver``, "" when it is empty


def coverage_rows(checks: tuple[CheckResult, ...]) -> tuple[CoverageRow, ...]:
    """One row per check for the reports' Coverage tables: SKIP and why, or what it examined."""
    return tuple(
        CoverageRow(c.name, f"SKIP: {c.skip}" if c.skip else c.examined or "all, with a key")
        for c in checks
    )


def report_content(
    summary: Summary,
    *,
    fail_on: Severity | None = Severity.HIGH,
    images: Mapping[str, bytes] | None = None,
) -> Report:
    """The report of ``summary``; ``fail_on`` None: no check fails (``--fail-on never``).

    Built once per run (analysis/__init__.py, cli/report.py): the finding groups and the
    coverage tally are made once here and handed to what words them."""
    groups = narrative.finding_groups(summary)
    shown, rest = narrative.shown_sas(summary)
    layouts = summary.layouts[: narrative.LAYOUTS_SHOWN]
    hidden = len(summary.layouts) - len(layouts)
    causes = likely_causes(summary)
    tallied = tally(summary.sas, summary.esp_layers)  # one walk of the SAs for both
    no_key = narrative.no_key_given(summary)  # a walk of every SA: once, not per SA shown
    damage = narrative.damage_sentence(summary)
    checks = _checks(summary, fail_on, groups)
    tcpdump = misplaced_filter(summary.layouts) or ""
    receiver = _receiver(summary)
    return Report(
        summary=summary,
        header=_header(summary),
        verdict=narrative.verdict_sentences(summary, tallied),
        sas=tuple(_sa_row(sa, no_key) for sa in shown),
        sas_rest=rest,
        groups=tuple(_group_row(g, _kind_frames(summary, g.kind)) for g in groups),
        findings=tuple(_finding_row(f) for f in summary.finding_list[:FINDINGS_SHOWN]),
        findings_rest=max(0, len(summary.finding_list) - FINDINGS_SHOWN),
        layouts=tuple(_layout_row(x) for x in layouts),
        layouts_rest=narrative.plural(hidden, "more layout") if hidden > 0 else "",
        tcpdump=tcpdump,
        tcpdump_note=filter_note(summary.layouts),
        causes=causes,
        causes_note=_causes_note(summary, causes),
        checks=checks,
        plots=tuple(_plot_row(p.name, p.files, p.skipped, images or {}) for p in summary.plots),
        # A damaged capture says so before any word on what was read ("nothing wrong").
        lead=(*([damage] if damage else []), *lead(summary, tallied, groups)),
        receiver=receiver,
        coverage=coverage_rows(checks),
        tcpdump_heading=HEADING if tcpdump else "",
        receiver_heading=RECEIVER_HEADING if receiver else "",
    )


RECEIVER_HEADING = "Receiver (predicted from this capture and the key file)"
RECEIVER_LISTED = "packets.csv's receiver column gives each"


def _receiver(summary: Summary) -> tuple[str, ...]:
    """Per host the predicted counters and the frames behind each; per state its window;
    the comparison with the receiver's own counters when given."""
    lines: list[str] = []
    for host in summary.receivers:
        lines.append(words.host_line(host))
        lines += [
            f"  {name}: frames {frames_text(f, listed=RECEIVER_LISTED)}"
            for name, f in host.frames.items()
        ]
    lines += [words.sa_line(sa) for sa in summary.receiver_sas]
    if summary.observed is not None:
        lines += words.compare_lines(summary.receivers, summary.observed)
        lines += words.stats_lines(summary.receiver_sas, summary.observed)
    return tuple(lines)


def _header(summary: Summary) -> Header:
    cap = summary.capture
    span = (cap.last_time or 0) - (cap.first_time or 0)
    return Header(
        f"espforensics {summary.tool_version} report",
        cap.path,
        PurePath(cap.path).name,
        cap.size,
        cap.sha256,
        narrative.utc(cap.first_time),
        narrative.utc(cap.last_time),
        f"{span:.3f} s",
        cap.frames,
        summary.esp_packets,
        f" (and {inner} inside them)" if (inner := summary.inner_esp_packets) else "",
        len(summary.sas),
        narrative.verdict_counts(summary.verdicts, narrative.no_key_given(summary)) or "none",
    )


def _sa_row(sa: SaSummary, no_key: bool) -> SaRow:
    return SaRow(
        f"{sa.spi:#010x}",
        sa.src,
        sa.dst,
        sa.algorithm or "no key",
        sa.mode,
        sa.packets,
        sa.verdicts.get(Verdict.OK.value, 0),
        narrative.others(sa, no_key),
        narrative.verdict_counts(sa.verdicts, no_key),
        narrative.mbit(sa),
        _sa_notes(sa),
        sa.iv_scheme,
    )


def _sa_notes(sa: SaSummary) -> tuple[str, ...]:
    """TFC padding (RFC 4303 s2.7) and inner checksums that do not verify, when there are."""
    notes = []
    if sa.tfc_packets:
        to = " or ".join(f"{int(k):,}" for k in sa.tfc_padded_to)
        notes.append(
            f"TFC padding: {sa.tfc_packets:,} of {sa.packets:,} packets padded to {to} bytes"
            f" ({sa.tfc_bytes:,} bytes)"
        )
    wrong = [
        f"{sa.inner_checksums[k]:,} {k}" for k in ("bad", "partial") if k in sa.inner_checksums
    ]
    if wrong:
        notes.append(f"inner checksums: {', '.join(wrong)} (inner_checksum findings)")
    if sa.icmp_quoted:
        notes.append(f"ICMP errors quoting its packets: {sa.icmp_quoted:,} (not counted in them)")
    return tuple(notes)


def _kind_frames(summary: Summary, kind: FindingKind) -> Frames:
    """Every frame the findings of ``kind`` list, each once."""
    return Frames.union(f.frames for f in summary.finding_list if f.kind is kind)


def _group_row(g: narrative.FindingGroup, frames: Frames) -> GroupRow:
    where = frames_filter(frames)
    return GroupRow(
        g.kind.value,
        g.severity.value,
        g.rows,
        g.count,
        narrative.group_unit(g),
        narrative.group_line(g),
        tuple(f"{s:#010x}" for s in g.spis),
        g.frames,
        g.detail,
        frames_text(frames),
        narrative.group_tally(g),
        where,
    )


def _finding_row(f: Finding) -> FindingRow:
    return FindingRow(
        f.kind.value,
        f.severity.value,
        "" if f.spi is None else f"{f.spi:#010x}",
        f.src,
        f.dst,
        f.count,
        tuple(f.frames[: narrative.EXAMPLES]),
        f.detail,
        frames_text(f.frames),
    )


def _layout_row(x: MisplacedLayout) -> LayoutRow:
    where, clear = narrative.layout_sentences(x)
    return LayoutRow(
        f"{x.spi:#010x}",
        f"IPv{x.ip_version} {x.proto}{narrative.behind(x)}",
        x.packets,
        x.expected_offset,
        x.esp_offset,
        x.clear_offset,
        narrative.clear_bytes(x) if x.clear or x.clear_prefix else "",
        narrative.clear_fields(x),
        where,
        clear,
    )


def _causes_note(summary: Summary, causes: tuple[LikelyCause, ...]) -> str:
    """High or critical findings that match none of the table: say so, not nothing."""
    high = SEVERITY_RANK[Severity.HIGH]
    if causes or not any(SEVERITY_RANK[f.severity] >= high for f in summary.finding_list):
        return ""
    return (
        f"None of the {len(CAUSES)} known fault patterns matches these findings "
        "(docs/outputs.md lists them)"
    )


def _plot_row(
    name: str, files: tuple[str, ...], skipped: str, images: Mapping[str, bytes]
) -> PlotRow:
    png = next((f for f in files if f.endswith(".png")), "")
    return PlotRow(name, files[0] if files else "", skipped, images.get(png, b""), caption(name))


__all__ = [  # what the renderers read
    "FINDINGS_SHOWN",
    "RECEIVER_HEADING",
    "CheckResult",
    "CoverageRow",
    "FindingRow",
    "GroupRow",
    "Header",
    "LayoutRow",
    "PlotRow",
    "Report",
    "SaRow",
    "coverage_rows",
    "frames_text",
    "report_content",
]
