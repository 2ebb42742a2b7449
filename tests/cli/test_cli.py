"""The command line: outputs, exit codes, one-line errors, no key material anywhere.

Ctrl-C under --jobs (a real signal): tests/e2e/test_parallel.py; a bug (exit 70):
tests/e2e/test_internal_error.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from espforensics.cli import app
from espforensics.errors import INTERRUPTED
from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import OUTPUT_NAMES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
runner = CliRunner()


def _one_error_line(stderr: str, *needles: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("espforensics: error: ")
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0]


def _key_hexes(keys_file: Path) -> list[str]:
    return re.findall(r"0x([0-9a-f]{40,72})", keys_file.read_text())


@pytest.mark.slow
def test_analyze_example_writes_every_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    keys = FIXTURES / "example.keys.yaml"
    res = runner.invoke(
        app, ["analyze", str(FIXTURES / "example.pcap"), "--sa", str(keys), "--out", str(out)]
    )
    assert res.exit_code == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUT_NAMES, "plots"])
    summary = json.loads((out / "summary.json").read_text())
    expected = json.loads((FIXTURES / "example.expected.json").read_text())
    assert summary["capture"]["frames"] == expected["frames"] == 40
    assert summary["verdicts"]["ok"] == 36 and summary["verdicts"]["not_esp"] == 4
    assert len((out / "packets.csv").read_text().splitlines()) == 41
    assert "40 frames, 36 ESP packets, 2 SAs" in res.stdout
    hexes = _key_hexes(keys)
    assert len(hexes) == 2
    everything = (
        res.stdout
        + res.stderr
        + "".join(p.read_bytes().decode("latin-1") for p in out.rglob("*") if p.is_file())
    )
    for key in hexes:
        assert key not in everything and key[:16] not in everything


@pytest.mark.slow
def test_existing_output_needs_force(tmp_path: Path) -> None:
    args = [
        "analyze",
        str(FIXTURES / "example.pcap"),
        "--sa",
        str(FIXTURES / "example.keys.yaml"),
        "--out",
        str(tmp_path / "o"),
        "-q",
    ]
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, args)
    assert again.exit_code == 2
    _one_error_line(again.stderr, str(tmp_path / "o"), "--force")
    keep = tmp_path / "o" / "my-notes.txt"
    keep.write_text("mine")
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0
    assert keep.read_text() == "mine"


@pytest.mark.parametrize(
    ("content", "needle"),
    [(None, "cannot open"), (b"", "empty file"), (b"hello, not a capture at all", "not a pcap")],
)
def test_bad_capture_is_one_line(tmp_path: Path, content: bytes | None, needle: str) -> None:
    cap = tmp_path / "cap.pcap"
    if content is not None:
        cap.write_bytes(content)
    res = runner.invoke(app, ["analyze", str(cap), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    _one_error_line(res.stderr, str(cap), needle)


@pytest.mark.slow
def test_truncated_capture_writes_what_was_read(tmp_path: Path) -> None:
    sc = build_scenario("ipv4-transport-tcp", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap")
    data = paths["capture"].read_bytes()
    paths["capture"].write_bytes(data[: len(data) - 30])  # cut inside the last record
    out = tmp_path / "o"
    res = runner.invoke(
        app, ["analyze", str(paths["capture"]), "--sa", str(paths["keys"]), "--out", str(out)]
    )
    assert res.exit_code == 2
    _one_error_line(res.stderr, str(paths["capture"]), f"read {len(sc.frames) - 1} complete frames")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["capture"]["frames"] == len(sc.frames) - 1
    assert "read 97 complete frames" in summary["error"]
    assert len((out / "packets.csv").read_text().splitlines()) == len(sc.frames)


def test_bad_key_file_is_one_line_without_the_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        "sas:\n  - spi: 0x1001\n    aead: rfc4106(gcm(aes))\n"
        "    key: 0x0102030405060708090a0b0c0d0e0f101112\n"
    )
    res = runner.invoke(
        app,
        [
            "analyze",
            str(FIXTURES / "example.pcap"),
            "--sa",
            str(keys),
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert res.exit_code == 2
    _one_error_line(res.stderr, str(keys), "18 bytes")
    assert "0102030405" not in res.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_natt_port_option(tmp_path: Path) -> None:
    sc = build_scenario("natt", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap")
    base = ["analyze", str(paths["capture"]), "--sa", str(paths["esp_sa"]), "-q"]
    assert runner.invoke(app, [*base, "--out", str(tmp_path / "a")]).exit_code == 0
    assert (
        runner.invoke(
            app,
            [*base, "--out", str(tmp_path / "b"), "--natt-port", "4500", "--natt-port", "14500"],
        ).exit_code
        == 0
    )
    a = json.loads((tmp_path / "a" / "summary.json").read_text())["verdicts"]
    b = json.loads((tmp_path / "b" / "summary.json").read_text())["verdicts"]
    assert (a["ok"], b["ok"]) == (18, 22)


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("espforensics.cli.commands.analyze_to_dir", interrupted)
    capture = FIXTURES / "example.pcap"
    res = runner.invoke(app, ["analyze", str(capture), "--out", str(tmp_path)])
    assert res.exit_code == 130
    assert res.stderr == (
        f"espforensics: interrupted: the analysis of {capture} stopped; no output was published\n"
    )


class _Interrupting(ModuleType):
    """A body whose commands raise KeyboardInterrupt: a Ctrl-C while it is imported."""

    def __getattr__(self, name: str) -> object:
        if name.endswith("_command"):  # what cli/__init__.py imports of it
            raise KeyboardInterrupt
        raise AttributeError(name)


@pytest.mark.parametrize(
    ("body", "args"),
    [
        ("espforensics.cli.commands", ["analyze", "x.pcap"]),
        ("espforensics.cli.report", ["report", "out"]),
        ("espforensics.cli.reconcile", ["reconcile", "a.pcap", "b.pcap"]),
    ],
)
def test_ctrl_c_while_a_command_loads_is_one_line_and_exit_130(
    body: str, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command imports its body (the analysis) once typer has parsed the line."""
    monkeypatch.setitem(sys.modules, body, _Interrupting(body))
    res = runner.invoke(app, args)
    assert (res.exit_code, res.stdout, res.stderr) == (130, "", INTERRUPTED + "\n")


