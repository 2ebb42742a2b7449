"""``analyze -`` reads standard input; ``--out -`` writes no folder; Ctrl-C's line.

A pipe gives the same results as the file it carries (plain or compressed),
the outputs and errors call it ``-``, and the temporary copy is removed
whatever ends the run.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.cli import app
from espforensics.cli_errors import _guarded

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURE = FIXTURES / "example.pcap"
KEYS = FIXTURES / "example.keys.yaml"
runner = CliRunner()


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A TMPDIR of the test's own, to see that the copy of stdin is removed."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    return folder


def _summary(folder: Path) -> dict[str, object]:
    summary = json.loads((folder / "summary.json").read_text())
    assert isinstance(summary, dict)
    return summary


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_stdin_gives_the_files_results(tmp_path: Path, tmpdir_env: Path, compress: bool) -> None:
    data = CAPTURE.read_bytes()
    piped = gzip.compress(data) if compress else data
    args = ["--sa", str(KEYS), "--no-plots", "--format", "json"]
    res = runner.invoke(app, ["analyze", "-", *args, "--out", str(tmp_path / "pipe")], input=piped)
    assert res.exit_code == 0, res.stderr
    whole = runner.invoke(app, ["analyze", str(CAPTURE), *args, "--out", str(tmp_path / "file")])
    assert whole.exit_code == 0, whole.stderr
    pipe, file = _summary(tmp_path / "pipe"), _summary(tmp_path / "file")
    pipe_capture, file_capture = pipe.pop("capture"), file.pop("capture")
    assert pipe == file
    assert isinstance(pipe_capture, dict) and isinstance(file_capture, dict)
    assert pipe_capture["path"] == "-"
    assert pipe_capture["frames"] == file_capture["frames"] == 40
    assert pipe_capture["size"] == len(piped)
    packets = (tmp_path / "pipe" / "packets.csv").read_bytes()
    assert packets == (tmp_path / "file" / "packets.csv").read_bytes()
    assert list(tmpdir_env.iterdir()) == []  # the copy of stdin is gone


def test_stdin_default_out_is_stdin_espforensics(
    tmp_path: Path, tmpdir_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(
        app, ["analyze", "-", "--sa", str(KEYS), "--no-plots"], input=CAPTURE.read_bytes()
    )
    assert res.exit_code == 0, res.stderr
    assert "  outputs: stdin.espforensics/" in res.stdout.splitlines()
    verdicts = _summary(tmp_path / "stdin.espforensics")["verdicts"]
    assert isinstance(verdicts, dict)
    assert {k: n for k, n in verdicts.items() if n} == {"ok": 36, "not_esp": 4}


def test_stdin_damage_names_dash(tmp_path: Path, tmpdir_env: Path) -> None:
    res = runner.invoke(
        app,
        ["analyze", "-", "--sa", str(KEYS), "--no-plots", "--out", str(tmp_path / "o")],
        input=CAPTURE.read_bytes()[:3000],
    )
    assert res.exit_code == 2
    assert res.stderr.splitlines()[-1] == (
        "espforensics: error: -: capture ends inside frame 14: read 13 complete frames"
    )
    capture = _summary(tmp_path / "o")["capture"]  # what was read is written, named "-"
    assert isinstance(capture, dict)
    assert (capture["path"], capture["frames"]) == ("-", 13)
    assert list(tmpdir_env.iterdir()) == []


def test_stdin_empty_is_one_line(tmp_path: Path, tmpdir_env: Path) -> None:
    res = runner.invoke(app, ["analyze", "-", "--out", str(tmp_path / "o")], input=b"")
    assert res.exit_code == 2
    assert res.stderr.startswith("espforensics: error: -: empty file")
    assert len(res.stderr.splitlines()) == 1
    assert list(tmpdir_env.iterdir()) == []


@pytest.mark.parametrize("fmt", ["summary", "text", "json"])
def test_out_dash_prints_and_writes_nothing(
    tmp_path: Path, tmpdir_env: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(
        app, ["analyze", str(CAPTURE), "--sa", str(KEYS), "--out", "-", "--format", fmt]
    )
    assert res.exit_code == 0, res.stderr
    kept = runner.invoke(
        app,
        [
            "analyze",
            str(CAPTURE),
            "--sa",
            str(KEYS),
            "--format",
            fmt,
            "--no-plots",
            "--out",
            "kept",
        ],
    )
    if fmt == "json":  # the same summary as a run that keeps its folder
        assert json.loads(res.stdout) == json.loads(kept.stdout)
    elif fmt == "text":
        assert res.stdout == kept.stdout
    else:  # the summary without the line naming a folder that is not there
        assert res.stdout.splitlines() == [
            line for line in kept.stdout.splitlines() if not line.startswith("  outputs:")
        ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "tmp"]
    assert not (FIXTURES / "example.pcap.espforensics").exists()
    assert list(tmpdir_env.iterdir()) == []


def test_ctrl_c_line_starts_after_the_bar_is_cleared() -> None:
    """The bar is stopped before the line is printed, so the line starts on its own."""

    def interrupted() -> None:
        raise KeyboardInterrupt

    def clear_bar() -> None:
        print("[bar cleared]", end="", file=__import__("sys").stderr)

    @app.command("ctrl-c-probe")
    def probe() -> None:  # a command of its own, so the test sees exactly the two writes
        _guarded(interrupted, None, clear_bar, "espforensics: interrupted: probe stopped")

    try:
        res = runner.invoke(app, ["ctrl-c-probe"])
    finally:
        app.registered_commands.pop()
    assert res.exit_code == 130
    assert res.stderr == "[bar cleared]espforensics: interrupted: probe stopped\n"
