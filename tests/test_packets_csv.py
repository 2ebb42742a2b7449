"""packets.csv by default only for captures of at most CSV_ROWS frames; packets.parquet
always; --csv / --no-csv decide (issue 19 s4: 433 MB of CSV for 2M frames)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from espforensics.synth import build_scenario, write_scenario
from espforensics.tables import CSV_ROWS
from tests.helpers import run_cli


@pytest.fixture(autouse=True)
def _frozen_progress_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal a progress line comes every 10 s: none on a frozen clock."""
    monkeypatch.setattr("espforensics.cli.monotonic", lambda: 0.0)


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """98 frames."""
    tmp = tmp_path_factory.mktemp("csv")
    paths = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), tmp, stem="c")
    return paths["capture"], paths["keys"]


def _run(capture: tuple[Path, Path], out: Path, *extra: str) -> tuple[int, str]:
    cap, keys = capture
    args = ["analyze", str(cap), "--sa", str(keys), "--out", str(out), "--no-plots", *extra]
    res = run_cli(*args)
    assert pq.ParquetFile(out / "packets.parquet").metadata.num_rows == 98  # always
    return res.code, res.stderr


def _lower_limit(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    monkeypatch.setattr("espforensics.analysis.CSV_ROWS", rows)
    monkeypatch.setattr("espforensics.cli.CSV_ROWS", rows)


def test_default_limit_is_a_million_frames() -> None:
    assert CSV_ROWS == 1_000_000


def test_a_capture_under_the_limit_gets_its_csv(capture: tuple[Path, Path], tmp_path: Path) -> None:
    assert _run(capture, tmp_path / "o") == (0, "")
    assert len((tmp_path / "o" / "packets.csv").read_text().splitlines()) == 99


def test_a_capture_over_the_limit_gets_no_csv_and_says_so(
    capture: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _lower_limit(monkeypatch, 50)
    out = tmp_path / "o"
    assert _run(capture, out) == (
        0,
        "espforensics: packets.csv not written: 98 frames, more than 50; packets.parquet "
        "has every row (--csv writes it anyway)\n",
    )
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("packets")) == [
        "packets.parquet"
    ]
    assert not list(out.glob("*.partial"))
    assert _run(capture, out, "--force", "-q") == (0, "")  # quiet: no line


def test_csv_writes_it_over_the_limit_and_no_csv_never(
    capture: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _lower_limit(monkeypatch, 50)
    assert _run(capture, tmp_path / "a", "--csv") == (0, "")
    assert len((tmp_path / "a" / "packets.csv").read_text().splitlines()) == 99
    assert _run(capture, tmp_path / "b", "--no-csv") == (0, "")
    assert not (tmp_path / "b" / "packets.csv").exists()
