"""How often the IV derivation check finds seqiv's true constant, on random windows.

Usage: python benchmarks/bench_iv_constant.py [--trials 2000] [--seed 5]

For windows of 16, 32 and 64 packets with consecutive sequence numbers
(random start and constant) whose IVs are built from seq64 + d, d drawn
uniformly from -2..+2 per packet (the hardest mix: no delta dominates),
prints the share of windows for which ``choose_constant`` returns the
true constant, and how long one choice takes. docs/checks.md quotes it.
"""

from __future__ import annotations

import argparse
import random
import time

from espforensics.checks.iv_derivation import choose_constant

M64 = (1 << 64) - 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    for n in (16, 32, 64):
        rng = random.Random(args.seed)
        right, spent = 0, 0.0
        for _ in range(args.trials):
            c, start = rng.getrandbits(64), rng.randint(1, 1 << 40)
            window = [(s, ((s + rng.randint(-2, 2)) & M64) ^ c) for s in range(start, start + n)]
            t = time.perf_counter()
            right += choose_constant(window) == c
            spent += time.perf_counter() - t
        print(
            f"window {n:2d}: true constant in {right / args.trials:6.1%} of {args.trials:,} "
            f"uniform mixes; {spent / args.trials * 1e6:,.0f} us per choice"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
