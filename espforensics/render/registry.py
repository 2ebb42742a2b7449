"""The renderers: one registry, used by ``--format`` and by the files ``analyze`` writes.

In: a renderer's name. Out: ``RENDERERS`` (name -> ``Renderer``, one dict
literal, the only registry of renderers of the report), ``FILE_RENDERERS``,
those that write a file of the output folder, and ``FOLDER_VIEWS``, the
stdout formats made from an output folder's tables rather than the report
(``packets``: a line per ESP packet). Each renderer lays out a ``Report``
(report/content.py) and returns text, in pieces where the text can be
large (summary.json: a line per SA); ``write`` puts them in a file one at
a time. Raises nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from espforensics.model.records import Finding
from espforensics.render.html import format_html
from espforensics.render.json import json_pieces
from espforensics.render.markdown import format_markdown
from espforensics.render.packets import packets_view
from espforensics.render.text import format_summary, format_text
from espforensics.report.content import Report


@dataclass(frozen=True, slots=True)
class Renderer:
    """One output format."""

    name: str
    pieces: Callable[[Report], Iterable[str]]  # the text, in order
    file: str = ""  # the file of the output folder it writes; "" for none
    stdout: bool = True  # a --format choice (report.html embeds files: written, not printed)

    def render(self, report: Report) -> str:
        """The whole text."""
        return "".join(self.pieces(report))

    def write(self, report: Report, path: Path) -> None:
        """The text into ``path`` (UTF-8), a piece at a time."""
        with path.open("w", encoding="utf-8") as fh:
            fh.writelines(self.pieces(report))


def _ktap(report: Report) -> str:
    """``--format ktap`` (render/ktap.py, with results/expect.py: imported when chosen)."""
    from espforensics.render.ktap import format_ktap  # noqa: PLC0415

    return format_ktap(report)


def _whole(render: Callable[[Report], str]) -> Callable[[Report], Iterable[str]]:
    """A renderer of one piece: its text is small (the reports list at most 20 SAs)."""
    return lambda report: (render(report),)


RENDERERS: dict[str, Renderer] = {
    "summary": Renderer("summary", _whole(format_summary)),
    "text": Renderer("text", _whole(format_text), "report.txt"),
    "markdown": Renderer("markdown", _whole(format_markdown), "report.md"),
    "json": Renderer("json", json_pieces, "summary.json"),
    "html": Renderer("html", _whole(format_html), "report.html", stdout=False),
    "ktap": Renderer("ktap", _whole(_ktap)),
}
FILE_RENDERERS = tuple(r for r in RENDERERS.values() if r.file)


@dataclass(frozen=True, slots=True)
class FolderView:
    """A stdout format made from an output folder's tables (and the findings)."""

    name: str
    pieces: Callable[[Path, Sequence[Finding]], Iterable[str]]


FOLDER_VIEWS: dict[str, FolderView] = {"packets": FolderView("packets", packets_view)}
STDOUT_FORMATS = (*(name for name, r in RENDERERS.items() if r.stdout), *FOLDER_VIEWS)
