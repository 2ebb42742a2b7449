"""Markdown rendering of the report (report.md), for code forges.

In: a ``Report`` (report/content.py, built once per run). Out: the same
content as report.txt, as Markdown tables. Raises nothing; reads no clock and no environment.
"""

from __future__ import annotations

from espforensics.report.content import PlotRow, Report


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(head: list[str], rows: list[list[object]]) -> list[str]:
    """A Markdown table."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _coverage(report: Report) -> list[str]:
    """One row per check: SKIP and why, or what it examined."""
    rows: list[list[object]] = [[row.check, row.examined] for row in report.coverage]
    return ["", "## Coverage", "", *table(["check", "examined"], rows)]


def format_markdown(report: Report) -> str:
    """report.md."""
    h = report.header
    lines = [f"# {h.title}", ""]
    lines += table(
        ["capture", "bytes", "sha256", "first", "last", "frames", "ESP packets"],
        [[h.name, h.size, f"`{h.sha256}`", h.first, h.last, h.frames, h.esp_count]],
    )
    for sentence in report.lead:
        lines += ["", f"**{_cell(sentence)}.**"]
    lines += ["", "## Verdict", ""]  # the damage, if any, led the lead above
    lines += [f"- {s}." for s in report.verdict]
    lines += ["", "## SAs", ""]
    lines += table(
        ["SPI", "src", "dst", "algorithm", "mode", "packets", "ok", "other", "Mbit/s"],
        [
            [
                sa.spi,
                sa.src,
                sa.dst,
                sa.algorithm,
                sa.mode or "-",
                sa.packets,
                sa.ok,
                sa.others or "-",
                sa.mbit,
            ]
            for sa in report.sas
        ],
    )
    lines += ["", report.sas_rest] if report.sas_rest else []
    notes = [f"- SPI {sa.spi}: {note}" for sa in report.sas for note in sa.notes]
    lines += ["", *notes] if notes else []
    lines += ["", "## Findings", ""]
    if report.groups:
        lines += table(
            ["severity", "kind", "findings", "concerned", "SPI", "frames", "detail"],
            [
                [
                    g.severity,
                    g.kind,
                    g.rows,
                    f"{g.count} {g.unit}",
                    " ".join(g.spis),
                    g.frames_text,
                    g.detail,
                ]
                for g in report.groups
            ],
        )
    else:
        lines.append("None.")
    lines += _coverage(report)
    if report.receiver:
        lines += ["", f"## {report.receiver_heading}", ""]
        lines += [f"  - {x.strip()}" if x.startswith("  ") else f"- {x}" for x in report.receiver]
    lines += _causes(report)
    lines += _misplaced(report)
    if report.plots:
        lines += ["", "## Plots", ""]
        lines += [_plot_line(p) for p in report.plots]
    return "\n".join(lines) + "\n"


def _plot_line(p: PlotRow) -> str:
    """A plot with its caption (report/captions.py): what it shows and how to read it."""
    c = p.caption
    if p.skipped:
        return f"- {c.title}: {p.skipped}"
    return f"- ![{c.title}]({p.file})\n  **{c.title}.** {c.shows} *How to read it:* {c.reading}"


def _causes(report: Report) -> list[str]:
    """The likely causes, one subsection each."""
    if not report.causes:
        return ["", "## Likely cause", "", f"{report.causes_note}."] if report.causes_note else []
    lines = ["", "## Likely cause"]
    for c in report.causes:
        lines += ["", f"### {_cell(c.title)} (`{c.id}`)", ""]
        lines += [f"- matched: {_cell(e)}" for e in c.evidence]
        lines += [
            f"- kernel path: {_cell(c.kernel_path)}",
            f"- why likely: {_cell(c.why)}",
            f"- would confirm it: {_cell(c.confirm)}",
            f"- rules it out: {_cell(c.rule_out)}",
        ]
    return lines


def _misplaced(report: Report) -> list[str]:
    """Where the misplaced ESP headers sat, what was in clear, the filter."""
    if not report.layouts:
        return []
    lines = ["", "## Misplaced ESP headers", "", "Bytes counted from the outer IP header.", ""]
    lines += table(
        ["SPI", "outer", "packets", "expected at", "found at", "clear at", "clear bytes", "fields"],
        [
            [
                x.spi,
                x.outer,
                x.packets,
                x.expected_offset,
                x.esp_offset,
                x.clear_offset,
                f"`{x.clear_bytes}`" if x.clear_bytes else "-",
                x.fields or "-",
            ]
            for x in report.layouts
        ],
    )
    if report.layouts_rest:
        lines += ["", f"And {report.layouts_rest} (summary.json)."]
    if report.tcpdump:
        lines += [
            "",
            report.tcpdump_heading,
            "",
            f"    {report.tcpdump}",
        ]
    if report.tcpdump_note:  # under the filter, or why there is none
        lines += ["", report.tcpdump_note]
    return lines
