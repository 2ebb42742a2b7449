"""Time and memory per frame against the number of SAs, in one run.

Usage: python benchmarks/bench_sas.py [--cases 60000:60000,1000000:100000]
                                      [--workdir DIR] [--repeat 1] [--stray N]

For each case FRAMES:SPIS, generates (once) two captures of FRAMES
Ethernet/IPv4 ESP frames from the project's benchmark builder: one where
every frame keeps its SA's SPI (two SPIs, the bulk transfer), and one
where the SPI is rewritten to cycle over SPIS distinct values (a scan, or
an archive of many short-lived SAs). Both are analyzed without keys (the
SPIs of a scan have none), every check and table on, no plots, each in a
fresh process; prints us/frame and peak RSS of both and their ratio. The
target is a ratio of at most 2. Memory per SA (target: at most 1 KB)
is (peak RSS of the many-SPI run - peak RSS of the 2-SPI run
of as many frames) / (its SAs - 2): what the SAs cost beyond the frames.
The 2-SPI run holds about 50 MB that a run of one-packet SAs never makes
(the lane's buffers, full evidence windows), so with few SAs this reads
below what one more SA costs; the difference between two cases' peaks
over their SAs gives that (docs/performance.md, "Many SAs (issue 35)").
``--stray N`` adds a third capture of each case: the 2-SPI one with every
N-th frame's SPI one of its own (a few one-packet SAs amid the bulk
transfer), and its time ratio to the 2-SPI run (docs/performance.md,
"Many SAs, third step").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

_ANALYZE = """
import resource, sys, time
from pathlib import Path
from espforensics.analysis import analyze_to_dir
t = time.perf_counter()
s = analyze_to_dir(sys.argv[1], None, Path(sys.argv[2]), force=True, plots=False)
print(time.perf_counter() - t, s.capture.frames, len(s.sas),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def make_capture(path: Path, frames: int, spis: int, stray: int = 0) -> None:
    """The bench capture with its SPIs cycling over ``spis`` values (0: as built), or with
    every ``stray``-th frame's SPI one of its own."""
    from espforensics.capture.writer import write_pcap  # noqa: PLC0415
    from espforensics.synth.bench import (  # noqa: PLC0415
        iter_bench_frames,
        with_spis,
        with_stray_spis,
    )

    built = iter_bench_frames(frames)
    if spis:
        built = with_spis(built, spis)
    elif stray:
        built = with_stray_spis(built, stray)
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as fh:
        write_pcap(fh, built, linktype=1)
    tmp.rename(path)


def _child(cap: Path, out: Path) -> tuple[float, int, int, float]:
    words = subprocess.run(
        [sys.executable, "-c", _ANALYZE, str(cap), str(out)],
        # Not the caller's directory: ``-c`` puts it first on sys.path, so run from a
        # checkout the child imported that checkout's package whatever the interpreter.
        cwd=out.parent,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(words[0]), int(words[1]), int(words[2]), int(words[3]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="60000:60000,1000000:100000")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "espf-sas")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the fastest counts")
    parser.add_argument(
        "--stray", type=int, default=0, help="also every N-th frame with an SPI of its own"
    )
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    worst = worst_mem = 0.0
    for case in args.cases.split(","):
        frames, spis = (int(x) for x in case.split(":"))
        row = {}
        for label, n_spis in (("2 SPIs", 0), (f"{spis:,} SPIs", spis)):
            cap = args.workdir / f"sas-{frames}-{n_spis}.pcap"
            if not cap.exists():
                make_capture(cap, frames, n_spis)
            runs = [_child(cap, args.workdir / "out") for _ in range(args.repeat)]
            row[label] = min(runs)
        print(f"{frames:,} frames, keyless, every check and table, no plots")
        for label, (secs, n, sas, rss) in row.items():
            print(
                f"  {label:>12}: {secs * 1e6 / n:6.1f} us/frame  {n / secs:>9,.0f} frames/s  "
                f"{sas:>7,} SAs  peak RSS {rss:5.0f} MB"
            )
        (one, _, one_sas, one_rss), (many, _, many_sas, many_rss) = row.values()
        per_sa = (many_rss - one_rss) * 2**20 / max(1, many_sas - one_sas)  # MB -> bytes
        print(f"  time ratio many/one: {many / one:.2f}")
        print(f"  memory per SA: {per_sa:,.0f} bytes (peak RSS many - one, per extra SA)")
        worst = max(worst, many / one)
        worst_mem = max(worst_mem, per_sa)
        if args.stray:
            cap = args.workdir / f"sas-{frames}-stray{args.stray}.pcap"
            if not cap.exists():
                make_capture(cap, frames, 0, args.stray)
            secs, n, sas, rss = min(_child(cap, args.workdir / "out") for _ in range(args.repeat))
            print(
                f"  every {args.stray}th frame an SPI of its own: {secs * 1e6 / n:6.1f} us/frame  "
                f"{sas:>7,} SAs  peak RSS {rss:5.0f} MB  time ratio to 2 SPIs: {secs / one:.2f}"
            )
    print(f"worst time ratio: {worst:.2f} (target <= 2)")
    print(f"worst memory per SA: {worst_mem:,.0f} bytes (target <= 1,024)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
