"""The batch report: which captures show what, worst first.

In: the batch's result rows. Out: report.txt, ASCII text of at most 72
columns: totals, then the captures that could not be analyzed, then
those with findings (most severe first), then the clean ones; a capture
analyzed without any key says so on its line, and the totals count them.
And report.html: the same totals, and one row per capture in that order
(sortable), linking to each capture's own report.html. Raises nothing;
reads no clock and no environment.

``load_batch`` reads a batch output folder back (``espforensics report
DIR``): its report.txt and which captures it analyzed; it raises
``InputError`` for a folder whose report or captures.csv cannot be read.

Both say what the archive holds, not how this run went: a batch resumed
from its manifest writes the same bytes as a fresh one (the finding kinds
in ``FindingKind`` order, whatever order a result row was stored in; how
many captures were taken from an earlier run is the command's to say).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from espforensics.batch.manifest import MANIFEST
from espforensics.errors import InputError
from espforensics.model.enums import SEVERITY_RANK, FindingKind, Severity
from espforensics.render.html import Cell, Link, page, table
from espforensics.render.text import wrap

if TYPE_CHECKING:  # its rows' type: batch/task.py runs analyses, which `report` never does
    from espforensics.batch.task import CaptureResult


def _rank(r: CaptureResult) -> int:
    return SEVERITY_RANK[Severity(r.worst)] if r.worst else -1


_KIND_ORDER = {k.value: i for i, k in enumerate(FindingKind)}  # captures.csv's column order


def _findings(r: CaptureResult) -> str:
    """ "esp_misplaced 12, seq_gap 5": the kinds in ``FindingKind`` order (a row read back
    from manifest.json has its keys sorted by name; a fresh one in the summary's order)."""
    kinds = sorted(r.findings, key=lambda k: (_KIND_ORDER.get(k, len(_KIND_ORDER)), k))
    return ", ".join(f"{k} {r.findings[k]}" for k in kinds if r.findings[k]) or "none"


def _keys(r: CaptureResult) -> str:
    """How the capture was keyed, for its line."""
    if r.keyless:
        return "no keys: ESP not decrypted"
    if r.key_source == "folder":
        return "keys found beside it: " + ", ".join(PurePath(k).name for k in r.keys)
    return ""


def _counts(r: CaptureResult) -> str:
    keys = _keys(r)
    return f"{r.frames} frames, {r.esp_packets} ESP packets" + (f"; {keys}" if keys else "")


def _groups(
    rows: Sequence[CaptureResult],
) -> tuple[list[CaptureResult], list[CaptureResult], list[CaptureResult]]:
    """Not analyzed, with findings (most severe first), clean."""
    errors = [r for r in rows if r.status == "error"]
    flagged = sorted(
        (r for r in rows if r.status != "error" and r.worst), key=lambda r: (-_rank(r), r.name)
    )
    clean = [r for r in rows if r.status != "error" and not r.worst]
    return errors, flagged, clean


def _totals(rows: Sequence[CaptureResult]) -> str:
    errors, flagged, clean = _groups(rows)
    return (
        f"{len(rows)} captures: {len(flagged)} with findings, {len(clean)} clean, "
        f"{len(errors)} not analyzed; "
        f"{sum(r.keyless for r in rows if r.status != 'error')} analyzed without keys; "
        f"{sum(r.frames for r in rows)} frames, "
        f"{sum(r.esp_packets for r in rows)} ESP packets"
    )


def render_batch_report(rows: Sequence[CaptureResult]) -> str:
    """report.txt of a batch."""
    errors, flagged, clean = _groups(rows)
    lines = ["espforensics batch report", "", *wrap(_totals(rows))]
    if errors:
        lines += ["", "Not analyzed (or only in part):"]
        for r in errors:
            lines += wrap(r.path, "  ", whole=(r.path,)) + wrap(r.error, "    ", whole=(r.path,))
    if flagged:
        lines += ["", "With findings (most severe first):"]
        for r in flagged:
            lines += wrap(f"{r.path}: worst {r.worst}", "  ", whole=(r.path,))
            lines += wrap(f"{_counts(r)}; {_findings(r)}", "    ")
            lines += wrap(f"details: captures/{r.name}/report.txt", "    ")
    if clean:
        lines += ["", "Clean:"]
        for r in clean:
            lines += wrap(f"{r.path}: {_counts(r)}", "  ", whole=(r.path,))
    return "\n".join(lines) + "\n"


def _row(r: CaptureResult) -> list[Cell]:
    name: Cell = Link(r.name, f"captures/{r.name}/report.html") if r.status != "error" else r.name
    return [
        name,
        r.path,
        r.status if r.status != "error" else f"error: {r.error}",
        (r.worst or "-", _rank(r)),
        _findings(r),
        r.frames,
        r.esp_packets,
        _keys(r) or r.key_source,
    ]


def render_batch_html(rows: Sequence[CaptureResult]) -> str:
    """report.html of a batch: one row per capture, each linking to its own report."""
    errors, flagged, clean = _groups(rows)
    body = [
        "<h1>espforensics batch report</h1>",
        f"<p>{escape(_totals(rows))}</p>",
        table(
            ["capture", "path", "status", "worst", "findings", "frames", "ESP packets", "keys"],
            [_row(r) for r in [*errors, *flagged, *clean]],
            sortable=True,
            name="captures",
        ),
    ]
    return page("espforensics batch report", body)


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """A batch output folder read back: its report and the captures it analyzed."""

    report: str  # report.txt
    done: tuple[str, ...]  # the NAME of each capture analyzed: captures/NAME/ holds it
    errors: int  # captures not analyzed, or only in part


def is_batch_folder(folder: Path) -> bool:
    """A folder ``batch`` wrote: it holds the manifest (batch/manifest.py)."""
    return (folder / MANIFEST).is_file()


def load_batch(folder: Path) -> StoredBatch:
    """report.txt and captures.csv of the batch output folder ``folder``."""
    try:
        report = (folder / "report.txt").read_text()
        with (folder / "captures.csv").open(newline="") as fh:
            rows = [(r["name"], r["status"]) for r in csv.DictReader(fh)]
    except OSError as exc:
        why = f"a batch output folder without its report ({exc.strerror}): run the batch again"
        raise InputError(str(folder), why) from exc
    except (csv.Error, KeyError, UnicodeDecodeError) as exc:
        raise InputError(
            str(folder / "captures.csv"), f"not a batch's captures.csv: {exc}"
        ) from exc
    done = tuple(name for name, status in rows if status != "error")
    return StoredBatch(report, done, len(rows) - len(done))
