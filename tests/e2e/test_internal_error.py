"""A bug in espforensics: exit 70, one line, a traceback file without any value, the outputs kept.

Each test injects the bug (a stage monkeypatched to raise) with the SA's
key in the exception's message and in the raising frame's locals, and
then greps stdout, stderr, the traceback and every output for the key.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics import cli
from espforensics.crypto import AeadContext
from espforensics.errors import EXIT_INTERNAL, scrub
from espforensics.results.builder import SummaryBuilder
from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import OUTPUT_NAMES

runner = CliRunner()
TRACEBACK = "espforensics-traceback.txt"
LINE = re.compile(
    r"espforensics: internal error: (.+) \(a bug in espforensics, please report it\); "
    r"traceback in (\S+)\n"
)


@pytest.fixture
def capture(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """ipv4-transport-tcp (98 frames), its keys file and its first SA's key bytes."""
    files = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), tmp_path, stem="cap")
    hexes = re.findall(r"0x([0-9a-f]{40,72})", files["keys"].read_text())
    return files["capture"], files["keys"], bytes.fromhex(hexes[0])


def _leaky_bug(key: bytes) -> RuntimeError:
    secret = key  # a local of the raising frame: never in the traceback
    return RuntimeError(f"inconsistent state {secret!r} key={secret.hex()}")


def _assert_no_key(key: bytes, *texts: str, folder: Path | None = None) -> None:
    blobs = [t.encode("latin-1", "replace") for t in texts]
    if folder is not None:
        blobs += [p.read_bytes() for p in folder.rglob("*") if p.is_file()]
    for blob in blobs:
        for needle in (key, key.hex().encode(), key.hex()[:16].encode(), repr(key)[2:18].encode()):
            assert needle not in blob


def _line(stderr: str) -> tuple[str, Path]:
    match = LINE.fullmatch(stderr)
    assert match is not None, stderr
    return match[1], Path(match[2])


