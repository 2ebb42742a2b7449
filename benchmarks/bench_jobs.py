"""What `analyze --jobs N` costs where, and a model of how it scales, from one run.

Usage: python benchmarks/bench_jobs.py CAPTURE KEYS [--jobs 2,3] [--cores-per-node 32]
                                       [--nodes 10] [--disk-mbps 2000]

Measures, each in a fresh process, on an uncompressed pcap (bench_speed.py
makes them):

- s: analyze with one process, no plots (us of wall time per frame), and
  each --jobs N asked for, measured: wall time, and the CPU time of the
  engine's process (its threads included: the SHA-256 and the table writer);
  with one process, that CPU over the wall time is the cores it keeps busy,
  c, so the machine's n cores allow any split of the same work at most
  x n / c (printed: on 2 cores one process keeps 1.2-1.4 busy);
- m: the engine's process alone when every batch comes prefetched (the
  prefetches computed first, then the engine timed with them in hand):
  what no number of workers takes off it;
- w: a worker's cost per frame (read its batch again through the mapping,
  parse, open, decode: ``Span.read`` + ``prefetch``), and the bytes of its
  result;
- p = s - m: what the engine saves per frame when a worker did the work;
- r: walking the file's records alone (the reader's share of m).

Then prints the model. With k = N - 1 workers and the engine stealing the
batches no worker has started (engine/pool.py), a frame costs the engine
m, plus p for the share f it opens itself; the workers open the rest at
w / k per frame: t = m + f p = (1 - f) w / k, so f = max(0, (w/k - m) /
(p + w/k)) and t(N) = m + f p, the speed-up s / t(N). It tends to s / m:
the engine's process is the limit from a few cores on, whatever the
machine or the cluster. A cluster adds network and a shared file system:
the capture is read at ``--disk-mbps`` at best, a bound printed beside.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import child_output

from espforensics.engine.workers import usable_cores

_ONE = """
import sys, time
from pathlib import Path
from espforensics.analysis import analyze_to_dir
t, cpu = time.perf_counter(), time.process_time()
s = analyze_to_dir(sys.argv[1], [sys.argv[2]], Path(sys.argv[3]), force=True, plots=False,
                   jobs=int(sys.argv[4]))
print(time.perf_counter() - t, s.capture.frames, time.process_time() - cpu)
"""

# The engine with every batch's prefetch already computed (engine/pool.py's Prefetcher
# replaced by one that hands them over done): the engine's own cost with perfect workers.
_ENGINE = """
import sys, time
from concurrent.futures import Future
from pathlib import Path
import espforensics.engine.run as run
from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture
from espforensics.engine.pool import Ahead
from espforensics.engine.prefetch import KeyRing, prefetch
from espforensics.keys import load_sas
from espforensics.model.options import Options

cap, keys = sys.argv[1], sys.argv[2]
table = load_sas([keys])
ports = Options().natt_ports | {sa.encap_port for sa in table if sa.encap_port is not None}
ring, done = KeyRing(table), {}
with open_capture(cap) as capture:
    for batch in capture.batches(run.batch_sizes(Options().batch_frames)):
        future = Future()
        future.set_result(prefetch(batch, ports, ring, {}))
        done[int(batch.number[0])] = future

class Handed:
    def __init__(self, *args):
        self.hints = {}
    def ahead(self, items, ports):
        for item in items:
            span = getattr(item, "span", None)
            yield item if span is None else Ahead(item, done[int(item.number[0])])
    def note(self, *args):
        pass
    def close(self):
        pass

run.Prefetcher = Handed
t = time.perf_counter()
s = analyze_to_dir(cap, [keys], Path(sys.argv[3]), force=True, plots=False, jobs=2)
print(time.perf_counter() - t, s.capture.frames)
"""

_WORKER = """
import pickle, sys, time
from itertools import repeat
from espforensics.capture import open_capture
from espforensics.engine.prefetch import KeyRing, prefetch
from espforensics.keys import load_sas
from espforensics.model.options import Options

cap, keys = sys.argv[1], sys.argv[2]
table = load_sas([keys])
ports = Options().natt_ports | {sa.encap_port for sa in table if sa.encap_port is not None}
ring = KeyRing(table)
with open_capture(cap) as capture:
    spans = [b.span for b in capture.batches(repeat(Options().batch_frames))]
