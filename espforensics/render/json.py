"""JSON rendering: the summary document (summary.json, and --format json).

In: a ``Report`` (report/content.py, built once per run). Out: the
summary's document (``Summary.to_json``) with the report's
``likely_causes`` after ``layouts``, as indented JSON text with a
trailing newline. Raises nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from itertools import islice

from espforensics.bounded.frames import Frames
from espforensics.model.records import Finding
from espforensics.report.content import Report
from espforensics.results.summary import Summary, finding_json, sa_json

# Lists that may hold one row per SA or finding (tens of thousands for a scan) are laid
# out one compact row per line: json's C encoder does not indent, and its Python
# encoder takes seconds for tens of thousands of SAs. Each row's dict is made, dumped
# and dropped in turn, and the text joined once: building every row's dict first, then
# replacing a placeholder and copying for the trailing newline, holds several copies
# at once (docs/performance.md).
_ROW_LISTS: tuple[tuple[str, Callable[[Summary], Iterator[Iterable[str]]]], ...] = (
    ("sas", lambda s: ((json.dumps(sa_json(sa)),) for sa in s.sas)),
    ("finding_list", lambda s: (_finding_pieces(f) for f in s.finding_list)),
)
# A finding's frames are written this many runs a piece: a keyless NULL capture's leak
# finding holds a run every few frames (660,000 runs at 2,000,000 frames), and its
# ``[[first, last], ...]`` as lists of ints, then dumped whole, raised the run's peak
# by about 20 MB at 2,000,000 frames (docs/performance.md, "The frames of a big finding").
_RUNS_A_PIECE = 4096


def format_json(report: Report) -> str:
    """``summary.json``: indented, with one line per SA and per finding."""
    return "".join(json_pieces(report))


def json_pieces(report: Report) -> Iterator[str]:
    """``format_json``'s text in pieces, each row's made as it is asked for: written to a
    file piece by piece, the document is never held whole (60,000 SAs: 28 MB, and as
    much again encoded)."""
    summary = report.summary
    doc = {}
    for name, value in replace(summary, sas=(), finding_list=()).to_json().items():
        doc[name] = value
        if name == "layouts":
            doc["likely_causes"] = [c.to_json() for c in report.causes]
    for name, _ in _ROW_LISTS:
        doc[name] = f"\0{name}\0"  # a placeholder no JSON string of ours holds
    rest = json.dumps(doc, indent=2)
    for name, rows in _ROW_LISTS:
        before, rest = rest.split(json.dumps(f"\0{name}\0"), 1)
        yield before
        yield from _laid(rows(summary))
    yield rest + "\n"


def _laid(rows: Iterator[Iterable[str]]) -> Iterator[str]:
    """A list of rows as JSON text, one row (given in pieces) a line, in pieces."""
    first = next(rows, None)
    if first is None:
        yield "[]"
        return
    yield "[\n    "
    yield from first
    for row in rows:
        yield ",\n    "
        yield from row
    yield "\n  ]"


def _finding_pieces(f: Finding) -> Iterator[str]:
    """``json.dumps(finding_json(f))`` in pieces, its ``frames`` written from the runs a
    piece at a time, as ``json.dumps`` lays out a list of lists (``[[2, 6], [8, 8]]``)."""
    row = finding_json(replace(f, frames=Frames()))
    before, after = json.dumps(row).split('"frames": []', 1)
    runs = Frames.of(f.frames).iter_runs()
    yield before + '"frames": ['
    sep = ""
    while piece := list(islice(runs, _RUNS_A_PIECE)):
        yield sep + ", ".join(f"[{a}, {b}]" for a, b in piece)
        sep = ", "
    yield "]" + after
