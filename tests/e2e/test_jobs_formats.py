"""``analyze --jobs N`` on every input format: pcapng and compressed captures go to the workers.

An uncompressed pcapng's batches carry spans (capture/pcapng.py) and a
compressed capture is decompressed once to a temporary file
(capture/unpack.py), read mapped and handed out in spans like a plain one.
Every output file stays the same bytes as with one process; ``pool.PATIENT``
(the ``patient`` fixture) makes the engine wait for its workers, so that
the tests know they opened some batches. The temporary file is gone after
the run, whether it ended well or not; when it cannot be written, or the
stream is damaged, the capture is read as a stream, as with one process.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_compressed_writer, unpack, write_pcap, write_pcapng
from espforensics.errors import CaptureTruncated
from espforensics.model.options import Options
from espforensics.model.records import DecryptionSecrets, Frame
from fuzz.steady import SteadySeed, pick_steady, steady_frames
from tests.engine.test_jobs import BOUND, STOPPED_RUN, _outputs
from tests.support.helpers import run_cli
from tests.support.procs import wait_gone
from tests.support.stop_at import stopped

Kind = Literal["gzip", "zstd"]
_SUFFIX = {None: "", "gzip": ".gz", "zstd": ".zst"}
ESP_SA = 0x45535053  # the esp_sa Decryption Secrets Block type (docs/keys.md)


@pytest.fixture
def tmpdir_of_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The folder ``tempfile`` puts the decompressed copy in (TMPDIR), empty."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    monkeypatch.setattr(unpack, "RESERVE", 0.0)  # a copy however full this disk is
    yield folder
    monkeypatch.setattr(tempfile, "tempdir", None)


def _same(tmp: Path, capture: Path, keys: Path | None, batch: int, jobs: int) -> None:
    """analyze with one process and with ``jobs``: every output file the same bytes."""
    options = Options(batch_frames=batch)
    sas = [] if keys is None else [keys]
    analyze_to_dir(capture, sas, tmp / "one", options=options, plots=False)
    analyze_to_dir(capture, sas, tmp / "many", options=options, plots=False, jobs=jobs)
    one, many = _outputs(tmp / "one"), _outputs(tmp / "many")
    assert sorted(one) == sorted(many)
    for name in one:
        assert one[name] == many[name], name


def _steady(k: int) -> tuple[SteadySeed, list[Frame]]:
    """One of the fuzzer's steady windows (one or two SAs, up to 3 faults), at least 250
    frames: long enough for the steady lane, and so for the workers."""
    rng = random.Random(f"test_jobs_formats:{k}")
    while True:
        st = pick_steady(rng)
        frames = steady_frames(rng, st)
        if len(frames) >= 250:
            return st, frames


def _write(
    tmp: Path,
    k: int,
    fmt: Literal["pcap", "pcapng"],
    kind: Kind | None = None,
    dsb_at: int | None = None,
) -> tuple[Path, Path | None]:
    """Window ``k`` as ``fmt``, compressed as ``kind``, and its key file; with ``dsb_at``,
    its keys in a Decryption Secrets Block before that frame (and no key file)."""
    st, frames = _steady(k)
    capture, keys = tmp / f"w.{fmt}{_SUFFIX[kind]}", tmp / "w.keys.yaml"
    with open_compressed_writer(capture, kind) as out:
        if fmt == "pcap":
            write_pcap(out, frames, linktype=st.seed.linktypes[0])
        else:
            items: list[Frame | DecryptionSecrets] = list(frames)
            if dsb_at is not None:
                items.insert(dsb_at, DecryptionSecrets(ESP_SA, st.seed.esp_sa.encode()))
            write_pcapng(out, items, linktypes=st.seed.linktypes)
    keys.write_text(st.seed.yaml)
    return capture, None if dsb_at is not None else keys


@pytest.mark.parametrize("window", range(3))
def test_pcapng_batches_go_to_the_workers(tmp_path: Path, window: int, patient: list[int]) -> None:
    _same(tmp_path, *_write(tmp_path, window, "pcapng"), batch=16, jobs=3)
    assert patient[0] > 0, "no batch was opened by a worker"


def test_an_sa_of_a_secrets_block_is_opened_by_the_engine(
    tmp_path: Path, patient: list[int]
) -> None:
    """The workers start with the key files' SAs (none here); the SAs a Decryption Secrets
    Block loads later are not theirs: the engine opens those packets itself (resolve
    refuses a prefetch without them), and the outputs are those of one process."""
    capture, keys = _write(tmp_path, 0, "pcapng", dsb_at=80)
    _same(tmp_path, capture, keys, batch=16, jobs=2)
    assert patient[0] == 0 and patient[1] > 0  # every prefetch refused, some offered
    summary = json.loads((tmp_path / "many" / "summary.json").read_text())
    assert summary["verdicts"]["ok"] > 100  # the secrets block's keys opened its packets


def test_a_multi_section_pcapng_goes_to_the_workers(tmp_path: Path, patient: list[int]) -> None:
    """Two sections of other byte orders and timestamp resolutions, frames numbered on."""
    st, frames = _steady(1)
    capture, keys = tmp_path / "two.pcapng", tmp_path / "w.keys.yaml"
    half = len(frames) // 2
    with capture.open("wb") as out:
        write_pcapng(out, frames[:half], linktypes=st.seed.linktypes)
        write_pcapng(out, frames[half:], linktypes=st.seed.linktypes, byteorder="big", tsresol=6)
    keys.write_text(st.seed.yaml)
    _same(tmp_path, capture, keys, batch=16, jobs=2)
    assert patient[0] > 0


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_compressed_capture_is_decompressed_once_for_the_workers(
    tmp_path: Path,
    kind: Kind,
    fmt: Literal["pcap", "pcapng"],
    patient: list[int],
    tmpdir_of_run: Path,
) -> None:
    capture, keys = _write(tmp_path, 2, fmt, kind)
    _same(tmp_path, capture, keys, batch=16, jobs=2)
    assert patient[0] > 0, "no batch was opened by a worker"
    assert list(tmpdir_of_run.glob("espforensics-*")) == []  # the decompressed copy is gone


def test_the_copy_is_gone_after_a_capture_error(
    tmp_path: Path, patient: list[int], tmpdir_of_run: Path
) -> None:
    """A sound gzip stream of a pcap cut inside a record: the copy is read (workers open
    batches), the error and the outputs are those of one process, the copy is gone."""
    st, frames = _steady(0)
    capture, keys = tmp_path / "cut.pcap.gz", tmp_path / "w.keys.yaml"
    keys.write_text(st.seed.yaml)
    with open_compressed_writer(tmp_path / "whole.pcap", None) as out:
        write_pcap(out, frames, linktype=st.seed.linktypes[0])
    whole = (tmp_path / "whole.pcap").read_bytes()
    with gzip.GzipFile(capture, "wb", mtime=0) as z:
        z.write(whole[:-7])
    errors = []
    for name, jobs in (("one", 1), ("many", 2)):
        with pytest.raises(CaptureTruncated) as caught:
            analyze_to_dir(
                capture,
                [keys],
                tmp_path / name,
                options=Options(batch_frames=16),
                plots=False,
                jobs=jobs,
            )
        errors.append(str(caught.value))
    assert errors[0] == errors[1]
    assert f"capture ends inside frame {len(frames)}: read {len(frames) - 1} complete" in errors[0]
    assert _outputs(tmp_path / "one") == _outputs(tmp_path / "many")
    assert patient[0] > 0
    assert list(tmpdir_of_run.glob("espforensics-*")) == []


def _damaged_gzip(tmp: Path) -> tuple[Path, Path]:
    """A gzip pcap of a window repeated to some MiB, its deflate stream cut two thirds of
    the way in: frames come before the error."""
    st, frames = _steady(1)
    capture, keys = tmp / "damaged.pcap.gz", tmp / "w.keys.yaml"
    keys.write_text(st.seed.yaml)
    with open_compressed_writer(capture, "gzip") as out:
        write_pcap(out, frames * 40, linktype=st.seed.linktypes[0])
    raw = capture.read_bytes()
    capture.write_bytes(raw[: len(raw) * 2 // 3])  # the stream ends before its end marker
    return capture, keys


def test_a_damaged_stream_is_read_as_with_one_process(tmp_path: Path, tmpdir_of_run: Path) -> None:
    """Decompressing fails: the capture is read as a stream, no worker takes a batch, and
    the outputs, the exit code and the error line are those of ``--jobs 1``."""
    capture, keys = _damaged_gzip(tmp_path)
    common = ("analyze", capture, "--sa", keys, "--no-plots", "--format", "json")
    one = run_cli(*common, "--out", tmp_path / "one")
    many = run_cli(*common, "--out", tmp_path / "many", "--jobs", "2")
    assert one.code == many.code == 2
    error = [line for line in one.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and "compressed stream (gzip) is damaged" in error[0]
    assert "read 0 complete frames" not in error[0]
    assert error[0] in many.stderr.splitlines()
    assert one.stdout == many.stdout
    assert _outputs(tmp_path / "one") == _outputs(tmp_path / "many")
    assert list(tmpdir_of_run.glob("espforensics-*")) == []
    notice = (
        f"espforensics: {capture}: gzip-compressed, decompressed once to a temporary file for "
        "the workers (if that fails, read as a stream: --jobs 2 decrypts on threads)"
    )
    assert notice in many.stderr.splitlines()


def test_no_room_for_the_copy_reads_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patient: list[int]
) -> None:
    """The copy cannot be written (here TMPDIR does not exist; ENOSPC goes the same way):
    the capture is read as a stream, its outputs those of one process, no worker used."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "absent"))
    _same(tmp_path, *_write(tmp_path, 0, "pcapng", "gzip"), batch=16, jobs=2)
    assert patient == [0, 0]  # no batch came with a worker's prefetch


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_copy_cut_short_by_a_full_disk_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patient: list[int], tmpdir_of_run: Path
) -> None:
    """ENOSPC while the copy is written (its writes go to /dev/full): the part written is
    removed and the capture read as a stream, its outputs those of one process."""
    made: list[Path] = []

    def full_disk(prefix: str, suffix: str) -> tuple[int, str]:
        made.append(tmpdir_of_run / f"{prefix}full{suffix}")
        made[-1].write_bytes(b"")
        return os.open("/dev/full", os.O_WRONLY), str(made[-1])

    monkeypatch.setattr(tempfile, "mkstemp", full_disk)
    _same(tmp_path, *_write(tmp_path, 0, "pcap", "gzip"), batch=16, jobs=2)
    assert len(made) == 1  # the copy was begun (by the --jobs 2 run only)
    assert patient == [0, 0]
    assert list(tmpdir_of_run.glob("espforensics-*")) == []


