"""Speed of `espforensics analyze` against tshark and the Python floor, in one run.

Usage: python benchmarks/bench_speed.py [--sizes 200000,2000000] [--workdir DIR]
                                        [--algorithm gcm|ccm|chacha20|cbc]
                                        [--jobs 2,4] [--repeat 3] [--no-tshark]
                                        [--tshark CMD ...] [--full] [--keep]

For each size, generates (once, with the project's own builder) an
Ethernet/IPv4 rfc4106 ESP capture (mean frame 1,289 bytes, two SAs; with
--algorithm ccm, chacha20 or cbc: AES-CCM, ChaCha20-Poly1305 or
AES-128-CBC + HMAC-SHA-256-128, in a folder of their own), then
measures, each in a fresh process:

- analyze: `analyze_to_dir` with every check, the tables and the reports,
  without and then with the plots; frames/s, MB/s and peak RSS;
- analyze with `jobs=N` for every N from 2 to the usable cores (or the
  list --jobs gives), no plots: the same outputs, N - 1 worker processes
  opening the batches ahead of the engine's; each one's speed against the
  one-process run (the scaling curve);
- the floor: one bare loop that walks the pcap records with mmap+struct,
  parses Ethernet/IPv4/ESP and decrypts with one AEAD object per SA (cbc:
  verifies the HMAC, then decrypts the CBC ciphertext);
- tshark, each --tshark command (default: `tshark` when on PATH; e.g.
  `--tshark tshark --tshark tshark44` for the host's 4.0 and a 4.4 in a
  chroot), with the same SAs (esp_sa table; gcm and cbc only): its version (`CMD --version`),
  its default dissection and `--disable-protocol tcp` (smallest size only:
  the default configuration is the slow one).

Each is run --repeat times (default 3), round robin, and the fastest run
counts: the VM this was tuned on varies by 10-40% from minute to minute.
Then prints the ratios analyze/tshark (against the fastest tshark run of all
commands, named), analyze/floor and the RSS at the largest size against the
smallest, and a block of the targets, each "met" or "not met" in this run.

Sizes of 5,000,000 frames or more are generated into --workdir (timed,
after checking that the disk has room: about 1.3 kB per frame for the
capture and 0.24 for the tables), measured with one analyze run (no plots,
no --jobs run, no floor, no tshark; --full measures them like the others)
and deleted afterwards unless --keep is given.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LARGE = 5_000_000  # frames from which a capture is measured once and deleted after
CAPTURE_BYTES_PER_FRAME = 1_305  # bench capture: 1,289-byte mean frame + 16-byte record header
TABLES_BYTES_PER_FRAME = 240  # packets.csv + packets.parquet (47 MB for 200,000 frames)
RSS_FLAT = 1.10  # "flat": peak RSS at the largest size at most 10% above the smallest

_ANALYZE = """
import resource, sys, time
from pathlib import Path
from espforensics.analysis import analyze_to_dir
t = time.perf_counter()
s = analyze_to_dir(sys.argv[1], [sys.argv[2]], Path(sys.argv[3]), force=True,
                   plots=sys.argv[4] == "plots", jobs=int(sys.argv[5]))
