"""Renderings of a before/after ``Comparison`` (``espforensics compare``).

In: a ``Comparison`` (report/compare.py). Out: text (ASCII, 72 columns but for
a long name, which is never broken), Markdown or JSON, each in the same
order: the two names, what to read first (``notes``: keys for one side
only), the findings that changed ("esp_misplaced 94 -> 0"), the table of
the rows not 0 on both sides (every row in JSON), then what changed.
Rows that depend on keys one side lacked say "not comparable". Raises
nothing; reads no clock and no environment.

Names come from the command line and may hold anything: text and
Markdown print them on one line with control and non-ASCII characters
escaped (``escape_name``), Markdown also escapes its own punctuation
(``|``, backticks, ``<``, ...); JSON keeps them exact as JSON strings.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict

from espforensics.render.text import wrap
from espforensics.report.compare import Comparison, Row

NOT_COMPARABLE = "n/c"  # the change column of a row whose values depend on keys


def _change(r: Row) -> str:
    return r.change if r.comparable or not r.changed else NOT_COMPARABLE


def _lead(r: Row) -> str:
    """ "esp_misplaced 94 -> 0", and why it may not be the kernel's doing."""
    return f"{r.finding} {r.before} -> {r.after}" + (
        "" if r.comparable else " (not comparable: keys differ)"
    )


def _hidden(cmp: Comparison) -> str:
    hidden = len(cmp.rows) - len(cmp.shown)
    return f"{hidden} rows 0 on both sides left out (--format json has every row)."


def _nothing(apart: list[str]) -> str:
    return "Nothing comparable changed." if apart else "Nothing changed."


def render_comparison(cmp: Comparison) -> str:
    """The comparison as text: names, notes, changed findings, the table, what changed."""
    before, after = escape_name(cmp.before), escape_name(cmp.after)
    lines = [
        *wrap(f"before: {before}", hanging="  ", whole=(before,)),
        *wrap(f"after:  {after}", hanging="  ", whole=(after,)),
        "",
    ]
    for note in cmp.notes:
        lines += [*wrap(note), ""]
    lead = cmp.changed_findings
    lines.append("Findings that changed:" if lead else "No finding changed.")
    lines += [f"  {_lead(r)}" for r in lead]
    shown = cmp.shown
    label_w = max((len(r.label) for r in shown), default=0)
    lines += ["", f"{'':<{label_w}}  {'before':>12}  {'after':>12}  {'change':>9}".rstrip()]
    for r in shown:
        lines.append(
            f"{r.label:<{label_w}}  {r.before:>12}  {r.after:>12}  {_change(r):>9}".rstrip()
        )
    lines += wrap(_hidden(cmp))
    changed = [r.sentence for r in cmp.rows if r.sentence and r.comparable]
    apart = [r.label for r in cmp.rows if r.changed and not r.comparable]
    lines += ["", "What changed:" if changed else _nothing(apart)]
    for sentence in changed:
        lines += wrap(sentence, "  ")
    if apart:
        lines += ["", *wrap(f"Not comparable ({NOT_COMPARABLE}, keys differ): {', '.join(apart)}.")]
    return "\n".join(lines) + "\n"


# CommonMark: any ASCII punctuation may be backslash-escaped, and then is literal.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~&\"'])")


def md_escape(text: str) -> str:
    """Text shown literally by a Markdown renderer, on one line."""
    return _MD_SPECIAL.sub(r"\\\1", escape_name(text))


def _md_row(cells: list[str]) -> str:
    """A table row, each cell escaped as every other line is (a ``|`` would end the cell)."""
    return "| " + " | ".join(md_escape(c) for c in cells) + " |"


def render_comparison_md(cmp: Comparison) -> str:
    """The comparison as Markdown, in the order of the text."""
    lines = [f"before: {md_escape(cmp.before)}, after: {md_escape(cmp.after)}", ""]
    lines += [f"> **{md_escape(note)}**\n" for note in cmp.notes]
    lead = cmp.changed_findings
    lines.append("**Findings that changed:**" if lead else "No finding changed.")
    lines += [f"- {md_escape(_lead(r))}" for r in lead]
    lines += ["", _md_row(["", "before", "after", "change"]), "|---|---|---|---|"]
    lines += [_md_row([r.label, r.before, r.after, _change(r)]) for r in cmp.shown]
    lines += ["", md_escape(_hidden(cmp)), ""]
    changed = [r.sentence for r in cmp.rows if r.sentence and r.comparable]
    apart = [r.label for r in cmp.rows if r.changed and not r.comparable]
    lines += [f"- {md_escape(s)}" for s in changed] if changed else [_nothing(apart)]
    if apart:
        lines += ["", md_escape(f"Not comparable (keys differ): {', '.join(apart)}.")]
    return "\n".join(lines) + "\n"


def render_comparison_json(cmp: Comparison) -> str:
    """The comparison as JSON: every row, with ``comparable``; names exact."""
    doc = {
        "before": cmp.before,
        "after": cmp.after,
        "keys": {"before": cmp.keys_before.value, "after": cmp.keys_after.value},
        "notes": list(cmp.notes),
        "changed_findings": [
            {"kind": r.finding, "before": r.before, "after": r.after, "comparable": r.comparable}
            for r in cmp.changed_findings
        ],
        "rows": [asdict(r) for r in cmp.rows],
    }
    return json.dumps(doc, indent=2) + "\n"


def escape_name(name: str) -> str:
    """A name on one line of ASCII: newlines, tabs and other control or non-ASCII
    characters as Python escapes (\\n, \\t, \\x1b, \\xe9), a backslash doubled."""
    out = []
    for ch in name:
        if ch == "\\":
            out.append("\\\\")
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1] if ch.isascii() else ch.encode("unicode_escape").decode())
    return "".join(out)
