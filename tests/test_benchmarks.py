"""The benchmark scripts still run (tiny sizes; the figures are not checked here).

Speed is measured by benchmarks/, never asserted by tests; these only keep
the scripts from rotting as the code changes under them (the IV tracker
benchmark once broke silently when PacketContext changed).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(script: str, *args: str) -> str:
    res = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_bench_speed_prints_every_figure(tmp_path: Path) -> None:
    out = _run(
        "bench_speed.py",
        "--sizes",
        "3000,6000",
        "--workdir",
        str(tmp_path),
        "--no-tshark",
        "--repeat",
        "1",
    )
    for needle in ("analyze ", "+ plots", "--jobs 2", "floor", "analyze/floor", "RSS at 6,000"):
        assert needle in out, out


def test_bench_iv_tracker_counts_one_run_for_counter_ivs() -> None:
    out = _run("bench_iv_tracker.py", "--counter", "20000", "--random", "5000")
    assert "counter  IVs:      20,000 packets" in out and "runs 1 |" in out, out


def test_bench_batch_runs(tmp_path: Path) -> None:
    out = _run("bench_batch.py", "--captures", "3", "--frames", "200", "--workdir", str(tmp_path))
    assert "--jobs 1:" in out and "--jobs 2:" in out, out


def test_bench_sas_prints_both_runs_and_the_ratio(tmp_path: Path) -> None:
    out = _run("bench_sas.py", "--cases", "400:300", "--workdir", str(tmp_path))
    assert "2 SPIs:" in out and "300 SPIs:" in out and "peak RSS" in out, out
    assert "time ratio many/one:" in out, out


def test_bench_iv_constant_prints_every_window() -> None:
    out = _run("bench_iv_constant.py", "--trials", "20")
    for n in (16, 32, 64):
        assert f"window {n:2d}: true constant in" in out, out