def test_a_bug_while_reading_exits_70_and_writes_what_was_read(
    capture: tuple[Path, Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap, keys, key = capture
    observe = SummaryBuilder.observe

    def buggy(self: SummaryBuilder, rec: object) -> None:
        if getattr(rec, "frame", None) == 40:
            raise _leaky_bug(key)
        observe(self, rec)  # type: ignore[arg-type]

    monkeypatch.setattr(SummaryBuilder, "observe", buggy)
    out = tmp_path / "out"
    res = runner.invoke(
        cli.app, ["analyze", str(cap), "--sa", str(keys), "--out", str(out), "--no-plots"]
    )
    assert res.exit_code == EXIT_INTERNAL
    assert _line(res.stderr) == ("RuntimeError", out / TRACEBACK)
    assert sorted(p.name for p in out.iterdir()) == [TRACEBACK, *OUTPUT_NAMES]
    assert len((out / "packets.csv").read_text().splitlines()) == 1 + 39
    summary = json.loads((out / "summary.json").read_text())
    assert summary["capture"]["frames"] == 39
    assert summary["error"] == "stopped by an internal error (a bug in espforensics): RuntimeError"
    text = (out / TRACEBACK).read_text()
    assert "\nRuntimeError: inconsistent state <left out> key=<left out>\n" in text
    assert "  espforensics.analysis:" in text and " in _consume\n" in text
    assert "  tests.e2e.test_internal_error:" in text and " in buggy\n" in text
    assert "secret" not in text  # the frame's local
    _assert_no_key(key, res.stdout, res.stderr, folder=out)


def test_a_bug_after_reading_leaves_the_partial_files(
    capture: tuple[Path, Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap, keys, key = capture

    def buggy(*args: object, **kwargs: object) -> str:
        raise _leaky_bug(key)

    monkeypatch.setattr("espforensics.analysis.report_content", buggy)
    out = tmp_path / "out"
    res = runner.invoke(
        cli.app, ["analyze", str(cap), "--sa", str(keys), "--out", str(out), "--no-plots"]
    )
    assert res.exit_code == EXIT_INTERNAL
    assert _line(res.stderr) == ("RuntimeError", out / TRACEBACK)
    assert sorted(p.name for p in out.iterdir()) == [
        TRACEBACK,
        "finding_frames.csv.partial",
        "finding_frames.parquet.partial",
        "findings.csv.partial",
        "packets.csv.partial",
        "packets.parquet.partial",
        "sas.csv.partial",
    ]
    _assert_no_key(key, res.stdout, res.stderr, folder=out)


def test_a_bug_in_report_goes_to_a_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = bytes(range(1, 21))

    def buggy(folder: Path) -> None:
        raise _leaky_bug(key)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr("espforensics.cli.report.load_summary", buggy)
    res = runner.invoke(cli.app, ["report", str(tmp_path / "nowhere")])
    assert res.exit_code == EXIT_INTERNAL
    what, where = _line(res.stderr)
    assert what == "RuntimeError"
    assert where.parent == tmp_path and where.name.startswith("espforensics-traceback-")
    assert "RuntimeError: inconsistent state <left out>" in where.read_text()
    _assert_no_key(key, res.stdout, res.stderr, folder=tmp_path)


def test_a_bug_outside_the_library_call_is_exit_70_too(
    capture: tuple[Path, Path, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``cli.main`` (the console entry point) catches what ``_guarded`` does not see."""
    cap, keys, key = capture

    def buggy(*args: object) -> None:
        raise _leaky_bug(key)

    temp = tmp_path / "temp"  # not tmp_path: the keys file is there
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr("espforensics.cli.commands._show", buggy)
    out = tmp_path / "out"
    args = ["espforensics", "analyze", str(cap), "--sa", str(keys), "--out", str(out)]
    monkeypatch.setattr(sys, "argv", [*args, "--no-plots"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == EXIT_INTERNAL
    err = capsys.readouterr().err
    what, where = _line(err)
    assert what == "RuntimeError" and where.parent == temp
    assert (out / "summary.json").exists()  # the analysis itself had finished
    _assert_no_key(key, err, folder=temp)
    _assert_no_key(key, folder=out)


def test_a_bug_in_a_batch_worker_process(
    capture: tuple[Path, Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's worker (forked, so the patch holds there) sends its traceback as text."""
    cap, keys, key = capture

    def buggy(*args: object, **kwargs: object) -> None:
        raise _leaky_bug(key)

    monkeypatch.setattr("espforensics.batch.task.analyze_to_dir", buggy)
    # Two captures and two cores: --jobs 2 is capped at neither, so a worker process runs.
    monkeypatch.setattr("espforensics.batch.run.usable_cores", lambda: 2)
    second = tmp_path / "second.pcap"
    second.write_bytes(cap.read_bytes())
    out = tmp_path / "batch"
    args = ["batch", str(cap), str(second), "--sa", str(keys), "--out", str(out), "--no-plots"]
    args.append("-q")
    res = runner.invoke(cli.app, [*args, "--jobs", "2"])
    assert res.exit_code == EXIT_INTERNAL
    assert _line(res.stderr) == ("RuntimeError", out / TRACEBACK)
    text = (out / TRACEBACK).read_text()
    assert "In the worker process:\n" in text
    assert re.search(r"  espforensics\.batch\.task:\d+ in run_task\n", text)
    _assert_no_key(key, res.stdout, res.stderr, folder=out)
    monkeypatch.undo()  # a rerun without the bug finishes and drops the old traceback
    assert runner.invoke(cli.app, [*args, "--jobs", "1"]).exit_code == 0
    assert not (out / TRACEBACK).exists()


def test_a_bug_while_decrypting_under_jobs_is_an_internal_error(
    capture: tuple[Path, Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug met where --jobs threads decrypt: exit 70, a traceback file without values."""
    cap, keys, key = capture

    def buggy(self: AeadContext, *args: object) -> None:
        raise _leaky_bug(key)

    monkeypatch.setattr(AeadContext, "open", buggy)
    out = tmp_path / "out"
    args = ["analyze", str(cap), "--sa", str(keys), "--out", str(out), "--no-plots", "-q"]
    res = runner.invoke(cli.app, [*args, "--jobs", "2"])
    assert res.exit_code == EXIT_INTERNAL
    assert _line(res.stderr) == ("RuntimeError", out / TRACEBACK)
    assert (
        "RuntimeError: inconsistent state <left out> key=<left out>"
        in (out / TRACEBACK).read_text()
    )
    _assert_no_key(key, res.stdout, res.stderr, folder=out)


def test_a_full_disk_is_an_input_error_not_a_bug(
    capture: tuple[Path, Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file system refusing an output is exit 2 and one line: nothing to report as a bug."""
    cap, keys, _ = capture

    def full(self: object, table: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("espforensics.tables.packets.PacketTableWriter._write_both", full)
    out = tmp_path / "out"
    res = runner.invoke(cli.app, ["analyze", str(cap), "--sa", str(keys), "--out", str(out)])
    assert res.exit_code == 2
    assert res.stderr == (
        f"espforensics: error: {out}: cannot write the outputs: No space left on device\n"
    )
    assert not (out / TRACEBACK).exists()


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("unsupported operand type(s) for +: 'int' and 'NoneType'", None),
        ("got b'\\x01\\x02\\x03' here", "got <left out> here"),
        ("key 0x0102030405060708090a", "key <left out>"),
        ("tail \\xff\\x00", "tail <left out><left out>"),
        ("seq 12345678901234", "seq <left out>"),
        ("blob AAECAwQFBgcICQoLDA0ODxAREhM=", "blob <left out>"),
        ("latin \x01\xfe", "latin <left out><left out>"),
        ("frame 1234 at offset 56", None),
    ],
)
def test_scrub_leaves_out_what_could_be_key_bytes(message: str, expected: str | None) -> None:
    assert scrub(message) == (message if expected is None else expected)
