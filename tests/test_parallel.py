"""``analyze --jobs``: workers decode, the main process keeps the state; outputs must not change.

The tests cut captures into batches of a few frames, so that every
boundary case happens: a datagram's fragments decoded by different
workers, an ESN wrap inside and across batches, a reused IV whose two
uses fall in different batches, a secrets block in the middle of a batch.
They compare every record and every finding with the one-process run,
and the files ``analyze`` writes byte for byte.
"""

from __future__ import annotations

import dataclasses
import gzip
import multiprocessing
import os
import random
import select
import signal
import sys
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture
from espforensics.cli import app
from espforensics.errors import CaptureTruncated, EspForensicsError
from espforensics.keys import SaTable, load_sas
from espforensics.model import Finding, FindingKind, Frame, PacketRecord, Verdict
from espforensics.parallel import _Workers, iter_records_parallel
from espforensics.pipeline import FrameAnalyzer, Options, iter_records
from espforensics.synth import SCENARIOS, build_scenario, keys_yaml, write_capture, write_scenario
from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, SaFlow, make_sa
from espforensics.synth.packets import udp_bytes
from tests.stop_at import run_until_stopped

# Interleaved into one capture: ESN wrap, IV reuse, fragments (v4 and v6), the
# kernel's misplaced header, sequence anomalies, a failed ICV and unknown SPIs.
MIXED = (
    "esn-wrap",
    "iv-reuse",
    "fragments-v4",
    "fragments-v6",
    "kernel-gso-v6",
    "sequence",
    "corrupt-icv",
    "unknown-spi",
)


@cache
def mixed_capture(folder: Path) -> tuple[Path, Path]:
    """The MIXED scenarios' frames, round robin, renumbered, 1 ms apart."""
    scenarios = [build_scenario(name) for name in MIXED]
    queues = [list(sc.frames) for sc in scenarios]
    frames: list[Frame] = []
    while any(queues):
        for queue in queues:
            if queue:
                f = queue.pop(0)
                n = len(frames) + 1
                frames.append(f._replace(number=n, ts_ns=1_700_000_000_000_000_000 + n * 1_000_000))
    cap, keys = folder / "mixed.pcap", folder / "mixed.keys.yaml"
    write_capture(cap, frames)
    keys.write_text(keys_yaml([sa for sc in scenarios for sa in sc.sas]))
    return cap, keys


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return mixed_capture(tmp_path_factory.mktemp("mixed"))


def _rows(records: list[PacketRecord]) -> list[tuple[object, ...]]:
    return [dataclasses.astuple(r) for r in records]


def _serial(cap: Path, sas: SaTable) -> tuple[list[PacketRecord], list[Finding]]:
    analyzer = FrameAnalyzer(sas, Options(), str(cap))
    with open_capture(cap) as capture:
        records = list(iter_records(capture, analyzer))
    return records, analyzer.findings


def _parallel(
    cap: Path, sas: SaTable, workers: int, batch: int
) -> tuple[list[PacketRecord], list[Finding], FrameAnalyzer]:
    analyzer = FrameAnalyzer(sas, Options(), str(cap))
    records = list(iter_records_parallel(cap, analyzer, workers, batch=batch))
    return records, analyzer.findings, analyzer


def _table(keys: Path) -> SaTable:
    return load_sas([keys])


@pytest.mark.parametrize(("workers", "batch"), [(1, 1), (2, 3), (3, 5), (2, 64)])
def test_mixed_capture_gives_the_same_records_and_findings(
    mixed: tuple[Path, Path], workers: int, batch: int
) -> None:
    cap, keys = mixed
    sas = _table(keys)
    want_records, want_findings = _serial(cap, sas)
    got_records, got_findings, analyzer = _parallel(cap, sas, workers, batch)
    assert _rows(got_records) == _rows(want_records)
    assert got_findings == want_findings
    # The work really was split: every verified packet that is not a reassembled
    # datagram was decoded by a worker, except perhaps those of the ESN SA (0x6001),
    # whose high half the main process decides again when a worker guessed otherwise.
    ok = [r for r in want_records if r.verdict is Verdict.OK and not r.fragments]
    esn = sum(r.spi == 0x6001 for r in ok)
    assert esn == 11
    assert len(ok) - esn <= analyzer.adopted <= len(want_records)


