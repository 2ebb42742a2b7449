"""``report DIR`` reads an analyze folder or a batch folder, and says what any other is.

A batch output folder prints its report.txt (``--format text`` or
``summary``) and exits as the batch did; a format of one capture's report
is one line naming the folder as a batch's. A folder that holds no report
gets one line saying what it is: missing, a file, an unfinished analysis, or
no output folder at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import run_cli


@pytest.fixture(scope="module")
def batch_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    root = tmp_path_factory.mktemp("batch")
    for name in ("kernel-gso-v4", "sequence"):
        write_scenario(build_scenario(name, seed=1), root / "in", stem=name)
    out = root / "out"
    res = run_cli("batch", root / "in", "--out", out, "--no-plots", "-j", "1")
    return out, res.code, res.stdout


def test_report_prints_a_batch_report_and_exits_as_the_batch(
    batch_out: tuple[Path, int, str],
) -> None:
    out, code, printed = batch_out
    assert code == 1  # kernel-gso-v4's misplaced ESP headers are critical
    for fmt in ("text", "summary"):
        res = run_cli("report", out, "--format", fmt)
        assert (res.code, res.stderr) == (1, "")
        assert res.stdout == printed == (out / "report.txt").read_text()
    assert run_cli("report", out, "--fail-on", "never").code == 0


@pytest.mark.parametrize("fmt", ["json", "markdown", "ktap", "packets"])
def test_a_capture_format_on_a_batch_folder_is_one_line(
    batch_out: tuple[Path, int, str], fmt: str
) -> None:
    out = batch_out[0]
    res = run_cli("report", out, "--format", fmt)
    assert (res.code, res.stdout) == (2, "")
    assert res.stderr.splitlines() == [
        f"espforensics: error: {out}: a batch output folder: --format {fmt} is one "
        f"capture's (report {out}/captures/NAME); a batch's report is text"
    ]


def test_a_batch_with_a_capture_not_analyzed_exits_2(tmp_path: Path) -> None:
    write_scenario(build_scenario("example", seed=1), tmp_path / "in", stem="example")
    (tmp_path / "in" / "notes.pcap").write_text("not a capture\n")
    out = tmp_path / "out"
    assert run_cli("batch", tmp_path / "in", "--out", out, "--no-plots", "-q").code == 2
    res = run_cli("report", out)
    assert res.code == 2
    assert "Not analyzed (or only in part):" in res.stdout


def test_a_folder_without_a_report_says_what_it_is(tmp_path: Path) -> None:
    paths = write_scenario(build_scenario("example", seed=1), tmp_path / "in")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "packets.csv.partial").write_text("frame\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "manifest.json").write_text('{"entries": {}}')
    cases = {
        tmp_path / "nope": "no such output folder",
        paths["capture"]: "a file, not an output folder (espforensics analyze reads a capture)",
        unfinished: "an analysis that did not finish: no summary.json, only .partial files "
        "(run analyze again with --force)",
        empty: "not an output folder of analyze or batch: it holds no summary.json",
        batch: "a batch output folder without its report (No such file or directory): "
        "run the batch again",
    }
    for folder, why in cases.items():
        res = run_cli("report", folder)
        assert (res.code, res.stdout) == (2, "")
        assert res.stderr.splitlines() == [f"espforensics: error: {folder}: {why}"]
