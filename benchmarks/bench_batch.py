"""Throughput of `espforensics batch` with 1 and 2 worker processes.

Usage: python benchmarks/bench_batch.py [--captures 24] [--frames 5000] [--plots]

Generates (once) an archive of CAPTURES rfc4106 captures of FRAMES frames
each (the benchmark traffic of the project's builder, keys beside each
capture), then runs the batch from scratch with --jobs 1 and --jobs 2 and
prints captures/s and packets/s for each, and the speed-up.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from espforensics.batch.run import run_batch
from espforensics.synth import bench_sas, iter_bench_frames, keys_yaml, write_capture


def ensure_archive(folder: Path, captures: int, frames: int) -> Path:
    archive = folder / f"archive-{captures}x{frames}"
    if archive.exists():
        return archive
    archive.mkdir(parents=True)
    for i in range(captures):
        write_capture(archive / f"run{i:03d}.pcap", iter_bench_frames(frames, seed=i))
        (archive / f"run{i:03d}.keys.yaml").write_text(keys_yaml(bench_sas(i)))
    return archive


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", type=int, default=24)
    parser.add_argument("--frames", type=int, default=5000)
    parser.add_argument("--plots", action="store_true", help="draw the plots too")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "espf-bench")
    args = parser.parse_args()
    archive = ensure_archive(args.workdir, args.captures, args.frames)
    rates = {}
    for jobs in (1, 2):
        out = args.workdir / f"batch-out-{jobs}"
        shutil.rmtree(out, ignore_errors=True)
        t = time.perf_counter()
        result = run_batch([str(archive)], [], out, jobs=jobs, plots=args.plots)
        dt = time.perf_counter() - t
        packets = sum(r.frames for r in result.rows)
        rates[jobs] = packets / dt
        print(
            f"--jobs {jobs}: {len(result.rows)} captures in {dt:.1f} s: "
            f"{len(result.rows) / dt:.2f} captures/s, {packets / dt:,.0f} packets/s"
        )
    print(f"speed-up with 2 workers: {rates[2] / rates[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
