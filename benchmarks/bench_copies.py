"""What `--decrypted`, `--annotate` and the plots cost: each run in a fresh process, side by side.

Usage: python benchmarks/bench_copies.py [--frames 200000] [--profiles gcm,random,cbc]
                                         [--repeat 3] [--workdir DIR] [--profile DIR]
                                         [--before TREE] [--cases plots]

For each sender profile (``gcm``: rfc4106 with Linux's seqiv IVs; ``random``:
rfc4106 with random IVs; ``cbc``: cbc(aes) with hmac(sha256), echainiv IVs),
a capture of FRAMES frames is generated once with ``python -m
espforensics.synth bench`` (kept in the work folder), then each case runs
in a fresh process, ``--repeat`` times round robin (the fastest counts: a
shared machine's load comes and goes): ``analyze --no-plots``; the same
with ``--decrypted FILE.pcap``; with ``--annotate FILE.pcapng``; with both;
and the default run (plots drawn). Printed per profile: each case's wall
time (the fastest of the rounds, the median beside it) and CPU time (the
least, with the processes the run waited for), and the
share of the run the copies take (both copies' time over the run with
both) and the plots (the plots' time over the default run), against the
targets (copies <= 30%, plots <= 20%).

``--cases plots`` runs only ``analyze --no-plots`` and the default run, and
skips the phases: the plots' share alone. The profile ``example`` is the
bundled example (fixtures/example.pcap and its keys, not generated).

Then, for a share that a shared machine's load moving between runs does not
blur, one run with both copies and the plots, in a fresh process, times its
own phases (analyze_to_dir's meter: reading and analysis, tables, copies,
plots, reports) and prints each phase's share of that run: the fastest of
``--repeat`` runs per phase.

``--before TREE`` also runs every case with another checkout's code
(``PYTHONPATH=TREE``, the same interpreter), taking turns with this one,
and prints its figures first: a before/after in the same conditions. The
copies' files and the plots' files of the two trees are compared: they must
be byte-identical.

``--profile DIR`` also runs the copies once under cProfile per profile and
writes ``DIR/PROFILE.prof`` (read it with ``python -m pstats``), printing
the copy writers' ten costliest functions.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROFILES = {
    "gcm": ("--ivs", "linux"),
    "random": ("--ivs", "random"),
    "cbc": ("--algorithm", "cbc"),
}
CASES = ("no plots", "+ decrypted", "+ annotate", "+ both", "+ plots")
CASE_SETS = {"all": CASES, "plots": ("no plots", "+ plots")}
EXAMPLE = "example"  # the bundled example capture, not generated
COPIES_TARGET, PLOTS_TARGET = 0.30, 0.20
HERE = Path(__file__).resolve().parents[1]  # this checkout


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--frames", type=int, default=200_000)
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--profile", type=Path, default=None, help="cProfile the copies into DIR")
    ap.add_argument("--before", type=Path, default=None, help="another checkout, run in turn")
    ap.add_argument("--cases", choices=sorted(CASE_SETS), default="all")
    return ap.parse_args()


def _generate(work: Path, name: str, frames: int) -> tuple[Path, Path]:
    if name == EXAMPLE:
        return HERE / "fixtures" / "example.pcap", HERE / "fixtures" / "example.keys.yaml"
    capture = work / f"{name}-{frames}.pcap"
    keys = capture.with_suffix(".keys.yaml")  # where the generator writes them
    if not capture.exists() or not keys.exists():
        cmd = [sys.executable, "-m", "espforensics.synth", "bench", str(frames), str(capture)]
        subprocess.run([*cmd, *PROFILES[name]], check=True, stdout=subprocess.DEVNULL)
    return capture, keys


def _command(capture: Path, keys: Path, out: Path, case: str) -> list[str]:
    cmd = [sys.executable, "-m", "espforensics", "analyze", str(capture), "--sa", str(keys)]
    cmd += ["--out", str(out / "run"), "--force", "--format", "summary"]
    if case != "+ plots":
        cmd.append("--no-plots")
    if case in ("+ decrypted", "+ both"):
        cmd += ["--decrypted", str(out / "decrypted.pcap")]
    if case in ("+ annotate", "+ both"):
        cmd += ["--annotate", str(out / "annotated.pcapng")]
    return cmd


def _time(cmd: list[str], tree: Path, cpu: list[float] | None = None) -> float:
    """The wall seconds of ``cmd``; its CPU seconds (user + system, its own and those
    of the processes it waited for) appended to ``cpu``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    done = subprocess.run(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, env=env, cwd=tree
    )
    took = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):  # 1: findings at --fail-on; the bench has none
        sys.exit(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    return took


# One run with both copies and the plots, its phases timed by analyze_to_dir's meter.
PHASES = """
import json, sys, time
from espforensics.analysis import analyze_to_dir
from espforensics.rewrite import CaptureCopies
capture, keys, out = sys.argv[1:4]
marks = [("analysis", time.perf_counter())]
class Meter:
    def reading(self, frames, bytes_read): pass
    def phase(self, name): marks.append((name, time.perf_counter()))
copies = CaptureCopies(annotate=out + "/annotated.pcapng", decrypted=out + "/decrypted.pcap")
analyze_to_dir(capture, [keys], out + "/run", force=True, copies=copies, meter=Meter())
spans = {a: t2 - t1 for (a, t1), (_, t2) in zip(marks, marks[1:])}
print(json.dumps(spans))
"""


def _phases(capture: Path, keys: Path, out: Path, tree: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [sys.executable, "-c", PHASES, str(capture), str(keys), str(out)]
    done = subprocess.run(args, capture_output=True, text=True, check=False, env=env, cwd=tree)
    if done.returncode not in (0, 1):
        sys.exit(f"phases run: exit {done.returncode}: {done.stderr[-500:]}")
    spans: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    for name in [n for n in spans if n.startswith("writing the capture copies")]:
        spans["copies"] = spans.pop(name)
    return spans


def _report_phases(label: str, spans: dict[str, float]) -> None:
    total = sum(spans.values())
    parts = ", ".join(f"{name} {took:.2f} s ({took / total:.0%})" for name, took in spans.items())
    print(f"  {label}, one run with both copies and the plots, {total:.2f} s: {parts}")
    copies, plots = spans.get("copies", 0.0), spans.get("drawing plots", 0.0)
    print(
        f"    copies: {copies / (total - plots):.0%} of that run without its plots (<= 30%); "
        f"plots: {plots / (total - copies):.0%} of it without its copies (<= 20%)"
    )


def _profile(capture: Path, keys: Path, out: Path, target: Path) -> None:
    cmd = _command(capture, keys, out, "+ both")
    subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(target), *cmd[1:]],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(HERE)},
        cwd=HERE,
    )
    stats = pstats.Stats(str(target))
    stats.sort_stats("cumulative").print_stats(r"rewrite|capture/writer", 10)


