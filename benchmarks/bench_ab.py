"""A/B of two trees in one sitting: analyze with each venv, interleaved, and the floor.

Usage: python benchmarks/bench_ab.py CAPTURE KEYS ROUNDS PYTHON_A PYTHON_B

Each round runs, each in a fresh process, bench_speed.py's ``_ANALYZE``
(one thread, every check, tables and reports, no plots) with PYTHON_A,
then with PYTHON_B, then ``_FLOOR``; prints every run's frames/s and the
ratio B/A of each round. On a shared machine only the ratio of two runs
next to each other means much (docs/performance.md).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import _ANALYZE, _FLOOR, NEUTRAL_CWD


def _fps(python: str, *args: str) -> float:
    out = subprocess.run(
        [python, "-c", *args], capture_output=True, text=True, check=True, cwd=NEUTRAL_CWD
    )
    secs, frames = out.stdout.split()[:2]
    return int(frames) / float(secs)


def main() -> int:
    if len(sys.argv) != 6:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    cap, keys, rounds, py_a, py_b = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(int(rounds)):
            a = _fps(py_a, _ANALYZE, cap, keys, f"{tmp}/a", "no-plots", "1")
            b = _fps(py_b, _ANALYZE, cap, keys, f"{tmp}/b", "no-plots", "1")
            floor = _fps(sys.executable, _FLOOR, cap, keys)
            print(
                f"round {r + 1}: A {a:,.0f}  B {b:,.0f}  floor {floor:,.0f} frames/s  "
                f"B/A {b / a:.2f}  A/floor {a / floor:.2f}  B/floor {b / floor:.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
