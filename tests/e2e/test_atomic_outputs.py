"""Outputs appear under their final names only when a run is finished (docs/outputs.md).

An interruption is injected at a chosen record (a monkeypatched stage
raising, or a child process stopped there by tests/support/stop_at.py and killed
with SIGKILL), never at a guessed time; the tests then list exactly which
names exist.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.batch.run import run_batch
from espforensics.errors import CaptureTruncated
from espforensics.results.builder import SummaryBuilder
from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import OUTPUT_NAMES
from tests.support.stop_at import run_until_stopped

FINAL = OUTPUT_NAMES
STREAMING = ["packets.csv.partial", "packets.parquet.partial"]


@pytest.fixture
def capture(tmp_path: Path) -> tuple[Path, Path]:
    """ipv4-transport-tcp: 98 frames and their keys."""
    files = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), tmp_path, stem="cap")
    return files["capture"], files["keys"]


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _stop_at_record(monkeypatch: pytest.MonkeyPatch, frame: int, exc: BaseException) -> None:
    observe = SummaryBuilder.observe

    def stopping(self: SummaryBuilder, rec: object) -> None:
        if getattr(rec, "frame", None) == frame:
            raise exc
        observe(self, rec)  # type: ignore[arg-type]

    monkeypatch.setattr(SummaryBuilder, "observe", stopping)


def test_an_interrupted_run_leaves_only_partial_tables(
    capture: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap, keys = capture
    _stop_at_record(monkeypatch, 40, KeyboardInterrupt())
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        analyze_to_dir(cap, [keys], out, plots=False)
    assert _names(out) == STREAMING
    # The 39 records before the interruption, flushed when the writer closed.
    assert len((out / "packets.csv.partial").read_text().splitlines()) == 1 + 39


def test_a_killed_run_leaves_no_final_name(capture: tuple[Path, Path], tmp_path: Path) -> None:
    """SIGKILL while frame 40 is being counted: no code of ours runs after it."""
    cap, keys = capture
    out = tmp_path / "out"
    args = ["analyze", str(cap), "--sa", str(keys), "--out", str(out), "--no-plots", "-q"]
    where = "args[1].frame == 40"
    with run_until_stopped(
        "espforensics.results.builder", "SummaryBuilder.observe", where, args
    ) as run:
        os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait()
    assert run.proc.returncode == -signal.SIGKILL
    assert _names(out) == STREAMING


def test_summary_json_is_renamed_last(capture: tuple[Path, Path], tmp_path: Path) -> None:
    """Killed just before summary.json gets its name: every other file has its own."""
    cap, keys = capture
    out = tmp_path / "out"
    args = ["analyze", str(cap), "--sa", str(keys), "--out", str(out), "--no-plots", "-q"]
    with run_until_stopped("os", "replace", "str(args[1]).endswith('summary.json')", args) as run:
        os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait()
    assert _names(out) == [n for n in FINAL if n != "summary.json"] + ["summary.json.partial"]
    assert len((out / "packets.csv").read_text().splitlines()) == 1 + 98


def test_a_damaged_capture_gets_every_output_under_its_name(
    capture: tuple[Path, Path], tmp_path: Path
) -> None:
    cap, keys = capture
    cap.write_bytes(cap.read_bytes()[:-30])  # cut inside the last record
    out = tmp_path / "out"
    with pytest.raises(CaptureTruncated):
        analyze_to_dir(cap, [keys], out)
    assert _names(out) == sorted([*FINAL, "plots"])
    assert "read 97 complete frames" in json.loads((out / "summary.json").read_text())["error"]


def test_force_removes_what_an_unfinished_run_left(
    capture: tuple[Path, Path], tmp_path: Path
) -> None:
    cap, keys = capture
    out = tmp_path / "out"
    (out / "plots.partial").mkdir(parents=True)
    (out / "plots.partial" / "verdicts.png").write_bytes(b"half")
    for name in [*STREAMING, "summary.json.partial", "espforensics-traceback.txt", "notes.txt"]:
        (out / name).write_text("stale")
    analyze_to_dir(cap, [keys], out, force=True, plots=False)
    assert _names(out) == sorted([*FINAL, "notes.txt"])
    assert (out / "notes.txt").read_text() == "stale"  # not ours: kept


def _batch_args(cap: Path, keys: Path, out: Path) -> list[str]:
    return ["batch", str(cap), "--sa", str(keys), "--out", str(out), "--jobs", "1", "-q"]


def test_a_killed_batch_leaves_a_partial_folder_that_a_rerun_replaces(
    capture: tuple[Path, Path], tmp_path: Path
) -> None:
    cap, keys = capture
    out = tmp_path / "batch"
    with run_until_stopped(
        "espforensics.results.builder",
        "SummaryBuilder.observe",
        "args[1].frame == 40",
        [*_batch_args(cap, keys, out), "--no-plots"],
    ) as run:
        os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait()
    assert _names(out) == ["captures"]
    assert _names(out / "captures") == [".partial-cap.pcap"]
    assert _names(out / "captures" / ".partial-cap.pcap") == STREAMING
    result = run_batch([str(cap)], [str(keys)], out, plots=False)
    assert [r.status for r in result.rows] == ["done"]
    assert _names(out / "captures") == ["cap.pcap"]
    assert _names(out / "captures" / "cap.pcap") == FINAL


def test_a_batch_killed_at_its_tables_keeps_them_aside(
    capture: tuple[Path, Path], tmp_path: Path
) -> None:
    """Killed before captures.csv gets its name: the capture is done, the table is not."""
    cap, keys = capture
    out = tmp_path / "batch"
    with run_until_stopped(
        "os",
        "replace",
        "str(args[1]).endswith('/captures.csv')",
        [*_batch_args(cap, keys, out), "--no-plots"],
    ) as run:
        os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait()
    assert _names(out) == [
        ".partial-captures.csv",
        ".partial-captures.parquet",
        ".partial-report.html",
        ".partial-report.txt",
        "captures",
        "manifest.json",
        "manifest.json.lock",  # empty: held while a process writes the manifest
        "packets",
    ]
    dataset = out / "packets" / "capture=cap.pcap"
    assert _names(dataset) == ["packets.parquet"]
    assert ds.dataset(out / "packets", partitioning="hive").count_rows() == 98
    again = run_batch([str(cap)], [str(keys)], out, plots=False)
    assert (again.skipped, again.analyzed) == (1, 0)  # the manifest had recorded it
    assert not [n for n in _names(out) if n.startswith(".partial-")]
    assert (out / "captures.csv").read_text().count("\n") == 2
