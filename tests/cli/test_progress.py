"""Progress off a terminal: one line at most every 10 s of an injected clock, with
frames, frames/s and the phase, the output phases after the reading included;
none with --quiet (issue 19 s4). No test here depends on real time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.analysis import analyze_to_dir
from espforensics.analysis.progress import (
    DONE,
    PLOTS,
    READING,
    REPORTS,
    TABLES,
    UNPACKING,
    LineMeter,
)
from espforensics.capture import compression, unpack
from espforensics.cli import app
from espforensics.synth import build_scenario, write_scenario

runner = CliRunner()


def _clock(step: float) -> Callable[[], float]:
    """A clock that advances ``step`` s at each reading, from 0."""
    now = [-step]

    def tick() -> float:
        now[0] += step
        return now[0]

    return tick


def test_line_meter_writes_one_line_per_period_and_the_totals() -> None:
    lines: list[str] = []
    meter = LineMeter(lines.append, _clock(3.0), size=1_000_000)  # start at 0
    for frames in (4096, 8192, 12288, 16384):  # at 3, 6, 9, 12 s
        meter.reading(frames, frames * 50)
    meter.phase(TABLES)  # 15 s (the reading took 15 s), then 18 s: 6 s after the line
    meter.phase(PLOTS)  # 21 s: 9 s after it
    meter.phase(REPORTS)  # 24 s: 12 s, a line
    meter.phase(DONE)  # 27 s
    assert lines == [
        "espforensics: reading: 16,384 frames, 1,365 frames/s, 81% of the capture",
        "espforensics: writing reports: 16,384 frames read (1,092 frames/s), 24 s",
        "espforensics: done: 16,384 frames read (1,092 frames/s), 27 s",
    ]


def test_line_meter_names_the_decompression_then_counts_the_reading_from_its_end() -> None:
    """--jobs on a compressed capture: the copy's decompression first (the compressed
    bytes taken, of the file's size), then the reading, whose frames/s start there."""
    lines: list[str] = []
    meter = LineMeter(lines.append, _clock(4.0), size=1_000_000)  # start at 0
    meter.phase(UNPACKING)  # 8 s
    meter.reading(0, 300_000)  # 12 s: a line
    meter.reading(0, 1_000_000)  # 16 s
    meter.phase(READING)  # the reading begins at 20 s
    meter.reading(40_000, 500_000)  # 24 s: a line (12 s after the last), 4 s of reading
    meter.phase(TABLES)  # 28 s: the reading took 8 s; 32 s
    meter.phase(DONE)  # 36 s
    assert lines == [
        "espforensics: decompressing for the workers: 30% of the capture",
        "espforensics: reading: 40,000 frames, 10,000 frames/s, 50% of the capture",
        "espforensics: done: 40,000 frames read (5,000 frames/s), 36 s",
    ]


def test_analyze_to_dir_names_the_decompression_for_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip capture with --jobs 2: the decompression is a phase of its own, told the
    compressed bytes taken (up to the file's size), before the reading."""
    monkeypatch.setattr(unpack, "RESERVE", 0.0)  # a copy however full this disk is
    for module in (compression, unpack):  # several chunks of a small capture
        monkeypatch.setattr(module, "CHUNK_SIZE", 4096)
    scenario = build_scenario("ipv4-transport-tcp", seed=1)
    paths = write_scenario(scenario, tmp_path, stem="c", compression="gzip")
    seen: list[tuple[str, int, int]] = []

    class Record:
        def reading(self, frames: int, bytes_read: int) -> None:
            seen.append(("reading", frames, bytes_read))

        def phase(self, name: str) -> None:
            seen.append((name, -1, -1))

    analyze_to_dir(paths["capture"], paths["keys"], tmp_path / "out", meter=Record(), jobs=2)
    start = seen.index((READING, -1, -1))
    told = seen[1:start]
    assert seen[0] == (UNPACKING, -1, -1) and len(told) >= 2
    assert all(kind == "reading" and frames == 0 for kind, frames, _ in told)
    at = [n for _, _, n in told]
    assert at == sorted(at) and at[-1] <= paths["capture"].stat().st_size
    assert [name for name, _, _ in seen[start + 2 :]] == [TABLES, PLOTS, REPORTS, DONE]
    assert seen[start + 1][:2] == ("reading", 98)


def test_a_short_run_writes_no_line() -> None:
    lines: list[str] = []
    meter = LineMeter(lines.append, _clock(1.0))
    meter.reading(98, 20_000)
    for phase in (TABLES, REPORTS, DONE):
        meter.phase(phase)
    assert lines == []


def test_analyze_to_dir_reports_every_phase(tmp_path: Path) -> None:
    """The phases in order: the ~9 s after the last frame of a big capture are named."""
    paths = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), tmp_path, stem="c")
    seen: list[tuple[str, int]] = []

    class Record:
        def reading(self, frames: int, bytes_read: int) -> None:
            seen.append(("reading", frames))

        def phase(self, name: str) -> None:
            seen.append((name, -1))

    analyze_to_dir(paths["capture"], paths["keys"], tmp_path / "out", meter=Record())
    assert seen == [
        ("reading", 98),
        (TABLES, -1),
        (PLOTS, -1),
        (REPORTS, -1),
        (DONE, -1),
    ]


@pytest.mark.parametrize(
    ("quiet", "expected"),
    [
        (
            False,
            "espforensics: writing tables: 98 frames read (12 frames/s), 12 s\n"
            "espforensics: done: 98 frames read (12 frames/s), 20 s\n",
        ),
        (True, ""),
    ],
)
def test_cli_off_a_terminal_prints_periodic_lines_unless_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quiet: bool, expected: str
) -> None:
    """The clock advances 4 s at each reading: start 0, last frame 4, reading ends 8."""
    monkeypatch.setattr("espforensics.cli.commands.monotonic", _clock(4.0))
    paths = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), tmp_path, stem="c")
    args = ["analyze", str(paths["capture"]), "--sa", str(paths["keys"]), "--no-plots"]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "o"), *(["-q"] if quiet else [])])
    assert res.exit_code == 0
    assert res.stderr == expected
