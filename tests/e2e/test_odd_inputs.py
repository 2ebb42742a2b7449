"""Odd inputs around the packet path (issue 19 s6): what is not a capture file, a bad
Decryption Secrets Block beside --decrypted/--annotate, --force after a stopped run.

No test here can block on a FIFO or spin on /dev/zero: ``no_special_open``
makes any ``open`` of a path that is not a regular file fail at once, so a
regression that opens one fails the test instead of hanging it (the code
under test decides with ``os.stat`` before it opens anything).
"""

from __future__ import annotations

import builtins
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from espforensics.analysis import analyze_to_dir
from espforensics.batch.discover import Skipped, discover_all
from espforensics.batch.run import run_batch
from espforensics.capture import open_capture, write_pcap, write_pcapng
from espforensics.cli import app
from espforensics.errors import CaptureError
from espforensics.model.records import DecryptionSecrets, Frame
from espforensics.results.builder import SummaryBuilder
from espforensics.synth import build_scenario, write_scenario
from tests.e2e.test_atomic_outputs import FINAL

runner = CliRunner()
BAD_DSB = b'"not an esp_sa line\n'
DSB_ERROR = "(decryption secrets block): line 1: not a list of quoted fields"


def _special(path: object) -> bool:
    if isinstance(path, int) or path == os.devnull:
        return False
    try:
        mode = os.stat(path).st_mode  # type: ignore[arg-type]
    except (OSError, TypeError):
        return False  # missing or a loop: open fails at once by itself
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


