"""Scripting the command and the library: --version, one-line usage errors, path
arguments as the standard library takes them, and --jobs capped at the work and
the cores (issue 19 s3, s4)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import espforensics
from espforensics.batch.task import CaptureTask, run_task
from espforensics.cli import app
from espforensics.engine.workers import Workers, cap_workers
from espforensics.model.version import TOOL_VERSION
from espforensics.synth import build_scenario, write_scenario

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURE = FIXTURES / "example.pcap"
KEYS = FIXTURES / "example.keys.yaml"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _frozen_progress_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal a progress line comes every 10 s: none on a frozen clock."""
    monkeypatch.setattr("espforensics.cli.commands.monotonic", lambda: 0.0)


def test_version_prints_the_package_version() -> None:
    res = runner.invoke(app, ["--version"], prog_name="espforensics")
    assert res.exit_code == 0
    assert res.stdout == f"espforensics {TOOL_VERSION}\n"
    assert TOOL_VERSION == "0.1.0"  # pyproject.toml's version, from the installed metadata


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["analyze"],
            "analyze: Missing argument 'CAPTURE'; see espforensics analyze --help",
        ),
        (
            ["analyze", "x.pcap", "--jobs", "0"],
            "analyze: Invalid value for '--jobs' / '-j': Input should be greater than or "
            "equal to 1; see espforensics analyze --help",
        ),
        (
            ["report", "d", "--format", "yaml"],
            "report: Invalid value for '--format': Value error, 'yaml' is not one of "
            "'summary', 'text', 'markdown', 'json', 'ktap', 'packets'; "
            "see espforensics report --help",
        ),
        (["frobnicate"], "No such command 'frobnicate'; see espforensics --help"),
        (["--frob"], "No such option: --frob; see espforensics --help"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], line: str) -> None:
    """Click prints the usage, a hint and the error: three lines. cli.md promises one."""
    res = runner.invoke(app, args, prog_name="espforensics")
    assert res.exit_code == 2
    assert res.stderr == f"espforensics: error: {line}\n"
    assert res.stdout == ""


def test_no_arguments_still_print_the_help() -> None:
    """Click's no_args_is_help: the whole help (not one line) on stderr, exit 2."""
    res = runner.invoke(app, [], prog_name="espforensics")
    assert res.exit_code == 2
    assert res.stderr.startswith("Usage: espforensics [OPTIONS] COMMAND [ARGS]...")
    assert "  --version  Print the version and exit." in res.stderr.splitlines()


@pytest.mark.parametrize("as_type", [str, Path])
def test_analyze_takes_one_key_path_as_str_or_pathlike(as_type: type[str] | type[Path]) -> None:
    """A str is one path (it was iterated character by character), as open() takes it."""
    one = espforensics.analyze(as_type(CAPTURE), as_type(KEYS))
    listed = espforensics.analyze(str(CAPTURE), [as_type(KEYS)])
    counts = {k: v for k, v in one.summary.verdicts.items() if v}
    assert counts == {"ok": 36, "not_esp": 4}
    assert one.summary.verdicts == listed.summary.verdicts
    assert len(espforensics.load_sas(as_type(KEYS))) == 2


def test_analyze_to_dir_takes_a_str_folder(tmp_path: Path) -> None:
    """analyze_to_dir(cap, [keys], "/tmp/out") raised AttributeError on the str."""
    out = str(tmp_path / "out")
    summary = espforensics.analyze_to_dir(str(CAPTURE), str(KEYS), out, plots=False)
    assert summary.verdicts["ok"] == 36
    assert (tmp_path / "out" / "summary.json").is_file()
    from espforensics.analysis import load_summary, summary_of

    assert load_summary(out).verdicts == summary_of(out).verdicts == summary.verdicts


@pytest.mark.parametrize(
    ("asked", "work", "cores", "expected"),
    [
        (10000, 8, 24, Workers(8, 10000, "8 captures to analyze")),
        (10000, 8, 2, Workers(2, 10000, "2 cores usable")),
        (4, 4, 4, Workers(4, 4)),
        (3, 8, 24, Workers(3, 3)),
        (5, 0, 24, Workers(1, 5, "0 captures to analyze")),
        (100000, None, 1, Workers(1, 100000, "1 core usable")),
        (9, 2, 2, Workers(2, 9, "2 captures to analyze and 2 cores usable")),
    ],
)
def test_workers_are_capped_at_the_work_and_the_cores(
    asked: int, work: int | None, cores: int, expected: Workers
) -> None:
    assert cap_workers(asked, work, cores) == expected


def _two_captures(tmp_path: Path) -> list[str]:
    caps = []
    for stem in ("a", "b"):
        paths = write_scenario(
            build_scenario("ipv4-transport-tcp", seed=1), tmp_path / stem, stem=stem
        )
        caps.append(str(paths["capture"]))
    return caps


def test_batch_jobs_capped_at_the_captures_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 workers asked for 2 captures: 2 start (in this process: the pool is faked)."""
    started: list[int] = []

    def run_local(tasks: list[CaptureTask], jobs: int, done: Callable[..., None]) -> None:
        started.append(jobs)
        for task in tasks:
            done(run_task(task))

    monkeypatch.setattr("espforensics.batch.run.usable_cores", lambda: 64)
    monkeypatch.setattr("espforensics.batch.run.run_local", run_local)
    out = tmp_path / "out"
    args = ["batch", *_two_captures(tmp_path), "-j", "10000", "--out", str(out), "--no-plots"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.stderr
    assert res.stderr == "espforensics: --jobs 10000 capped at 2: 2 captures to analyze\n"
    assert started == [2]
    quiet = runner.invoke(app, [*args, "--force", "-q"])
    assert (quiet.exit_code, quiet.stderr) == (0, "")


def test_analyze_threads_capped_at_the_cores_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    monkeypatch.setattr("espforensics.cli.commands.usable_cores", lambda: 3)
    real = espforensics.analyze_to_dir

    def spy(*args: object, **kw: object) -> object:
        seen.append(int(kw["jobs"]))  # type: ignore[call-overload]
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr("espforensics.cli.commands.analyze_to_dir", spy)
    base = ["analyze", str(CAPTURE), "--sa", str(KEYS), "--no-plots", "--out"]
    res = runner.invoke(app, [*base, str(tmp_path / "a"), "--jobs", "100000"])
    assert res.exit_code == 0, res.stderr
    assert res.stderr == "espforensics: --jobs 100000 capped at 3: 3 cores usable\n"
    res = runner.invoke(app, [*base, str(tmp_path / "b"), "--jobs", "2"])
    assert (res.exit_code, res.stderr) == (0, "")
    assert seen == [3, 2]