print(time.perf_counter() - t, s.capture.frames, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""

# The floor: what a bare Python loop costs per frame (walk, parse, verify and decrypt).
# AEADs: one AEAD object per SA. cbc: RFC 4303 s3.4.4, the HMAC-SHA-256-128 of header, IV
# and ciphertext first (a copy of a keyed HMAC per packet), then AES-CBC of the ciphertext
# under the packet's IV, with one decryptor per SA fed IV || ciphertext and the first block
# dropped (RFC 3602 s2.3: each block is XORed with the one before), the fastest way we know.
_FLOOR = """
import hashlib, hmac, mmap, resource, struct, sys, time
import yaml
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305
sas = {}
for e in yaml.safe_load(open(sys.argv[2]))["sas"]:
    k = bytes.fromhex(str(e["key"])[2:])
    if "enc" in e:  # cbc(aes) or ecb(cipher_null), + hmac(sha256) 128
        mac = hmac.new(bytes.fromhex(str(e["auth_key"])[2:]), digestmod=hashlib.sha256)
        dec = Cipher(algorithms.AES(k), modes.CBC(bytes(16))).decryptor() if k else None
        sas[int(str(e["spi"]), 16)] = (dec, mac)
        continue
    aead = str(e.get("aead", "rfc4106"))
    if aead.startswith("rfc4543"):  # GMAC: the payload authenticated, in clear
        sas[int(str(e["spi"]), 16)] = (AESGCM(k[:-4]), (k[-4:],))
        continue
    if aead.startswith("rfc4309"):  # CCM: 3-byte salt, 11-byte nonce
        cipher, salt = AESCCM(k[:-3], tag_length=16), k[-3:]
    elif aead.startswith("rfc7539esp"):
        cipher, salt = ChaCha20Poly1305(k[:-4]), k[-4:]
    else:
        cipher, salt = AESGCM(k[:-4]), k[-4:]
    sas[int(str(e["spi"]), 16)] = (cipher, salt)
t = time.perf_counter()
rec = struct.Struct("<IIII"); esp = struct.Struct(">II")
n = ok = 0
with open(sys.argv[1], "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
    off, end = 24, len(m)
    while off + 16 <= end:
        _s, _u, caplen, _l = rec.unpack_from(m, off)
        off += 16
        frame = m[off:off + caplen]
        off += caplen
        n += 1
        if frame[12:14] != b"\\x08\\x00" or frame[23] != 50:
            continue
        ihl = (frame[14] & 15) * 4
        e = 14 + ihl
        spi, seq = esp.unpack_from(frame, e)
        cipher, extra = sas[spi]
        if isinstance(extra, hmac.HMAC):
            mac = extra.copy()
            mac.update(frame[e:-16])
            if not hmac.compare_digest(mac.digest()[:16], frame[-16:]):
                raise SystemExit("floor: an ICV does not verify")  # as AESGCM raises
            if cipher is not None:  # NULL: nothing to decrypt
                cipher.update(frame[e + 8:-16])[16:]
        elif isinstance(extra, tuple):  # GMAC: header, IV and payload are the AAD
            cipher.decrypt(extra[0] + frame[e + 8:e + 16], frame[-16:], frame[e:-16])
        else:
            cipher.decrypt(extra + frame[e + 8:e + 16], frame[e + 16:], esp.pack(spi, seq))
        ok += 1
print(time.perf_counter() - t, n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


# Where children run: ``python -c`` and ``-m`` put the working directory first on sys.path,
# so a child started in a checkout would import that checkout's package, whatever the venv.
NEUTRAL_CWD = tempfile.gettempdir()


# The children's bytecode: an installed package is run from its compiled modules (pip
# compiles them when it installs a wheel; an editable install writes them on its first
# run), but a shell with PYTHONDONTWRITEBYTECODE set (some development shells set it) makes every
# run compile the package again, 0.2-0.3 s of a run that the user never pays. The
# children read and write a cache of their own instead, filled by ``compile_package``.
PYCACHE = Path(tempfile.gettempdir()) / "espforensics-bench-pycache"
CHILD_ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "PYTHONPYCACHEPREFIX": str(PYCACHE),
}


def _child_env(tree: Path | None) -> dict[str, str]:
    """CHILD_ENV, with ``tree``'s espforensics first on the path when given (another
    checkout, measured beside this one: bench_profiles.py --before)."""
    return CHILD_ENV if tree is None else {**CHILD_ENV, "PYTHONPATH": str(tree)}


@functools.cache
def compile_package(tree: Path | None = None) -> None:
    """Fill the children's bytecode cache with espforensics' modules (``tree``'s, when
    given), as an install does (once per benchmark run, before its first child)."""
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import compileall, espforensics as e, os; "
            "compileall.compile_dir(os.path.dirname(e.__file__), quiet=1)",
        ],
        check=True,
        cwd=NEUTRAL_CWD,
        env=_child_env(tree),
    )


def child_output(code: str, *args: str, tree: Path | None = None) -> str:
    """What ``python -c code args`` prints, run from NEUTRAL_CWD with CHILD_ENV (and
    ``tree``'s espforensics, when given)."""
    compile_package(tree)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        check=True,
        capture_output=True,
        text=True,
        cwd=NEUTRAL_CWD,
        env=_child_env(tree),
    ).stdout


