"""Memory per SA of captures of one-packet SAs, counted with tracemalloc, not timed.

Usage: python benchmarks/bench_sa_memory.py [--few 2000] [--many 4000] [--keyed] [--peak]

Counts the Python allocations of runs over FEW and over MANY one-packet
SAs and prints their difference per SA added: what one more SA costs,
without what every run holds whatever its SAs. Keyless by default: the
benchmark frames with their SPIs cycling (as benchmarks/bench_sas.py
makes them); ``--keyed``: SAs each with its own rfc4106 key, the key
table holding each and its reverse (``synth.bench.one_packet_sas``).

What is counted: by default what the analysis holds once every frame is
analyzed, the analyzer alive (as tests/engine/test_many_sas.py counts
it); ``--peak``: the peak of a whole ``analyze_to_dir`` (no plots) of a
capture of them, its summary and tables included (pyarrow's own buffers
are not Python allocations). While its SAs wait for their IV constant a
run holds their records, up to 4,096 (analyzer/frame.py
``MAX_BEHIND_CHECK``): a peak per SA counts them unless both runs have
more SAs than that (``--few 20000 --many 40000``). Peak RSS adds what the
allocator keeps besides (objects rounded up, arenas partly used):
benchmarks/bench_sas.py measures that. tracemalloc slows a run about
twice; its figures depend on the code only, not on the machine's load.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import tracemalloc
from pathlib import Path

from espforensics.analysis import analyze_to_dir
from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.capture.writer import write_pcap
from espforensics.engine import Engine, deliver
from espforensics.keys import SaTable
from espforensics.model.options import Options
from espforensics.model.records import Frame
from espforensics.results.builder import SummaryBuilder
from espforensics.synth.bench import iter_bench_frames, one_packet_sas, with_spis


def sas_of(n: int, keyed: bool) -> tuple[list[Frame], SaTable]:
    """``n`` frames of ``n`` one-packet SAs, and the key table (empty without keys)."""
    if keyed:
        frames, sas = one_packet_sas(n)
        return frames, SaTable(sas)
    return list(with_spis(iter_bench_frames(n), n)), SaTable()


def held(frames: list[Frame], table: SaTable) -> int:
    """Bytes the analysis holds once every frame is analyzed, its analyzer alive."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        options = Options()
        analyzer = FrameAnalyzer(table, options)
        builder = SummaryBuilder()
        engine = Engine(analyzer, options)
        try:
            for row in engine.iter_rows(frames):
                deliver(row, builder)
        finally:
            engine.close()
        gc.collect()
        count = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    if len(builder.sa_keys()) != len(frames):  # one SA a frame, or the count means nothing
        raise SystemExit(
            f"{len(frames):,} one-packet SAs, but the run saw {len(builder.sa_keys()):,}"
        )
    return count


def peak(frames: list[Frame], table: SaTable, work: Path) -> int:
    """tracemalloc's peak over a whole analysis of a capture of ``frames``."""
    capture = work / f"sas-{len(frames)}.pcap"
    with capture.open("wb") as fh:
        write_pcap(fh, iter(frames), linktype=1)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        analyze_to_dir(capture, table, work / f"out-{len(frames)}", force=True, plots=False)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--few", type=int, default=2000, help="SAs of the smaller run")
    parser.add_argument("--many", type=int, default=4000, help="SAs of the larger run")
    parser.add_argument("--keyed", action="store_true", help="SAs with keys (rfc4106)")
    parser.add_argument("--peak", action="store_true", help="the peak of a whole analyze")
    args = parser.parse_args()
    if not 0 < args.few < args.many:
        parser.error("--few must be above 0 and below --many")
    counts = []
    with tempfile.TemporaryDirectory(prefix="espf-sa-memory-") as tmp:
        for n in (args.few, args.many):
            frames, table = sas_of(n, args.keyed)
            counts.append(peak(frames, table, Path(tmp)) if args.peak else held(frames, table))
    what = "peak of a whole analyze" if args.peak else "held once the frames are analyzed"
    kind = "keyed" if args.keyed else "keyless"
    print(f"{kind} one-packet SAs, {what}:")
    for n, count in zip((args.few, args.many), counts, strict=True):
        print(f"  {n:>9,} SAs: {count / 1e6:8.1f} MB")
    per_sa = (counts[1] - counts[0]) / (args.many - args.few)
    print(f"memory per SA: {per_sa:,.0f} bytes (difference / SAs added)")


if __name__ == "__main__":
    main()