@pytest.fixture(autouse=True)
def no_special_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a FIFO or a device fails the test instead of blocking it."""
    real_open: Callable[..., Any] = builtins.open
    real_os_open: Callable[..., int] = os.open

    def guarded_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        assert not _special(file), f"opened {file}, a FIFO or a device"
        return real_open(file, *args, **kwargs)

    def guarded_os_open(path: Any, *args: Any, **kwargs: Any) -> int:
        assert not _special(path), f"opened {path}, a FIFO or a device"
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _one_error(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture
def odd_files(tmp_path: Path) -> dict[str, Path]:
    """A FIFO, a symlink to /dev/zero, a symlink loop and a dangling symlink, named *.pcap."""
    if not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"):
        pytest.skip("needs /dev/zero and FIFOs (POSIX)")
    odd = tmp_path / "odd"
    odd.mkdir()
    os.mkfifo(odd / "fifo.pcap")
    (odd / "zero.pcap").symlink_to("/dev/zero")
    (odd / "loop.pcap").symlink_to(odd / "loop.pcap")
    (odd / "gone.pcapng").symlink_to(odd / "nothing-here")
    return {p.stem.split(".")[0]: p for p in odd.iterdir()}


# --- analyze and compare: one line, exit 2, nothing written ------------------------------


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("fifo", "not a regular file: FIFO"),
        ("zero", "not a regular file: character device"),
        ("loop", "cannot open: Too many levels of symbolic links"),
    ],
)
def test_analyze_refuses_what_is_not_a_regular_file(
    odd_files: dict[str, Path], tmp_path: Path, name: str, what: str
) -> None:
    out = tmp_path / "out"
    path = odd_files[name]
    res = runner.invoke(app, ["analyze", str(path), "--out", str(out), "-q"])
    assert res.exit_code == 2
    assert _one_error(res.stderr) == f"espforensics: error: {path}: {what}"
    assert not out.exists()  # refused before the output folder was made


def test_dev_zero_itself_is_refused(tmp_path: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    res = runner.invoke(app, ["analyze", "/dev/zero", "--out", str(tmp_path / "o"), "-q"])
    assert res.exit_code == 2
    expected = "espforensics: error: /dev/zero: not a regular file: character device"
    assert _one_error(res.stderr) == expected
    with pytest.raises(CaptureError, match="not a regular file: character device"):
        open_capture("/dev/zero")


def test_compare_refuses_a_fifo_and_dev_zero(odd_files: dict[str, Path], tmp_path: Path) -> None:
    files = write_scenario(build_scenario("example", seed=1), tmp_path / "ok")
    good = str(files["capture"])
    for side in (["BEFORE", good], [good, "AFTER"]):
        for name, what in (("fifo", "FIFO"), ("zero", "character device")):
            args = [str(odd_files[name]) if s in ("BEFORE", "AFTER") else s for s in side]
            res = runner.invoke(app, ["compare", *args])
            assert res.exit_code == 2
            line = f"espforensics: error: {odd_files[name]}: not a regular file: {what}"
            assert _one_error(res.stderr) == line


# --- batch: a folder's odd files are one skip line each, the captures still run --------------


def test_batch_skips_odd_files_and_runs_the_captures(
    odd_files: dict[str, Path], tmp_path: Path
) -> None:
    odd = odd_files["fifo"].parent
    write_scenario(build_scenario("example", seed=1), odd, stem="good")
    out = tmp_path / "batch"
    res = runner.invoke(app, ["batch", str(odd), "--out", str(out), "--jobs", "1", "--no-plots"])
    assert res.exit_code == 0, res.stderr
    assert res.stderr.splitlines() == [
        f"espforensics: skipped: {odd / name}: {why}"
        for name, why in [
            ("fifo.pcap", "not a regular file: FIFO"),
            ("gone.pcapng", "cannot open: No such file or directory"),
            ("loop.pcap", "cannot open: Too many levels of symbolic links"),
            ("zero.pcap", "not a regular file: character device"),
        ]
    ]
    rows = (out / "captures.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith(f"{odd / 'good.pcap'},good.pcap,")
    summary = json.loads((out / "captures" / "good.pcap" / "summary.json").read_text())
    assert summary["capture"]["frames"] == 40


def test_glob_skips_them_too_and_named_files_are_error_rows(
    odd_files: dict[str, Path], tmp_path: Path
) -> None:
    odd = odd_files["fifo"].parent
    found = discover_all([str(odd / "*.pcap")])
    assert found.jobs == []
    assert found.skipped == [
        Skipped(odd / "fifo.pcap", "not a regular file: FIFO"),
        Skipped(odd / "loop.pcap", "cannot open: Too many levels of symbolic links"),
        Skipped(odd / "zero.pcap", "not a regular file: character device"),
    ]
    named = [str(odd_files[n]) for n in ("fifo", "zero", "loop")]
    result = run_batch(named, [], tmp_path / "b", plots=False)
    assert sorted((r.path, r.status, r.error) for r in result.rows) == sorted(
        [
            (named[0], "error", f"{named[0]}: not a regular file: FIFO"),
            (named[1], "error", f"{named[1]}: not a regular file: character device"),
            (named[2], "error", f"{named[2]}: cannot open: Too many levels of symbolic links"),
        ]
    )
    assert result.passed_over == ()


# --- a bad Decryption Secrets Block with --decrypted / --annotate ---------------------------


def _bad_dsb_capture(tmp_path: Path, after: int) -> tuple[Path, int]:
    """pcapng-dsb with a bad secrets block after ``after`` frames; (path, frames in all)."""
    sc = build_scenario("pcapng-dsb", seed=1)
    path = tmp_path / "bad-dsb.pcapng"
    items: list[Frame | DecryptionSecrets] = [*sc.secrets, *sc.frames[:after]]
    items += [DecryptionSecrets(sc.secrets[0].secrets_type, BAD_DSB), *sc.frames[after:]]
    types = sorted({f.linktype for f in sc.frames})
    with open(path, "wb") as fh:
        write_pcapng(fh, items, linktypes=types)
    return path, len(sc.frames)


def _frames(path: Path) -> int:
    with open_capture(path) as cap:
        return sum(isinstance(item, Frame) for item in cap)


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True])
def test_bad_secrets_block_with_copies_writes_what_a_run_without_them_writes(
    tmp_path: Path, force: bool
) -> None:
    capture, total = _bad_dsb_capture(tmp_path, after=12)
    assert total > 12
    plain, copied = tmp_path / "plain", tmp_path / "copied"
    res = runner.invoke(app, ["analyze", str(capture), "--out", str(plain), "-q"])
    assert res.exit_code == 2
    line = _one_error(res.stderr)
    assert line == f"espforensics: error: {capture} {DSB_ERROR}"
    if force:  # an earlier complete run in the folder, which this one replaces
        good = write_scenario(build_scenario("example", seed=1), tmp_path / "g")["capture"]
        earlier = runner.invoke(app, ["analyze", str(good), "--out", str(copied), "-q"])
        assert earlier.exit_code == 4  # done, no key given: nothing verified (cli.md)
    decrypted, annotated = tmp_path / "d.pcap", tmp_path / "a.pcapng"
    args = ["analyze", str(capture), "--out", str(copied), "-q", "--decrypted", str(decrypted)]
    args += ["--annotate", str(annotated), *(["--force"] if force else [])]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.stderr
    assert _one_error(res.stderr) == line
    assert _names(copied) == _names(plain) == sorted([*FINAL, "plots"])
    for name in ("packets.csv", "summary.json", "report.txt", "findings.csv"):
        assert (copied / name).read_text() == (plain / name).read_text().replace(
            str(plain), str(copied)
        )
    assert len((copied / "packets.csv").read_text().splitlines()) == 1 + 12
    assert DSB_ERROR in json.loads((copied / "summary.json").read_text())["error"]
    assert (_frames(decrypted), _frames(annotated)) == (12, 12)  # both end where it stopped
    assert not list(tmp_path.rglob("*.partial"))


def test_force_keeps_the_earlier_outputs_until_new_ones_replace_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), tmp_path, stem="cap")
    out = tmp_path / "out"
    analyze_to_dir(files["capture"], [files["keys"]], out, plots=False)
    before = {name: (out / name).read_bytes() for name in FINAL}
    observe = SummaryBuilder.observe

    def stopping(self: SummaryBuilder, rec: Any) -> None:
        if rec.frame == 40:
            raise KeyboardInterrupt
        observe(self, rec)

    monkeypatch.setattr(SummaryBuilder, "observe", stopping)
    with pytest.raises(KeyboardInterrupt):
        analyze_to_dir(files["capture"], [files["keys"]], out, force=True, plots=False)
    assert _names(out) == sorted([*FINAL, "packets.csv.partial", "packets.parquet.partial"])
    assert {name: (out / name).read_bytes() for name in FINAL} == before
    monkeypatch.setattr(SummaryBuilder, "observe", observe)
    analyze_to_dir(files["capture"], [files["keys"]], out, force=True, plots=True)
    assert _names(out) == sorted([*FINAL, "plots"])
    analyze_to_dir(files["capture"], [files["keys"]], out, force=True, plots=False)
    assert _names(out) == FINAL  # the earlier run's plots/ is not this run's: removed


# --- no warning on stderr: an IPv6 fragment that never completes, then one valid packet -------


@pytest.mark.slow
def test_a_lone_fragment_then_one_packet_prints_nothing_on_stderr(tmp_path: Path) -> None:
    """The issue's capture, with plots, under -W error: exit 0, stderr empty.

    ``--quiet``: off a terminal a run past 10 s writes a progress line, and this run is a
    fresh interpreter the test's frozen clock does not reach; on a loaded machine it may."""
    sc = build_scenario("fragments-v6", seed=1)
    first = next(i for i, t in enumerate(sc.truth) if t.verdict.value == "fragment")
    keys = write_scenario(sc, tmp_path / "full")["keys"]
    capture = tmp_path / "lone.pcap"
    with open(capture, "wb") as fh:
        frames = [sc.frames[first]._replace(number=1), sc.frames[0]._replace(number=2)]
        write_pcap(fh, frames, linktype=frames[0].linktype)
    out = tmp_path / "out"
    args = ["analyze", str(capture), "--sa", str(keys), "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    run = subprocess.run(
        [sys.executable, "-W", "error", "-m", "espforensics", *args],
        check=False, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert (run.returncode, run.stderr) == (0, "")
    verdicts = json.loads((out / "summary.json").read_text())["verdicts"]
    assert {k: v for k, v in verdicts.items() if v} == {"ok": 1, "fragment": 1}
    assert sorted(p.name for p in (out / "plots").iterdir())  # the plots were drawn