def child_run(code: str, *args: str, tree: Path | None = None) -> tuple[float, int, float]:
    """A child's "seconds frames peak-KiB" line: seconds, frames and peak RSS in MiB."""
    out = child_output(code, *args, tree=tree).split()
    return float(out[0]), int(out[1]), int(out[2]) / 1024


def esp_sa_file(keys: Path) -> list[str]:
    """tshark -o options holding the esp_sa rows of the keys."""
    from espforensics.keys import load_sas  # noqa: PLC0415
    from espforensics.synth import esp_sa_text  # noqa: PLC0415

    sas = tuple(load_sas([keys]))
    rows = [line for line in esp_sa_text(sas).splitlines() if line.startswith('"')]
    opts = ["-o", "esp.enable_encryption_decode:TRUE"]
    if any(sa.auth_algorithm is not None for sa in sas):
        # analyze verifies every HMAC (RFC 4303 s3.4.4); tshark must too, for the same work
        opts += ["-o", "esp.enable_authentication_check:TRUE"]
    for row in rows:
        opts += ["-o", f"uat:esp_sa:{row}"]
    return opts


def _best_of(runs: dict[str, list[str]], repeat: int) -> dict[str, tuple[float, int, float]]:
    """Run each child ``repeat`` times, round robin; per child the fastest run and max RSS.

    Round robin, so that a slow spell of the machine hits every configuration alike.
    """
    best: dict[str, tuple[float, int, float]] = {}
    for _ in range(repeat):
        for name, argv in runs.items():
            secs, frames, rss = child_run(*argv)
            old = best.get(name)
            if old is None or secs < old[0]:
                best[name] = (secs, frames, max(rss, old[2] if old else 0.0))
            else:
                best[name] = (old[0], old[1], max(rss, old[2]))
    return best


def _capture_paths(workdir: Path, frames: int) -> tuple[Path, Path]:
    return workdir / f"bench-{frames}.pcap", workdir / f"bench-{frames}.keys.yaml"