def _report(
    label: str, frames: int, times: dict[str, list[float]], cpu: dict[str, list[float]]
) -> None:
    print(f"  {label}")
    best = {case: min(took) for case, took in times.items()}
    median = {case: statistics.median(took) for case, took in times.items()}
    for case in times:
        extra = best[case] - best["no plots"]
        rate = frames / best[case]
        print(
            f"    {case:<12} {best[case]:7.2f} s  (median {median[case]:.2f} s)  "
            f"{rate:9,.0f} frames/s  (+{extra:.2f} s)  CPU {min(cpu[case]):.2f} s"
        )
    met = {True: "met", False: "NOT met"}
    if "+ both" in times:
        copies = max(0.0, best["+ both"] - best["no plots"]) / best["+ both"]
        verdict = met[copies <= COPIES_TARGET]
        print(f"    copies: {copies:.0%} of the run with both (<= 30%: {verdict})")
    plots = max(0.0, best["+ plots"] - best["no plots"]) / best["+ plots"]
    middle = max(0.0, median["+ plots"] - median["no plots"]) / median["+ plots"]
    print(
        f"    plots: {plots:.0%} of the default run, {middle:.0%} by the medians "
        f"(<= 20%: {met[plots <= PLOTS_TARGET]})"
    )


def _same(first: Path, second: Path) -> bool:
    """The two files, or the two folders' files, byte for byte."""
    if first.is_file():
        return filecmp.cmp(first, second, shallow=False)
    names = sorted(p.name for p in first.iterdir())
    if names != sorted(p.name for p in second.iterdir()):
        return False
    return all(filecmp.cmp(first / n, second / n, shallow=False) for n in names)


def main() -> None:
    args = _args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-copies-"))
    work.mkdir(parents=True, exist_ok=True)
    trees = {"after": HERE}
    if args.before is not None:
        trees = {"before": args.before.resolve(), **trees}
    cases = CASE_SETS[args.cases]
    for name in args.profiles.split(","):
        capture, keys = _generate(work, name, args.frames)
        times: dict[str, dict[str, list[float]]] = {t: {c: [] for c in cases} for t in trees}
        cpu: dict[str, dict[str, list[float]]] = {t: {c: [] for c in cases} for t in trees}
        for _ in range(args.repeat):
            for case in cases:
                for tree, path in trees.items():
                    out = work / f"out-{name}-{tree}"
                    out.mkdir(exist_ok=True)
                    took = _time(_command(capture, keys, out, case), path, cpu[tree][case])
                    times[tree][case].append(took)
        frames = _frames(work / f"out-{name}-after" / "run")
        print(f"{name}: {frames:,} frames, {capture.stat().st_size / 1e6:.0f} MB")
        for tree, path in trees.items():
            _report(f"{tree} ({path})", frames, times[tree], cpu[tree])
        same = {True: "identical", False: "DIFFERENT"}
        if len(trees) == 2:  # the last case of a round drew the plots
            plots = [work / f"out-{name}-{tree}" / "run" / "plots" for tree in trees]
            print(f"  plots/: {same[_same(*plots)]} in both trees")
        if "+ both" not in cases:
            continue
        phases: dict[str, dict[str, float]] = {tree: {} for tree in trees}
        for _ in range(args.repeat):
            for tree, path in trees.items():
                spans = _phases(capture, keys, work / f"out-{name}-{tree}", path)
                for phase, took in spans.items():
                    phases[tree][phase] = min(phases[tree].get(phase, took), took)
        for tree in trees:
            _report_phases(tree, phases[tree])
        if len(trees) == 2:
            for copy in ("decrypted.pcap", "annotated.pcapng"):
                copies = [work / f"out-{name}-{tree}" / copy for tree in trees]
                print(f"  {copy}: {same[_same(*copies)]} in both trees")
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
            _profile(capture, keys, work / f"out-{name}-after", args.profile / f"{name}.prof")


def _frames(out: Path) -> int:
    """The frames of the capture, as the last run's summary.json counts them."""
    frames: int = json.loads((out / "summary.json").read_text())["capture"]["frames"]
    return frames


if __name__ == "__main__":
    main()