def test_a_copy_that_would_fill_its_disk_is_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patient: list[int], tmpdir_of_run: Path
) -> None:
    """The copy may not take the last ``RESERVE`` of its file system (here all of it: no
    disk is that empty): it is given up at its first chunk, removed, and the capture read
    as a stream, its outputs those of one process."""
    monkeypatch.setattr(unpack, "RESERVE", 1.0)
    _same(tmp_path, *_write(tmp_path, 0, "pcap", "gzip"), batch=16, jobs=2)
    assert patient == [0, 0]  # no batch came with a worker's prefetch
    assert list(tmpdir_of_run.glob("espforensics-*")) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("where", ["decompressing", "working"])
def test_ctrl_c_removes_the_copy(tmp_path: Path, where: str) -> None:
    """Ctrl-C (SIGINT to the process group) while the capture is decompressed, or while
    the workers read the copy: the run ends (exit 130) and the copy is gone."""
    capture, keys = _write(tmp_path, 2, "pcap", "gzip")
    assert keys is not None
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    argv = [sys.executable, "-c", STOPPED_RUN, str(capture), str(keys), str(tmp_path / "o")]
    with stopped([*argv, where, "2"], env={**os.environ, "TMPDIR": str(folder)}) as run:
        proc, workers = run.proc, run.below
        copies = [p.name for p in folder.glob("espforensics-*")]  # pymp-*: multiprocessing's
        assert len(copies) == 1 and copies[0].endswith(".pcap"), copies
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=BOUND)
        assert proc.returncode == 130, stderr
        assert b"Traceback" not in stderr, stderr
        assert wait_gone(workers, BOUND) == []
        assert list(folder.glob("espforensics-*")) == []


def test_a_plain_pcapng_gets_no_notice(tmp_path: Path) -> None:
    """Its batches go to the workers as a pcap's do: no line about a stream on stderr."""
    capture, keys = _write(tmp_path, 0, "pcapng")
    assert keys is not None
    res = run_cli(
        "analyze", capture, "--sa", keys, "--out", tmp_path / "o", "--no-plots", "-j", "2"
    )
    assert res.code == 1, res.stderr  # the window's faults are findings
    assert "read as a stream" not in res.stderr and "decompressed" not in res.stderr
