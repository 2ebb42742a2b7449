"""Where one run's time goes: the wall seconds of the analysis's stages, in process.

Usage: python benchmarks/bench_split.py CAPTURE [KEYS]

Runs ``analyze_to_dir`` (no plots, one thread; without KEYS, no key: the
keyless lane) with each function of ``STAGES`` wrapped to add up its wall
time (``time.perf_counter``: a stage inside another counts in both, and a
thread's stage, the packets table's writer, is not here), then prints the
run's seconds and each stage's, largest first. Unlike cProfile it adds
nothing per Python call, so numpy-heavy stages read as they run. One run
on a shared machine is one sample: compare the stages of one run, and two
trees' runs taken in turn (docs/performance.md, "Keyless GMAC and NULL,
third step").
"""

from __future__ import annotations

import functools
import importlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# (module, attribute): each where its callers look it up
STAGES = (
    ("espforensics.engine.steady", "SteadyLane.prepare"),
    ("espforensics.engine.steady", "SteadyLane.apply"),
    ("espforensics.checks.leaks", "LeakCheck.refuses_bytes"),
    ("espforensics.checks.leaks", "may_be_clear"),
    ("espforensics.checks.leaks", "_in_bulk"),
    ("espforensics.checks.leaks", "clear_rows"),
    ("espforensics.checks.leaks", "spaced_hex"),
    ("espforensics.decode.clear", "word_sums"),
    ("espforensics.analysis.run", "_Tee.observe_rows"),
    ("espforensics.analysis", "_write_reports"),
)


def _timed(module: str, attribute: str, spent: dict[str, float]) -> None:
    """Wrap ``module.attribute`` (a function, or a class's method) to add its time to
    ``spent[attribute]``."""
    owner: object = importlib.import_module(module)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    inner: Callable[..., object] = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[attribute] = spent.get(attribute, 0.0) + time.perf_counter() - start

    setattr(owner, name, timed)


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    capture, keys = sys.argv[1], sys.argv[2:]
    spent: dict[str, float] = {}
    for module, attribute in STAGES:
        _timed(module, attribute, spent)
    from espforensics.analysis import analyze_to_dir  # noqa: PLC0415  # after the wrapping
    from espforensics.errors import EspForensicsError  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        try:
            summary = analyze_to_dir(capture, keys, Path(out), force=True, plots=False, jobs=1)
        except EspForensicsError as exc:  # a capture or key file it cannot use: its one line
            print(f"bench_split.py: error: {exc}", file=sys.stderr)
            return 2
        total = time.perf_counter() - start
    print(f"{Path(capture).name}: {summary.capture.frames:,} frames, {total:.3f} s in all")
    for attribute, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"{seconds:8.3f} s  {attribute}")
    for _, attribute in STAGES:
        if attribute not in spent:
            print(f"   never  {attribute}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
