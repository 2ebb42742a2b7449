"""HTML rendering: report.html, one self-contained file to open in a browser.

In: a ``Report`` (report/content.py), with the plot images when the
caller gave them. Out: one HTML5 document with the content of report.md
in the order a reviewer needs it (``SECTIONS``: verdict, likely cause,
plots with captions that say how to read them, then the details), the
plots as PNG ``data:`` URIs, and the findings folded one ``<details>``
per kind, each with a table of its findings that sorts by any column (a
few lines of inline script); long frame lists fold too. Nothing is
loaded from elsewhere: no external script, style sheet, font or image,
and a Content-Security-Policy that forbids any. Every text taken from
the capture, the key files or the summary is HTML-escaped. Raises
nothing; reads no clock and no environment.

``page``, ``table`` and ``Link`` are shared with the batch's report.html.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from urllib.parse import quote

from espforensics.report.content import FindingRow, Header, Report

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 75em; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
table.sortable th { cursor: pointer; }
th[aria-sort=ascending]::after { content: " \\25b2"; }
th[aria-sort=descending]::after { content: " \\25bc"; }
td.num { text-align: right; }
code, pre { font-family: ui-monospace, monospace; }
figure { margin: 1em 0; }
figure img { max-width: 100%; }
figcaption { max-width: 60em; color: #333; }
#capture td:nth-child(3) { overflow-wrap: anywhere; min-width: 16em; }
details.kind td:last-child { overflow-wrap: anywhere; min-width: 24em; }
td details, td summary { display: inline; }
nav.toc { margin: 0.5em 0 1em; }
details.kind { margin: 0.3em 0; }
details.kind > summary { cursor: pointer; }
"""
# Click a header to sort its table by that column (again: the other way). A
# cell's data-sort, when it has one, is the number it sorts by. A link to a
# folded finding kind (#kind-...) opens it. Once the page has loaded, each
# image says whether it could be shown.
SCRIPT = """
function sortKey(cell) {
  var v = cell.getAttribute("data-sort");
  return v === null ? cell.textContent : Number(v);
}
document.querySelectorAll("table.sortable").forEach(function (table) {
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, col) {
    th.addEventListener("click", function () {
      var up = th.getAttribute("aria-sort") !== "ascending";
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = sortKey(a.cells[col]), y = sortKey(b.cells[col]);
        return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
function openTarget() {
  var target = location.hash && document.getElementById(location.hash.slice(1));
  if (target && target.tagName === "DETAILS") { target.open = true; }
}
window.addEventListener("hashchange", openTarget);
openTarget();
window.addEventListener("load", function () {
  document.querySelectorAll("figure img").forEach(function (img) {
    if (img.naturalWidth) {
      img.setAttribute("data-shown", img.naturalWidth + "x" + img.naturalHeight);
    } else {
      img.nextElementSibling.textContent += " (the image could not be shown)";
    }
  });
});
"""


@dataclass(frozen=True, slots=True)
class Link:
    """A cell that links to another file of the output folder."""

    text: str
    href: str  # a relative path, quoted here


Cell = str | int | tuple[str, int] | Link  # text, a number, (text, sort key), a link


def _td(cell: Cell) -> str:
    if isinstance(cell, Link):
        return f'<td><a href="{escape(quote(cell.href))}">{escape(cell.text)}</a></td>'
    if isinstance(cell, tuple):
        text, key = cell
        return f'<td data-sort="{key}">{escape(text)}</td>'
    if isinstance(cell, int):
        return f'<td class="num" data-sort="{cell}">{cell}</td>'
    return f"<td>{escape(cell)}</td>"


