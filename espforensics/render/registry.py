"""The renderers: one registry, used by ``--format`` and by the files ``analyze`` writes.

In: a renderer's name. Out: ``RENDERERS`` (name -> ``Renderer``, one dict
literal, the only registry of renderers) and ``FILE_RENDERERS``, those that
write a file of the output folder. Each renderer lays out a ``Report``
(render/content.py) and returns text. Raises nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from espforensics.render.content import Report
from espforensics.render.html import format_html
from espforensics.render.json import format_json
from espforensics.render.ktap import format_ktap
from espforensics.render.markdown import format_markdown
from espforensics.render.text import format_summary, format_text


@dataclass(frozen=True, slots=True)
class Renderer:
    """One output format."""

    name: str
    render: Callable[[Report], str]
    file: str = ""  # the file of the output folder it writes; "" for none
    stdout: bool = True  # a --format choice (report.html embeds files: written, not printed)


RENDERERS: dict[str, Renderer] = {
    "summary": Renderer("summary", format_summary),
    "text": Renderer("text", format_text, "report.txt"),
    "markdown": Renderer("markdown", format_markdown, "report.md"),
    "json": Renderer("json", format_json, "summary.json"),
    "html": Renderer("html", format_html, "report.html", stdout=False),
    "ktap": Renderer("ktap", format_ktap),
}
FILE_RENDERERS = tuple(r for r in RENDERERS.values() if r.file)
STDOUT_FORMATS = tuple(name for name, r in RENDERERS.items() if r.stdout)
