"""Plain-text renderings: the short summary and report.txt.

In: a ``Report`` (report/content.py, built once per run). Out: ASCII
text, no line over 72 columns, the same text for the same capture, fit to
paste below a patch's ``---`` line.
Raises nothing; reads no clock and no environment.
"""

from __future__ import annotations

import textwrap

from espforensics.report.content import Report, SaRow

WIDTH = 72


def ascii_only(text: str) -> str:
    """Escape anything that is not ASCII (file names may hold anything)."""
    return text.encode("ascii", "backslashreplace").decode("ascii")


_KEEP = "\x00"  # stands for a space of a path kept whole: textwrap never breaks there


def wrap(
    text: str, indent: str = "", hanging: str = "    ", whole: tuple[str, ...] = ()
) -> list[str]:
    """Lines of at most 72 columns, broken only between words.

    A word longer than a line (a path, a number, a hex string) stays whole on
    a line of its own, longer than 72 columns: grep and copy-paste must find
    it (``.../tso-on/captu`` + ``re.pcap`` found neither). The strings in
    ``whole`` (paths, which may hold spaces) are not broken at their spaces
    either.
    """
    text = ascii_only(text)
    for keep in sorted({ascii_only(w) for w in whole if " " in w}, key=len, reverse=True):
        text = text.replace(keep, keep.replace(" ", _KEEP))
    lines = textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + hanging,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line.replace(_KEEP, " ") for line in lines] or [""]


def format_summary(report: Report) -> str:
    """A few lines after ``analyze``: what the capture holds and how it verified."""
    h = report.header
    lines = [
        *wrap(h.path, whole=(h.path,)),
        *(x for sentence in report.lead for x in wrap(sentence, "  ")),
        f"  {h.frames} frames, {h.esp_packets} ESP packets{h.esp_more}, {h.sa_count} SAs",
        *wrap(f"verdicts: {h.verdicts}", "  "),
    ]
    for sa in report.sas:
        lines += wrap(f"SPI {sa.spi} {sa.src} -> {sa.dst} ({sa.algorithm})", "  ")
        lines += wrap(f"{sa.packets} packets: {sa.verdicts}", "    ")
    lines += wrap(report.sas_rest, "  ") if report.sas_rest else []
    lines += wrap("; ".join(report.verdict), "  ")
    return "\n".join(lines) + "\n"


def _header(report: Report) -> list[str]:
    h = report.header
    return [
        h.title,
        "",
        *wrap(f"file:   {h.name} ({h.size:,} bytes)", whole=(h.name,)),
        *(x for sentence in report.lead for x in wrap(sentence, "  ")),
        f"sha256: {h.sha256}",
        f"first:  {h.first}",
        f"last:   {h.last} ({h.span})",
        f"frames: {h.frames}; ESP packets: {h.esp_count} in {h.sa_count} SAs",
    ]


def _sa_lines(sa: SaRow) -> list[str]:
    lines = wrap(f"SPI {sa.spi} {sa.src} -> {sa.dst}", "  ")
    lines += wrap(
        f"{sa.algorithm}, {sa.mode or 'mode unknown'}, {sa.packets} packets, {sa.mbit} Mbit/s",
        "    ",
    )
    lines += wrap(f"ok {sa.ok}" + (f", {sa.others}" if sa.others else ""), "    ")
    lines += wrap(f"IV scheme: {sa.iv_scheme}", "    ") if sa.iv_scheme else []
    for note in sa.notes:
        lines += wrap(note, "    ")
    return lines


def _findings(report: Report) -> list[str]:
    if not report.groups:
        return ["Findings: none"]
    lines = ["Findings:"]
    for g in report.groups:
        lines += wrap(f"{g.line}, SPI {' '.join(g.spis) or '-'}", "  ")
        if g.frames:
            keep = (g.frames_filter,) if g.frames_filter else ()
            lines += wrap("frames " + g.frames_text, "    ", whole=keep)
        lines += wrap(g.detail, "    ")
    return lines


def _coverage(report: Report) -> list[str]:
    """What each check examined: those that skipped ESP packets, and why."""
    lines = []
    for c in report.checks:
        if c.skip:
            lines += wrap(f"{c.name}: SKIP, {c.skip}", "  ")
        elif c.coverage:
            lines += wrap(c.coverage, "  ")
    if not lines:
        return ["", "Coverage: every check examined every ESP packet with its key"]
    return ["", "Coverage:", *lines]


def _causes(report: Report) -> list[str]:
    """The likely causes: what matched, the kernel path, why, what rules it out."""
    if not report.causes:
        return (
            ["", "Likely cause:", *wrap(f"{report.causes_note}.", "  ")]
            if report.causes_note
            else []
        )
    lines = ["", "Likely cause:"]
    for c in report.causes:
        lines += wrap(f"{c.title} ({c.id})", "  ")
        for evidence in c.evidence:
            lines += wrap(f"matched: {evidence}", "    ")
        lines += wrap(f"kernel path: {c.kernel_path}", "    ")
        lines += wrap(f"why likely: {c.why}", "    ")
        lines += wrap(f"would confirm it: {c.confirm}", "    ")
        lines += wrap(f"rules it out: {c.rule_out}", "    ")
    return lines


def _misplaced(report: Report) -> list[str]:
    """Where the misplaced ESP headers sat, what was in clear, the filter."""
    if not report.layouts:
        return []
    lines = ["", "Misplaced ESP headers (bytes counted from the outer IP header):"]
    for x in report.layouts:
        lines += wrap(x.where, "  ") + wrap(x.clear, "    ")
    if report.layouts_rest:
        lines += wrap(f"and {report.layouts_rest} (summary.json)", "  ")
    if report.tcpdump:
        lines += ["", report.tcpdump_heading]
        lines += wrap(report.tcpdump, "  ")
    if report.tcpdump_note:  # under the filter, or why there is none
        lines += ["", *wrap(report.tcpdump_note, "", "")]
    return lines


def format_text(report: Report) -> str:
    """report.txt: everything a reviewer pastes into a patch review.

    No local paths (plot files) beyond the capture's name: it is pasted
    on public lists. report.md lists the plots.
    """
    lines = [*_header(report), "", "Verdict:"]
    for sentence in report.verdict:  # the damage, if any, led the header
        lines += wrap(sentence + ".", "  ")
    lines += ["", "SAs:" if report.sas else "SAs: none"]
    lines += [x for sa in report.sas for x in _sa_lines(sa)]
    lines += wrap(report.sas_rest, "  ") if report.sas_rest else []
    lines += ["", *_findings(report), *_coverage(report), *_receiver(report), *_causes(report)]
    lines += _misplaced(report)
    return "\n".join(lines) + "\n"


def _receiver(report: Report) -> list[str]:
    """The receiver model's lines (report/content.py ``_receiver``), if any."""
    if not report.receiver:
        return []
    lines = ["", f"{report.receiver_heading}:"]
    for line in report.receiver:
        lines += wrap(line.strip(), "    " if line.startswith("  ") else "  ")
    return lines
