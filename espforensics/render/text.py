"""Plain-text renderings: the short summary and report.txt.

In: a ``Summary`` (words and counts from ``narrative``). Out: ASCII text,
no line over 72 columns, the same text for the same capture, fit to paste
below a patch's ``---`` line. Raises nothing; reads no clock and no
environment.
"""

from __future__ import annotations

import textwrap
from pathlib import PurePath

from espforensics import narrative
from espforensics.compare import Comparison
from espforensics.render.tcpdump import misplaced_filter
from espforensics.summary import SaSummary, Summary

WIDTH = 72


def ascii_only(text: str) -> str:
    """Escape anything that is not ASCII (file names may hold anything)."""
    return text.encode("ascii", "backslashreplace").decode("ascii")


def wrap(text: str, indent: str = "", hanging: str = "    ") -> list[str]:
    """Lines of at most 72 columns; long words are broken too."""
    return textwrap.wrap(
        ascii_only(text),
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + hanging,
        break_on_hyphens=False,
    ) or [""]


def _verdicts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v)


def render_summary(summary: Summary) -> str:
    """A few lines after ``analyze``: what the capture holds and how it verified."""
    cap = summary.capture
    damage = narrative.damage_sentence(summary)
    lines = [
        *wrap(cap.path),
        *(wrap(damage + ".", "  ") if damage else []),
        f"  {cap.frames} frames, {summary.esp_packets} ESP packets, {len(summary.sas)} SAs",
        *wrap(f"verdicts: {_verdicts(summary.verdicts) or 'none'}", "  "),
    ]
    shown, rest = narrative.shown_sas(summary)
    for sa in shown:
        lines += wrap(f"SPI {sa.spi:#010x} {sa.src} -> {sa.dst} ({sa.algorithm or 'no key'})", "  ")
        lines += wrap(f"{sa.packets} packets: {_verdicts(sa.verdicts)}", "    ")
    lines += wrap(rest, "  ") if rest else []
    lines += wrap("; ".join(narrative.verdict_sentences(summary)), "  ")
    return "\n".join(lines) + "\n"


def _header(summary: Summary) -> list[str]:
    cap = summary.capture
    span = (cap.last_time or 0) - (cap.first_time or 0)
    return [
        f"espforensics {summary.tool_version} report",
        "",
        *wrap(f"file:   {PurePath(cap.path).name} ({cap.size:,} bytes)"),
        f"sha256: {cap.sha256}",
        f"first:  {narrative.utc(cap.first_time)}",
        f"last:   {narrative.utc(cap.last_time)} ({span:.3f} s)",
        f"frames: {cap.frames}; ESP packets: {summary.esp_packets} in {len(summary.sas)} SAs",
    ]


def _sa_lines(sa: SaSummary) -> list[str]:
    lines = wrap(f"SPI {sa.spi:#010x} {sa.src} -> {sa.dst}", "  ")
    lines += wrap(
        f"{sa.algorithm or 'no key'}, {sa.mode or 'mode unknown'}, {sa.packets} "
        f"packets, {narrative.mbit(sa)} Mbit/s",
        "    ",
    )
    lines += wrap(
        f"ok {sa.verdicts.get('ok', 0)}"
        + (f", {narrative.others(sa)}" if narrative.others(sa) else ""),
        "    ",
    )
    return lines


def _findings(summary: Summary) -> list[str]:
    groups = narrative.finding_groups(summary)
    if not groups:
        return ["Findings: none"]
    lines = ["Findings:"]
    for g in groups:
        spis = " ".join(f"{s:#010x}" for s in g.spis) or "-"
        lines += wrap(f"{narrative.group_line(g)}, SPI {spis}", "  ")
        if g.frames:
            lines += wrap("frames " + " ".join(map(str, g.frames)), "    ")
        lines += wrap(g.detail, "    ")
    return lines


def _misplaced(summary: Summary) -> list[str]:
    """Where the misplaced ESP headers sat, what was in clear, the filter."""
    if not summary.layouts:
        return []
    lines = ["", "Misplaced ESP headers (bytes counted from the outer IP header):"]
    for layout in summary.layouts[: narrative.LAYOUTS_SHOWN]:
        where, clear = narrative.layout_sentences(layout)
        lines += wrap(where, "  ") + wrap(clear, "    ")
    hidden = len(summary.layouts) - narrative.LAYOUTS_SHOWN
    if hidden > 0:
        lines += wrap(f"and {narrative.plural(hidden, 'more layout')} (summary.json)", "  ")
    bpf = misplaced_filter(summary.layouts)
    if bpf:
        lines += ["", "tcpdump filter selecting the misplaced ESP packets (no keys needed):"]
        lines += wrap(bpf, "  ")
    return lines


def render_report(summary: Summary) -> str:
    """report.txt: everything a reviewer pastes into a patch review.

    No local paths (plot files) beyond the capture's name: it is pasted
    on public lists. report.md lists the plots.
    """
    lines = [*_header(summary), "", "Verdict:"]
    damage = narrative.damage_sentence(summary)
    for sentence in ((damage,) if damage else ()) + narrative.verdict_sentences(summary):
        lines += wrap(sentence + ".", "  ")
    lines += ["", "SAs:" if summary.sas else "SAs: none"]
    shown, rest = narrative.shown_sas(summary)
    lines += [x for sa in shown for x in _sa_lines(sa)]
    lines += wrap(rest, "  ") if rest else []
    lines += ["", *_findings(summary), *_misplaced(summary)]
    return "\n".join(lines) + "\n"


def render_comparison(cmp: Comparison) -> str:
    """The before/after table as text (72 columns), then what changed."""
    label_w = max(len(r.label) for r in cmp.rows)
    cols = [label_w, 12, 12, 9]
    head = ("", "before", "after", "change")
    lines = wrap(f"before: {cmp.before}") + wrap(f"after:  {cmp.after}") + [""]
    lines.append(
        f"{head[0]:<{cols[0]}}  {head[1]:>{cols[1]}}  {head[2]:>{cols[2]}}  "
        f"{head[3]:>{cols[3]}}".rstrip()
    )
    for r in cmp.rows:
        lines.append(
            f"{r.label:<{cols[0]}}  {r.before:>{cols[1]}}  {r.after:>{cols[2]}}  "
            f"{r.change:>{cols[3]}}".rstrip()
        )
    changed = [r.sentence for r in cmp.rows if r.sentence]
    lines += ["", "What changed:" if changed else "Nothing changed."]
    for sentence in changed:
        lines += wrap(sentence, "  ")
    return "\n".join(lines) + "\n"
