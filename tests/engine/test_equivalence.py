"""The engine's steady lane against the per-frame reference path: the outputs must not change.

``Options(steady_lane=False)`` sends every frame down the per-frame path,
the reference. The default sends the packets of a steady state through the
batch steady lane, in batches of ``Options.batch_frames`` frames. For every
synthetic scenario, every real kernel capture in ../shared/captures and a
capture that interleaves the scenarios whose state crosses batches (ESN
wrap, IV reuse, fragments, misplaced headers, sequence anomalies, failed
ICVs, unknown SPIs), keyed and keyless, these tests compare the whole
packets table, summary.json's document and the findings of the reference
with those of the steady lane at several batch sizes, and the files
``analyze_to_dir`` writes with ``jobs`` 1, 2 and 3.
"""

from __future__ import annotations

import csv
import json
import os
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pandas.testing import assert_frame_equal

from espforensics.analysis import Analysis, analyze, analyze_to_dir
from espforensics.model.enums import FindingKind
from espforensics.model.options import Options
from espforensics.render.json import format_json
from espforensics.report.content import report_content
from espforensics.synth import SCENARIOS, build_scenario, write_scenario
from tests.support import helpers
from tests.support.mixed import write_mixed

REFERENCE = Options(steady_lane=False)

# The steady lane at the default batch size and at batch sizes that cut every state apart.
STEADY = [
    pytest.param(Options(), id="steady"),
    *(pytest.param(Options(batch_frames=n), id=f"steady-batch{n}") for n in (1, 7, 64)),
]
KEYED = [pytest.param(True, id="keyed"), pytest.param(False, id="keyless")]

# The real Linux kernel captures, found the way tests/e2e/test_real_captures.py finds them.
CAPTURES = helpers.CAPTURES / "linux-6.1"
REAL = sorted(p.parent.name for p in CAPTURES.glob("*/capture.pcap"))

# What analyze_to_dir writes without plots, and how each is compared.
BYTE_FILES = (
    "packets.csv",
    "sas.csv",
    "findings.csv",
    "finding_frames.csv",
    "report.txt",
    "report.md",
    "report.html",
)
OUTPUTS = sorted([*BYTE_FILES, "summary.json", "packets.parquet", "finding_frames.parquet"])


class Capture(NamedTuple):
    """A capture on disk, its key file and how many frames it holds."""

    path: Path
    keys: Path
    frames: int


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("equivalence")


@cache
def scenario_capture(folder: Path, name: str) -> Capture:
    """The scenario (seed 1) written as capture and keys.yaml, as tests/e2e/test_scenarios.py
    does."""
    sc = build_scenario(name, seed=1)
    files = write_scenario(sc, folder / name, stem="cap")
    return Capture(files["capture"], files["keys"], len(sc.frames))


@cache
def mixed_capture(folder: Path) -> Capture:
    """tests/support/mixed.py's capture of the cases that cross batches."""
    return Capture(*write_mixed(folder))


def real_capture(name: str) -> Capture:
    """A kernel capture, its ``ip xfrm state`` key file and its ground truth's frame count."""
    here = CAPTURES / name
    truth = json.loads((here / "ground-truth.json").read_text())
    return Capture(here / "capture.pcap", here / "xfrm-state.txt", int(truth["frames"]))


def run(capture: Capture, keyed: bool, options: Options) -> Analysis:
    return analyze(capture.path, [capture.keys] if keyed else None, options)


@cache
def reference(capture: Capture, keyed: bool) -> Analysis:
    """The per-frame path's result, computed once per capture and key choice."""
    return run(capture, keyed, REFERENCE)


def _cells(packets: pd.DataFrame) -> tuple[object, dict[str, list[object]]]:
    """The table's Arrow schema and its cells, floats as ``float.hex`` (bit exact, NaN equal)."""
    table = pa.Table.from_pandas(packets, preserve_index=False)
    cells = {
        name: [v.hex() if isinstance(v, float) else v for v in table.column(name).to_pylist()]
        for name in table.column_names
    }
    return table.schema.remove_metadata(), cells


