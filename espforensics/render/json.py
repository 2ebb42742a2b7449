"""JSON rendering: the summary document (summary.json, and --format json).

In: a ``Summary``. Out: indented JSON text with a trailing newline.
Raises nothing.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from espforensics.compare import Comparison
from espforensics.summary import Summary

# Lists that may hold one row per SA or finding (tens of thousands for a scan) are laid
# out one compact row per line: json's C encoder does not indent, and its Python
# encoder took 5 s for 60,000 SAs.
_ROW_LISTS = ("sas", "finding_list")


def render_json(summary: Summary) -> str:
    """``summary.json``: indented, with one line per SA and per finding."""
    doc = summary.to_json()
    rows = {}
    for name in _ROW_LISTS:
        rows[name] = doc[name]
        doc[name] = f"\0{name}\0"  # a placeholder no JSON string of ours holds
    text = json.dumps(doc, indent=2)
    for name, items in rows.items():
        laid = (
            "[\n" + ",\n".join("    " + json.dumps(item) for item in items) + "\n  ]"
            if items
            else "[]"
        )
        text = text.replace(json.dumps(f"\0{name}\0"), laid, 1)
    return text + "\n"


def render_comparison_json(cmp: Comparison) -> str:
    """The comparison rows as JSON."""
    return (
        json.dumps(
            {"before": cmp.before, "after": cmp.after, "rows": [asdict(r) for r in cmp.rows]},
            indent=2,
        )
        + "\n"
    )
