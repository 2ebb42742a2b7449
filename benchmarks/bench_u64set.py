"""Speed and memory of the set of random IVs as the steady lane uses it.

Usage: python benchmarks/bench_u64set.py [--values 200000,2000000] [--batch 700]
    [--repeat 3]

A key group of random IVs (checks/iv_groups.py) asks ``U64Set.contains_many``
which IVs of a batch it holds, then adds the new ones with ``add_new``: 700
values a call is what a 200,000-frame keyless gcm-random run of 4 SAs gives
(288 calls). For each count of random 64-bit values, fed in such batches,
prints the seconds of the probes and of the adds (fastest of ``--repeat``),
then, in a run under tracemalloc, the bytes the set holds per value. Run it
with PYTHONPATH set to each tree to compare them.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from espforensics.bounded.intervals import U64Set


def feed(values: np.ndarray, batch: int) -> tuple[float, float]:
    """Probe then add every batch of ``values``; the seconds of each kind of call."""
    s = U64Set()
    probe = add = 0.0
    for at in range(0, len(values), batch):
        part = values[at : at + batch]
        t0 = time.perf_counter()
        held = s.contains_many(part)
        t1 = time.perf_counter()
        s.add_new(part)
        add += time.perf_counter() - t1
        probe += t1 - t0
        assert not held.any()
    return probe, add


def held_bytes(values: np.ndarray, batch: int) -> float:
    """Bytes per value the set holds once every batch is in (tracemalloc)."""
    tracemalloc.start()
    try:
        s = U64Set()
        base = tracemalloc.get_traced_memory()[0]
        for at in range(0, len(values), batch):
            s.add_new(values[at : at + batch])
        return (tracemalloc.get_traced_memory()[0] - base) / len(values)
    finally:
        tracemalloc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", default="200000,2000000")
    parser.add_argument("--batch", type=int, default=700)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    for n in (int(v) for v in args.values.split(",")):
        values = np.unique(rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False))
        rng.shuffle(values)
        runs = [feed(values, args.batch) for _ in range(args.repeat)]
        probe, add = min(r[0] for r in runs), min(r[1] for r in runs)
        print(
            f"{len(values):>11,} values in batches of {args.batch:,}: probes {probe:.3f} s, "
            f"adds {add:.3f} s, both {probe + add:.3f} s (fastest of {args.repeat}); "
            f"{held_bytes(values, args.batch):.2f} bytes a value held"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