# -- help texts -----------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
USAGE = {
    "analyze": "Usage: espforensics analyze [OPTIONS] CAPTURE",
    "report": "Usage: espforensics report [OPTIONS] DIR",
    "compare": "Usage: espforensics compare [OPTIONS] BEFORE AFTER",
    "batch": "Usage: espforensics batch [OPTIONS] PATH...",
    "reconcile": "Usage: espforensics reconcile [OPTIONS] SENDER RECEIVER",
    "completion": "Usage: espforensics completion [OPTIONS] SHELL",
}


def _commands() -> list[str]:
    return [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]


@pytest.mark.parametrize("command", _commands())
def test_help_shows_the_docs_metavars_not_type_placeholders(command: str) -> None:
    """typer's ``{capture}``, ``<list[Path]>``, ``<int range>`` mean nothing to a user."""
    res = runner.invoke(app, [command, "--help"], prog_name="espforensics", terminal_width=100)
    assert res.exit_code == 0
    assert res.stdout.splitlines()[0] == USAGE[command]
    placeholders = re.findall(r"\{[^}\s]*\}|<[^>\s]*(?: range)?>", res.stdout)
    assert placeholders == [], placeholders
    docs = DOCS.read_text()
    shown = re.findall(r"(--[a-z][a-z-]+) ([A-Z]+)\b", res.stdout)
    assert shown or command == "completion", res.stdout  # completion has no option but --help
    for option, metavar in shown:
        assert f"`{option} {metavar}`" in docs, f"{command} {option} {metavar}"


def test_compare_offers_only_the_formats_it_renders(tmp_path: Path) -> None:
    res = runner.invoke(app, ["compare", "a", "b", "--format", "summary"])
    assert res.exit_code == 2
    assert "'summary' is not one of 'text', 'markdown', 'json'" in res.stderr


@pytest.mark.slow
def test_batch_jobs_has_a_short_form(tmp_path: Path) -> None:
    paths = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), tmp_path / "in", stem="c")
    out = tmp_path / "out"
    res = runner.invoke(app, ["batch", str(paths["capture"]), "-j", "1", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.stderr
    rows = (out / "captures.csv").read_text().splitlines()
    assert len(rows) == 2 and ",done," in rows[1]
    assert runner.invoke(app, ["batch", str(paths["capture"]), "-j", "0"]).exit_code == 2
