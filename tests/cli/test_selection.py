"""``--spi`` and ``--frames`` select what is analyzed; every other frame stays a row.

On the kernel GSO fixture (kernel-gso-v6: 25 frames, SPI 0x1001 with 12 misplaced
ESP headers in frames 4-6 8-10 12-14 16-18, SPI 0x1002 clean): the frames not
selected are ``not_selected`` rows, no SA or finding comes from them, the
steady lane and the per-frame path give the same bytes, and a bad value is one
line, exit 2.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.analysis import analyze_to_dir
from espforensics.cli import app
from espforensics.model.options import Options, Selection
from espforensics.synth import build_scenario, write_scenario

runner = CliRunner()
LANES = {
    "per-frame": Options(steady_lane=False),
    "steady": Options(batch_frames=8),  # small batches: the lane takes the SAs early
}


@pytest.fixture(scope="module")
def gso(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_scenario(
        build_scenario("kernel-gso-v6", seed=1), tmp_path_factory.mktemp("sel"), stem="g"
    )


def _run(gso: dict[str, Path], out: Path, options: Options) -> list[dict[str, str]]:
    analyze_to_dir(gso["capture"], [gso["keys"]], out, plots=False, options=options)
    with (out / "packets.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _with(options: Options, select: Selection) -> Options:
    return Options(
        steady_lane=options.steady_lane, batch_frames=options.batch_frames, select=select
    )


@pytest.mark.parametrize("lane", list(LANES))
def test_spi_selects_one_sa(gso: dict[str, Path], tmp_path: Path, lane: str) -> None:
    rows = _run(gso, tmp_path / "out", _with(LANES[lane], Selection(frozenset({0x1002}))))
    assert len(rows) == 25  # every frame is a row
    chosen = [r for r in rows if r["verdict"] != "not_selected"]
    assert [(r["spi"], r["verdict"]) for r in chosen] == [("4098", "ok")] * 7
    rest = [r for r in rows if r["verdict"] == "not_selected"]
    assert len(rest) == 18 and {r["spi"] for r in rest} == {"4097"}
    assert all(r["detail"] == "SPI 0x00001001 not selected (--spi 0x00001002)" for r in rest)
    with (tmp_path / "out" / "sas.csv").open(newline="") as fh:
        assert [r["spi"] for r in csv.DictReader(fh)] == ["4098"]
    with (tmp_path / "out" / "findings.csv").open(newline="") as fh:
        assert list(csv.DictReader(fh)) == []  # the misplaced headers are 0x1001's


@pytest.mark.parametrize("lane", list(LANES))
def test_frames_selects_a_range(gso: dict[str, Path], tmp_path: Path, lane: str) -> None:
    rows = _run(gso, tmp_path / "out", _with(LANES[lane], Selection(frames=(3, 9))))
    assert [int(r["frame"]) for r in rows] == list(range(1, 26))
    outside = [int(r["frame"]) for r in rows if r["verdict"] == "not_selected"]
    assert outside == [1, 2, *range(10, 26)]
    assert all(
        r["detail"] == "frame not selected (--frames 3-9)" and r["spi"] == ""
        for r in rows
        if r["verdict"] == "not_selected"
    )
    with (tmp_path / "out" / "finding_frames.csv").open(newline="") as fh:
        linked = {int(r["frame"]) for r in csv.DictReader(fh)}
    assert linked == {4, 5, 6, 8, 9}  # the misplaced headers inside 3-9, no other


def test_the_lanes_write_the_same_bytes(gso: dict[str, Path], tmp_path: Path) -> None:
    for select in (Selection(frozenset({0x1001})), Selection(frames=(5, 20))):
        outs = []
        for lane, options in LANES.items():
            out = tmp_path / f"{lane}-{select.words()}"
            _run(gso, out, _with(options, select))
            outs.append(out)
        for name in ("packets.csv", "sas.csv", "findings.csv", "finding_frames.csv"):
            assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


def test_cli_spi_and_frames_together(gso: dict[str, Path], tmp_path: Path) -> None:
    whole = _run(gso, tmp_path / "whole", Options())
    want = [r["frame"] for r in whole if r["spi"] == "4097" and int(r["frame"]) >= 8]
    args = ["analyze", str(gso["capture"]), "--sa", str(gso["keys"]), "--out", "-"]
    res = runner.invoke(app, [*args, "--spi", "4097", "--frames", "8-", "--format", "packets"])
    assert res.exit_code == 1, res.stderr  # the misplaced headers of 0x1001 from frame 8
    lines = res.stdout.splitlines()
    assert [line.split()[0] for line in lines] == want and len(want) == 13
    assert all(" SPI 0x00001001 " in line for line in lines)


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--spi", "zz", "'zz' is not an SPI (0x1001 or 4097)"),
        ("--spi", "0x100000000", "0x100000000 is not a 32-bit SPI"),
        ("--frames", "9-3", "'9-3': frames count from 1, and A <= B"),
        ("--frames", "0-3", "'0-3': frames count from 1, and A <= B"),
        ("--frames", "a-b", "'a-b' is not A-B, A- or A (frame numbers)"),
    ],
)
def test_a_bad_selection_is_one_line(
    gso: dict[str, Path], tmp_path: Path, option: str, value: str, why: str
) -> None:
    out = tmp_path / "out"
    args = ["analyze", str(gso["capture"]), "--out", str(out), option, value]
    res = runner.invoke(app, args, prog_name="espforensics")
    assert res.exit_code == 2
    assert res.stderr == (
        f"espforensics: error: analyze: Invalid value for '{option}': {why}; "
        "see espforensics analyze --help\n"
    )
    assert not out.exists()
