"""The fuzz campaign command line.

In: ``python -m fuzz --inputs N --seed S [--kinds K,...] [--jobs N]
[--findings DIR]`` (or ``--replay FOLDER``). Out, on stdout: inputs tried
per kind, outcome counts, failures grouped by class with one example
each, minimized and saved under ``--findings``; exit status 1 when any
input ended in an internal error or broke an invariant, else 0. Raises
nothing (a usage error exits 2, as argparse does).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from fuzz.campaign import Tally, judge, prepare_process, run_block, schedule
from fuzz.inputs import KEY_KINDS, KINDS, FuzzInput, make_input
from fuzz.minimize import minimize
from fuzz.oracle import INPUT_ERROR, INTERNAL_ERROR, OK, Oracle

ALIASES = {"keys": KEY_KINDS, "captures": ("pcap", "pcapng"), "all": KINDS}
BLOCK = 500  # inputs per task handed to a worker process
FINDING = "finding.json"  # a saved finding's metadata, beside its input files


def parse_kinds(text: str) -> tuple[str, ...]:
    """``pcap,keys`` -> ("pcap", "yaml", "xfrm", "esp_sa")."""
    out: list[str] = []
    for word in filter(None, (w.strip() for w in text.split(","))):
        if word not in KINDS and word not in ALIASES:
            raise argparse.ArgumentTypeError(f"unknown kind {word!r}; known: {', '.join(KINDS)}")
        out += ALIASES.get(word, (word,))
    return tuple(dict.fromkeys(out))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--inputs", type=int, default=10_000, help="inputs to try")
    p.add_argument("--seed", type=int, default=1, help="campaign seed")
    p.add_argument("--start", type=int, default=0, help="index of the first input")
    p.add_argument("--kinds", type=parse_kinds, default=KINDS, help="comma list; keys, captures")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--findings", type=Path, default=Path("/tmp/fuzz-findings"))
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per input; 0: none")
    p.add_argument("--memory-mib", type=int, default=4096, help="address space cap per process")
    p.add_argument("--minimize-budget", type=int, default=250, help="oracle calls per class")
    p.add_argument(
        "--replay", type=Path, help="judge a saved finding folder (or each in a --findings folder)"
    )
    return p


def scratch_dir() -> Path:
    """A private scratch folder, in memory (/dev/shm) when the machine has one."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    return Path(tempfile.mkdtemp(prefix="espf-fuzz-", dir=base))


def _worker_init(memory_mib: int) -> None:
    prepare_process(memory_mib)


