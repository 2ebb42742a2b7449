"""``analyze --jobs N``: worker processes open the batches ahead; the outputs stay the same bytes.

The workers parse, open and decode an uncompressed pcap's batches
(engine/prefetch.py, engine/pool.py); the engine keeps every piece of
state and takes a worker's result only where its own plan opens the same
rows with the same SA and seq64. With batches of a few frames every kind
of boundary falls between two of them: a fragment and its rest, an ESN
wrap, a reordered packet and the one before it, an IV and its reuse, an
SA's first packet. ``pool.PATIENT`` makes the engine wait for the workers,
so the tests know which batches they opened; the outputs do not depend on it.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import os
import random
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np
import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.capture import open_capture, unpack, write_pcap
from espforensics.capture.batch import FrameBatch
from espforensics.crypto import sa_identity
from espforensics.engine import Engine
from espforensics.engine.plain import Decoded, PlainColumns
from espforensics.engine.plan import Opening
from espforensics.engine.pool import WorkerFailed
from espforensics.engine.prefetch import KeyRing, Prefetch, prefetch, resolve
from espforensics.engine.steady import SteadyLane
from espforensics.engine.wire import parse
from espforensics.errors import InputError
from espforensics.keys import SaTable, load_sas
from espforensics.model.options import Options
from espforensics.model.records import Frame
from espforensics.synth import write_scenario
from fuzz.steady import pick_steady, steady_frames
from tests.support.helpers import capture_params, real_capture, run_cli, scenario
from tests.support.procs import wait_gone
from tests.support.stop_at import stopped

# Scenarios whose boundaries matter: fragments, ESN wraps and faults, reorder and
# duplicates, IV reuse across batches, SAs that start late, many algorithms, NAT-T.
SCENARIOS = (
    "example",
    "natt",
    "fragments-v4",
    "fragments-v6",
    "kernel-gso-v6",
    "esn-wrap",
    "esn-fault-v4",
    "esn-fault-late-start",
    "algorithms",
    "encauth",
    "iv-reuse",
    "sequence",
    "shared-key",
    "midstream-odd-10",
    "corrupt-icv",
)


def _outputs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _both(tmp: Path, capture: Path, keys: Path, batch: int, jobs: int) -> None:
    """analyze with one process and with ``jobs``: every output file the same bytes."""
    options = Options(batch_frames=batch)
    one, many = tmp / "one", tmp / "many"
    analyze_to_dir(capture, [keys], one, options=options, plots=False)
    analyze_to_dir(capture, [keys], many, options=options, plots=False, jobs=jobs)
    a, b = _outputs(one), _outputs(many)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name


@pytest.mark.parametrize("name", SCENARIOS)
def test_jobs_outputs_equal_on_scenarios(tmp_path: Path, name: str, patient: list[int]) -> None:
    paths = write_scenario(scenario(name), tmp_path / "in", stem=name)
    _both(tmp_path, paths["capture"], paths["keys"], batch=16, jobs=3)
    # These captures are short: the lane takes an SA once the IV derivation check has
    # seen its first 64 packets, so most are all per-frame; the runs below are long.


def _window(tmp: Path, k: int, compress: bool = False) -> tuple[Path, Path]:
    """A capture of one of the fuzzer's steady windows (100-300 frames of one or two SAs,
    AES-GCM or AES-CBC with HMAC, up to 3 faults: duplicate, reorder, flipped bit, cut,
    dropped frame, replayed IV), long enough for the lane (at least 250 frames)."""
    rng = random.Random(f"test_jobs:{k}")
    while True:
        st = pick_steady(rng)
        frames = steady_frames(rng, st)
        if len(frames) >= 250:
            break
    capture, keys = tmp / ("w.pcap.gz" if compress else "w.pcap"), tmp / "w.keys.yaml"
    with gzip.open(capture, "wb") if compress else capture.open("wb") as out:
        write_pcap(cast(BinaryIO, out), frames, linktype=st.seed.linktypes[0])
    keys.write_text(st.seed.yaml)
    return capture, keys


@pytest.mark.parametrize("window", range(6))
def test_jobs_outputs_equal_on_long_runs_with_faults(
    tmp_path: Path, window: int, patient: list[int]
) -> None:
    """Steady windows in batches of 16 frames, 3 processes."""
    _both(tmp_path, *_window(tmp_path, window), batch=16, jobs=3)
    assert patient[0] > 0, "no batch was opened by a worker"


@pytest.mark.slow
def test_jobs_outputs_equal_for_every_n_up_to_8(tmp_path: Path, patient: list[int]) -> None:
    """1 to 8 processes (7 workers on any machine: only the command line caps --jobs at
    the cores), batches of 7 frames: every output the same bytes as one process's."""
    capture, keys = _window(tmp_path, 6)
    options = Options(batch_frames=7)
    analyze_to_dir(capture, [keys], tmp_path / "1", options=options, plots=False)
    one = _outputs(tmp_path / "1")
    for jobs in range(2, 9):
        before = patient[0]
        out = tmp_path / str(jobs)
        analyze_to_dir(capture, [keys], out, options=options, plots=False, jobs=jobs)
        assert _outputs(out) == one, jobs
        assert patient[0] > before, f"no batch was opened by a worker of {jobs} processes"


