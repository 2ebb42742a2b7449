"""packets.csv by default only for captures of at most CSV_ROWS frames; packets.parquet
always; --csv / --no-csv decide (issue 19 s4: 433 MB of CSV for 2M frames)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from espforensics.model.options import CSV_ROWS
from espforensics.model.records import PACKET_COLUMNS, PacketRecord
from espforensics.synth import build_scenario, write_scenario
from espforensics.tables.packets import PacketTableWriter, iter_packet_records
from tests.support.helpers import run_cli


@pytest.fixture(autouse=True)
def _frozen_progress_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal a progress line comes every 10 s: none on a frozen clock."""
    monkeypatch.setattr("espforensics.cli.commands.monotonic", lambda: 0.0)


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
    monkeypatch.setattr("espforensics.cli.commands.CSV_ROWS", rows)


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


def _records(capture: tuple[Path, Path], tmp: Path) -> list[PacketRecord]:
    """The capture's rows as records, read back from its packets.parquet."""
    _run(capture, tmp / "src", "--no-csv")
    return list(iter_packet_records(tmp / "src" / "packets.parquet", PACKET_COLUMNS))


def _write(
    tmp: Path, name: str, records: list[PacketRecord], csv_rows: int | None, at: int
) -> Path:
    """Write ``records`` with a writer told, after half of them, that ``at`` of the
    capture's 1,000 bytes were read; its packets.csv (which may not exist)."""
    csv = tmp / f"{name}.csv"
    with PacketTableWriter(tmp / f"{name}.parquet", csv, csv_rows, 1000) as writer:
        for i, rec in enumerate(records):
            if i == len(records) // 2:
                writer.reached(at)
            writer.observe(rec)
    return csv


def test_a_projection_past_the_limit_stops_the_csv_and_a_wrong_one_costs_only_time(
    capture: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("espforensics.tables.rows.ROW_GROUP", 8)
    monkeypatch.setattr("espforensics.tables.packets._SAMPLE", 16)
    rebuilt: list[Path] = []
    rebuild = PacketTableWriter._csv_from_parquet

    def spy(writer: PacketTableWriter) -> None:
        rebuilt.append(writer._csv_path)
        rebuild(writer)

    monkeypatch.setattr(PacketTableWriter, "_csv_from_parquet", spy)
    records = _records(capture, tmp_path)
    assert len(records) == 98
    whole = _write(tmp_path, "whole", records, None, 1000).read_bytes()
    assert len(whole.splitlines()) == 99
    # 48 rows given from 10 bytes of 1,000 project 4,800 frames: more than 5/4 of 98, so
    # the CSV stops; the capture ends at 98, within the limit: written from the Parquet
    assert _write(tmp_path, "wrong", records, 98, 10).read_bytes() == whole
    assert rebuilt == [tmp_path / "wrong.csv"]
    # the same projection for a limit of 97: stopped, and rightly (98 > 97)
    assert not _write(tmp_path, "right", records, 97, 10).exists()
    # 48 rows from 500 bytes project 96, not more than 5/4 of 98: written as it goes
    assert _write(tmp_path, "kept", records, 98, 500).read_bytes() == whole
    assert rebuilt == [tmp_path / "wrong.csv"]  # neither "right" nor "kept" was rebuilt
