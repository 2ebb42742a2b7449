"""Memory and speed of the (key, IV) reuse tracker on long streams.

Usage: python benchmarks/bench_iv_tracker.py [--counter N] [--random N]

Feeds the IV reuse check N packets of one SA directly (no capture, no
crypto): first IVs that follow Linux's seqiv counter (IV = seq64 xor a
constant, the kernel's case), then random IVs (as a generator without a
counter would make). Prints what the tracker holds at the end and at its
peak (tracemalloc, so only what the tracker allocates; the peak includes
the moment the hash table grows, when old and new arrays coexist), bytes
per packet, runs kept, and packets/s (slowed by tracemalloc).
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc

from espforensics.checks.context import Flow, Memo, PacketContext, SaState
from espforensics.checks.iv_reuse import IvReuseCheck
from espforensics.decode.ip import OuterIp
from espforensics.keys.sa import SaTable
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord

CONST = 0xEC10433AEF4C2994  # a seqiv constant seen in a real kernel capture


def feed(n: int, iv_of: str) -> dict[str, float]:
    """Observe n packets; return peak bytes, bytes/packet, runs and rate."""
    ip = OuterIp(4, b"\xc0\x00\x02\x01", b"\xc0\x00\x02\x02", 50, 20, 1300, None, 0, False, 20, 9)
    data = bytes(1300)
    flow = Flow(0x1001, "192.0.2.1", "192.0.2.2", SaState())
    rng = random.Random(1)
    tracemalloc.start()
    check = IvReuseCheck(SaTable())
    base = tracemalloc.get_traced_memory()[0]
    t = time.perf_counter()
    for seq in range(1, n + 1):
        iv = seq ^ CONST if iv_of == "counter" else rng.getrandbits(64)
        rec = PacketRecord(
            seq,
            0,
            1314,
            1314,
            Verdict.UNKNOWN_SA,
            spi=0x1001,
            seq=seq,
            seq64=seq,
            iv=f"{iv:016x}",
            esp_offset=20,
            expected_offset=20,
        )
        memo = Memo(seq.to_bytes(8, "big"))
        check.observe(PacketContext(rec, data, ip, flow, iv, memo=memo))
    dt = time.perf_counter() - t
    now, peak = tracemalloc.get_traced_memory()
    peak -= base
    tracemalloc.stop()
    [group] = check._groups.values()
    hashed = group.hashed
    return {
        "packets": n,
        "peak_bytes": peak,
        "bytes_per_packet": peak / n,
        "held_bytes": now - base,
        "held_per_packet": (now - base) / n,
        "runs": len(group.runs),
        "hashed_values": len(hashed) if hashed is not None else 0,
        "packets_per_s": n / dt,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counter", type=int, default=10_000_000)
    parser.add_argument("--random", type=int, default=2_000_000)
    args = parser.parse_args()
    for kind, n in (("counter", args.counter), ("random", args.random)):
        fig = feed(n, kind)
        print(
            f"{kind:8} IVs: {fig['packets']:>11,} packets | held at the end "
            f"{fig['held_bytes'] / 1e6:7.2f} MB = {fig['held_per_packet']:6.2f} B/packet | peak "
            f"{fig['peak_bytes'] / 1e6:7.2f} MB = {fig['bytes_per_packet']:6.2f} B/packet | "
            f"runs {fig['runs']:,} | hashed {fig['hashed_values']:,} | "
            f"{fig['packets_per_s']:,.0f} packets/s under tracemalloc"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
