"""The report's content is built once per run, and the renderers only lay it out.

``analyze`` writes report.txt, report.md, summary.json and report.html and
prints its ``--format`` from one ``Report`` (report/content.py): the
finding groups are made once in it, whatever the format printed. The
renderers of render/ import nothing of report/ but its value types (frozen
dataclasses): no builder function, no sentence, no constant.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from espforensics.report import narrative
from espforensics.report.content import Report
from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import run_cli

RENDER = Path(__file__).resolve().parents[2] / "espforensics" / "render"


def _counting(monkeypatch: pytest.MonkeyPatch, cls: type[Any]) -> list[int]:
    """Count the values of ``cls`` made from now on."""
    made = [0]
    init: Callable[..., None] = cls.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        made[0] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", counted)
    return made


@pytest.mark.parametrize("fmt", ["summary", "text", "markdown", "json", "ktap"])
def test_analyze_builds_the_report_once_for_its_files_and_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    # kernel-gso-v6: two finding kinds (esp_misplaced, seq_gap) in every format
    paths = write_scenario(build_scenario("kernel-gso-v6", seed=1), tmp_path / "in")
    reports = _counting(monkeypatch, Report)
    groups = _counting(monkeypatch, narrative.FindingGroup)
    out = tmp_path / "out"
    run = run_cli(
        "analyze", paths["capture"], "--sa", paths["keys"], "--out", out, "--no-plots",
        "--format", fmt,
    )  # fmt: skip
    assert run.code == 1, run.stderr  # its high findings
    assert reports[0] == 1
    kinds = {f.kind for f in run_kinds(out)}
    assert len(kinds) == 2
    assert groups[0] == len(kinds)  # each kind grouped once, not once per sentence
    assert run.stdout  # printed from that one report


def run_kinds(out: Path) -> list[Any]:
    from espforensics.analysis import load_summary

    return list(load_summary(out).finding_list)


def _report_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every import of report/ in ``path``, at any depth; a whole
    module imported (``import espforensics.report.x``, ``from espforensics.report
    import x``) is its name with ``*``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, "*") for a in node.names if a.name.startswith("espforensics.report")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "espforensics.report"
        ):
            found += [(node.module or "", a.name) for a in node.names]
    return found


def test_the_renderers_import_only_the_report_value_types() -> None:
    """A renderer that called a builder (report_content, a sentence of narrative, a filter
    of filters.py, a caption) would build content again, or words the report lacks."""
    imported = [(p.name, m, n) for p in sorted(RENDER.glob("*.py")) for m, n in _report_imports(p)]
    assert imported  # the renderers do read the report's types
    wrong = []
    for file, module, name in imported:
        value = getattr(importlib.import_module(module), name, None) if name != "*" else None
        if not (isinstance(value, type) and dataclasses.is_dataclass(value)):
            wrong.append(f"{file}: {module}.{name}")
    assert wrong == []
