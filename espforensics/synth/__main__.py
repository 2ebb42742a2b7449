"""Command line of the capture builder.

    python -m espforensics.synth SCENARIO OUTDIR [--seed N] [--stem NAME]
                                 [--format pcap|pcapng] [--compression KIND]
    python -m espforensics.synth bench N OUT [--seed N] [--mean-size BYTES]
                                 [--algorithm gcm|ccm|chacha20|cbc|gmac|null]
                                 [--ivs linux|seq|counter|random]
                                 [--format pcap|pcapng] [--compression KIND]
    python -m espforensics.synth list

In: arguments. Out: files (capture, keys.yaml, xfrm-state.txt, esp_sa,
expected.json; for ``bench`` the capture and ``<OUT stem>.keys.yaml``) and
one line per file on stdout. Exit codes: 0 done, 2 usage error (argparse).
argparse rather than typer: typer belongs to the analyzer's CLI only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from espforensics.synth.bench import BENCH_ALGORITHMS, IV_PROFILES, bench_sas, iter_bench_frames
from espforensics.synth.capture import SUFFIXES, write_capture, write_scenario
from espforensics.synth.keytext import keys_yaml
from espforensics.synth.scenarios import SCENARIOS, build_scenario

PROG = "python -m espforensics.synth"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=1, help="seed of keys and jitter (1)")
    parser.add_argument(
        "--format",
        choices=("pcap", "pcapng"),
        default=None,
        help="capture format (default: the scenario's, pcap for bench)",
    )
    parser.add_argument(
        "--compression", choices=tuple(SUFFIXES), default=None, help="compress the capture file"
    )


def _scenario_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Write a synthetic ESP capture.")
    parser.add_argument(
        "scenario",
        choices=tuple(SCENARIOS),
        metavar="SCENARIO",
        help="one of: " + ", ".join(SCENARIOS),
    )
    parser.add_argument("outdir", type=Path, help="folder for the capture and its files")
    parser.add_argument(
        "--stem",
        default=None,
        help="name files <stem>.pcap, <stem>.keys.yaml, ... (default capture.*)",
    )
    _common(parser)
    return parser


def _bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} bench", description="Write a benchmark capture of N frames."
    )
    parser.add_argument("frames", type=int, help="number of frames")
    parser.add_argument("out", type=Path, help="capture file to write")
    parser.add_argument("--mean-size", type=int, default=1289, help="mean frame length (1289)")
    parser.add_argument(
        "--algorithm",
        choices=sorted(BENCH_ALGORITHMS),
        default="gcm",
        help="the SAs' algorithm (gcm; cbc: cbc(aes) + hmac(sha256))",
    )
    parser.add_argument(
        "--ivs",
        choices=IV_PROFILES,
        default="linux",
        help="the senders' IVs (linux: seqiv, echainiv for cbc; seq: IV = seq64; "
        "counter: seq64 + c; random)",
    )
    _common(parser)
    return parser


def _run_scenario(argv: Sequence[str]) -> int:
    args = _scenario_parser().parse_args(argv)
    scenario = build_scenario(args.scenario, args.seed)
    paths = write_scenario(
        scenario,
        args.outdir,
        stem=args.stem,
        compression=args.compression,
        capture_format=args.format,
    )
    counts = ", ".join(f"{k} {v}" for k, v in scenario.verdict_counts().items())
    print(f"{paths['capture']}: {len(scenario.frames)} frames ({counts})")
    for role in ("keys", "xfrm", "esp_sa", "expected"):
        print(paths[role])
    return 0


def _run_bench(argv: Sequence[str]) -> int:
    parser = _bench_parser()
    args = parser.parse_args(argv)
    if args.frames < 0:
        parser.error("the frame count must not be negative")
    try:
        frames = iter_bench_frames(args.frames, args.seed, args.mean_size, args.algorithm, args.ivs)
    except ValueError as exc:  # a counter profile asked of CBC's IVs
        parser.error(str(exc))
    args.out.parent.mkdir(parents=True, exist_ok=True)  # as a scenario's folder is made
    count = write_capture(
        args.out, frames, format=args.format or "pcap", compression=args.compression, linktypes=(1,)
    )
    keys = args.out.with_name(args.out.name.split(".")[0] + ".keys.yaml")
    keys.write_text(keys_yaml(bench_sas(args.seed, args.algorithm)), encoding="ascii")
    print(f"{args.out}: {count} frames")
    print(keys)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to ``bench``, ``list`` or a scenario; returns the exit code (2: a file
    could not be written, said in one line)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["bench"]:
            return _run_bench(args[1:])
        if args == ["list"]:
            for name, builder in SCENARIOS.items():
                print(f"{name:20} {builder(1).description}")
            return 0
        return _run_scenario(args)
    except OSError as exc:  # no permission, a file in the way, no space left (no file name)
        print(f"{PROG}: error: {exc.filename or 'writing'}: {exc.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
