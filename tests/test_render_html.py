"""report.html: self-contained, escaped, the content of report.md, the plots embedded.

Parsed with html.parser everywhere; loaded in a real headless browser
(Debian's chromium) when one is installed: each embedded plot decodes,
and clicking a header of the finding table sorts it.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.batch.run import run_batch
from espforensics.synth import build_scenario, write_scenario

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no headless chromium installed")


class _Dom(HTMLParser):
    """Tags with their attributes, the text, and the cells of each table by id."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self._table = self.tables.setdefault(
                dict(attrs).get("id") or f"#{len(self.tables)}", []
            )
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self.tags and self.tags[-1][0] in ("script", "style"):
            return  # not text the page shows
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def flat(self) -> str:
        return " ".join(" ".join(self.text).split())

    def all(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for t, attrs in self.tags if t == tag]


def _dom(text: str) -> _Dom:
    dom = _Dom()
    dom.feed(text)
    return dom


def _analyzed(tmp: Path, scenario: str, plots: bool = True) -> Path:
    paths = write_scenario(build_scenario(scenario, seed=1), tmp / "in", stem=scenario)
    out = tmp / "out"
    analyze_to_dir(paths["capture"], [paths["keys"]], out, plots=plots)
    return out


@pytest.fixture(scope="module")
def gso(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _analyzed(tmp_path_factory.mktemp("gso"), "kernel-gso-v6")


# Five frames, how many more, and the filter that selects all 12 (findings.csv lists them).
SHORTENED = "4 5 6 8 9 ... and 7 more (Wireshark: frame.number in {4..6 8..10 12..14 16..18})"


def test_report_html_has_the_content_of_report_md(gso: Path) -> None:
    dom = _dom((gso / "report.html").read_text())
    text = dom.flat()
    sections = [h["id"] for h in dom.all("h2")]
    assert sections == ["verdict", "sas", "findings", "causes", "misplaced", "plots"]
    assert "12 of 25 ESP packets do not decrypt at offset 0 (12 esp_misplaced)." in text
    assert "transport-mode GSO of an inner tunnel" in text
    assert "ip6 proto 50 and ip6[56:2] = 0x4500 and ip6[60:4] = 0x1001" in text
    findings = dom.tables["finding-list"]
    assert findings[0] == ["severity", "kind", "SPI", "src", "dst", "count", "frames", "detail"]
    assert [row[:3] + row[5:7] for row in findings[1:]] == [
        ["critical", "cleartext_leak", "0x00001001", "12", SHORTENED],
        ["critical", "esp_misplaced", "0x00001001", "12", SHORTENED],
    ]
    md = (gso / "report.md").read_text()
    for row in dom.tables["#1"][1:]:  # the SA table: each SA row of report.md, cell by cell
        assert "| " + " | ".join(row) + " |" in md


def test_report_html_is_self_contained(gso: Path) -> None:
    html = (gso / "report.html").read_text()
    dom = _dom(html)
    imgs = dom.all("img")
    drawn = sorted(p.name for p in (gso / "plots").glob("*.png"))
    assert len(imgs) == len(drawn) == 4
    for attrs in imgs:
        src = attrs["src"] or ""
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1])
        assert png == (gso / "plots" / f"{attrs['alt']}.png").read_bytes()
    assert not dom.all("link") and not dom.all("iframe") and not dom.all("object")
    assert all("src" not in attrs for attrs in dom.all("script"))  # inline scripts only
    assert not [a for a in dom.all("a") if ":" in (a.get("href") or "")]
    (csp,) = [m for m in dom.all("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert (csp["content"] or "").startswith("default-src 'none'; img-src data:;")


def test_without_plots_the_report_says_so(tmp_path: Path) -> None:
    out = _analyzed(tmp_path, "kernel-gso-v4", plots=False)
    dom = _dom((out / "report.html").read_text())
    assert not dom.all("img") and "plots" not in [h["id"] for h in dom.all("h2")]


def test_everything_from_the_inputs_is_escaped(tmp_path: Path) -> None:
    """A capture and a key file whose names are HTML: the text is shown, never parsed."""
    sc = build_scenario("shared-key", seed=1)  # its shared_key finding names the key file
    folder = tmp_path / "<script>alert(1)<"  # with the file below: .../<script>alert(1)</script>
    paths = write_scenario(sc, folder, stem='a&b"<i>')
    keys = folder / "script>.yaml"
    paths["keys"].rename(keys)
    out = tmp_path / "out"
    analyze_to_dir(paths["capture"], [keys], out, plots=False)
    html = (out / "report.html").read_text()
    assert "<script>alert(1)</script>" not in html and "<i>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.yaml:entry 1" in html
    assert "a&amp;b&quot;&lt;i&gt;.pcap" in html
    assert len(_dom(html).all("script")) == 1  # the page's own


def _chromium(page: Path) -> str:
    """The DOM after the page loaded and its scripts ran."""
    assert CHROMIUM is not None
    res = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return res.stdout


@needs_chromium
def test_chromium_shows_every_plot(gso: Path) -> None:
    dom = _dom(_chromium(gso / "report.html"))
    shown = [attrs.get("data-shown") or "" for attrs in dom.all("img")]
    assert len(shown) == 4
    for size in shown:
        width, height = (int(n) for n in size.split("x"))
        assert width > 0 and height > 0
    assert "could not be shown" not in dom.flat()


@needs_chromium
@pytest.mark.parametrize(("header", "clicks", "column", "first"), [
    ("kind", 1, 1, ["iv_derivation", "iv_reuse", "iv_reuse", "iv_reuse", "iv_reuse", "iv_reuse"]),
    ("severity", 1, 0, ["high", "critical", "critical", "critical", "critical", "critical"]),
    ("count", 2, 5, ["5", "2", "2", "2", "2", "2"]),
    ("frames", 2, 6, ["61 62", "49 50", "37 38", "25 26", "14 26 38 50 62", "13 14"]),
])  # fmt: skip
def test_chromium_sorts_the_findings_by_a_clicked_header(
    tmp_path: Path, header: str, clicks: int, column: int, first: list[str]
) -> None:
    """iv-seq-minus-1: five iv_reuse findings (2 packets each), one iv_derivation (5)."""
    out = _analyzed(tmp_path, "iv-seq-minus-1", plots=False)
    html = (out / "report.html").read_text()
    heads, *before = _dom(html).tables["finding-list"]
    assert [row[1] for row in before] == ["iv_reuse"] * 5 + ["iv_derivation"]
    index = heads.index(header) + 1
    click = f'document.querySelector("#finding-list th:nth-child({index})").click();' * clicks
    page = tmp_path / "clicked.html"
    page.write_text(html.replace("</body>", f"<script>{click}</script>\n</body>"))
    after = _dom(_chromium(page)).tables["finding-list"]
    assert [row[column] for row in after[1:]] == first
    assert sorted(map(tuple, after[1:])) == sorted(map(tuple, before))  # the same rows


def test_batch_writes_one_report_html_with_a_row_per_capture(tmp_path: Path) -> None:
    keys = []
    for name in ("kernel-gso-v4", "example"):
        paths = write_scenario(build_scenario(name, seed=1), tmp_path / "in", stem=name)
        keys.append(str(paths["keys"]))
    (tmp_path / "in" / "broken.pcap").write_bytes(b"\xd4\xc3\xb2\xa1 not a capture")
    out = tmp_path / "batch"
    result = run_batch([str(tmp_path / "in")], keys, out, jobs=1, plots=False)
    dom = _dom((out / "report.html").read_text())
    rows = dom.tables["captures"]
    assert rows[0][:4] == ["capture", "path", "status", "worst"]
    assert [(r[0], r[2][:5], r[3]) for r in rows[1:]] == [
        ("broken.pcap", "error", "-"),
        ("kernel-gso-v4.pcap", "done", "critical"),
        ("example.pcap", "done", "-"),
    ]
    assert len(result.rows) == 3
    links = [a["href"] or "" for a in dom.all("a")]
    assert links == ["captures/kernel-gso-v4.pcap/report.html", "captures/example.pcap/report.html"]
    for link in links:
        assert "<h1>espforensics" in (out / link).read_text()
    assert "3 captures: 1 with findings, 1 clean, 1 not analyzed" in dom.flat()
