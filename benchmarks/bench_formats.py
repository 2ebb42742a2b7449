"""One capture as pcap, pcapng and gzip-compressed pcapng, side by side in one run.

Usage: python benchmarks/bench_formats.py CAPTURE.pcap KEYS [--rounds 2] [--jobs 1,2]

Writes the pcap's frames again as pcapng (the project's writer) and gzips
that (level 1), in a temporary folder, then measures each in a fresh
process, the formats taking turns in every round, best of the rounds:

- walk: the frames of ``open_capture`` one at a time, and its batches
  (``Capture.batches``, what the engine takes), us a frame;
- copy: for the compressed one, the decompression ``--jobs`` makes first
  (capture/unpack.py), MB/s of the copy written;
- analyze: ``analyze_to_dir`` without plots, for each ``--jobs`` value,
  frames/s, and each format's ratio to the pcap with one process.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import child_output

_WALK = """
import sys, time
from espforensics.capture import open_capture
from espforensics.engine.run import batch_sizes
t = time.perf_counter()
with open_capture(sys.argv[1]) as capture:
    frames = sum(1 for _ in capture)
one = time.perf_counter() - t
t = time.perf_counter()
with open_capture(sys.argv[1]) as capture:
    batched = sum(len(b) for b in capture.batches(batch_sizes(4096)))
assert batched == frames
print(one, time.perf_counter() - t, frames)
"""

_COPY = """
import os, sys, time
from espforensics.capture import open_capture
t = time.perf_counter()
with open_capture(sys.argv[1], unpack_once=True) as capture:
    took = time.perf_counter() - t
    # no copy (None): it would leave under a tenth of the file system free
    # (capture/unpack.py RESERVE), and the capture is read as a stream
    print(took, -1 if capture.unpacked is None else os.path.getsize(capture.unpacked))
"""

_ANALYZE = """
import sys, time
from pathlib import Path
from espforensics.analysis import analyze_to_dir
t = time.perf_counter()
s = analyze_to_dir(sys.argv[1], [sys.argv[2]], Path(sys.argv[3]), force=True, plots=False,
                   jobs=int(sys.argv[4]))
print(time.perf_counter() - t, s.capture.frames)
"""


def _formats(pcap: Path, work: Path) -> dict[str, Path]:
    """The pcap, its frames as pcapng (interfaces of the link types it holds), and that
    gzipped."""
    from espforensics.capture import open_capture, write_pcapng  # noqa: PLC0415
    from espforensics.model.records import Frame  # noqa: PLC0415

    with open_capture(pcap) as capture:
        linktypes = sorted({f.linktype for f in capture if isinstance(f, Frame)})
    ng = work / "capture.pcapng"
    with open_capture(pcap) as capture, ng.open("wb") as out:
        write_pcapng(out, capture, linktypes=linktypes)
    gz = work / "capture.pcapng.gz"
    with ng.open("rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return {"pcap": pcap, "pcapng": ng, "pcapng.gz": gz}


def _numbers(code: str, *args: str) -> list[float]:
    return [float(x) for x in child_output(code, *args).split()]


class Figures:
    """The best of each measurement over the rounds."""

    def __init__(self) -> None:
        self.walk: dict[str, tuple[float, float]] = {}  # us a frame: one by one, batches
        self.rate: dict[tuple[str, int], float] = {}  # frames/s of analyze, per --jobs
        self.copy = (float("inf"), 0.0)  # the .gz's copy: seconds, bytes
        self.frames = 0

    def measure(self, name: str, path: Path, keys: Path, jobs: list[int], out: Path) -> None:
        one, batched, n = _numbers(_WALK, str(path))
        self.frames = int(n)
        best = self.walk.get(name, (float("inf"), float("inf")))
        self.walk[name] = (min(best[0], one / n * 1e6), min(best[1], batched / n * 1e6))
        if name.endswith(".gz"):
            took, size = _numbers(_COPY, str(path))
            self.copy = min(self.copy, (took, size))
        for j in jobs:
            took, frames = _numbers(_ANALYZE, str(path), str(keys), str(out), str(j))
            self.rate[name, j] = max(self.rate.get((name, j), 0.0), frames / took)

    def print(self, rounds: int, jobs: list[int]) -> None:
        print(f"{self.frames:,} frames, best of {rounds} rounds, the formats taking turns")
        head = "".join(f"{'-j' + str(j):>18}" for j in jobs)
        print(f"{'':12} {'walk 1 by 1':>12} {'batches':>10}   {head}")
        base = self.rate["pcap", jobs[0]]
        for name, (per, bat) in self.walk.items():
            rates = [self.rate[name, j] for j in jobs]
            cells = "".join(f"{r:>10,.0f} x{r / base:4.2f}  " for r in rates)
            print(f"{name:12} {per:9.2f} us {bat:7.2f} us   {cells}")
        took, size = self.copy
        if size < 0:
            print(
                "the copy --jobs makes of the .gz: not made, under a tenth of its file system free"
            )
        else:
            print(f"the copy --jobs makes of the .gz: {size / 1e6 / took:,.0f} MB/s ({took:.2f} s)")
        print(f"(frames/s of analyze without plots; x: against the pcap with --jobs {jobs[0]})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("keys", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--jobs", default="1,2")
    args = ap.parse_args()
    jobs = [int(j) for j in args.jobs.split(",")]
    figures = Figures()
    with tempfile.TemporaryDirectory(prefix="bench-formats-") as tmp:
        formats = _formats(args.capture.resolve(), Path(tmp))
        for _ in range(args.rounds):
            for name, path in formats.items():
                figures.measure(name, path, args.keys.resolve(), jobs, Path(tmp) / "out")
    figures.print(args.rounds, jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
