"""Every option is checked before the run starts, whatever the capture's size.

``--scheduler`` without dask installed, or naming a scheduler that cannot be
reached, is one line and exit 2 before any output folder is touched, for
``analyze`` (whose workers a small capture never asks for) and ``batch``
(even with nothing left to analyze); ``--natt-port`` out of 1-65535 too.
"Not installed" is simulated by making the import fail; "unreachable" is a
local port nobody listens on, with a short connect timeout.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from espforensics.engine import dask_workers
from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import run_cli


@pytest.fixture
def small(tmp_path: Path) -> dict[str, Path]:
    """A capture of 16 frames: too small for any worker to be started."""
    return write_scenario(build_scenario("example", seed=1), tmp_path / "in")


@pytest.fixture
def closed_port(monkeypatch: pytest.MonkeyPatch) -> str:
    """tcp://127.0.0.1:PORT where nothing listens (bound, then closed), tried for 0.2 s."""
    monkeypatch.setattr(dask_workers, "CONNECT_TIMEOUT", "0.2s")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"tcp://127.0.0.1:{port}"


@pytest.fixture
def no_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # import raises ImportError


NOT_INSTALLED = "--scheduler needs dask, which is not installed: pip install 'espforensics[dask]'"


def _commands(small: dict[str, Path], out: Path, address: str) -> list[list[str | Path]]:
    capture, keys = small["capture"], small["keys"]
    return [
        ["analyze", capture, "--sa", keys, "--out", out, "--scheduler", address],
        ["batch", capture.parent, "--out", out, "--scheduler", address],
    ]


@pytest.mark.usefixtures("no_dask")
def test_scheduler_without_dask_is_one_line_before_any_output(
    small: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    for args in _commands(small, out, "tcp://127.0.0.1:8786"):
        res = run_cli(*args)
        assert res.code == 2, res.stderr
        assert res.stderr.splitlines() == [
            f"espforensics: error: tcp://127.0.0.1:8786: {NOT_INSTALLED}"
        ]
        assert res.stdout == ""
        assert not out.exists(), args[0]


def test_an_unreachable_scheduler_is_one_line_before_any_output(
    small: dict[str, Path], tmp_path: Path, closed_port: str
) -> None:
    out = tmp_path / "out"
    for args in _commands(small, out, closed_port):
        res = run_cli(*args)
        assert res.code == 2, res.stderr
        [line] = res.stderr.splitlines()
        assert line.startswith(
            f"espforensics: error: {closed_port}: cannot reach the Dask scheduler: "
        ), line
        assert res.stdout == ""
        assert not out.exists(), args[0]


def test_a_batch_with_nothing_left_to_do_still_reaches_its_scheduler(
    small: dict[str, Path], tmp_path: Path, closed_port: str
) -> None:
    """Every capture done already: the scheduler is still checked, the folder left as it was."""
    out = tmp_path / "out"
    done = run_cli("batch", small["capture"].parent, "--out", out, "--no-plots", "-q")
    assert done.code == 0, done.stderr
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    res = run_cli("batch", small["capture"].parent, "--out", out, "--scheduler", closed_port)
    assert res.code == 2
    assert "cannot reach the Dask scheduler" in res.stderr
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_an_address_dask_cannot_read_is_named(small: dict[str, Path], tmp_path: Path) -> None:
    res = run_cli(*_commands(small, tmp_path / "out", "udp://127.0.0.1:1")[0])
    assert res.code == 2
    assert res.stderr.startswith(
        "espforensics: error: udp://127.0.0.1:1: not a Dask scheduler address: "
        "unknown address scheme 'udp'"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("port", ["0", "65536", "-1"])
def test_a_natt_port_out_of_range_is_refused_before_the_run(
    small: dict[str, Path], tmp_path: Path, port: str
) -> None:
    out = tmp_path / "out"
    commands: list[list[str | Path]] = [
        ["analyze", small["capture"], "--out", out, "--natt-port", port],
        ["batch", small["capture"].parent, "--out", out, "--natt-port", port],
    ]
    for args in commands:
        res = run_cli(*args)
        assert res.code == 2
        [line] = res.stderr.splitlines()
        assert line.startswith(f"espforensics: error: {args[0]}: Invalid value for '--natt-port'")
        assert not out.exists()


def test_a_batch_out_that_cannot_be_a_folder_is_one_line(
    small: dict[str, Path], tmp_path: Path
) -> None:
    """--out naming a file, or a folder that cannot be made: exit 2, not a bug (70)."""
    a_file = tmp_path / "file"
    a_file.write_text("")
    for out, why in (
        (a_file, "exists and is not a folder"),
        (a_file / "out", "cannot create output folder: Not a directory"),
    ):
        res = run_cli("batch", small["capture"].parent, "--out", out, "-q")
        assert res.code == 2, res.stderr
        assert res.stderr.splitlines() == [f"espforensics: error: {out}: {why}"]
