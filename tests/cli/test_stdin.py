"""``analyze -`` reads standard input; ``--out -`` writes no folder; Ctrl-C's line.

A pipe gives the same results as the file it carries (plain or compressed),
the outputs and errors call it ``-``, and the temporary copy is removed
whatever ends the run.
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.cli import app
from espforensics.cli.errors import _guarded

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
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


def test_format_packets_is_a_line_per_esp_packet(tmp_path: Path) -> None:
    """Each ESP row of packets.csv, with the ids and kinds of the findings that name it."""
    from espforensics.synth import build_scenario, write_scenario

    paths = write_scenario(build_scenario("kernel-gso-v6", seed=1), tmp_path / "in", stem="g")
    out = tmp_path / "out"
    args = ["analyze", str(paths["capture"]), "--sa", str(paths["keys"]), "--no-plots"]
    res = runner.invoke(app, [*args, "--out", str(out), "--format", "packets"])
    assert res.exit_code == 1, res.stderr  # critical findings
    lines = res.stdout.splitlines()
    with (out / "packets.csv").open(newline="") as fh:
        esp = [r for r in csv.DictReader(fh) if r["verdict"] != "not_esp"]
    with (out / "findings.csv").open(newline="") as fh:
        findings = list(csv.DictReader(fh))
    assert len(lines) == len(esp) == 25
    first = int(esp[0]["time"]) if esp[0]["time"].isdigit() else None
    for line, row in zip(lines, esp, strict=True):
        words = line.split()
        assert words[0] == row["frame"]
        assert words[2:5] == [row["src"], "->", row["dst"]]
        assert words[5:9] == ["ESP", "SPI", f"{int(row['spi']):#010x}", "seq"]
        assert (words[9], words[10]) == (row["seq"], row["verdict"])
        named = [f"{f['id']} {f['kind']}" for f in findings if _names(f["frames"], row["frame"])]
        assert line.endswith(f" [{', '.join(named)}]" if named else f" {row['verdict']}")
    assert lines[3].endswith("esp_misplaced [1 cleartext_leak, 2 esp_misplaced]")
    assert first is None or lines[0].split()[1] == "0.000000"
    again = runner.invoke(app, ["report", str(out), "--format", "packets"])
    assert again.stdout == res.stdout
    printed = runner.invoke(app, [*args, "--out", "-", "--format", "packets"])
    assert printed.stdout == res.stdout


def _names(runs: str, frame: str) -> bool:
    """Whether findings.csv's runs ``4-6 8 10-12`` hold ``frame``."""
    n = int(frame)
    for run in runs.split():
        a, _, b = run.partition("-")
        if int(a) <= n <= int(b or a):
            return True
    return False


@pytest.mark.parametrize("fmt", ["summary", "text", "markdown", "json", "ktap", "packets"])
def test_every_format_choice_prints_from_report(tmp_path: Path, fmt: str) -> None:
    """Every --format choice works, from analyze and from report alike."""
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["analyze", str(CAPTURE), "--sa", str(KEYS), "--no-plots", "--out", str(out)]
    )
    assert res.exit_code == 0, res.stderr
    again = runner.invoke(app, ["report", str(out), "--format", fmt])
    assert again.exit_code == 0, again.stderr
    assert again.stdout.strip() and again.stdout.endswith("\n")


def test_batch_refuses_standard_input_in_one_line(tmp_path: Path) -> None:
    """A batch is many captures: '-' is refused in one line that names what reads it."""
    res = runner.invoke(app, ["batch", "-", "--out", str(tmp_path / "b")], input=b"")
    assert res.exit_code == 2
    assert res.stderr == (
        "espforensics: error: -: batch reads files, folders and patterns, not standard "
        "input; analyze - reads one capture from it\n"
    )


def test_sa_text_reaches_the_key_reader_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tcpdump -E text given to --sa is not a path: "//" in an ASCII secret stays "//"."""
    seen: list[object] = []

    def record(path: object, sas: object, *args: object, **kwargs: object) -> None:
        seen.append(sas)
        raise KeyboardInterrupt  # enough: the value has arrived

    monkeypatch.setattr("espforensics.cli.commands.analyze_to_dir", record)
    text = '0x1001@192.0.2.2 aes128-cbc:"a//b//c//d//e//f"'
    res = runner.invoke(app, ["analyze", str(CAPTURE), "--sa", text, "--out", str(tmp_path)])
    assert res.exit_code == 130
    assert seen == [[text]]