def assert_same_packets(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Every cell, type and column alike.

    assert_frame_equal names the first difference, but pandas 3.1 drops its
    check_exact for extension-array columns (pandas PR 65797): Arrow-backed
    floats, the ``time`` column, get rtol 1e-5, hours on an epoch timestamp.
    The cells are therefore compared once more, exactly, on the Arrow table.
    """
    assert_frame_equal(got, want, check_exact=True)
    got_schema, got_cells = _cells(got)
    want_schema, want_cells = _cells(want)
    assert got_schema == want_schema
    for name, column in want_cells.items():
        diff = [i for i, (a, b) in enumerate(zip(got_cells[name], column, strict=True)) if a != b]
        assert not diff, f"column {name!r} differs in frame {diff[0] + 1}"


def assert_same(got: Analysis, want: Analysis, frames: int) -> None:
    """The packets table, summary.json's document and the findings, exactly alike."""
    assert frames > 0
    for result in (want, got):
        assert len(result.packets) == frames
        assert list(result.packets["frame"]) == list(range(1, frames + 1))
        assert result.summary.capture.frames == frames
    assert_same_packets(got.packets, want.packets)
    assert got.summary.to_json() == want.summary.to_json()
    assert got.summary.finding_list == want.summary.finding_list


# -- 1. every synthetic scenario ---------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("options", STEADY)
@pytest.mark.parametrize("keyed", KEYED)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_steady_lane_matches_the_reference(
    folder: Path, name: str, keyed: bool, options: Options
) -> None:
    capture = scenario_capture(folder, name)
    assert_same(run(capture, keyed, options), reference(capture, keyed), capture.frames)


# -- 2. the real kernel captures -----------------------------------------------


@helpers.needs_captures
def test_real_captures_are_there_with_their_keys() -> None:
    """The glob below finds the kernel captures, each with its key file and ground truth."""
    assert len(REAL) >= 8, REAL
    for name in REAL:
        assert (CAPTURES / name / "xfrm-state.txt").is_file(), name
        assert real_capture(name).frames > 0, name


@helpers.needs_captures
@pytest.mark.parametrize("options", STEADY)
@pytest.mark.parametrize("keyed", KEYED)
@pytest.mark.parametrize("name", REAL)
def test_real_capture_steady_lane_matches_the_reference(
    name: str, keyed: bool, options: Options
) -> None:
    capture = real_capture(name)
    assert_same(run(capture, keyed, options), reference(capture, keyed), capture.frames)


# -- 3. the scenarios interleaved ----------------------------------------------


def test_mixed_capture_holds_what_crosses_batches(folder: Path) -> None:
    """The fixture really has the faults whose state the steady lane must carry."""
    capture = mixed_capture(folder)
    result = reference(capture, True)
    kinds = {f.kind for f in result.summary.finding_list}
    assert {
        FindingKind.ESN_WRAP,
        FindingKind.IV_REUSE,
        FindingKind.ESP_MISPLACED,
        FindingKind.SEQ_DUPLICATE,
        FindingKind.SEQ_REORDER,
    } <= kinds
    verdicts = set(result.packets["verdict"])
    assert {"ok", "auth_fail", "unknown_sa", "fragment", "esp_misplaced"} <= verdicts
    assert int(result.packets["fragments"].notna().sum()) >= 2  # reassembled datagrams
    assert int(result.packets["iv_reused"].sum()) > 0


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 2, 5, 64, 4096], ids=lambda n: f"batch{n}")
@pytest.mark.parametrize("keyed", KEYED)
def test_mixed_capture_steady_lane_matches_the_reference(
    folder: Path, keyed: bool, batch: int
) -> None:
    capture = mixed_capture(folder)
    got = run(capture, keyed, Options(batch_frames=batch))
    assert_same(got, reference(capture, keyed), capture.frames)


# -- 4. analyze_to_dir with jobs -----------------------------------------------

DIR_CAPTURES = ["mixed", "iv-reuse", "esn-fault-late-start"]
DIR_RUNS = [
    pytest.param(1, Options(), id="jobs1"),
    pytest.param(2, Options(), id="jobs2"),
    pytest.param(3, Options(), id="jobs3"),
    pytest.param(2, REFERENCE, id="jobs2-reference"),
    pytest.param(3, Options(batch_frames=7), id="jobs3-batch7"),
]


def dir_capture(folder: Path, name: str) -> Capture:
    return mixed_capture(folder) if name == "mixed" else scenario_capture(folder, name)


@cache
def reference_dir(folder: Path, name: str) -> Path:
    """analyze_to_dir's files from one process on the per-frame path."""
    capture = dir_capture(folder, name)
    out = folder / f"{name}.reference-out"
    analyze_to_dir(capture.path, [capture.keys], out, jobs=1, plots=False, options=REFERENCE)
    return out


def _csv_rows(path: Path) -> int:
    with path.open(newline="") as fh:
        return sum(1 for _ in csv.reader(fh)) - 1  # without the header


@pytest.mark.parametrize(("jobs", "options"), DIR_RUNS)
@pytest.mark.parametrize("name", DIR_CAPTURES)
def test_analyze_to_dir_writes_the_same_files(
    folder: Path, tmp_path: Path, name: str, jobs: int, options: Options
) -> None:
    capture = dir_capture(folder, name)
    want = reference_dir(folder, name)
    got = tmp_path / "out"
    summary = analyze_to_dir(
        capture.path, [capture.keys], got, jobs=jobs, plots=False, options=options
    )
    assert sorted(os.listdir(want)) == sorted(os.listdir(got)) == OUTPUTS
    for out in (want, got):
        assert _csv_rows(out / "packets.csv") == capture.frames
        assert pq.read_table(out / "packets.parquet").num_rows == capture.frames
    for file in BYTE_FILES:
        assert (got / file).read_bytes() == (want / file).read_bytes(), file
    doc = json.loads((got / "summary.json").read_text())
    assert doc == json.loads((want / "summary.json").read_text())
    assert doc["capture"]["frames"] == capture.frames
    assert doc["capture"]["path"] == str(capture.path)
    # the summary's own document, and its causes
    assert json.loads(format_json(report_content(summary))) == doc
    assert {k: v for k, v in doc.items() if k != "likely_causes"} == summary.to_json()
    assert pq.read_table(got / "packets.parquet").equals(pq.read_table(want / "packets.parquet"))
