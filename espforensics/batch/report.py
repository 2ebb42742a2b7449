"""The batch report: which captures show what, worst first.

In: the batch's result rows. Out: ASCII text of at most 72 columns:
totals, then the captures that could not be analyzed, then those with
findings (most severe first), then the clean ones. Raises nothing; reads
no clock and no environment.
"""

from __future__ import annotations

from collections.abc import Sequence

from espforensics.batch.task import CaptureResult
from espforensics.model import SEVERITY_RANK, Severity
from espforensics.render.text import wrap


def _rank(r: CaptureResult) -> int:
    return SEVERITY_RANK[Severity(r.worst)] if r.worst else -1


def _findings(r: CaptureResult) -> str:
    return ", ".join(f"{k} {v}" for k, v in r.findings.items() if v) or "none"


def render_batch_report(rows: Sequence[CaptureResult], skipped: int) -> str:
    """report.txt of a batch."""
    errors = [r for r in rows if r.status == "error"]
    flagged = sorted(
        (r for r in rows if r.status != "error" and r.worst), key=lambda r: (-_rank(r), r.name)
    )
    clean = [r for r in rows if r.status != "error" and not r.worst]
    lines = [
        "espforensics batch report",
        "",
        *wrap(
            f"{len(rows)} captures: {len(flagged)} with findings, {len(clean)} clean, "
            f"{len(errors)} not analyzed; {skipped} taken from an earlier run; "
            f"{sum(r.frames for r in rows)} frames, "
            f"{sum(r.esp_packets for r in rows)} ESP packets"
        ),
    ]
    if errors:
        lines += ["", "Not analyzed (or only in part):"]
        for r in errors:
            lines += wrap(r.path, "  ") + wrap(r.error, "    ")
    if flagged:
        lines += ["", "With findings (most severe first):"]
        for r in flagged:
            lines += wrap(f"{r.path}: worst {r.worst}", "  ")
            lines += wrap(f"{r.frames} frames, {r.esp_packets} ESP packets; {_findings(r)}", "    ")
            lines += wrap(f"details: captures/{r.name}/report.txt", "    ")
    if clean:
        lines += ["", "Clean:"]
        for r in clean:
            lines += wrap(f"{r.path}: {r.frames} frames, {r.esp_packets} ESP packets", "  ")
    return "\n".join(lines) + "\n"
