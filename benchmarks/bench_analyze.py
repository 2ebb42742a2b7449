"""Throughput and memory of `espforensics analyze` on a generated rfc4106 capture.

Usage: python benchmarks/bench_analyze.py [--frames N] [--workdir DIR]

Generates (once, with the project's own builder) an Ethernet/IPv4/ESP
capture of N frames (default 200,000, mean frame 1,289 bytes), then runs
`espforensics analyze` with every check on in a fresh process and prints
frames/s, MB/s and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = """
import resource, sys, time
from pathlib import Path
from espforensics.analysis import analyze_to_dir
t = time.perf_counter()
s = analyze_to_dir(sys.argv[1], [sys.argv[2]], Path(sys.argv[3]), force=True)
dt = time.perf_counter() - t
print(dt, s.capture.frames, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def ensure_capture(workdir: Path, frames: int) -> tuple[Path, Path]:
    """The benchmark capture and its keys, generated if missing."""
    cap = workdir / f"bench-{frames}.pcap"
    keys = workdir / f"bench-{frames}.keys.yaml"
    if not cap.exists() or not keys.exists():
        subprocess.run(
            [sys.executable, "-m", "espforensics.synth", "bench", str(frames), str(cap)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return cap, keys


def measure(cap: Path, keys: Path, out: Path) -> dict[str, float]:
    """Run analyze in a child process; its time, frame count and peak RSS."""
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, str(cap), str(keys), str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    seconds, frames, rss_kib = res.stdout.split()
    size_mb = cap.stat().st_size / 1e6
    return {
        "frames": int(frames),
        "seconds": float(seconds),
        "frames_per_s": int(frames) / float(seconds),
        "mb_per_s": size_mb / float(seconds),
        "peak_rss_mb": int(rss_kib) / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "espf-bench")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    cap, keys = ensure_capture(args.workdir, args.frames)
    gen = time.perf_counter() - t
    fig = measure(cap, keys, args.workdir / "out")
    if args.json:
        print(json.dumps(fig))
        return 0
    print(f"capture      {cap} ({cap.stat().st_size / 1e6:.1f} MB, prepared in {gen:.1f} s)")
    print(f"frames       {fig['frames']:,}")
    print(f"time         {fig['seconds']:.2f} s")
    print(f"frames/s     {fig['frames_per_s']:,.0f}")
    print(f"MB/s         {fig['mb_per_s']:.1f}")
    print(f"peak RSS     {fig['peak_rss_mb']:.0f} MB")
    print(f"machine      {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
