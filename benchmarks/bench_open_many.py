"""CPU seconds of two trees' keyed runs and of their ``open_many`` calls, interleaved.

Usage: python benchmarks/bench_open_many.py CAPTURE KEYS ROUNDS TREE_A TREE_B [ANALYZE OPTION...]

Each round runs, in a fresh process per tree (``PYTHONPATH=TREE``, a
bytecode cache of the tree's own), ``espforensics analyze CAPTURE --sa
KEYS --no-plots --out DIR`` and the options given (``--decrypted
FILE.pcap``, ...) through the CLI, with every context's ``open_many``
(AEAD and enc+auth) wrapped to sum its ``time.thread_time()``; prints the
process's CPU seconds after its imports and those of ``open_many``, per
tree, and B/A of each. CPU seconds, because the wall time of a shared
2-core machine moves more than the change (docs/performance.md, "CBC
opened in bulk"); the fastest round of each counts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import NEUTRAL_CWD

# One run through the CLI, open_many timed on the thread that calls it (--jobs threads too).
_CHILD = """
import sys, time
from espforensics.cli import main
from espforensics.crypto import AeadContext, EncAuthContext
spent = [0.0]
def timed(orig):
    def open_many(self, *args):
        t = time.thread_time()
        try:
            return orig(self, *args)
        finally:
            spent[0] += time.thread_time() - t
    return open_many
for cls in (AeadContext, EncAuthContext):
    cls.open_many = timed(cls.open_many)
sys.argv = ["espforensics", "analyze", *sys.argv[1:]]
t = time.process_time()
try:
    main()
except SystemExit:
    pass
print(time.process_time() - t, spent[0], file=sys.stderr)
"""


def _run(tree: str, cache: str, args: list[str]) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPATH": tree, "PYTHONPYCACHEPREFIX": cache}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=NEUTRAL_CWD,
        env=env,
    )
    process, opening = out.stderr.split()[-2:]
    return float(process), float(opening)


def main() -> int:
    if len(sys.argv) < 6:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    cap, keys, rounds, tree_a, tree_b, *options = sys.argv[1:]
    best: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(int(rounds)):
            for name, tree in (("A", tree_a), ("B", tree_b)):
                args = [cap, "--sa", keys, "--no-plots", "--force", "--out", f"{tmp}/{name}"]
                process, opening = _run(tree, f"{tmp}/pyc-{name}", [*args, *options])
                print(f"round {r + 1} {name}: process {process:.2f} s, open_many {opening:.2f} s")
                old = best.get(name, (process, opening))
                best[name] = (min(old[0], process), min(old[1], opening))
    (pa, oa), (pb, ob) = best["A"], best["B"]
    print(f"fastest: process A {pa:.2f} B {pb:.2f} s (B/A {pb / pa:.2f}); ", end="")
    print(f"open_many A {oa:.2f} B {ob:.2f} s (B/A {ob / oa:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