def ensure_capture(
    workdir: Path, frames: int, algorithm: str = "gcm"
) -> tuple[Path, Path, float | None]:
    """The capture and key file of ``frames`` frames; seconds spent generating, or None.

    Written under a temporary name and renamed, so that an interrupted run
    leaves no truncated capture to be measured next time.
    """
    cap, keys = _capture_paths(workdir, frames)
    if cap.exists() and keys.exists():
        return cap, keys, None
    part, part_keys = (
        workdir / f"bench-{frames}-partial.pcap",
        workdir / f"bench-{frames}-partial.keys.yaml",
    )
    t = time.perf_counter()
    try:
        subprocess.run(
            [
                *(sys.executable, "-m", "espforensics.synth", "bench", str(frames), str(part)),
                *("--algorithm", algorithm),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    except BaseException:
        part.unlink(missing_ok=True)
        part_keys.unlink(missing_ok=True)
        raise
    secs = time.perf_counter() - t
    part_keys.replace(keys)
    part.replace(cap)
    return cap, keys, secs


def space_problem(workdir: Path, sizes: list[int], large: int, keep: bool) -> str | None:
    """One line saying why the disk under ``workdir`` is too small for the run, or None.

    Captures below ``large`` stay in the workdir (as cached); one above it is
    deleted after its run unless ``keep``, so only the largest counts then.
    The tables of one run at a time sit in the out folder.
    """
    missing = [n for n in sizes if not all(p.exists() for p in _capture_paths(workdir, n))]
    small = [n * CAPTURE_BYTES_PER_FRAME for n in missing if n < large]
    big = [n * CAPTURE_BYTES_PER_FRAME for n in missing if n >= large]
    need = sum(small) + (sum(big) if keep else max(big, default=0))
    need += max(sizes) * TABLES_BYTES_PER_FRAME
    st = os.statvfs(workdir)
    free = st.f_bavail * st.f_frsize
    if need <= free:
        return None
    return (
        f"bench_speed: not enough disk in {workdir}: this run needs about {need / 1e9:,.1f} GB "
        f"(captures of {', '.join(f'{n:,}' for n in missing) or 'none'} frames and the tables), "
        f"{free / 1e9:,.1f} GB free"
    )


@dataclass(frozen=True)
class Tshark:
    """One --tshark command: its words, as given, and its version line."""

    label: str
    argv: tuple[str, ...]
    version: str


def find_tshark(command: str) -> Tshark:
    """The command (split with shlex) and the first line of its ``--version``.

    Raises ValueError, with the reason, when it is not found or fails.
    """
    argv = tuple(shlex.split(command))
    if not argv or shutil.which(argv[0]) is None:
        raise ValueError(f"--tshark {command!r}: not found")
    try:
        res = subprocess.run(
            [*argv, "--version"], check=False, capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"--tshark {command!r}: {exc}") from exc
    lines = [line.strip() for line in res.stdout.splitlines() if line.strip()]
    if res.returncode != 0 or not lines:
        why = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        raise ValueError(f"--tshark {command!r} --version failed: {why}")
    return Tshark(shlex.join(argv), argv, lines[0])


TSHARK_CONFIGS = {
    "default dissection": (),
    "--disable-protocol tcp": ("--disable-protocol", "tcp"),
}


def tshark_fps(
    tshark: Tshark, cap: Path, opts: list[str], frames: int, extra: tuple[str, ...]
) -> float:
    t = time.perf_counter()
    subprocess.run(
        [*tshark.argv, "-n", "-r", str(cap), *opts, *extra],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return frames / (time.perf_counter() - t)


def measure_tsharks(
    tsharks: list[Tshark], cap: Path, keys: Path, frames: int, repeat: int
) -> dict[tuple[str, str], float]:
    """frames/s per (command, configuration): the fast one --repeat times, round robin
    over the commands, the fastest counting; the default dissection once each."""
    opts = esp_sa_file(keys)
    fast = "--disable-protocol tcp"
    best: dict[tuple[str, str], float] = {}
    for _ in range(repeat):
        for ts in tsharks:
            fps = tshark_fps(ts, cap, opts, frames, TSHARK_CONFIGS[fast])
            best[ts.label, fast] = max(fps, best.get((ts.label, fast), 0.0))
    for ts in tsharks:
        best[ts.label, "default dissection"] = tshark_fps(ts, cap, opts, frames, ())
    return best


@dataclass
class Figures:
    """What the targets are computed from, per size, as far as it was measured."""

    rss: dict[int, float]
    floor: dict[int, float]
    jobs: dict[int, float]
    plots_pct: dict[int, float]
    tshark: dict[int, tuple[float, str]]


def _where(n: int, values: dict[int, float], worst: str) -> str:
    return f"at {n:,} frames" + (f" ({worst} of {len(values)} sizes)" if len(values) > 1 else "")


def target_lines(fig: Figures, jobs: int) -> list[str]:
    """One line per target: its figure at the worst size measured, the target, met or not."""
    rows: list[tuple[str, str, str, bool | None]] = []
    ratios = {n: r for n, (r, _) in fig.tshark.items()}
    if ratios:
        n = min(ratios, key=ratios.__getitem__)
        shown = f"{ratios[n]:.2f} {_where(n, ratios, 'lowest')} ({fig.tshark[n][1]})"
        rows.append(("analyze/fastest tshark", shown, ">= 3.0", ratios[n] >= 3.0))
    else:
        rows.append(("analyze/fastest tshark", "no tshark run", ">= 3.0", None))
    for name, values, goal in (
        ("analyze/floor", fig.floor, 0.6),
        (f"jobs-{jobs}/jobs-1", fig.jobs, 1.7),
    ):
        if values:
            n = min(values, key=values.__getitem__)
            shown = f"{values[n]:.2f} {_where(n, values, 'lowest')}"
            rows.append((name, shown, f">= {goal}", values[n] >= goal))
        else:
            rows.append((name, "not run at any size", f">= {goal}", None))
    if fig.plots_pct:
        n = max(fig.plots_pct, key=fig.plots_pct.__getitem__)
        pct = fig.plots_pct[n]
        shown = f"{pct:+.0f}% of the no-plot run {_where(n, fig.plots_pct, 'highest')}"
        rows.append(("plots overhead", shown, "<= 20%", pct <= 20.0))
    else:
        rows.append(("plots overhead", "not run at any size", "<= 20%", None))
    sizes = sorted(fig.rss)
    shown = ", ".join(f"{fig.rss[n]:.0f} MB at {n:,}" for n in sizes)
    low = max(fig.rss.values()) <= 250.0
    ok: bool | None = low
    if len(sizes) > 1:
        ratio = fig.rss[sizes[-1]] / fig.rss[sizes[0]]
        shown += f"; largest/smallest {ratio:.2f}"
        ok = low and ratio <= RSS_FLAT
    elif low:
        shown += " (one size: flatness not measured)"
        ok = None
    rows.append(("peak RSS (no plots)", shown, f"<= 250 MB, flat (<= {RSS_FLAT:.2f})", ok))
    verdicts = {True: "met", False: "not met", None: "not measured"}
    return [
        f"  {name:<23} {shown}  target {goal}: {verdicts[met]}" for name, shown, goal, met in rows
    ]


def _print_tsharks(
    tsharks: list[Tshark], fps: float, found: dict[tuple[str, str], float]
) -> tuple[float, str]:
    width = max(9, *(len(ts.label) + 1 for ts in tsharks))
    for ts in tsharks:
        print(f"  {ts.label + ':':<{width}} {ts.version}")
        for config in TSHARK_CONFIGS:
            print(f"  {ts.label:<{width}} {found[ts.label, config]:>10,.0f} frames/s ({config})")
    (label, config), top = max(found.items(), key=lambda item: item[1])
    print(
        f"  analyze/tshark (fastest run: {label}, {config}, {top:,.0f} frames/s) {fps / top:6.2f}"
    )
    return fps / top, f"{label}, {config}"


def _measure_large(args: argparse.Namespace, n: int, cap: Path, keys: Path) -> float:
    """One analyze run, no plots, of a large capture: prints its figures, returns its RSS."""
    mb = cap.stat().st_size / 1e6
    secs, frames, rss = child_run(
        _ANALYZE, str(cap), str(keys), str(args.workdir / "out"), "no-plots", "1"
    )
    print(f"{n:>9,} frames ({mb:,.0f} MB), one run (analyze only; --full for every figure)")
    print(
        f"  analyze   {frames / secs:>10,.0f} frames/s  {mb / secs:7.1f} MB/s  "
        f"peak RSS {rss:.0f} MB  (every check, tables, reports)"
    )
    return rss


def _measure(
    args: argparse.Namespace, n: int, cap: Path, keys: Path, fig: Figures, tsharks: list[Tshark]
) -> None:
    """Every figure of one size: analyze, + plots, --jobs, the floor, and the tsharks given."""
    mb = cap.stat().st_size / 1e6
    out = str(args.workdir / "out")
    common = [str(cap), str(keys), out]
    curve = {f"jobs {j}": [_ANALYZE, *common, "no-plots", str(j)] for j in args.curve}
    best = _best_of(
        {
            "analyze": [_ANALYZE, *common, "no-plots", "1"],
            "plots": [_ANALYZE, *common, "plots", "1"],
            **curve,
            "floor": [_FLOOR, str(cap), str(keys)],
        },
        args.repeat,
    )
    secs, frames, fig.rss[n] = best["analyze"]
    fps = frames / secs
    psecs, _, prss = best["plots"]
    fsecs, fframes, _ = best["floor"]
    floor = fframes / fsecs
    fig.floor[n] = fps / floor
    if f"jobs {args.jobs}" in best:
        fig.jobs[n] = secs / best[f"jobs {args.jobs}"][0]
    fig.plots_pct[n] = (psecs - secs) / secs * 100
    print(f"{n:>9,} frames ({mb:,.0f} MB), fastest of {args.repeat} runs each")
    print(
        f"  analyze   {fps:>10,.0f} frames/s  {mb / secs:7.1f} MB/s  "
        f"peak RSS {fig.rss[n]:.0f} MB  (every check, tables, reports)"
    )
    print(
        f"  + plots   {frames / psecs:>10,.0f} frames/s  {mb / psecs:7.1f} MB/s  "
        f"peak RSS {prss:.0f} MB  (the plots add {psecs - secs:.1f} s)"
    )
    for j in args.curve:  # the scaling curve: --jobs N processes, N - 1 of them workers
        jsecs, _, jrss = best[f"jobs {j}"]
        print(
            f"  --jobs {j:<2} {frames / jsecs:>10,.0f} frames/s  {mb / jsecs:7.1f} MB/s  "
            f"peak RSS {jrss:.0f} MB (engine's process)  x{secs / jsecs:.2f} of one process"
        )
    print(f"  floor     {floor:>10,.0f} frames/s")
    print(f"  analyze/floor             {fps / floor:6.2f}")
    if tsharks:
        found = measure_tsharks(tsharks, cap, keys, n, args.repeat)
        fig.tshark[n] = _print_tsharks(tsharks, fps, found)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="200000,2000000")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "espf-bench")
    parser.add_argument("--no-tshark", action="store_true")
    parser.add_argument(
        "--tshark",
        action="append",
        metavar="CMD",
        help="a tshark command to compare against (repeatable, split with shlex; "
        "default: tshark when on PATH)",
    )
    parser.add_argument(
        "--jobs",
        default=None,
        help="the --jobs values of the scaling curve, e.g. 2,4 (default: 2 to the usable "
        "cores); the first is the one the target is for",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the fastest counts")
    parser.add_argument(
        "--full",
        action="store_true",
        help=f"measure sizes of {LARGE:,} frames or more like the others (floor, tshark, ...)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the large captures after")
    parser.add_argument(
        "--algorithm",
        choices=("gcm", "ccm", "chacha20", "cbc"),
        default="gcm",
        help="the bench SAs' algorithm (cbc: cbc(aes)-128 + hmac(sha256) 128; ccm, "
        "chacha20: no tshark, whose ESP has neither up to 4.4)",
    )
    parser.add_argument("--large-from", type=int, default=LARGE, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    from espforensics.engine.workers import usable_cores  # noqa: PLC0415 (bench_ab imports this file)

    cores = usable_cores()
    args.curve = (
        [int(j) for j in args.jobs.split(",")] if args.jobs else list(range(2, max(2, cores) + 1))
    )
    args.jobs = args.curve[0]
    print(f"machine: {cores} usable cores, {platform.processor() or platform.machine()}")
    if args.algorithm != "gcm":  # its own captures, beside the GCM ones
        args.workdir = args.workdir / args.algorithm
    tsharks: list[Tshark] = []
    if args.algorithm in ("ccm", "chacha20") and not args.no_tshark:
        # Measured: tshark 4.0.17 and 4.4.19 refuse both esp_sa encryption names.
        print("tshark: not run (the ESP of tshark 4.0 and 4.4 has no AES-CCM or ChaCha20)")
    elif not args.no_tshark:
        commands = args.tshark
        if commands is None:
            commands = ["tshark"] if shutil.which("tshark") else []
        try:
            tsharks = [find_tshark(c) for c in commands]
        except ValueError as exc:
            parser.error(str(exc))
    args.workdir.mkdir(parents=True, exist_ok=True)
    problem = space_problem(args.workdir, sizes, args.large_from, args.keep)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    fig = Figures({}, {}, {}, {}, {})
    for n in sizes:
        large = n >= args.large_from
        cap, keys, gen_secs = ensure_capture(args.workdir, n, args.algorithm)
        if gen_secs is not None:
            print(f"generated {n:,} frames in {gen_secs:.1f} s")
        try:
            if large and not args.full:
                fig.rss[n] = _measure_large(args, n, cap, keys)
            else:
                _measure(args, n, cap, keys, fig, tsharks if n == sizes[0] or large else [])
        finally:
            if large and not args.keep:
                cap.unlink(missing_ok=True)
                keys.unlink(missing_ok=True)
                shutil.rmtree(args.workdir / "out", ignore_errors=True)
                print(f"  deleted {cap.name} (--keep keeps it)")
    if len(sizes) > 1:
        print(
            f"RSS at {sizes[-1]:,} / at {sizes[0]:,} frames: "
            f"{fig.rss[sizes[-1]] / fig.rss[sizes[0]]:.2f}"
        )
    print("targets, from this run (each at its worst size):")
    for line in target_lines(fig, args.jobs):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
