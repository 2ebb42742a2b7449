"""``analyze --jobs N``: N threads decrypt the steady lane's packets; outputs must not change.

One code path for every N (engine/run.py): the pool only opens packets,
in order, and the checks' state stays on the analyzing thread. The tests
run captures in small batches, so every boundary case happens (a
datagram's fragments in different batches, an ESN wrap inside and across
batches, a reused IV whose two uses fall in different batches), and
compare every row and finding with one thread and with the per-frame
reference path (tests/engine/test_equivalence.py compares the files of
every scenario).
"""

from __future__ import annotations

import gzip
import os
import random
import signal
import sys
from functools import cache
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from espforensics.analysis import analyze, analyze_to_dir
from espforensics.cli import app
from espforensics.errors import CaptureTruncated
from espforensics.model.options import Options
from espforensics.synth import SCENARIOS, build_scenario, keys_yaml, write_capture, write_scenario
from espforensics.synth.bench import bench_sas, iter_bench_frames
from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, SaFlow, make_sa
from espforensics.synth.packets import udp_bytes
from tests.support.mixed import write_mixed
from tests.support.stop_at import run_until_stopped


@cache
def mixed_capture(folder: Path) -> tuple[Path, Path]:
    cap, keys, _ = write_mixed(folder)
    return cap, keys


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return mixed_capture(tmp_path_factory.mktemp("mixed"))


def _files(cap: Path, keys: Path | None, out: Path, jobs: int, batch: int = 4096) -> Path:
    analyze_to_dir(
        cap,
        [keys] if keys else [],
        out,
        plots=False,
        jobs=jobs,
        options=Options(batch_frames=batch),
    )
    return out


_SAME = ("packets.csv", "findings.csv", "sas.csv", "report.txt", "summary.json")


def _assert_same(a: Path, b: Path, names: tuple[str, ...] = _SAME) -> None:
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert pq.read_table(a / "packets.parquet").equals(pq.read_table(b / "packets.parquet"))


@pytest.mark.slow
@pytest.mark.parametrize(("jobs", "batch"), [(2, 1), (2, 3), (3, 5), (2, 64), (2, 4096)])
def test_mixed_capture_gives_the_same_files(
    mixed: tuple[Path, Path], tmp_path: Path, jobs: int, batch: int
) -> None:
    cap, keys = mixed
    one = _files(cap, keys, tmp_path / "one", 1)
    _assert_same(one, _files(cap, keys, tmp_path / "many", jobs, batch))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_is_the_same_on_two_threads(name: str, tmp_path: Path) -> None:
    sc = build_scenario(name)
    files = write_scenario(sc, tmp_path)
    keys = None if sc.secrets else files["keys"]
    one = _files(files["capture"], keys, tmp_path / "one", 1)
    _assert_same(one, _files(files["capture"], keys, tmp_path / "two", 2, 4))


@pytest.mark.slow
def test_a_cut_capture_reports_the_same_frames_and_error(
    mixed: tuple[Path, Path], tmp_path: Path
) -> None:
    cap, keys = mixed
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(cap.read_bytes()[:-700])
    errors = []
    for jobs in (1, 2):
        with pytest.raises(CaptureTruncated) as error:
            _files(cut, keys, tmp_path / f"jobs{jobs}", jobs, 4)
        errors.append(str(error.value))
    assert errors[0] == errors[1]
    _assert_same(tmp_path / "jobs1", tmp_path / "jobs2")
    assert (tmp_path / "jobs1" / "packets.csv").read_text().count("\n") > 100


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


def test_a_32_bit_counter_that_wraps_is_placed_across_batches(tmp_path: Path) -> None:
    """A 32-bit counter that wraps without ESN: only the state of earlier batches knows.

    RFC 4303 forbids the wrap, but a capture of a broken sender has one. The
    ICV does not cover the high half then, so only the packets before the
    wrap (in the batch before) tell that the packets after it have high half 1.
    """
    rng, cb = random.Random(3), CaptureBuilder(3)
    flow = SaFlow(make_sa(rng, 0x6101, V4_A, V4_B), V4_A, V4_B)
    for seq64 in range((1 << 32) - 3, (1 << 32) + 3):  # wire: ...fffd fffe ffff 0 1 2
        packet, truth = flow.send(udp_bytes(V4_A, V4_B, 6000, 6001, b"x" * 24), 17, seq64)
        cb.emit_ip(packet, truth)
    sc = cb.scenario("wrap-no-esn", "", (flow.sealer,))
    files = write_scenario(sc, tmp_path)
    want = list(range((1 << 32) - 3, (1 << 32) + 3))
    for batch in (1, 3, 4096):
        got = analyze(files["capture"], [files["keys"]], Options(batch_frames=batch))
        assert got.packets["seq64"].tolist() == want
        assert set(got.packets["verdict"]) == {"ok"}


