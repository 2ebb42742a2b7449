"""Markdown rendering of the report (report.md), for code forges.

In: a ``Report`` (render/content.py; ``render_report_md`` takes a
``Summary`` and builds it). Out: the same content as report.txt, as
Markdown tables. Raises nothing; reads no clock and no environment.
"""

from __future__ import annotations

from espforensics.compare import Comparison
from espforensics.render.content import Report, report_content
from espforensics.summary import Summary


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(head: list[str], rows: list[list[object]]) -> list[str]:
    """A Markdown table."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def format_markdown(report: Report) -> str:
    """report.md."""
    h = report.header
    lines = [f"# {h.title}", ""]
    lines += table(
        ["capture", "bytes", "sha256", "first", "last", "frames", "ESP packets"],
        [[h.name, h.size, f"`{h.sha256}`", h.first, h.last, h.frames, h.esp_packets]],
    )
    lines += ["", "## Verdict", ""] + ([f"- **{report.damage}.**"] if report.damage else [])
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
    lines += _causes(report)
    lines += _misplaced(report)
    if report.plots:
        lines += ["", "## Plots", ""]
        lines += [
            f"- {p.name}: {p.skipped}" if p.skipped else f"- {p.name}: ![{p.name}]({p.file})"
            for p in report.plots
        ]
    return "\n".join(lines) + "\n"


def render_report_md(summary: Summary) -> str:
    """``format_markdown`` of the summary's report."""
    return format_markdown(report_content(summary))


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
            "tcpdump filter selecting the misplaced ESP packets (no keys needed):",
            "",
            f"    {report.tcpdump}",
        ]
    return lines


def render_comparison_md(cmp: Comparison) -> str:
    """The before/after table as Markdown, then what changed."""
    lines = [f"before: `{cmp.before}`, after: `{cmp.after}`", ""]
    lines += table(
        ["", "before", "after", "change"],
        [[r.label, r.before, r.after, r.change] for r in cmp.rows],
    )
    changed = [r.sentence for r in cmp.rows if r.sentence]
    lines += [""] + ([f"- {s}" for s in changed] if changed else ["Nothing changed."])
    return "\n".join(lines) + "\n"
