"""``batch --jobs 2``: the worker processes die with the batch process, even after a SIGKILL.

The batch is stopped at a known point by tests/support/stop_at.py (its first
result being recorded in the manifest: the pool is up, its workers
alive), its workers are read from /proc, and only the batch process is
killed. The test then waits on each worker's pidfd until none is left,
up to a generous bound (a loaded 2-core machine), never a fixed sleep;
any worker still there at the bound fails the test and is killed.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from pathlib import Path

import pytest

from espforensics.engine.workers import EXIT_ORPHANED, watch_parent
from espforensics.synth import build_scenario, write_scenario
from tests.support.procs import children as _children
from tests.support.procs import wait_gone
from tests.support.stop_at import run_until_stopped

BOUND = 60.0  # seconds; PDEATHSIG acts at once, the watchdog within 0.5 s


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_batch(tmp_path: Path) -> None:
    for seed in range(1, 5):
        write_scenario(build_scenario("kernel-gso-v4", seed=seed), tmp_path / "in", stem=f"c{seed}")
    out = tmp_path / "batch"
    args = ["batch", str(tmp_path / "in"), "--out", str(out), "--jobs", "2", "--no-plots"]
    with run_until_stopped("espforensics.batch.manifest", "Manifest.record", "True", args) as run:
        proc, workers = run.proc, _children(run.proc.pid)
        assert len(workers) == 2, workers
        os.kill(proc.pid, signal.SIGKILL)  # the batch process only, not its group
        assert wait_gone(workers, BOUND) == []
        stdout, _ = proc.communicate(timeout=BOUND)  # no worker holds the pipe open
        assert stdout == b""
        assert proc.returncode == -signal.SIGKILL


def test_the_watchdog_ends_a_worker_whose_parent_is_gone() -> None:
    """The portable fallback alone: a worker told of a parent that is not its own exits 75."""
    process = multiprocessing.get_context("spawn").Process(target=watch_parent, args=(-1,))
    process.start()
    try:
        process.join(BOUND)
        assert process.exitcode == EXIT_ORPHANED == 75
    finally:
        if process.exitcode is None:
            process.kill()
            process.join()
        process.close()  # its sentinel's descriptor, not left to a later test