t, frames, size = time.perf_counter(), 0, 0
for span in spans:
    pre = prefetch(span.read(), ports, ring, {})
    size += len(pickle.dumps(pre, 5))
    frames += len(span.heads)
print(time.perf_counter() - t, frames, size)
"""

_WALK = """
import sys, time
from itertools import repeat
from espforensics.capture import open_capture
t = time.perf_counter()
frames = 0
with open_capture(sys.argv[1]) as capture:
    for batch in capture.batches(repeat(4096)):
        frames += len(batch)
print(time.perf_counter() - t, frames)
"""


def _child(script: str, *args: str) -> list[float]:
    return [float(x) for x in child_output(script, *args).split()]


def model(s: float, m: float, w: float, n: int) -> float:
    """The wall time per frame of ``--jobs n`` (n - 1 workers), in the units given."""
    if n <= 1:
        return s
    k = n - 1
    p = s - m
    f = max(0.0, (w / k - m) / (p + w / k))
    return m + f * p


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("keys", type=Path)
    parser.add_argument("--cores-per-node", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--disk-mbps", type=float, default=2000.0)
    parser.add_argument("--jobs", default="2", help="--jobs values to run besides 1, e.g. 2,3")
    args = parser.parse_args()
    args.jobs = [1, *(int(n) for n in args.jobs.split(",") if int(n) > 1)]
    cap, keys = str(args.capture), str(args.keys)
    with tempfile.TemporaryDirectory() as tmp:
        runs = {n: _child(_ONE, cap, keys, str(Path(tmp) / "run"), str(n)) for n in args.jobs}
        esecs, _ = _child(_ENGINE, cap, keys, str(Path(tmp) / "engine"))
    secs, frames, cpu = runs[1]
    wsecs, wframes, wbytes = _child(_WORKER, cap, keys)
    rsecs, _ = _child(_WALK, cap)
    us = 1e6 / frames
    s, m, w, r = secs * us, esecs * us, wsecs * 1e6 / wframes, rsecs * us
    frame_bytes = args.capture.stat().st_size / frames
    print(f"{int(frames):,} frames, {frame_bytes:,.0f} bytes each on average")
    print(
        f"  s  one process                      {s:6.2f} us/frame  {1e6 / s:>10,.0f} frames/s"
        f"  ({cpu / secs:.2f} cores: its threads hash the file and write the tables)"
    )
    cores = usable_cores()
    print(
        f"     so {cores} cores allow --jobs at most x{cores * secs / cpu:.2f} of one process "
        "(if splitting cost no CPU)"
    )
    print(f"  m  engine, every batch prefetched   {m:6.2f} us/frame  {1e6 / m:>10,.0f} frames/s")
    back = wbytes / wframes
    print(f"  w  a worker: read, parse, open, decode {w:6.2f} us/frame, {back:.0f} B back")
    print(f"  p  what a worker takes off the engine {s - m:6.2f} us/frame")
    print(f"  r  the reader's walk alone          {r:6.2f} us/frame (part of m)")
    for n, (wall, _, engine_cpu) in runs.items():
        print(
            f"  measured --jobs {n}: {wall:.2f} s wall, the engine's process {engine_cpu:.2f} s "
            f"of CPU ({engine_cpu / wall:.2f} cores), x{secs / wall:.2f} of one process"
        )
    print("model: t(N) = m + f p, f = max(0, (w/k - m) / (p + w/k)), k = N - 1 workers")
    for n in (1, 2, 3, 4, 8, 16, 32, 64):
        t = model(s, m, w, n)
        print(f"  --jobs {n:<3} {1e6 / t:>10,.0f} frames/s  x{s / t:5.2f} of one process")
    cluster = args.nodes * args.cores_per_node
    t = model(s, m, w, cluster + 1)
    disk = frame_bytes / args.disk_mbps  # us per frame to read the file at that rate
    print(
        f"  {args.nodes} nodes x {args.cores_per_node} cores: {1e6 / t:,.0f} frames/s "
        f"(x{s / t:.2f}); reading at {args.disk_mbps:,.0f} MB/s allows {1e6 / disk:,.0f} frames/s"
    )
    bound = frame_bytes / m  # MB/s: bytes per us
    print(f"  the limit, s / m: x{s / m:.2f}; the file read becomes it below {bound:,.0f} MB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
