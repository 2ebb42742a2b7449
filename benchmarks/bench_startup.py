"""Start-up of `espforensics analyze` on the bundled 36-frame example, two trees side by side.

Usage: python benchmarks/bench_startup.py [--before TREE] [--after TREE] [--runs 10]
                                          [--profile N]

A TREE is a checkout with its own ``.venv`` (``pip install -e .`` in it), so
its ``.venv/bin/python -m espforensics`` runs that tree's code. Each case is
run RUNS times, the two trees taking turns (so a load that comes and goes on
a shared machine falls on both), and the median wall time of each is printed
with the ratio after/before. The cases: ``import espforensics.cli``, the
default ``analyze`` (plots drawn) and ``analyze --no-plots``, on
fixtures/example.pcap with fixtures/example.keys.yaml. ``--profile N`` also
prints the N slowest imports (``-X importtime``, cumulative) of each
analyze run of the after tree. Without ``--before`` only the after tree runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
EXAMPLE = ("fixtures/example.pcap", "fixtures/example.keys.yaml")


def cases(tree: Path, out: Path) -> dict[str, list[str]]:
    """The command lines of each case, run with ``tree``'s own interpreter."""
    python = str(tree / ".venv" / "bin" / "python")
    capture, keys = (str(HERE / name) for name in EXAMPLE)
    analyze = [python, "-m", "espforensics", "analyze", capture, "--sa", keys]
    analyze += ["--out", str(out), "--force", "--quiet"]
    return {
        "import espforensics.cli": [python, "-c", "import espforensics.cli"],
        "analyze (plots)": analyze,
        "analyze --no-plots": [*analyze, "--no-plots"],
    }


def wall(command: list[str]) -> float:
    """Seconds from start to exit of ``command`` (which must succeed)."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def slowest_imports(command: list[str], count: int) -> list[str]:
    """The ``count`` imports of ``command`` with the largest cumulative time (-X importtime)."""
    res = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]],
        check=True,
        capture_output=True,
        text=True,
    )
    rows = []
    for line in res.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    rows.sort(reverse=True)
    return [f"  {us / 1000:8.1f} ms {name}" for us, name in rows[:count]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="tree to compare with (has a .venv)")
    parser.add_argument("--after", type=Path, default=HERE, help="tree measured [default: this]")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    args = parser.parse_args()
    trees = {"after": args.after} if args.before is None else {"before": args.before}
    trees["after"] = args.after
    with tempfile.TemporaryDirectory() as work:
        lines = {name: cases(tree, Path(work) / name) for name, tree in trees.items()}
        times: dict[tuple[str, str], list[float]] = {}
        for case in lines["after"]:
            for _ in range(args.runs):
                for name in trees:
                    times.setdefault((name, case), []).append(wall(lines[name][case]))
        print(f"median wall of {args.runs} runs, seconds")
        print(f"{'case':<26}" + "".join(f"{name:>10}" for name in trees) + "  ratio")
        for case in lines["after"]:
            medians = [statistics.median(times[(name, case)]) for name in trees]
            ratio = f"  {medians[-1] / medians[0]:.2f}" if len(medians) == 2 else ""
            print(f"{case:<26}" + "".join(f"{m:10.3f}" for m in medians) + ratio)
        for case, command in lines["after"].items():
            if args.profile and case.startswith("analyze"):
                print(f"\nslowest imports, after, {case}:")
                print("\n".join(slowest_imports(command, args.profile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