def test_mixed_capture_covers_what_crosses_batches(mixed: tuple[Path, Path]) -> None:
    """The fixture holds what the identity must survive, across batches of 3."""
    cap, keys = mixed
    records, findings = _serial(cap, _table(keys))
    kinds = {f.kind for f in findings}
    assert {FindingKind.ESN_WRAP, FindingKind.IV_REUSE, FindingKind.ESP_MISPLACED} <= kinds
    reassembled = [r for r in records if r.fragments]
    assert len(reassembled) >= 2
    batch = 3
    spans = []
    for rec in reassembled:
        parts = [
            r.frame for r in records if r.detail.endswith(f"completed in frame {rec.frame}")
        ] + [rec.frame]
        spans.append({(n - 1) // batch for n in parts})
    assert any(len(s) > 1 for s in spans), "no datagram's fragments span two batches"
    reuse = next(f for f in findings if f.kind is FindingKind.IV_REUSE and len(f.frames) >= 2)
    assert len({(n - 1) // batch for n in reuse.frames}) > 1


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_is_the_same_on_two_processes(name: str, tmp_path: Path) -> None:
    sc = build_scenario(name)
    files = write_scenario(sc, tmp_path)
    sas = SaTable(sc.sas if not sc.secrets else ())
    want_records, want_findings = _serial(files["capture"], sas)
    got_records, got_findings, _ = _parallel(files["capture"], sas, 2, 4)
    assert _rows(got_records) == _rows(want_records)
    assert got_findings == want_findings


def test_a_cut_capture_reports_the_same_frames_and_error(
    mixed: tuple[Path, Path], tmp_path: Path
) -> None:
    cap, keys = mixed
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(cap.read_bytes()[:-700])
    sas = _table(keys)
    analyzer = FrameAnalyzer(sas, Options(), str(cut))
    got: list[PacketRecord] = []
    with pytest.raises(CaptureTruncated) as parallel_error:
        got.extend(iter_records_parallel(cut, analyzer, 2, batch=4))
    with pytest.raises(CaptureTruncated) as serial_error:
        _serial(cut, sas)
    want: list[PacketRecord] = []
    serial = FrameAnalyzer(sas, Options(), str(cut))
    with open_capture(cut) as capture, pytest.raises(CaptureTruncated):
        want.extend(iter_records(capture, serial))
    assert _rows(got) == _rows(want)
    assert len(got) > 0
    assert str(parallel_error.value) == str(serial_error.value)


def test_cli_jobs_writes_the_same_files(mixed: tuple[Path, Path], tmp_path: Path) -> None:
    cap, keys = mixed
    runner = CliRunner()
    outs = []
    for jobs in (1, 3):
        out = tmp_path / f"jobs{jobs}"
        args = ["analyze", str(cap), "--sa", str(keys), "--out", str(out), "--no-plots", "-q"]
        result = runner.invoke(app, [*args, "--jobs", str(jobs)])
        assert result.exit_code == 1, result.output  # the mixed capture has critical findings
        outs.append(out)
    for name in ("packets.csv", "packets.parquet", "findings.csv", "sas.csv", "report.txt"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def test_library_jobs_matches(mixed: tuple[Path, Path], tmp_path: Path) -> None:
    cap, keys = mixed
    one = analyze_to_dir(cap, [keys], tmp_path / "a", plots=False)
    two = analyze_to_dir(cap, [keys], tmp_path / "b", plots=False, jobs=2)
    assert one == two


def test_a_worker_guess_of_the_high_half_is_checked(tmp_path: Path) -> None:
    """A 32-bit counter that wraps without ESN: only the state of earlier batches knows.

    RFC 4303 forbids the wrap, but a capture of a broken sender has one. The
    ICV does not cover the high half then, so a worker that meets the SA
    only after the wrap infers high half 0 where the one-process run, which
    saw the packets before it, infers 1. The main process must notice and
    decide itself.
    """
    rng, cb = random.Random(3), CaptureBuilder(3)
    flow = SaFlow(make_sa(rng, 0x6101, V4_A, V4_B), V4_A, V4_B)
    for seq64 in range((1 << 32) - 3, (1 << 32) + 3):  # wire: ...fffd fffe ffff 0 1 2
        packet, truth = flow.send(udp_bytes(V4_A, V4_B, 6000, 6001, b"x" * 24), 17, seq64)
        cb.emit_ip(packet, truth)
    sc = cb.scenario("wrap-no-esn", "", (flow.sealer,))
    cap = write_scenario(sc, tmp_path)["capture"]
    sas = SaTable(sc.sas)
    want, _ = _serial(cap, sas)
    assert [r.seq64 for r in want] == list(range((1 << 32) - 3, (1 << 32) + 3))
    got, _, analyzer = _parallel(cap, sas, 2, 3)  # frames 4-6 go to the second worker
    assert _rows(got) == _rows(want)
    assert analyzer.adopted == 3  # the second worker's three guesses were redone


def test_a_dead_worker_is_one_clear_error() -> None:
    recv, send = multiprocessing.Pipe(duplex=False)
    send.close()  # what the main process sees when a worker is killed
    workers = object.__new__(_Workers)
    workers._pipes, workers._procs, workers._path, workers._ended = [recv], [], "x.pcap", set()
    with pytest.raises(EspForensicsError, match=r"^x.pcap: a worker process of --jobs died"):
        workers.batch(0)


def test_a_compressed_capture_gives_the_same_records(
    mixed: tuple[Path, Path], tmp_path: Path
) -> None:
    """Each worker decompresses the capture itself (gzip here), and must agree."""
    cap, keys = mixed
    gz = tmp_path / "mixed.pcap.gz"
    gz.write_bytes(gzip.compress(cap.read_bytes()))
    sas = _table(keys)
    want, want_findings = _serial(gz, sas)
    got, got_findings, analyzer = _parallel(gz, sas, 2, 16)
    assert _rows(got) == _rows(want) and got_findings == want_findings
    assert analyzer.adopted > len(want) // 2


def _repeated(tmp_path: Path, times: int) -> tuple[Path, Path]:
    """ipv4-transport-tcp's 98 frames (958 bytes each on average) ``times`` over, renumbered."""
    sc = build_scenario("ipv4-transport-tcp")
    files = write_scenario(sc, tmp_path)
    frames = list(sc.frames) * times
    big = tmp_path / "big.pcap"
    write_capture(big, [f._replace(number=i + 1) for i, f in enumerate(frames)])
    return big, files["keys"]


def test_progress_advances_under_jobs(tmp_path: Path) -> None:
    """The bytes the main process's reader has taken, every 4,096 frames, as with one process."""
    big, keys = _repeated(tmp_path, 140)  # 13,720 frames, 13 MB: three reports, 1 MiB reads
    calls: dict[int, list[int]] = {}
    for jobs in (1, 2):
        calls[jobs] = []
        out = tmp_path / f"jobs{jobs}"
        analyze_to_dir(big, [keys], out, plots=False, progress=calls[jobs].append, jobs=jobs)
    assert len(calls[1]) == 13_720 // 4096 == 3
    assert calls[2] == calls[1]
    assert 0 < calls[2][0] < calls[2][1] < calls[2][2] <= big.stat().st_size


def _group(pgid: int) -> dict[int, int]:
    """Parent pid by pid, of every process in process group ``pgid``."""
    members = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)"
        except OSError:
            continue  # ended meanwhile
        if int(fields[2]) == pgid:
            members[int(stat.parent.name)] = int(fields[1])
    return members


def _ended(pid: int, timeout: float) -> bool:
    """Whether ``pid`` has ended, waiting for that event up to ``timeout`` seconds."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc and waits on pidfds")
def test_ctrl_c_during_jobs_leaves_no_worker_behind(tmp_path: Path) -> None:
    """A real SIGINT to the process group while worker processes have batches to send.

    tests/stop_at.py stops the command's main process at frame 1, when it has
    received worker 0's first batch; it waits there on a pipe the test never
    writes. Each worker has 6 batches of 2,048 frames; the main process takes
    no more, and a pipe holds 64 KiB, less than one pickled batch: no worker
    can have finished when the signal comes.
    """
    big, keys = _repeated(tmp_path, 251)  # 24,598 frames: 12 batches
    args = ["analyze", str(big), "--sa", str(keys), "--out", str(tmp_path / "out")]
    proc = run_until_stopped(
        "espforensics.pipeline",
        "FrameAnalyzer.adopt",
        "args[1].number == 1",
        [*args, "--no-plots", "--jobs", "3", "-q"],
    )
    group = _group(proc.pid)
    helpers = [pid for pid, parent in group.items() if parent == proc.pid]  # the forkserver, ...
    workers = [pid for pid, parent in group.items() if parent in helpers]
    assert len(workers) == 2, group
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err == b"espforensics: interrupted (a batch resumes where it stopped)\n"
    assert all(_ended(pid, 0) for pid in workers), "a worker outlived the command"
    assert all(_ended(pid, 10) for pid in helpers), "the forkserver outlived the command"