def _worker(args: tuple[int, tuple[str, ...], int, int, float]) -> Tally:
    campaign, kinds, start, stop, timeout = args
    scratch = scratch_dir()
    try:
        return run_block(campaign, kinds, range(start, stop), scratch, timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _blocks(ns: argparse.Namespace) -> Iterator[tuple[int, tuple[str, ...], int, int, float]]:
    stop = ns.start + ns.inputs
    for start in range(ns.start, stop, BLOCK):
        yield ns.seed, ns.kinds, start, min(stop, start + BLOCK), ns.timeout


def run_campaign(ns: argparse.Namespace) -> Tally:
    """All blocks, on ``--jobs`` processes (in this one when 1), with progress on stderr."""
    total, began = Tally(), time.monotonic()
    if ns.jobs <= 1:
        prepare_process(ns.memory_mib)
        results: Iterator[Tally] = map(_worker, _blocks(ns))
        pool = None
    else:
        ctx = multiprocessing.get_context("fork")
        pool = ctx.Pool(ns.jobs, _worker_init, (ns.memory_mib,), maxtasksperchild=20)
        results = pool.imap_unordered(_worker, _blocks(ns))
    try:
        for tally in results:
            total.merge(tally)
            done = sum(total.tried.values())
            rate = done / max(time.monotonic() - began, 1e-9)
            print(
                f"fuzz: {done} inputs, {rate:.0f}/s, {total.internal_errors} internal errors, "
                f"{len(total.failures)} classes",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if pool is not None:
            pool.terminate()
    return total


def _slug(cls: str) -> str:
    keep = "".join(c if c.isalnum() else "-" for c in cls.lower())
    return "-".join(filter(None, keep.split("-")))[:70]


def save_finding(folder: Path, cls: str, fuzz_input: FuzzInput, detail: str, seed: int) -> None:
    """Write the input's files and ``finding.json`` (class, message, seed, index, flags)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, chunks in fuzz_input.files:
        (folder / name).write_bytes(b"".join(chunks))
    meta = {
        "class": cls,
        "detail": detail,
        "campaign_seed": seed,
        "index": fuzz_input.index,
        "kind": fuzz_input.kind,
        "seed": fuzz_input.seed,
        "compress": fuzz_input.compress,
        "table": fuzz_input.table,
        "full": fuzz_input.full,
        "to_dir": fuzz_input.to_dir,
        "plots": fuzz_input.plots,
    }
    (folder / FINDING).write_text(json.dumps(meta, indent=2) + "\n")


def load_finding(folder: Path) -> FuzzInput:
    """The input saved in a finding folder."""
    meta = json.loads((folder / FINDING).read_text())
    files = tuple(
        (p.name, (p.read_bytes(),)) for p in sorted(folder.iterdir()) if p.name != FINDING
    )
    flags = {k: meta[k] for k in ("compress", "table", "full", "to_dir", "plots")}
    return FuzzInput(meta["kind"], meta["index"], meta["seed"], files, **flags)


def save_findings(tally: Tally, ns: argparse.Namespace) -> dict[str, Path]:
    """Minimize the first example of every class and save it; the folder of each."""
    ns.findings.mkdir(parents=True, exist_ok=True)
    oracle, saved, lines = Oracle(scratch_dir()), {}, []
    order = schedule(ns.kinds)
    for number, cls in enumerate(sorted(tally.examples), 1):
        example = tally.examples[cls]
        fuzz_input = make_input(ns.seed, example.index, order[example.index % len(order)])

        def same(candidate: FuzzInput, cls: str = cls) -> bool:
            return any(f.cls == cls for f in judge(oracle, candidate, ns.timeout).failures)

        budget = 0 if cls.startswith("hang") else ns.minimize_budget
        small = minimize(fuzz_input, same, budget) if budget and same(fuzz_input) else fuzz_input
        folder = ns.findings / f"{number:02d}-{_slug(cls)}"
        save_finding(folder, cls, small, example.detail, ns.seed)
        saved[cls] = folder
        size = sum(len(b"".join(c)) for _, c in small.files)
        lines.append(
            f"{folder.name}: {cls}; {example.kind} input #{example.index}, "
            f"{len(small.files)} file(s), {size} bytes: {example.detail[:120]}"
        )
    shutil.rmtree(oracle.scratch, ignore_errors=True)
    (ns.findings / "README.txt").write_text(
        "One folder per failure class: the minimized input, finding.json; replay with\n"
        "  .venv/bin/python -m fuzz --replay FOLDER\n\n" + "\n".join(lines) + "\n"
    )
    return saved


def _lane_lines(tally: Tally) -> list[str]:
    """Per kind: inputs the steady lane took frames of, the frames, the candidates refused."""
    out = [f"steady lane: {'kind':<8} {'inputs':>9} {'frames':>9} {'refused':>9}"]
    for kind in KINDS:
        if tally.tried[kind]:
            taken, refused = tally.lane_taken[kind], tally.lane_refused[kind]
            out.append(
                f"             {kind:<8} {tally.lane_inputs[kind]:>9} {taken:>9} {refused:>9}"
            )
    return out


def report(tally: Tally, seconds: float, saved: dict[str, Path]) -> str:
    """The campaign's figures as text."""
    done = sum(tally.tried.values())
    out = [f"inputs: {done} in {seconds:.0f} s ({done / max(seconds, 1e-9):.0f}/s)"]
    out.append(f"{'kind':<8} {'tried':>9} {OK:>9} {INPUT_ERROR:>11} {INTERNAL_ERROR:>14}")
    for kind in KINDS:
        if tally.tried[kind]:
            counts = [tally.outcomes[(kind, o)] for o in (OK, INPUT_ERROR, INTERNAL_ERROR)]
            out.append(
                f"{kind:<8} {tally.tried[kind]:>9} {counts[0]:>9} {counts[1]:>11} {counts[2]:>14}"
            )
    out += _lane_lines(tally)
    out.append(f"harness errors (inputs not made): {sum(tally.harness.values())}")
    out += [f"  {count:>7}  {cls}" for cls, count in tally.harness.most_common(10)]
    out.append(f"failure classes: {len(tally.failures)}")
    for cls, count in tally.failures.most_common():
        ex = tally.examples[cls]
        out.append(f"  {count:>7}  {cls}")
        out.append(f"           first: {ex.kind} #{ex.index}: {ex.detail[:160]}")
        if cls in saved:
            out.append(f"           saved: {saved[cls]}")
    return "\n".join(out)


def replay(folder: Path, timeout: float, memory_mib: int) -> int:
    """Judge a saved finding again, or each finding of a campaign's --findings folder;
    1 if one still fails, 2 if there is none to judge."""
    found = (
        [folder]
        if (folder / FINDING).is_file()
        else sorted(p.parent for p in folder.glob(f"*/{FINDING}"))
    )
    if not found:
        print(f"fuzz: {folder}: no {FINDING} in it or in its folders", file=sys.stderr)
        return 2
    prepare_process(memory_mib)
    failed = 0
    for one in found:
        oracle = Oracle(scratch_dir())
        try:
            verdict = judge(oracle, load_finding(one), timeout)
        finally:
            shutil.rmtree(oracle.scratch, ignore_errors=True)
        print(f"{one}: {verdict.outcome}")
        for failure in verdict.failures:
            print(f"  {failure.cls}: {failure.detail}")
        failed += verdict.outcome == INTERNAL_ERROR
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run a campaign (or a replay); 1 when anything failed."""
    ns = _parser().parse_args(argv)
    if ns.replay is not None:
        return replay(ns.replay, ns.timeout, ns.memory_mib)
    began = time.monotonic()
    tally = run_campaign(ns)
    seconds = time.monotonic() - began
    saved = save_findings(tally, ns) if tally.examples else {}
    print(f"fuzz: seed {ns.seed}, kinds {','.join(ns.kinds)}, jobs {ns.jobs}")
    print(report(tally, seconds, saved))
    return 1 if tally.internal_errors or tally.harness else 0
