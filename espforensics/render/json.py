"""JSON rendering: the summary document (summary.json, and --format json).

In: a ``Report`` (render/content.py; ``render_json`` takes a ``Summary``
and builds it). Out: the summary's document (``Summary.to_json``) with the
report's ``likely_causes`` after ``layouts``, as indented JSON text with a
trailing newline. Raises nothing.
"""

from __future__ import annotations

import json

from espforensics.render.content import Report, report_content
from espforensics.summary import Summary

# Lists that may hold one row per SA or finding (tens of thousands for a scan) are laid
# out one compact row per line: json's C encoder does not indent, and its Python
# encoder took 5 s for 60,000 SAs.
_ROW_LISTS = ("sas", "finding_list")


def format_json(report: Report) -> str:
    """``summary.json``: indented, with one line per SA and per finding."""
    doc = {}
    for name, value in report.summary.to_json().items():
        doc[name] = value
        if name == "layouts":
            doc["likely_causes"] = [c.to_json() for c in report.causes]
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


def render_json(summary: Summary) -> str:
    """``format_json`` of the summary's report."""
    return format_json(report_content(summary))
