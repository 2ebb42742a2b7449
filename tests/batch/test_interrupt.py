"""Ctrl-C of ``batch``, with one worker or two: it stops, exits 130, and the rerun resumes.

With ``--jobs 2`` a Ctrl-C from a terminal (SIGINT to the process group)
left captures its workers had finished out of manifest.json, so the rerun
redid them, and a SIGINT to the batch process alone waited for every
running capture to end. Here tests/support/interrupt_at.py stops the batch right
after the worker analyzing ``c2`` finished it, before the batch process
hears of it, by each way a batch is stopped; the test never guesses a
time (BOUND is a limit for a loaded machine, not a wait). What must hold:
exit 130 with the one line (or the SIGKILL), c2 in the manifest, every
entry of the manifest a finished capture's folder, the worker that
finished c2 gone, and the rerun taking exactly the manifest's captures
and analyzing only the others.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from espforensics.batch.manifest import Manifest
from espforensics.batch.run import run_batch
from espforensics.errors import INTERRUPTED
from espforensics.synth import build_scenario, write_scenario
from tests.support.procs import wait_gone

BOUND = 120.0  # seconds: a limit for a loaded 2-core machine, never a wait
CAPTURES = [f"c{seed}.pcap" for seed in range(1, 6)]
DRIVER = Path(__file__).parents[1] / "support" / "interrupt_at.py"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("archive")
    for seed in range(1, 6):
        write_scenario(build_scenario("kernel-gso-v4", seed=seed), folder, stem=f"c{seed}")
    return folder


def interrupted(archive: Path, out: Path, how: str, jobs: int) -> tuple[int, str, int]:
    """Run the batch until c2 is done and ``how`` stops it: (exit code, stderr, the pid
    of the process that finished c2)."""
    stopped = out.with_name("stopped.pid")
    args = ["batch", str(archive), "--out", str(out), "--jobs", str(jobs), "--no-plots"]
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), "c2.pcap", how, str(stopped), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=BOUND)
    finally:
        if proc.poll() is None:  # it did not stop: end it and whatever it started
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, err.decode(), int(stopped.read_text())


@pytest.mark.parametrize(
    ("how", "jobs"), [("group", 2), ("batch", 2), ("kill", 2), ("group", 1), ("batch", 1)]
)
def test_an_interrupted_batch_keeps_what_it_finished(
    archive: Path, tmp_path: Path, how: str, jobs: int
) -> None:
    out = tmp_path / "out"
    code, err, finisher = interrupted(archive, out, how, jobs)
    if how == "kill":
        assert code == -signal.SIGKILL
    else:
        assert (code, err) == (130, INTERRUPTED + "\n")
    assert wait_gone([finisher], BOUND) == []  # ended with the batch, whoever it was
    entries = json.loads((out / "manifest.json").read_text())["entries"].values()
    kept = {e["name"] for e in entries}
    assert "c2.pcap" in kept
    assert {e["status"] for e in entries} == {"done"}
    for name in kept:
        assert (out / "captures" / name / "summary.json").is_file(), name
    if jobs == 1:  # one capture at a time, in order: exactly c1 and c2
        assert kept == {"c1.pcap", "c2.pcap"}
    again = run_batch([str(archive)], [], out, jobs=1, plots=False)
    assert (again.skipped, again.analyzed) == (len(kept), len(CAPTURES) - len(kept))
    assert [r.name for r in again.rows] == CAPTURES
    assert {r.status for r in again.rows} == {"done"}


def test_writers_of_one_manifest_keep_each_others_entries(tmp_path: Path) -> None:
    """Two processes record into one manifest, each from what it read before the other
    wrote (the batch process and a worker): each write adds to the file, never replaces
    the other's entry with its own stale view."""
    first, second = Manifest(tmp_path), Manifest(tmp_path)  # both read an empty manifest
    second.record("k2", {"status": "done", "name": "c2.pcap", "result": {}})
    first.record("k1", {"status": "done", "name": "c1.pcap", "result": {}})
    entries = json.loads((tmp_path / "manifest.json").read_text())["entries"]
    assert sorted(entries) == ["k1", "k2"]
    assert Manifest(tmp_path).done("k2") == {"status": "done", "name": "c2.pcap", "result": {}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "manifest.json.lock"]
