"""Speed for every sender's IVs, keyed and keyless, against tshark, side by side in one run.

Usage: python benchmarks/bench_profiles.py [--frames 200000] [--workdir DIR] [--repeat 2]
                                           [--profiles gcm-linux,gcm-seq,...]
                                           [--tshark CMD] [--no-tshark] [--before TREE]

For each sender profile (primer s9: speed must not depend on
which one a capture holds), generates once, with the project's builder
(``python -m espforensics.synth bench N OUT --algorithm A --ivs I``), the
same bulk TCP traffic of --frames frames over two SAs, the senders' IVs
those of the profile: rfc4106 with Linux's seqiv (``gcm-linux``),
``IV = seq64`` (``gcm-seq``, DPDK's rte_ipsec), an additive counter
(``gcm-counter``, VPP) or random IVs (``gcm-random``), and
``cbc(aes)`` + ``hmac(sha256)`` with echainiv (``cbc-linux``) or random
IVs (``cbc-random``), GMAC (``rfc4543(gcm(aes))``, seqiv: ``gmac-linux``)
and NULL encryption with ``hmac(sha256)`` (``null``, no IV). Then
measures, each in a fresh process, round robin over every profile and
measurement --repeat times, the fastest run counting
(the capture is read through once, untimed, before each run: a page cache
dropped between runs would otherwise charge the disk to whichever tool
came first):

- analyze, one process, every check, the tables and reports, no plots:
  with the key file (keyed) and without (keyless);
- the floor (benchmarks/bench_speed.py's: walk, parse, verify, decrypt);
- tshark (the TSHARK environment variable, else --tshark, else ``tshark``
  on PATH; e.g. ``--tshark "chroot /srv/deb13 tshark"`` for a 4.4):
  keyed, decrypting with the same SAs and checking every ICV
  (``esp.enable_authentication_check``), TCP not dissected (its fastest
  configuration in bench_speed.py); keyless, plain ESP dissection printing
  ``-T fields -e esp.spi -e esp.sequence``. A suite tshark's ESP
  dissector lacks (GMAC, up to 4.4: synth's esp_sa writes no row for it)
  has no tshark keyed figure.

``--before TREE`` (another checkout of espforensics, e.g. ``git worktree add
/tmp/before HEAD~1``) also runs its keyed and keyless analyses, with
``PYTHONPATH=TREE``, in the same rounds, and prints a second table: its
frames/s and this tree's speed over it (``x before``), a change measured
over every profile in one run.

Prints one line per profile: frames/s keyed and keyless and the ratios
analyze/tshark and analyze/floor, every figure from this one run, and the
peak RSS of the keyed and the keyless analysis (the largest of the rounds:
it must not grow with --frames, issue 12), then one line with the range of
those peaks, the largest named, and every run above 250 MB (issue 12's
bound at 2,000,000 frames). Speed
figures of different runs are not comparable on a shared machine: compare
the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_speed import _FLOOR, NEUTRAL_CWD, Tshark, child_run, esp_sa_file, find_tshark

PROFILES = {  # name: (--algorithm, --ivs)
    "gcm-linux": ("gcm", "linux"),
    "gcm-seq": ("gcm", "seq"),
    "gcm-counter": ("gcm", "counter"),
    "gcm-random": ("gcm", "random"),
    "cbc-linux": ("cbc", "linux"),
    "cbc-random": ("cbc", "random"),
    "gmac-linux": ("gmac", "linux"),
    "null": ("null", "linux"),
}

# One analyze run: keyed with a key file, keyless with "-". Prints seconds, frames and
# the peak RSS in KiB (as bench_speed.py's children, read by its ``child_run``).
_ANALYZE = """
import resource, sys, time
from pathlib import Path
from espforensics.analysis import analyze_to_dir
t = time.perf_counter()
keys = [] if sys.argv[2] == "-" else [sys.argv[2]]
s = analyze_to_dir(sys.argv[1], keys, Path(sys.argv[3]), force=True, plots=False, jobs=1)
print(time.perf_counter() - t, s.capture.frames,
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def ensure_capture(workdir: Path, name: str, frames: int) -> tuple[Path, Path]:
    """The profile's capture and key file, generated unless already there (renamed whole
    into place, so an interrupted run leaves nothing half written to measure)."""
    cap, keys = workdir / f"{name}-{frames}.pcap", workdir / f"{name}-{frames}.keys.yaml"
    if cap.exists() and keys.exists():
        return cap, keys
    part = workdir / f"{name}-{frames}-partial.pcap"
    algorithm, ivs = PROFILES[name]
    t = time.perf_counter()
    subprocess.run(
        [
            *(sys.executable, "-m", "espforensics.synth", "bench", str(frames), str(part)),
            *("--algorithm", algorithm, "--ivs", ivs),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (workdir / f"{name}-{frames}-partial.keys.yaml").replace(keys)
    part.replace(cap)
    print(f"generated {name}: {frames:,} frames in {time.perf_counter() - t:.1f} s", flush=True)
    return cap, keys


def _warm(cap: Path) -> None:
    """Read ``cap`` through, so that the run after it reads from the page cache."""
    with cap.open("rb", buffering=0) as f:
        while f.read(1 << 23):
            pass


def _tshark(ts: Tshark, cap: Path, opts: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(
        [*ts.argv, "-n", "-r", str(cap), *opts],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=NEUTRAL_CWD,
    )
    return time.perf_counter() - t


KEYLESS_FIELDS = ["-T", "fields", "-e", "esp.spi", "-e", "esp.sequence"]


def measure(
    workdir: Path,
    names: list[str],
    frames: int,
    repeat: int,
    ts: Tshark | None,
    before: Path | None = None,
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """Seconds per (profile, measurement), the fastest of ``repeat`` rounds; and the
    analysis runs' peak RSS in MiB, the largest of the rounds. ``before``: another
    checkout whose analyses run too ("before keyed", "before keyless")."""
    out = str(workdir / "out")
    runs: dict[tuple[str, str], tuple[str, ...] | tuple[Tshark, Path, list[str]]] = {}
    caps: dict[str, Path] = {}
    trees: dict[tuple[str, str], Path] = {}  # the runs of the other checkout
    for name in names:
        cap, keys = ensure_capture(workdir, name, frames)
        caps[name] = cap
        runs[name, "keyed"] = (_ANALYZE, str(cap), str(keys), out)
        runs[name, "keyless"] = (_ANALYZE, str(cap), "-", out)
        runs[name, "floor"] = (_FLOOR, str(cap), str(keys))
        if before is not None:
            for what in ("keyed", "keyless"):
                runs[name, f"before {what}"] = runs[name, what]
                trees[name, f"before {what}"] = before
        if ts is None:
            continue
        opts = esp_sa_file(keys)
        if any(o.startswith("uat:esp_sa:") for o in opts):  # none: tshark lacks the suite
            if "esp.enable_authentication_check:TRUE" not in opts:  # the AEAD's ICV too
                opts += ["-o", "esp.enable_authentication_check:TRUE"]
            runs[name, "tshark keyed"] = (ts, cap, [*opts, "--disable-protocol", "tcp"])
        runs[name, "tshark keyless"] = (ts, cap, KEYLESS_FIELDS)
    best: dict[tuple[str, str], float] = {}
    peak: dict[tuple[str, str], float] = {}
    for _ in range(repeat):
        for key, run in runs.items():
            _warm(caps[key[0]])
            if isinstance(run[0], Tshark):
                ts_run, cap_run, opts_run = run
                assert isinstance(cap_run, Path) and isinstance(opts_run, list)
                secs = _tshark(ts_run, cap_run, opts_run)
            else:
                secs, _, mib = child_run(*(str(a) for a in run), tree=trees.get(key))
                peak[key] = max(mib, peak.get(key, 0.0))
            best[key] = min(secs, best.get(key, secs))
    return best, peak


def table(
    names: list[str],
    frames: int,
    best: dict[tuple[str, str], float],
    peak: dict[tuple[str, str], float],
) -> list[str]:
    """One line per profile: frames/s and the ratios of this run, and the peak RSS."""

    def fps(name: str, what: str) -> float | None:
        secs = best.get((name, what))
        return None if secs is None else frames / secs

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or b is None else f"{a / b:.2f}"

    lines = [
        f"{'profile':<12} {'keyed fr/s':>11} {'x tshark':>8} {'x floor':>7} "
        f"{'keyless fr/s':>12} {'x tshark':>8} {'tshark keyed':>12} {'keyless':>9} "
        f"{'MB keyed':>8} {'keyless':>7}"
    ]
    for name in names:
        keyed, keyless = fps(name, "keyed"), fps(name, "keyless")
        t_keyed, t_keyless = fps(name, "tshark keyed"), fps(name, "tshark keyless")
        floor = fps(name, "floor")
        lines.append(
            f"{name:<12} {keyed or 0:>11,.0f} {ratio(keyed, t_keyed):>8} "
            f"{ratio(keyed, floor):>7} {keyless or 0:>12,.0f} {ratio(keyless, t_keyless):>8} "
            f"{t_keyed or 0:>12,.0f} {t_keyless or 0:>9,.0f} "
            f"{peak.get((name, 'keyed'), 0):>8,.0f} {peak.get((name, 'keyless'), 0):>7,.0f}"
        )
    return lines


# Issue 12's bound on a run's peak RSS, at 2,000,000 frames and flat to 10,000,000: what a
# capture's size or its sender's profile must not move it above.
RSS_BOUND_MB = 250


def memory_line(names: list[str], peak: dict[tuple[str, str], float]) -> str:
    """The analyses' peak RSS across profiles, the largest named, and the runs above
    ``RSS_BOUND_MB``: a profile holding more than the others shows here (keyless NULL and
    GMAC at 2,000,000 frames held 345-351 MB where the others held 182-216)."""
    runs = {(n, kind): peak[n, kind] for n in names for kind in ("keyed", "keyless")}
    most = max(runs, key=runs.__getitem__)
    over = [f"{n} {kind} {mb:,.0f} MB" for (n, kind), mb in runs.items() if mb > RSS_BOUND_MB]
    return (
        f"peak RSS: {min(runs.values()):,.0f}-{runs[most]:,.0f} MB (most: {' '.join(most)}); "
        f"the bound, {RSS_BOUND_MB} MB at 2,000,000 frames: "
        + (f"exceeded by {', '.join(over)}" if over else "every run within it")
    )


def before_table(
    names: list[str],
    frames: int,
    best: dict[tuple[str, str], float],
    peak: dict[tuple[str, str], float],
) -> list[str]:
    """One line per profile: the other checkout's frames/s, this one's speed over it, and
    the other's peak RSS (``--before``)."""
    lines = [
        f"{'profile':<12} {'keyed fr/s':>11} {'x before':>8} "
        f"{'keyless fr/s':>12} {'x before':>8} {'MB keyed':>8} {'keyless':>7}"
    ]
    for name in names:
        cells = []
        for what in ("keyed", "keyless"):
            then, now = best[name, f"before {what}"], best[name, what]
            cells.append(f"{frames / then:>{11 if what == 'keyed' else 12},.0f} {then / now:>8.2f}")
        lines.append(
            f"{name:<12} {' '.join(cells)} {peak[name, 'before keyed']:>8,.0f} "
            f"{peak[name, 'before keyless']:>7,.0f}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "espf-profiles"
    )
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the fastest counts")
    parser.add_argument("--profiles", default=",".join(PROFILES), help="comma-separated names")
    parser.add_argument(
        "--tshark",
        metavar="CMD",
        default=os.environ.get("TSHARK"),
        help="the tshark command (split with shlex; default: $TSHARK, else tshark on PATH)",
    )
    parser.add_argument("--no-tshark", action="store_true")
    parser.add_argument(
        "--before", metavar="TREE", type=Path, help="another checkout, measured beside this one"
    )
    args = parser.parse_args()
    before = None if args.before is None else args.before.resolve()
    if before is not None and not (before / "espforensics" / "__init__.py").is_file():
        parser.error(f"--before {before}: no espforensics package there")
    names = args.profiles.split(",")
    unknown = [n for n in names if n not in PROFILES]
    if unknown or args.frames <= 0 or args.repeat <= 0:
        parser.error(f"profiles are {', '.join(PROFILES)}; frames and repeat above 0")
    ts = None
    if not args.no_tshark:
        command = args.tshark or ("tshark" if shutil.which("tshark") else None)
        if command is None:
            parser.error("no tshark on PATH: give --tshark CMD or --no-tshark")
        try:
            ts = find_tshark(command)
        except ValueError as exc:
            parser.error(str(exc))
        print(f"tshark: {ts.label}: {ts.version}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    best, peak = measure(args.workdir, names, args.frames, args.repeat, ts, before)
    print(f"{args.frames:,} frames per profile, fastest of {args.repeat} rounds, one run:")
    for line in table(names, args.frames, best, peak):
        print(line)
    print(memory_line(names, peak))
    if before is not None:
        print(f"before: {before}, in the same rounds:")
        for line in before_table(names, args.frames, best, peak):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