def table(
    head: Sequence[str], rows: Sequence[Sequence[Cell]], *, sortable: bool = False, name: str = ""
) -> str:
    """A table; every cell escaped. ``sortable``: sorts by a click on a header."""
    attrs = (' class="sortable"' if sortable else "") + (f' id="{escape(name)}"' if name else "")
    heads = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "\n".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows)
    return f"<table{attrs}>\n<thead><tr>{heads}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def page(title: str, body: Sequence[str]) -> str:
    """A whole HTML5 document: ``body`` is HTML already escaped."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            f"<title>{escape(title)}</title>",
            f"<style>{STYLE}</style>",
            "</head>",
            "<body>",
            *body,
            f"<script>{SCRIPT}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )


def _p(text: str) -> str:
    return f"<p>{escape(text)}</p>"


# The report's sections in the order a reviewer needs them: what is wrong, why,
# the pictures, then the details (house style: the first screen tells the story).
SECTIONS: tuple[tuple[str, str], ...] = (
    ("verdict", "Verdict"),
    ("coverage", "Coverage"),
    ("receiver", "Receiver"),
    ("causes", "Likely cause"),
    ("plots", "Plots"),
    ("findings", "Findings"),
    ("sas", "SAs"),
    ("misplaced", "Misplaced ESP headers"),
)


def _esp_cell(h: Header) -> Cell:
    """A number cell, or with ESP inside ESP its text sorted by the frames' count."""
    return (h.esp_count, h.esp_packets) if h.esp_more else h.esp_packets


def _sections(report: Report) -> list[str]:
    h = report.header
    out = [f"<h1>{escape(h.title)}</h1>"]
    out.append(
        table(
            ["capture", "bytes", "sha256", "first", "last", "frames", "ESP packets"],
            [[h.name, h.size, h.sha256, h.first, h.last, h.frames, _esp_cell(h)]],
            name="capture",
        )
    )
    out += [f"<p><strong>{escape(sentence)}.</strong></p>" for sentence in report.lead]
    parts = {
        "verdict": _verdict(report),
        "coverage": _coverage(report),
        "receiver": _receiver(report),
        "causes": _causes(report),
        "plots": _plots(report),
        "findings": _findings(report),
        "sas": _sas(report),
        "misplaced": _misplaced(report),
    }
    shown = [(key, title) for key, title in SECTIONS if parts[key]]
    links = " | ".join(f'<a href="#{key}">{escape(title)}</a>' for key, title in shown)
    out.append(f'<nav class="toc">{links}</nav>')
    return out + [line for key, _ in shown for line in parts[key]]


def _verdict(report: Report) -> list[str]:
    out = ['<h2 id="verdict">Verdict</h2>\n<ul>']
    out += [f"<li>{escape(s)}.</li>" for s in report.verdict]
    out.append("</ul>")
    if report.groups:  # one line per finding kind, linking to its details below
        out.append('<ul class="kinds">')
        out += [
            f'<li><a href="#kind-{escape(g.kind)}"><strong>{escape(g.severity)}</strong> '
            f"{escape(g.kind)}</a>: {escape(g.tally)}</li>"
            for g in report.groups
        ]
        out.append("</ul>")
    return out


def _receiver(report: Report) -> list[str]:
    """The receiver model's lines: a list, each line's details nested under it."""
    if not report.receiver:
        return []
    out = [f'<h2 id="receiver">{escape(report.receiver_heading)}</h2>', "<ul>"]
    for line in report.receiver:
        tag = '<li class="sub">' if line.startswith("  ") else "<li>"
        out.append(f"{tag}{escape(line.strip())}</li>")
    out.append("</ul>")
    return out


def _coverage(report: Report) -> list[str]:
    """What each check examined (``Report.coverage``), as the other reports say."""
    rows: list[list[Cell]] = [[row.check, row.examined] for row in report.coverage]
    return [
        '<h2 id="coverage">Coverage</h2>',
        table(["check", "examined"], rows, name="coverage-table"),
    ]


def _sas(report: Report) -> list[str]:
    out = ['<h2 id="sas">SAs</h2>']
    out.append(
        table(
            ["SPI", "src", "dst", "algorithm", "mode", "packets", "ok", "other", "Mbit/s"],
            [
                [
                    s.spi,
                    s.src,
                    s.dst,
                    s.algorithm,
                    s.mode or "-",
                    s.packets,
                    s.ok,
                    s.others or "-",
                    s.mbit,
                ]
                for s in report.sas
            ],
            sortable=True,
            name="sa-list",
        )
    )
    out += [_p(report.sas_rest)] if report.sas_rest else []
    return out + [_p(f"SPI {sa.spi}: {note}") for sa in report.sas for note in sa.notes]


