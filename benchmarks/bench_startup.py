"""Start-up of `espforensics analyze` on the bundled 36-frame example, two trees side by side.

Usage: python benchmarks/bench_startup.py [--before TREE] [--after TREE] [--runs 10]
                                          [--profile N] [--bytecode]

A TREE is a checkout with its own ``.venv`` (``pip install -e .`` in it), so
its ``.venv/bin/python -m espforensics`` runs that tree's code; the after
tree is run by the interpreter running this script unless ``--after`` is
given. Each case is run RUNS times, the two trees taking turns (so a load
that comes and goes on a shared machine falls on both), and the median wall
time and the median CPU time (user + system) of each are printed with the
ratio after/before. The cases: the interpreter alone, the third-party
libraries a run needs (the floor under any start-up; imported with
``OPENBLAS_NUM_THREADS`` set as the command sets it), ``import
espforensics.cli``, ``espforensics --help`` and ``--version``, the default
``analyze`` (plots drawn) and ``analyze --no-plots``, on
fixtures/example.pcap with fixtures/example.keys.yaml. One untimed round
comes first.
``--profile N`` also prints the N slowest imports (``-X importtime``,
cumulative) of each analyze run of the after tree. Without ``--before``
only the after tree runs.

Bytecode: with ``PYTHONDONTWRITEBYTECODE`` set (as some development shells
set it), an editable install never gets a ``.pyc`` of its own
modules, so every run compiles espforensics' ~110 modules from source (about
0.2 s of CPU); an installed wheel, or an editable install run without it,
loads them compiled. ``--bytecode`` gives each tree's runs a bytecode cache
of their own (``PYTHONPYCACHEPREFIX`` under a temporary folder, filled by the
untimed round; nothing is written into the trees) and is how a user's run
starts; without it the runs inherit this environment. The script prints which.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# ``-c`` and ``-m`` put the working directory first on sys.path: run from a checkout, a child
# would import that checkout's package whatever the interpreter (before/after alike).
NEUTRAL_CWD = tempfile.gettempdir()

HERE = Path(__file__).resolve().parents[1]
EXAMPLE = ("fixtures/example.pcap", "fixtures/example.keys.yaml")
# The third-party modules a run of analyze --no-plots cannot do without (the floor of its start-up:
# tables/packets.py writes Parquet and CSV with pyarrow, crypto/ decrypts, the keys are YAML, the
# CLI is typer's; not pydantic: cli/coercion.py coerces the options' plain values without it; not
# pyarrow.compute: packets.csv's seconds are divided in numpy; not pandas: its packets.parquet
# metadata is built from the schema and the arrays from buffers; nor dpkt: decode/clear.py sums
# RFC 1071 itself), and what drawing the plots adds (pandas with matplotlib: the plots' data are
# DataFrames).
LIBRARIES = (
    "numpy",
    "pyarrow.parquet",
    "pyarrow.csv",
    "cryptography.hazmat.primitives.ciphers.aead",
    "yaml",
    "typer",
)
PLOTTING = "pandas, matplotlib.figure, matplotlib.backends.backend_agg"
# As the command imports them: __main__.py asks numpy's OpenBLAS for no threads (they spin at
# import, some 60 ms of CPU), unless the environment sets it.
_AS_THE_COMMAND = "import os; os.environ.setdefault('OPENBLAS_NUM_THREADS', '1'); "


def cases(python: str, out: Path) -> dict[str, list[str]]:
    """The command lines of each case, run with ``python`` (a tree's own interpreter)."""
    capture, keys = (str(HERE / name) for name in EXAMPLE)
    analyze = [python, "-m", "espforensics", "analyze", capture, "--sa", keys]
    analyze += ["--out", str(out), "--force", "--quiet"]
    return {
        "python -c pass": [python, "-c", "pass"],
        "libraries, no plots": [python, "-c", f"{_AS_THE_COMMAND}import {', '.join(LIBRARIES)}"],
        "libraries and plots": [
            python,
            "-c",
            f"{_AS_THE_COMMAND}import {', '.join(LIBRARIES)}, {PLOTTING}",
        ],
        "import espforensics.cli": [python, "-c", "import espforensics.cli"],
        "espforensics --help": [python, "-m", "espforensics", "--help"],
        "espforensics --version": [python, "-m", "espforensics", "--version"],
        "analyze (plots)": analyze,
        "analyze --no-plots": [*analyze, "--no-plots"],
    }


def _python(tree: Path) -> str:
    return str(tree / ".venv" / "bin" / "python")


def environment(work: Path, tree: str, bytecode: bool) -> dict[str, str]:
    """The environment of a tree's runs: this one, or with a bytecode cache of its own."""
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / f"pycache-{tree}")
    return env


def wall(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from start to exit of ``command`` (which must succeed), and its CPU seconds.

    The CPU time (user and system, of the child) varies far less than the wall
    time on a machine that others load too; both are printed.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        command,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=NEUTRAL_CWD,
        env=env,
    )
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def slowest_imports(command: list[str], count: int, env: dict[str, str]) -> list[str]:
    """The ``count`` imports of ``command`` with the largest cumulative time (-X importtime)."""
    res = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]],
        check=True,
        cwd=NEUTRAL_CWD,
        env=env,
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


def _table(
    trees: dict[str, str], cases: dict[str, list[str]], times: dict[tuple[str, str], list[float]]
) -> None:
    """One row per case: the median of each tree, and after/before when there are two."""
    ratio_head = "  ratio" if len(trees) == 2 else ""
    print(f"{'case':<26}" + "".join(f"{name:>10}" for name in trees) + ratio_head)
    for case in cases:
        medians = [statistics.median(times[(name, case)]) for name in trees]
        ratio = f"  {medians[-1] / medians[0]:.2f}" if len(medians) == 2 else ""
        print(f"{case:<26}" + "".join(f"{m:10.3f}" for m in medians) + ratio)


def _bytecode_line(bytecode: bool) -> str:
    if bytecode:
        return "bytecode: each tree's own cache (PYTHONPYCACHEPREFIX), filled by the first round"
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return "bytecode: none (PYTHONDONTWRITEBYTECODE is set): each run compiles the tree"
    return "bytecode: the trees' own __pycache__ folders, as this environment writes them"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="tree to compare with (has a .venv)")
    parser.add_argument("--after", type=Path, help="tree measured [default: this one]")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--bytecode", action="store_true", help="each tree's own .pyc cache")
    args = parser.parse_args()
    trees = {} if args.before is None else {"before": _python(args.before)}
    trees["after"] = sys.executable if args.after is None else _python(args.after)
    with tempfile.TemporaryDirectory() as work:
        lines = {name: cases(tree, Path(work) / name) for name, tree in trees.items()}
        envs = {name: environment(Path(work), name, args.bytecode) for name in trees}
        print(_bytecode_line(args.bytecode))
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for case in lines["after"]:
            for run in range(args.runs + 1):  # the first round untimed
                for name in trees:
                    took = wall(lines[name][case], envs[name])
                    if run:
                        times.setdefault((name, case), []).append(took)
        for i, what in enumerate(("wall", "CPU")):
            print(f"median {what} of {args.runs} runs, seconds")
            _table(trees, lines["after"], {k: [t[i] for t in v] for k, v in times.items()})
        for case, command in lines["after"].items():
            if args.profile and case.startswith("analyze"):
                print(f"\nslowest imports, after, {case}:")
                print("\n".join(slowest_imports(command, args.profile, envs["after"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
