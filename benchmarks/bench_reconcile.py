"""Peak memory and speed of ``espforensics reconcile`` on a synthetic pair of captures.

Usage: python benchmarks/bench_reconcile.py [--frames 200000] [--folder bench-reconcile]

Generates (once) SENDER: ``--frames`` frames of ``python -m espforensics.synth
bench`` (rfc4106, two SAs: 0x1001 a -> b, 0x1002 b -> a); and RECEIVER:
the same frames as the other host saw them, its clock 3 s ahead, 200 us of
delay each way, every 997th frame lost, every 1009th duplicated and every
1013th swapped with the next. Then runs ``reconcile --out -`` once in a
fresh process and prints its time, its CPU time, frames/s and peak RSS (the
child's ru_maxrss).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from espforensics.model.records import Frame
from espforensics.synth import iter_bench_frames, write_capture

SHIFT_NS = 3_000_000_000
DELAY_NS = 200_000
FORWARD = 0x1001  # a -> b: the receiver is b


def _spi(frame: Frame) -> int:
    return int.from_bytes(frame.data[34:38], "big")  # Ethernet 14 + IPv4 20


def receiver_frames(n: int) -> Iterator[Frame]:
    """The sender's frames as the receiver's capture holds them."""
    held: Frame | None = None
    number = 0
    for i, frame in enumerate(iter_bench_frames(n), 1):
        if i % 997 == 0:
            continue
        sign = 1 if _spi(frame) == FORWARD else -1
        moved = frame._replace(ts_ns=frame.ts_ns + SHIFT_NS + sign * DELAY_NS)
        copies = [moved, moved] if i % 1009 == 0 else [moved]
        for copy in copies:
            if held is None and i % 1013 == 0:
                held = copy
                continue
            number += 1
            yield copy._replace(number=number)
            if held is not None:
                number += 1
                yield held._replace(number=number)
                held = None
    if held is not None:
        yield held._replace(number=number + 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--folder", type=Path, default=Path("bench-reconcile"))
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    sender = args.folder / f"sender-{args.frames}.pcap"
    receiver = args.folder / f"receiver-{args.frames}.pcap"
    if not receiver.exists():
        write_capture(sender, iter_bench_frames(args.frames))
        write_capture(receiver, receiver_frames(args.frames))
    command = [sys.executable, "-m", "espforensics", "reconcile", str(sender), str(receiver)]
    start = time.perf_counter()
    subprocess.run([*command, "--out", "-"], check=True)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss_mb, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
    print(f"{args.frames:,} frames each: {seconds:.1f} s ({cpu:.1f} s of CPU: on a busy "
          f"machine, the figure to compare), {args.frames / seconds:,.0f} frames/s "
          f"of SENDER, peak RSS {rss_mb:.0f} MB")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
