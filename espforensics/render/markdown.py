"""Markdown rendering of the report (report.md), for code forges.

In: a ``Summary``. Out: the same content as report.txt, as Markdown
tables. Raises nothing; reads no clock and no environment.
"""

from __future__ import annotations

from pathlib import PurePath

from espforensics import narrative
from espforensics.compare import Comparison
from espforensics.render.tcpdump import misplaced_filter
from espforensics.summary import Summary


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(head: list[str], rows: list[list[object]]) -> list[str]:
    """A Markdown table."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def render_report_md(summary: Summary) -> str:
    """report.md."""
    cap = summary.capture
    lines = [f"# espforensics {summary.tool_version} report", ""]
    lines += table(
        ["capture", "bytes", "sha256", "first", "last", "frames", "ESP packets"],
        [
            [
                PurePath(cap.path).name,
                cap.size,
                f"`{cap.sha256}`",
                narrative.utc(cap.first_time),
                narrative.utc(cap.last_time),
                cap.frames,
                summary.esp_packets,
            ]
        ],
    )
    damage = narrative.damage_sentence(summary)
    lines += ["", "## Verdict", ""] + ([f"- **{damage}.**"] if damage else [])
    lines += [f"- {s}." for s in narrative.verdict_sentences(summary)]
    lines += ["", "## SAs", ""]
    shown, rest = narrative.shown_sas(summary)
    lines += table(
        ["SPI", "src", "dst", "algorithm", "mode", "packets", "ok", "other", "Mbit/s"],
        [
            [
                f"{sa.spi:#010x}",
                sa.src,
                sa.dst,
                sa.algorithm or "no key",
                sa.mode or "-",
                sa.packets,
                sa.verdicts.get("ok", 0),
                narrative.others(sa) or "-",
                narrative.mbit(sa),
            ]
            for sa in shown
        ],
    )
    lines += ["", rest] if rest else []
    lines += ["", "## Findings", ""]
    groups = narrative.finding_groups(summary)
    if groups:
        lines += table(
            ["severity", "kind", "findings", "concerned", "SPI", "frames", "detail"],
            [
                [
                    g.severity.value,
                    g.kind.value,
                    g.rows,
                    f"{g.count} {narrative.UNITS.get(g.kind, 'packets')}",
                    " ".join(f"{s:#010x}" for s in g.spis),
                    " ".join(map(str, g.frames)),
                    g.detail,
                ]
                for g in groups
            ],
        )
    else:
        lines.append("None.")
    lines += _misplaced(summary)
    if summary.plots:
        lines += ["", "## Plots", ""]
        lines += [
            f"- {p.name}: {p.skipped}" if p.skipped else f"- {p.name}: ![{p.name}]({p.files[0]})"
            for p in summary.plots
        ]
    return "\n".join(lines) + "\n"


def _misplaced(summary: Summary) -> list[str]:
    """Where the misplaced ESP headers sat, what was in clear, the filter."""
    if not summary.layouts:
        return []
    lines = ["", "## Misplaced ESP headers", "", "Bytes counted from the outer IP header.", ""]
    lines += table(
        ["SPI", "outer", "packets", "expected at", "found at", "clear at", "clear bytes", "fields"],
        [
            [
                f"{x.spi:#010x}",
                f"IPv{x.ip_version} {x.proto}",
                x.packets,
                x.expected_offset,
                x.esp_offset,
                x.clear_offset,
                f"`{narrative.clear_bytes(x)}`" if x.clear_hex or x.clear_prefix else "-",
                narrative.clear_fields(x) or "-",
            ]
            for x in summary.layouts[: narrative.LAYOUTS_SHOWN]
        ],
    )
    hidden = len(summary.layouts) - narrative.LAYOUTS_SHOWN
    if hidden > 0:
        lines += ["", f"And {narrative.plural(hidden, 'more layout')} (summary.json)."]
    bpf = misplaced_filter(summary.layouts)
    if bpf:
        lines += [
            "",
            "tcpdump filter selecting the misplaced ESP packets (no keys needed):",
            "",
            f"    {bpf}",
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