def test_a_compressed_capture_gives_the_same_files(
    mixed: tuple[Path, Path], tmp_path: Path
) -> None:
    cap, keys = mixed
    gz = tmp_path / "mixed.pcap.gz"
    gz.write_bytes(gzip.compress(cap.read_bytes()))
    plain, packed = (
        _files(cap, keys, tmp_path / "plain", 1),
        _files(gz, keys, tmp_path / "gz", 2, 16),
    )
    _assert_same(plain, packed, ("packets.csv", "findings.csv", "sas.csv"))  # reports name the file


def _repeated(tmp_path: Path, times: int) -> tuple[Path, Path]:
    """ipv4-transport-tcp's 98 frames (958 bytes each on average) ``times`` over, renumbered."""
    sc = build_scenario("ipv4-transport-tcp")
    files = write_scenario(sc, tmp_path)
    frames = list(sc.frames) * times
    big = tmp_path / "big.pcap"
    write_capture(big, [f._replace(number=i + 1) for i, f in enumerate(frames)])
    return big, files["keys"]


@pytest.mark.slow
def test_progress_advances_under_jobs(tmp_path: Path) -> None:
    """The bytes the reader has taken, about every 4,096 frames (once a batch of more), the
    same for any --jobs."""
    big, keys = _repeated(tmp_path, 200)  # 19,600 frames, 19 MB: three reports, 1 MiB reads
    calls: dict[int, list[int]] = {}
    for jobs in (1, 2):
        calls[jobs] = []
        out = tmp_path / f"jobs{jobs}"
        analyze_to_dir(big, [keys], out, plots=False, progress=calls[jobs].append, jobs=jobs)
    assert len(calls[1]) == 3
    assert calls[2] == calls[1]
    assert 0 < calls[2][0] < calls[2][1] < calls[2][2] <= big.stat().st_size


class _Readings:
    """A ``Meter`` that keeps what it is told while reading."""

    def __init__(self) -> None:
        self.told: list[tuple[int, int]] = []

    def reading(self, frames: int, bytes_read: int) -> None:
        self.told.append((frames, bytes_read))

    def phase(self, name: str) -> None:
        pass


@pytest.mark.slow
def test_the_meter_hears_the_frames_when_the_position_stays(tmp_path: Path) -> None:
    """An 8,192-frame batch hands its rows on at once: the progress callback hears its
    position once, the meter its frames at each 4,096 they cross (its frames/s)."""
    big, keys = _repeated(tmp_path, 200)  # 19,600 frames: batches of 64 doubling to 8,192
    meter, calls = _Readings(), list[int]()
    analyze_to_dir(big, [keys], tmp_path / "out", plots=False, progress=calls.append, meter=meter)
    assert [f for f, _ in meter.told] == [4096, 8192, 12288, 16384, 19600]  # then the end
    positions = [b for _, b in meter.told[:-1]]
    assert len(set(positions)) < len(positions)  # 8,192 and 12,288: one batch's rows
    assert calls == sorted(set(positions))  # each position told once


def test_progress_counts_the_steady_lanes_frames(tmp_path: Path) -> None:
    """The steady lane hands frames on thousands at a time: progress still comes every 4,096."""
    big = tmp_path / "bench.pcap"
    write_capture(big, list(iter_bench_frames(13_000, mean_size=1000)))  # 13 MB: 1 MiB reads
    keys = tmp_path / "bench.keys.yaml"
    keys.write_text(keys_yaml(list(bench_sas())))
    calls: list[int] = []
    summary = analyze_to_dir(big, [keys], tmp_path / "out", plots=False, progress=calls.append)
    assert summary.verdicts["ok"] == 13_000
    # Batches of 64 frames doubling to 8,192 (Engine.batch_sizes), each handed on at once:
    # 4,032 frames, then 8,128 (4,096 since the start), then 13,000 (4,096 since 8,128).
    assert len(calls) == 2
    assert 0 < calls[0] < calls[1] <= big.stat().st_size


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


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc and waits on pidfds")
def test_ctrl_c_during_jobs_leaves_nothing_behind(tmp_path: Path) -> None:
    """A real SIGINT to the process group while the thread pool has packets to open.

    tests/support/stop_at.py stops the command when the steady lane hands the first
    batch to the pool of 3 threads (started with the run); it waits there on
    a pipe the test never writes.
    """
    big, keys = _repeated(tmp_path, 100)
    args = ["analyze", str(big), "--sa", str(keys), "--out", str(tmp_path / "out")]
    with run_until_stopped(
        "espforensics.engine.run",
        "_Opener.submit",
        "True",
        [*args, "--no-plots", "--jobs", "3", "-q"],
    ) as run:
        proc = run.proc
        assert set(_group(proc.pid)) == {proc.pid}  # threads, no worker process
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        stopped = f"the analysis of {big} stopped; no output was published"
        assert err == f"espforensics: interrupted: {stopped}\n".encode()
    assert not (tmp_path / "out" / "summary.json").exists()
