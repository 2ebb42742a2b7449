"""What many test modules share: the real captures and one way to run the analyzer.

The real Linux captures live beside the checkout, in ``../shared/captures``
(``KERNEL/NAME/{capture.pcap,xfrm-state.txt,ground-truth.json}``). A test
that reads them says so in one of the ways below, and skips, with
``NO_CAPTURES`` as its reason, where they are absent (a fresh clone):
``needs_captures`` on it or on its module (``pytestmark``), a case of
``capture_params``, the ``captures`` fixture (tests/conftest.py; also through a
fixture of its own that takes it), or ``real_capture``. A test that reads
them without saying so fails, with or without them (``audit_captures``): on a
fresh clone it would error instead of skipping.

``run_frames``/``run_scenario`` analyze in process with the ``Options`` a
test gives (tests/conftest.py's ``lane`` fixture gives each test the steady
lane off and on); ``run_cli`` runs the command line in process and returns
its exit code, its output and its output folder.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from espforensics.analysis import Analysis, analyze, analyze_to_dir
from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.capture import open_capture
from espforensics.engine import Engine, Row, SteadyRows
from espforensics.keys import SaTable
from espforensics.keys.sa import SecurityAssociation
from espforensics.model.enums import Proto, SeqAnomaly, Verdict
from espforensics.model.options import Options
from espforensics.model.records import DecryptionSecrets, Finding, Frame, PacketRecord
from espforensics.report import filters as tcpdump
from espforensics.synth import Scenario, build_scenario, write_scenario
from espforensics.tables.rows import records_to_table, steady_table

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
CAPTURES = Path(__file__).resolve().parents[3] / "shared" / "captures"
NO_CAPTURES = f"the real captures are not beside the checkout ({CAPTURES} is absent)"
# The marker of a test that reads CAPTURES: tests/conftest.py skips it where they are absent.
needs_captures = pytest.mark.real_captures

# What a finished `analyze --no-plots` leaves in its folder, sorted (docs/outputs.md).
OUTPUT_NAMES = [
    "finding_frames.csv",
    "finding_frames.parquet",
    "findings.csv",
    "packets.csv",
    "packets.parquet",
    "report.html",
    "report.md",
    "report.txt",
    "sas.csv",
    "summary.json",
]

# The two lanes every in-process end-to-end test runs with (tests/conftest.py ``lane``).
PER_FRAME = Options(steady_lane=False)
STEADY = Options(batch_frames=64)  # small batches: the lane takes an SA from its second batch


# -- the real captures -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RealCapture:
    """One real capture: its files and its ground truth."""

    name: str  # KERNEL/NAME, e.g. linux-6.1/esn-wrap-v4
    folder: Path

    @property
    def pcap(self) -> Path:
        return self.folder / "capture.pcap"

    @property
    def keys(self) -> Path:
        """The ``ip xfrm state`` text of its SAs."""
        return self.folder / "xfrm-state.txt"

    @property
    def truth(self) -> dict[str, Any]:
        return _truth(self.folder)

    @property
    def frames(self) -> int:
        """The frames the ground truth counts."""
        return int(str(self.truth["frames"]))


@cache
def _truth(folder: Path) -> dict[str, Any]:
    truth: dict[str, Any] = json.loads((folder / "ground-truth.json").read_text())
    return truth


def real_capture(name: str) -> RealCapture:
    """The capture ``KERNEL/NAME``; the calling test skips if the captures are absent."""
    watch_captures(None)  # the test says it reads them
    if not CAPTURES.is_dir():
        pytest.skip(NO_CAPTURES)
    folder = CAPTURES / name
    assert (folder / "capture.pcap").is_file(), f"no real capture {name} in {CAPTURES}"
    return RealCapture(name, folder)


@cache
def analyze_real(name: str, options: Options, keys: bool = True) -> Analysis:
    """A real capture analyzed in process (once per session), with its keys or without."""
    cap = real_capture(name)
    return analyze(cap.pcap, [cap.keys] if keys else None, options)


def capture_names(kernel: str | None = None) -> list[str]:
    """Every real capture as ``KERNEL/NAME`` (of one kernel, if given), sorted."""
    pattern = f"{kernel or '*'}/*/capture.pcap"
    return sorted(f"{p.parent.parent.name}/{p.parent.name}" for p in CAPTURES.glob(pattern))


def capture_params(kernel: str | None = None) -> list[object]:
    """``capture_names`` for ``parametrize``; one visibly skipped case where they are absent."""
    names = capture_names(kernel)
    if names:
        return [pytest.param(n, id=n, marks=needs_captures) for n in names]
    return [pytest.param("", id="no-captures", marks=needs_captures)]


# -- a test that reads the captures without saying so -----------------------------------

_WATCHED: list[str] = []  # the running test's id, while it has not said it reads CAPTURES
# Audit events (docs.python.org/3/library/audit_events.html) whose first arguments name
# what is read or run, and how many of them to look at.
_READS = {
    "open": 1,
    "os.listdir": 1,
    "os.scandir": 1,
    "glob.glob": 1,
    "os.symlink": 1,
    "subprocess.Popen": 2,  # executable, args (a command line may name a capture)
    "os.posix_spawn": 2,
    "os.exec": 2,
}


def watch_captures(test: str | None) -> None:
    """``test`` runs now and has not said it reads CAPTURES (None: nothing is watched)."""
    _WATCHED[:] = [test] if test is not None else []


def _captures_named(value: object) -> str | None:
    """The path or command line of ``value`` that names CAPTURES, if one does."""
    if isinstance(value, list | tuple):
        return next(filter(None, map(_captures_named, value)), None)
    if isinstance(value, str | bytes | os.PathLike):
        text = os.fsdecode(os.fspath(value))
        return text if str(CAPTURES) in text else None
    return None  # a file descriptor, None


def audit_captures(event: str, args: tuple[Any, ...]) -> None:
    """An audit hook (``sys.addaudithook``, tests/conftest.py): a watched test that opens,
    lists or runs a command on a path under CAPTURES fails, naming the marker it lacks."""
    reads = _READS.get(event)
    what = _captures_named(args[:reads]) if reads is not None and _WATCHED else None
    if what is None:
        return
    test = _WATCHED.pop()  # once: what runs after the failure is not the test's
    pytest.fail(
        f"{test} reads {what} without tests.support.helpers.needs_captures (or real_capture, "
        f"capture_params, the captures fixture): without ../shared it would not skip",
        pytrace=False,
    )


# -- in process ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """An in-process run: one record per row of packets.parquet, the findings, the analyzer."""

    records: list[PacketRecord]
    findings: list[Finding]
    analyzer: FrameAnalyzer


def _record(ns: int, row: dict[str, Any]) -> PacketRecord:
    """A record from a packets-table row (``time`` apart: Arrow reads it as a datetime)."""
    enums = {
        "verdict": Verdict(row["verdict"]),
        "proto": Proto(row["proto"]),
        "seq_anomaly": SeqAnomaly(row["seq_anomaly"] or ""),
    }
    return PacketRecord(**{**row, **enums, "time": ns})


def steady_records(rows: SteadyRows) -> list[PacketRecord]:
    """The records of a steady run, read back from the packets table it writes.

    The table (tables.steady_table) is what packets.parquet holds for these
    frames, so each record is what a user reads; the records made from it
    must give the same table again, or the reading here is wrong.
    """
    table = steady_table(rows)
    times = table.column("time").cast(pa.int64()).to_pylist()
    plain = table.drop_columns(["time"]).to_pylist()
    records = [_record(ns, row) for ns, row in zip(times, plain, strict=True)]
    assert records_to_table(records).equals(table), "a steady run read back differs"
    return records


def records_of(row: Row) -> list[PacketRecord]:
    """The records of one row the engine yields (a record, or a steady run's records)."""
    return [row] if isinstance(row, PacketRecord) else steady_records(row)


def run_frames(
    items: Iterable[Frame | DecryptionSecrets],
    sas: SaTable | Iterable[SecurityAssociation],
    options: Options,
    origin: str = "<capture>",
) -> Run:
    """Analyze ``items`` in process with ``options``; every row as records."""
    table = sas if isinstance(sas, SaTable) else SaTable(tuple(sas))
    analyzer = FrameAnalyzer(table, options, origin)
    engine = Engine(analyzer, options)
    try:
        records = [rec for row in engine.iter_rows(items) for rec in records_of(row)]
    finally:
        engine.close()
    return Run(records, analyzer.findings, analyzer)


def iter_rows(
    items: Iterable[Frame | DecryptionSecrets], analyzer: FrameAnalyzer, options: Options
) -> Iterator[PacketRecord]:
    """``run_frames`` for a test that builds its own analyzer: its records, lazily."""
    engine = Engine(analyzer, options)
    try:
        for row in engine.iter_rows(items):
            yield from records_of(row)
    finally:
        engine.close()


@cache
def scenario(name: str, seed: int = 1) -> Scenario:
    """A synthetic scenario, built once per test session."""
    return build_scenario(name, seed=seed)


class ScenarioRun(NamedTuple):
    """A scenario and what the analyzer made of it."""

    scenario: Scenario
    records: list[PacketRecord]
    findings: list[Finding]


@cache
def run_scenario(
    name: str, options: Options, keys: bool = True, secrets: bool = False, seed: int = 1
) -> ScenarioRun:
    """A scenario (built once) analyzed in process, with its keys or without; ``secrets``:
    its pcapng decryption secrets blocks go first, as a capture file holds them."""
    sc = scenario(name, seed)
    items: Sequence[Frame | DecryptionSecrets] = (
        [*sc.secrets, *sc.frames] if keys and secrets else sc.frames
    )
    run = run_frames(items, sc.sas if keys else (), options, name)
    return ScenarioRun(sc, run.records, run.findings)


def analyzed_dir(tmp: Path, name: str, plots: bool = True) -> Path:
    """A scenario (seed 1) written under ``tmp/in`` and analyzed with its keys into
    ``tmp/out`` (every output file; plots unless told not to)."""
    return analyzed_scenario(tmp, scenario(name), name, plots)[1]


def analyzed_scenario(tmp: Path, sc: Scenario, stem: str, plots: bool = True) -> tuple[Path, Path]:
    """``analyzed_dir`` of a scenario value: (the capture written, the output folder)."""
    paths = write_scenario(sc, tmp / "in", stem=stem)
    out = tmp / "out"
    analyze_to_dir(paths["capture"], [paths["keys"]], out, plots=plots)
    return paths["capture"], out


# -- the command line, in process ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CliRun:
    """What ``espforensics ARGS`` did: its exit code, stdout, stderr and output folder."""

    code: int
    stdout: str
    stderr: str
    out: Path | None
    exception: BaseException | None
    stdout_bytes: bytes
    stderr_bytes: bytes


def run_cli(*args: str | Path) -> CliRun:
    """``espforensics ARGS`` in process; ``out`` is the ``--out`` folder, if one is given."""
    from espforensics.cli import app

    argv = [str(a) for a in args]
    res = CliRunner().invoke(app, argv)
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
    return CliRun(
        res.exit_code,
        res.stdout,
        res.stderr,
        out,
        res.exception,
        res.stdout_bytes,
        res.stderr_bytes,
    )


# -- the reports' filters, run by tcpdump and tshark ----------------------------------------


def packet_rows(out: Path) -> list[dict[str, str]]:
    """The rows of an output folder's packets.csv, as text."""
    with (out / "packets.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def tcpdump_frames(capture: Path, bpf: str, tmp: Path) -> list[int]:
    """Frame numbers tcpdump selects with ``bpf`` (matched back by time and bytes)."""
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        if os.environ.get("CI"):
            pytest.fail("tcpdump is not installed in CI")
        pytest.skip("tcpdump not installed")
    picked = tmp / "picked.pcap"
    subprocess.run(
        [tcpdump, "-r", str(capture), "-w", str(picked), bpf], check=True, capture_output=True
    )
    # tcpdump writes microsecond timestamps: match on those and the bytes.
    with open_capture(capture) as cap:
        index = {(f.ts_ns // 1000, f.data): f.number for f in cap if isinstance(f, Frame)}
    with open_capture(picked) as cap:
        return [index[(f.ts_ns // 1000, f.data)] for f in cap if isinstance(f, Frame)]


def tshark_frames(capture: Path, display_filter: str, command: str = "tshark") -> list[int]:
    """Frame numbers ``tshark -r CAPTURE -Y FILTER`` selects; a filter tshark refuses fails
    the test with tshark's own message. ``command`` may name another tshark on PATH
    (``tshark44``, Debian 13's 4.4: docs/performance.md), skipped where it is absent."""
    tshark = shutil.which(command)
    if tshark is None:
        if os.environ.get("CI") and command == "tshark":
            pytest.fail("tshark is not installed in CI")
        pytest.skip(f"{command} not installed")
    res = subprocess.run(
        [tshark, "-n", "-r", str(capture), "-Y", display_filter, "-T", "fields",
         "-e", "frame.number"],
        check=False, capture_output=True, text=True, timeout=300, cwd=capture.parent,
    )  # fmt: skip
    refused = [line for line in res.stderr.splitlines() if "dangerous" not in line]
    assert res.returncode == 0, f"{command} refuses {display_filter!r}: {' '.join(refused)}"
    return [int(n) for n in res.stdout.split()]


def printed_filter(report: str) -> str:
    """The misplaced-ESP filter a report.txt prints, its wrapped lines joined."""
    lines = report.splitlines()
    start = lines.index(tcpdump.HEADING)
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        body.append(line.strip())
    return " ".join(body)
