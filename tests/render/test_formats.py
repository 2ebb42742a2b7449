"""Every renderer of the registry on every fixture scenario: each says what the summary says.

One ``Report`` per scenario (report/content.py) is laid out by every
renderer; each output must carry the capture's frame and ESP counts,
every verdict count, and every finding kind with its count, in its own
form: ASCII lines of 72 columns, Markdown, JSON equal to the summary,
HTML whose finding tables (one per kind) have one row per finding, KTAP with one result
per check.
"""

from __future__ import annotations

import json
import re
from functools import cache
from html.parser import HTMLParser
from pathlib import Path

import pytest

from espforensics.analysis import summarize
from espforensics.cli import Format
from espforensics.model.enums import SEVERITY_RANK, FindingKind, Severity
from espforensics.render.registry import FILE_RENDERERS, RENDERERS, STDOUT_FORMATS
from espforensics.report.check_results import CHECKS
from espforensics.report.content import Report, report_content
from espforensics.results.summary import Summary
from espforensics.synth import SCENARIOS, build_scenario, write_scenario


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scenarios")


@cache
def _summary(folder: Path, name: str) -> Summary:
    paths = write_scenario(build_scenario(name, seed=1), folder / name, stem=name)
    return summarize(paths["capture"], [paths["keys"]])


class _Text(HTMLParser):
    """The text of a document and the rows of its finding table."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.rows = 0
        self._table = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id") or ""
        if tag == "tr" and self._table.startswith("findings-"):  # one table per kind
            self.rows += 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_cli_formats_are_the_registry_stdout_renderers() -> None:
    assert [f.value for f in Format] == list(STDOUT_FORMATS)
    assert [r.file for r in FILE_RENDERERS] == [
        "report.txt",
        "report.md",
        "summary.json",
        "report.html",
    ]
    assert set(RENDERERS) == {"summary", "text", "markdown", "json", "html", "ktap"}


def test_every_check_finding_kind_belongs_to_one_ktap_test() -> None:
    kinds = [k for _, ks in CHECKS for k in ks]
    assert sorted(kinds) == sorted(FindingKind)


def _kinds(summary: Summary) -> dict[str, int]:
    return {k: n for k, n in summary.findings.items() if n}


def _check_text(report: Report, out: str) -> None:
    s = report.summary
    assert out.isascii()
    # Over 72 columns only a word that is longer than a line: a path is never broken.
    assert [line for line in out.splitlines() if len(line) > 72 and len(line.split()) > 1] == []
    flat = " ".join(out.split())
    assert f"frames: {s.capture.frames}; ESP packets: {s.esp_packets} in {len(s.sas)} SAs" in flat
    for kind in _kinds(s):
        assert f" {kind}: " in flat
    for sa in report.sas:
        assert f"SPI {sa.spi} {sa.src} -> {sa.dst}" in flat


def _check_summary(report: Report, out: str) -> None:
    s = report.summary
    flat = " ".join(out.split())
    assert f"{s.capture.frames} frames, {s.esp_packets} ESP packets, {len(s.sas)} SAs" in flat
    for verdict, n in s.verdicts.items():
        if n:
            assert f"{verdict} {n}" in flat


def _check_markdown(report: Report, out: str) -> None:
    s = report.summary
    assert out.startswith(f"# espforensics {s.tool_version} report\n")
    assert f"| {s.capture.frames} | {s.esp_packets} |" in out
    for g in report.groups:
        assert f"| {g.severity} | {g.kind} | {g.rows} | {g.count} {g.unit} |" in out


def _check_json(report: Report, out: str) -> None:
    doc = json.loads(out)
    assert Summary.from_json(doc) == report.summary
    assert [c["id"] for c in doc["likely_causes"]] == [c.id for c in report.causes]


def _check_html(report: Report, out: str) -> None:
    s = report.summary
    parser = _Text()
    parser.feed(out)
    text = " ".join(" ".join(parser.text).split())
    n = len(s.finding_list)
    assert parser.rows == n + len(report.groups)  # a header row per kind, a row per finding
    for sentence in report.verdict:
        assert " ".join(sentence.split()) in text
    for kind in _kinds(s):
        assert kind in text
    assert "http://" not in out and "https://" not in out


def _check_ktap(report: Report, out: str) -> None:
    s = report.summary
    lines = out.splitlines()
    assert lines[:2] == ["KTAP version 1", f"1..{len(CHECKS)}"]
    results = [m for line in lines if (m := re.fullmatch(r"(not ok|ok) (\d+) (\w+)( # .+)?", line))]
    assert [int(m[2]) for m in results] == list(range(1, len(CHECKS) + 1))
    high = SEVERITY_RANK[Severity.HIGH]  # report_content's default --fail-on
    failing = {f.kind for f in s.finding_list if SEVERITY_RANK[f.severity] >= high}
    for (name, kinds), m in zip(CHECKS, results, strict=True):
        assert m[3] == name
        assert m[1] == ("not ok" if failing & set(kinds) else "ok"), m[0]
    assert all(line.startswith(("KTAP", "1..", "# ", "ok ", "not ok ")) for line in lines)


CHECKERS = {
    "summary": _check_summary,
    "text": _check_text,
    "markdown": _check_markdown,
    "json": _check_json,
    "html": _check_html,
    "ktap": _check_ktap,
}


def test_every_renderer_has_its_checker() -> None:
    assert set(CHECKERS) == set(RENDERERS)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_renderer_on_every_scenario(folder: Path, scenario: str) -> None:
    report = report_content(_summary(folder, scenario))
    for name, renderer in RENDERERS.items():
        out = renderer.render(report)
        assert out.endswith("\n"), name
        CHECKERS[name](report, out)
