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
from espforensics.report.captions import caption
from espforensics.synth import build_scenario, write_scenario
from tests.support import helpers
from tests.support.helpers import analyzed_dir

REAL = helpers.CAPTURES / "linux-6.1"
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


@pytest.fixture(scope="module")
def gso(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return analyzed_dir(tmp_path_factory.mktemp("gso"), "kernel-gso-v6")


# Five frames, how many more, and the filter that selects all 12 (findings.csv lists them).
SHORTENED = "4 5 6 8 9 ... and 7 more (Wireshark: frame.number in {4..6,8..10,12..14,16..18})"


def test_report_html_has_the_content_of_report_md(gso: Path) -> None:
    dom = _dom((gso / "report.html").read_text())
    text = dom.flat()
    sections = [h["id"] for h in dom.all("h2")]
    # what is wrong, why, the pictures, then the details
    assert sections == [
        *("verdict", "coverage", "receiver", "causes"),
        *("plots", "findings", "sas", "misplaced"),
    ]
    assert [a["href"] for a in dom.all("a")][:8] == [f"#{s}" for s in sections]  # the toc
    assert "12 of 25 ESP packets do not decrypt at offset 0 (12 esp_misplaced)." in text
    assert "transport-mode GSO of an inner tunnel" in text
    assert "would confirm it: the misplaced packets vanish with TSO and GSO off" in text
    assert "ip6 proto 50 and ip6[56:2] = 0x4500 and ip6[60:4] = 0x1001" in text
    kinds = [d["id"] for d in dom.all("details") if d.get("class") == "kind"]
    assert kinds == ["kind-cleartext_leak", "kind-esp_misplaced"]
    for kind in ("cleartext_leak", "esp_misplaced"):
        heads, *rows = dom.tables[f"findings-{kind}"]
        assert heads == ["SPI", "src", "dst", "count", "frames", "detail"]  # the SA's flow
        assert [row[:5] for row in rows] == [
            ["0x00001001", "fd00:a::1", "fd00:a::2", "12", SHORTENED]
        ]
    md = (gso / "report.md").read_text()
    for row in dom.tables["sa-list"][1:]:  # each SA row of report.md, cell by cell
        assert "| " + " | ".join(row) + " |" in md
    # the lead (what was checked, what is wrong) and the coverage table, as report.md says them
    lead = [line[2:-2] for line in md.splitlines() if line.startswith("**")]  # **X.**
    assert lead == [
        "all 25 ESP packets verified with their keys (2 SAs).",
        "found: critical cleartext_leak (12 packets); critical esp_misplaced (12 packets).",
    ]
    assert all(sentence in text for sentence in lead)
    heads, *rows = dom.tables["coverage-table"]
    assert heads == ["check", "examined"]
    assert [r[0] for r in rows] == [
        "esp_placement",
        "cleartext_leak",
        "iv_reuse",
        "iv_derivation",
        "sequence",
        "esn_mismatch",
        "keys",
        "inner_checksum",
    ]
    for row in rows:
        assert "| " + " | ".join(row) + " |" in md


class _Unfolded(HTMLParser):
    """The text a reader sees before opening any <details> (their summaries included)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth, self.summary = 0, False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.depth += tag == "details"
        self.summary |= tag == "summary"

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag == "details"
        self.summary &= tag != "summary"

    def handle_data(self, data: str) -> None:
        if self.depth == 0 or (self.depth == 1 and self.summary):
            self.text.append(data)


def _open_text(html: str) -> str:
    parser = _Unfolded()
    parser.feed(html)
    return " ".join(" ".join(parser.text).split())


@pytest.fixture(scope="module")
def tso_on_html(tmp_path_factory: pytest.TempPathFactory, captures: Path) -> Path:
    out = tmp_path_factory.mktemp("tso") / "out"
    folder = REAL / "ip6tnl-transport-tso-on"
    analyze_to_dir(folder / "capture.pcap", [folder / "xfrm-state.txt"], out)
    return out / "report.html"


def test_real_tso_on_findings_fold_one_line_per_kind(tso_on_html: Path) -> None:
    """32 iv_reuse findings of long hex: one summary line, its table folded below the plots."""
    html = tso_on_html.read_text()
    dom = _dom(html)
    summaries = [_dom(part.split("</summary>")[0]).flat() for part in html.split("<summary>")[1:]]
    assert summaries[:4] == [
        "critical cleartext_leak: 1 finding, 94 packets, SPI 0x00001001",
        "critical esp_misplaced: 1 finding, 94 packets, SPI 0x00001001",
        "critical iv_reuse: 32 findings, 64 packets, SPI 0x00001001",
        "high iv_derivation: 1 finding, 94 packets, SPI 0x00001001",
    ]
    heads, *rows = dom.tables["findings-iv_reuse"]
    assert heads == ["SPI", "src", "dst", "count", "frames", "detail"]  # its SA's addresses
    assert len(rows) == 32 and rows[0][:5] == ["0x00001001", "fd00:a::1", "fd00:a::2", "2", "27 28"]
    order = [html.index(f'id="{key}"') for key in ("causes", "plots", "kind-iv_reuse")]
    assert order == sorted(order)
    assert "ceda14dff6890ee2b0ae69618a1101e7" in html  # in the folded table
    assert "ceda14dff6890ee2b0ae69618a1101e7" not in _open_text(html)  # but not shown


def test_plot_captions_say_what_a_plot_shows_and_how_to_read_it(gso: Path) -> None:
    html = (gso / "report.html").read_text()
    captions = {}
    for part in html.split('<figure id="plot-')[1:]:
        name = part.split('"', 1)[0]
        captions[name] = _dom(part.split("<figcaption>")[1].split("</figcaption>")[0]).flat()
    assert sorted(captions) == ["iv_derivation", "offsets", "throughput", "verdicts"]
    assert captions["offsets"].startswith("ESP header offset: expected vs found. Packets per ESP")
    for name, text in captions.items():
        assert text.startswith(caption(name).title + ". ")
        assert " How to read it: " in text and name not in text.split("How to read it")[0]
    assert "Sequence number gaps, duplicates and reorders per SA: no sequence gaps" in (
        _dom(html).flat()
    )


def test_report_html_is_self_contained(gso: Path) -> None:
    html = (gso / "report.html").read_text()
    dom = _dom(html)
    imgs = dom.all("img")
    drawn = sorted(p.name for p in (gso / "plots").glob("*.png"))
    assert len(imgs) == len(drawn) == 4
    figures = [a.get("id") or "" for t, a in dom.tags if t == "figure"]
    for figure, attrs in zip(figures, imgs, strict=True):
        src = attrs["src"] or ""
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1])
        assert png == (gso / "plots" / f"{figure.removeprefix('plot-')}.png").read_bytes()
    assert not dom.all("link") and not dom.all("iframe") and not dom.all("object")
    assert all("src" not in attrs for attrs in dom.all("script"))  # inline scripts only
    assert not [a for a in dom.all("a") if ":" in (a.get("href") or "")]
    (csp,) = [m for m in dom.all("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert (csp["content"] or "").startswith("default-src 'none'; img-src data:;")


def test_without_plots_the_report_says_so(tmp_path: Path) -> None:
    out = analyzed_dir(tmp_path, "kernel-gso-v4", plots=False)
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


def _chromium(page: Path, fragment: str = "") -> str:
    """The DOM after the page (at ``fragment``) loaded and its scripts ran."""
    assert CHROMIUM is not None
    url = page.as_uri() + fragment
    res = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
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
@pytest.mark.parametrize(("header", "clicks", "frames"), [
    ("frames", 2, ["61 62", "49 50", "37 38", "25 26", "13 14"]),
    ("frames", 3, ["13 14", "25 26", "37 38", "49 50", "61 62"]),
    ("detail", 2, ["61 62", "49 50", "37 38", "25 26", "13 14"]),  # IV ...68 first
])  # fmt: skip
def test_chromium_sorts_a_kinds_findings_by_a_clicked_header(
    tmp_path: Path, header: str, clicks: int, frames: list[str]
) -> None:
    """iv-seq-minus-1: five iv_reuse findings (2 packets each), one iv_derivation (5)."""
    out = analyzed_dir(tmp_path, "iv-seq-minus-1", plots=False)
    html = (out / "report.html").read_text()
    heads, *before = _dom(html).tables["findings-iv_reuse"]
    at = heads.index("frames")
    assert [row[at] for row in before] == ["13 14", "25 26", "37 38", "49 50", "61 62"]
    index = heads.index(header) + 1
    click = f'document.querySelector("#findings-iv_reuse th:nth-child({index})").click();'
    page = tmp_path / "clicked.html"
    page.write_text(html.replace("</body>", f"<script>{click * clicks}</script>\n</body>"))
    after = _dom(_chromium(page)).tables["findings-iv_reuse"]
    assert [row[at] for row in after[1:]] == frames
    assert sorted(map(tuple, after[1:])) == sorted(map(tuple, before))  # the same rows


@needs_chromium
def test_chromium_opens_the_kind_a_link_points_at(tmp_path: Path) -> None:
    out = analyzed_dir(tmp_path, "iv-seq-minus-1", plots=False)
    dom = _dom(_chromium(out / "report.html", "#kind-iv_reuse"))
    kinds = {d["id"]: "open" in d for d in dom.all("details") if d.get("class") == "kind"}
    assert kinds == {"kind-iv_reuse": True, "kind-iv_derivation": False}
    links = [a["href"] for a in dom.all("a") if (a.get("href") or "").startswith("#kind-")]
    assert links == ["#kind-iv_reuse", "#kind-iv_derivation"]  # from the verdict


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