def _findings(report: Report) -> list[str]:
    """One folded block per finding kind: its line, then a sortable table of its findings."""
    out = ['<h2 id="findings">Findings</h2>']
    if not report.groups:
        return [*out, _p("None.")]
    out.append(_p("One line per kind; open one for its findings (click a header to sort)."))
    by_kind: dict[str, list[FindingRow]] = {}
    for f in report.findings:
        by_kind.setdefault(f.kind, []).append(f)
    for g in report.groups:
        rows = by_kind.get(g.kind, [])
        spis = f", SPI {' '.join(g.spis)}" if g.spis else ""
        out.append(
            f'<details class="kind" id="kind-{escape(g.kind)}">'
            f"<summary><strong>{escape(g.severity)}</strong> {escape(g.kind)}: "
            f"{escape(g.tally)}{escape(spis)}</summary>"
        )
        out.append(_kind_table(g.kind, rows))
        out.append("</details>")
    if report.findings_rest:
        out.append(_p(f"And {report.findings_rest} more findings: findings.csv has them all."))
    return out


def _kind_table(kind: str, rows: list[FindingRow]) -> str:
    """The findings of one kind; src and dst only when some finding names them
    (an iv_reuse finding is about a key, not a flow)."""
    flows = any(f.src or f.dst for f in rows)
    head = ["SPI", *(["src", "dst"] if flows else []), "count", "frames", "detail"]
    cells: list[list[Cell]] = [
        [
            f.spi,
            *([f.src, f.dst] if flows else []),
            f.count,
            (f.frames_text, f.frames[0] if f.frames else 0),
            f.detail,
        ]
        for f in rows
    ]
    return table(head, cells, sortable=True, name=f"findings-{kind}")


def _causes(report: Report) -> list[str]:
    if not report.causes:
        return (
            ['<h2 id="causes">Likely cause</h2>', _p(report.causes_note + ".")]
            if (report.causes_note)
            else []
        )
    out = ['<h2 id="causes">Likely cause</h2>']
    out.append(_p("Hypotheses that fit the findings, each with what would confirm or exclude it."))
    for c in report.causes:
        out.append(f"<h3>{escape(c.title)} (<code>{escape(c.id)}</code>)</h3>\n<ul>")
        out += [f"<li>matched: {escape(e)}</li>" for e in c.evidence]
        out.append(f"<li>kernel path: {escape(c.kernel_path)}</li>")
        out.append(f"<li>why likely: {escape(c.why)}</li>")
        out.append(f"<li>would confirm it: {escape(c.confirm)}</li>")
        out.append(f"<li>rules it out: {escape(c.rule_out)}</li>\n</ul>")
    return out


def _misplaced(report: Report) -> list[str]:
    if not report.layouts:
        return []
    out = [
        '<h2 id="misplaced">Misplaced ESP headers</h2>',
        _p("Bytes counted from the outer IP header."),
    ]
    out.append(
        table(
            [
                "SPI",
                "outer",
                "packets",
                "expected at",
                "found at",
                "clear at",
                "clear bytes",
                "fields",
            ],
            [
                [
                    x.spi,
                    x.outer,
                    x.packets,
                    x.expected_offset,
                    x.esp_offset,
                    x.clear_offset,
                    x.clear_bytes or "-",
                    x.fields or "-",
                ]
                for x in report.layouts
            ],
        )
    )
    if report.layouts_rest:
        out.append(_p(f"And {report.layouts_rest} (summary.json)."))
    if report.tcpdump:
        out.append(_p(report.tcpdump_heading))
        out.append(f"<pre>{escape(report.tcpdump)}</pre>")
    if report.tcpdump_note:  # under the filter, or why there is none
        out.append(_p(report.tcpdump_note))
    return out


def _plots(report: Report) -> list[str]:
    """Each plot with a caption saying what it shows and how to read it."""
    if not report.plots:
        return []
    out = ['<h2 id="plots">Plots</h2>']
    for p in report.plots:
        c = p.caption
        if p.skipped:
            out.append(_p(f"{c.title}: {p.skipped}"))
        elif p.png:
            data = base64.b64encode(p.png).decode("ascii")
            out.append(
                f'<figure id="plot-{escape(p.name)}"><img alt="{escape(c.title)}" '
                f'src="data:image/png;base64,{data}">'
                f"<figcaption><strong>{escape(c.title)}.</strong> {escape(c.shows)} "
                f"<em>How to read it:</em> {escape(c.reading)}</figcaption></figure>"
            )
        else:
            out.append(_p(f"{c.title}: {p.file} (not embedded)"))
    return out


def format_html(report: Report) -> str:
    """report.html."""
    return page(f"{report.header.title}: {report.header.name}", _sections(report))
