"""JSON rendering: the summary document (summary.json, and --format json).

In: a ``Summary``. Out: indented JSON text with a trailing newline.
Raises nothing.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from espforensics.compare import Comparison
from espforensics.summary import Summary


def render_json(summary: Summary) -> str:
    """``summary.json``."""
    return json.dumps(summary.to_json(), indent=2) + "\n"


def render_comparison_json(cmp: Comparison) -> str:
    """The comparison rows as JSON."""
    return (
        json.dumps(
            {"before": cmp.before, "after": cmp.after, "rows": [asdict(r) for r in cmp.rows]},
            indent=2,
        )
        + "\n"
    )
