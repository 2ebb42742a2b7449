"""benchmarks/bench_startup.py still runs (one run of each case; its figures are not checked)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_startup.py"


@pytest.mark.slow
def test_bench_startup_prints_a_figure_per_case_and_the_slowest_imports() -> None:
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--profile", "3", "--bytecode"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == (
        "bytecode: each tree's own cache (PYTHONPYCACHEPREFIX), filled by the first round"
    )
    cases = [
        "python -c pass",
        "libraries, no plots",
        "libraries and plots",
        "import espforensics.cli",
        "espforensics --help",
        "espforensics --version",
        "analyze (plots)",
        "analyze --no-plots",
    ]
    for first, what in ((1, "wall"), (11, "CPU")):
        assert lines[first] == f"median {what} of 1 runs, seconds"
        assert lines[first + 1].split() == ["case", "after"]  # no --before: no ratio
        rows = lines[first + 2 : first + 10]
        assert [row[:26].strip() for row in rows] == cases
        assert all(float(row[26:]) > 0 for row in rows)
    profiles = [i for i, line in enumerate(lines) if line.startswith("slowest imports, after")]
    assert len(profiles) == 2  # the two analyze cases, 3 imports each
    for i in profiles:
        assert all(re.fullmatch(r" +[0-9.]+ ms +\S.*", row) for row in lines[i + 1 : i + 4])