@pytest.mark.parametrize("name", capture_params())
def test_jobs_outputs_equal_on_real_captures(tmp_path: Path, name: str, patient: list[int]) -> None:
    cap = real_capture(name)
    _both(tmp_path, cap.pcap, cap.keys, batch=32, jobs=2)
    print("COUNTS", patient)
    assert patient[0] > 0, "no batch was opened by a worker"


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_jobs_outputs_equal_at_any_batch_size(
    tmp_path: Path, batch: int, patient: list[int]
) -> None:
    """An ESN capture across its wrap: the workers open with the high half the engine
    last saw, and a batch they opened with the old one is opened again (resolve)."""
    cap = real_capture("linux-6.1/esn-wrap-v4")
    _both(tmp_path, cap.pcap, cap.keys, batch=batch, jobs=2)
    assert patient[0] > 0


def test_jobs_outputs_equal_without_waiting(tmp_path: Path) -> None:
    """Without ``PATIENT`` the engine opens a batch itself when no worker has started on
    it: which batches the workers open then varies from run to run, the outputs not."""
    _both(tmp_path, *_window(tmp_path, 0), batch=8, jobs=2)


def test_a_compressed_capture_is_decompressed_once(
    tmp_path: Path, patient: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compressed capture is decompressed to a temporary file first, whose batches the
    workers read in spans (capture/unpack.py; tests/e2e/test_jobs_formats.py has more)."""
    monkeypatch.setattr(unpack, "RESERVE", 0.0)  # a copy however full this disk is
    _both(tmp_path, *_window(tmp_path, 0, compress=True), batch=16, jobs=2)
    assert patient[0] > 0  # batches came with a worker's prefetch


@dataclass(frozen=True)
class Planned:
    """A scenario's frames after its warm-up as one batch, the lane's opening of it and
    the SA identity of each of the plan's flows."""

    analyzer: FrameAnalyzer
    lane: SteadyLane
    batch: FrameBatch
    opening: Opening
    idents: list[bytes]

    def prefetch(self, hints: dict[bytes, int]) -> Prefetch:
        return prefetch(self.batch, self.analyzer.natt_ports, KeyRing(self.analyzer.sas), hints)

    def resolve(self, pre: Prefetch, idents: list[bytes] | None = None) -> Decoded | None:
        return resolve(pre, self.opening, idents or self.idents)


def _planned(capture: Path, keys: Path, warm: int) -> Planned:
    """The frames of ``capture`` after its first ``warm``, as one batch, planned."""
    with open_capture(capture) as cap:
        frames = [f for f in cap if isinstance(f, Frame)]
    an = FrameAnalyzer(load_sas([keys]), Options())
    for frame in frames[:warm]:
        an.process(frame)
    batch = FrameBatch.of(tuple(frames[warm:]))
    lane = SteadyLane(an)
    opening = lane.prepare(batch, parse(batch, an.natt_ports))
    assert opening.parts, "the lane plans to open packets of this batch"
    idents = []
    for flow in opening.plan.flows:
        assert flow.state.sa is not None
        idents.append(sa_identity(flow.state.sa))
    return Planned(an, lane, batch, opening, idents)


def _esn() -> Planned:
    cap = real_capture("linux-6.1/esn-wrap-v4")
    return _planned(cap.pcap, cap.keys, 400)


def test_resolve_takes_what_the_lane_would_decode() -> None:
    p = _esn()
    flows = p.opening.plan.flows
    tops = {i: f.state.tracker.top for i, f in zip(p.idents, flows, strict=True)}
    found = p.resolve(p.prefetch(tops))
    opened = [job.open() for job in p.opening.jobs]
    local = p.lane.decode(p.opening, p.batch, opened)
    assert found is not None and local is not None
    assert found.good.tolist() == local.good.tolist()
    assert len(local.good) > 0
    for column in PlainColumns.__slots__:
        assert np.array_equal(getattr(found.columns, column), getattr(local.columns, column))


def test_resolve_refuses_another_esn_high_half() -> None:
    """An ESN SA's packets opened with another high half are not taken: the ICV covers it."""
    p = _esn()
    assert p.resolve(p.prefetch(dict.fromkeys(p.idents, 7 << 32))) is None


def test_resolve_refuses_another_key(tmp_path: Path) -> None:
    """Packets opened with an SA of another identity (another key) are not taken."""
    p = _planned(*_window(tmp_path, 0), 200)
    pre = p.prefetch({})
    assert p.resolve(pre, [bytes(16) for _ in p.idents]) is None
    assert p.resolve(pre) is not None


def test_a_failed_worker_is_an_error_naming_its_frames(tmp_path: Path, patient: list[int]) -> None:
    """The file a worker reads is not the one the engine mapped: the worker fails, and the
    run stops with an error naming the batch's frames, no result of the worker used."""
    paths = write_scenario(scenario("kernel-gso-v4"), tmp_path / "in", stem="gso")
    capture = paths["capture"]
    an = FrameAnalyzer(SaTable(scenario("kernel-gso-v4").sas), Options(batch_frames=8))
    engine = Engine(an, Options(batch_frames=8), jobs=2)
    items = open_capture(capture).batches(engine.batch_sizes())
    first = next(items)  # the engine's own mapping of the file is made
    os.replace(write_scenario(scenario("example"), tmp_path / "other")["capture"], capture)
    try:
        with pytest.raises(WorkerFailed, match=r"a --jobs worker failed on frames \d+-\d+"):
            for _ in engine.iter_rows(itertools.chain([first], items)):
                pass
    finally:
        engine.close()


@pytest.mark.slow
def test_a_dask_cluster_gives_the_same_outputs(tmp_path: Path, patient: list[int]) -> None:
    """``--scheduler``: a LocalCluster's worker processes prefetch the batches."""
    distributed = pytest.importorskip("distributed")
    capture, keys = _window(tmp_path, 1)
    options = Options(batch_frames=16)
    one, many = tmp_path / "one", tmp_path / "dask"
    analyze_to_dir(capture, [keys], one, options=options, plots=False)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        analyze_to_dir(
            capture, [keys], many, options=options, plots=False, scheduler=cluster.scheduler_address
        )
    assert _outputs(one) == _outputs(many)
    assert patient[0] > 0, "no batch was opened by a Dask worker"


@pytest.mark.slow
def test_an_unreachable_scheduler_is_an_input_error(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    capture, keys = _window(tmp_path, 0)
    with pytest.raises(InputError, match=r"tcp://127\.0\.0\.1:9: cannot reach the Dask scheduler"):
        analyze_to_dir(
            capture,
            [keys],
            tmp_path / "o",
            options=Options(batch_frames=16),
            plots=False,
            scheduler="tcp://127.0.0.1:9",
        )


# A run that stops at a known point, writes "reached" and blocks on stdin, so that the
# test signals it there, not after a sleep. argv: capture, keys, out, where, jobs; where:
# "working", the engine's first submission to its started workers, or "decompressing",
# the second read of a compressed capture's stream while its copy is made.
STOPPED_RUN = """
import os, sys
from espforensics.analysis import analyze_to_dir
from espforensics.capture import unpack
from espforensics.engine import pool
from espforensics.model.options import Options
pool.PATIENT = True
unpack.RESERVE = 0.0  # a copy however full this disk is
def reached():
    os.write(1, b"reached\\n")
    os.read(0, 1)
if sys.argv[4] == "decompressing":
    read = unpack.ByteSource.read
    def blocked(self, size=1 << 20):
        if self.compression is not None and self.bytes_read > 0:
            reached()
        return read(self, size)
    unpack.ByteSource.read = blocked
else:
    submit = pool._Local.submit
    def stop(self, span, hints):
        reached()
        return submit(self, span, hints)
    pool._Local.submit = stop
try:
    analyze_to_dir(sys.argv[1], [sys.argv[2]], sys.argv[3], options=Options(batch_frames=16),
                   plots=False, jobs=int(sys.argv[5]))
except KeyboardInterrupt:
    sys.exit(130)
"""
BOUND = 60.0  # seconds for the workers to go; PDEATHSIG acts at once, the watchdog in 0.5 s


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_a_stopped_run_leaves_no_worker_and_no_finished_output(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGKILL of the engine's process, or Ctrl-C (SIGINT to its process group): the workers
    go with it, none prints a traceback, and nothing in the output folder looks finished."""
    capture, keys = _window(tmp_path, 2)
    out = tmp_path / "out"
    argv = [sys.executable, "-c", STOPPED_RUN, str(capture), str(keys), str(out), "working", "3"]
    with stopped(argv) as run:
        proc, workers = run.proc, run.below
        assert len(workers) >= 3, workers  # the resource tracker, the fork server, a worker
        if sig == signal.SIGKILL:
            os.kill(proc.pid, sig)  # the engine's process only
        else:
            os.killpg(proc.pid, sig)  # a terminal's Ctrl-C: the whole group
        assert wait_gone(workers, BOUND) == []
        _, stderr = proc.communicate(timeout=BOUND)
        assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 130)
        assert b"Traceback" not in stderr, stderr
        assert not (out / "summary.json").exists()


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (
            ["--jobs", "2"],
            "decompressed once to a temporary file for the workers (if that fails, read as "
            "a stream: --jobs 2 decrypts on threads)",
        ),
        (
            ["--scheduler", "CLUSTER"],
            "read as a stream: no worker takes its batches (--scheduler is not used)",
        ),
    ],
)
def test_a_streamed_capture_says_no_worker_takes_it(
    tmp_path: Path, extra: list[str], says: str
) -> None:
    """A compressed capture asked --jobs or --scheduler: one line says what happens (local
    workers read it decompressed once; a cluster's cannot), and the run goes on. The
    scheduler is reached all the same (a LocalCluster of threads: no worker is used)."""
    capture, keys = _window(tmp_path, 0, compress=True)
    alone = run_cli("analyze", capture, "--sa", keys, "--out", tmp_path / "a", "--no-plots")
    with contextlib.ExitStack() as stack:
        if "CLUSTER" in extra:
            distributed = pytest.importorskip("distributed")
            cluster = stack.enter_context(
                distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=":0")
            )
            extra = [cluster.scheduler_address if a == "CLUSTER" else a for a in extra]
        res = run_cli(
            "analyze", capture, "--sa", keys, "--out", tmp_path / "o", "--no-plots", *extra
        )
    assert res.code == alone.code == 1, res.stderr  # the window's faults are findings
    assert "read as a stream" not in alone.stderr
    assert f"espforensics: {capture}: gzip-compressed, {says}" in res.stderr.splitlines()
