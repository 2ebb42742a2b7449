"""Every frame of a finding in the machine outputs, as runs; the text reports
shorten with "... and N more" and where all are (issue 19 s3)."""

from __future__ import annotations

import csv
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from espforensics.analysis import analyze_to_dir, load_summary
from espforensics.bounded.frames import (
    Frames,
    display_filter,
    first_frames,
    frame_runs,
    from_runs,
    frozen,
    runs_text,
    with_frame,
    with_frames,
)
from espforensics.model.enums import FindingKind
from espforensics.report import narrative
from espforensics.report.content import FILTER_SHOWN, frames_filter, frames_text
from espforensics.synth import build_scenario, write_scenario
from tests.support import helpers

GSO_FRAMES = (4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18)  # the 12 misplaced of kernel-gso-v4


def test_frames_are_runs_and_a_sequence() -> None:
    assert frozen(None) == Frames()  # a check that never named a frame
    runs = None
    for frame in (30, 20, 21, 22, 24, 23, 21, 40):
        runs = with_frame(runs, frame)
    frames = frozen(runs)
    assert frames.runs == ((20, 24), (30, 30), (40, 40))
    assert list(frames) == [20, 21, 22, 23, 24, 30, 40] and len(frames) == 7
    assert (frames[0], frames[5], frames[-1], frames[:2]) == (20, 30, 40, (20, 21))
    as_tuple = (20, 21, 22, 23, 24, 30, 40)
    assert frames == as_tuple
    assert as_tuple.__eq__(frames) is NotImplemented  # so == asks Frames: equal both ways
    assert frames != (20, 21) and bool(Frames()) is False
    with pytest.raises(IndexError):
        frames[7]
    assert runs_text(frames) == "20-24 30 40"
    assert display_filter(frames) == "frame.number in {20..24,30,40}"
    assert display_filter(Frames()) == "!frame"  # `in {}` is a syntax error
    assert frame_runs(frames) == [[20, 24], [30, 30], [40, 40]]
    assert from_runs([[20, 24], [30, 30], 40]) == frames  # a plain number: older summary.json
    assert first_frames([Frames.of([5, 9]), Frames.of([1, 5, 7])], 3) == (1, 5, 7)


def test_a_million_back_to_back_frames_are_one_run() -> None:
    runs = None
    for frame in range(1, 1_000_001):
        runs = with_frame(runs, frame)
    frames = frozen(runs)
    assert frames.runs == ((1, 1_000_000),) and len(frames) == 1_000_000
    assert frames_text(frames) == (
        "1 2 3 4 5 ... and 999995 more (Wireshark: frame.number in {1..1000000})"
    )


def test_frames_text_leaves_a_long_filter_to_findings_csv() -> None:
    every_other = Frames.of(range(20, 208, 2))  # 94 frames, no two adjacent
    assert frames_text(every_other) == "20 22 24 26 28 ... and 89 more (findings.csv lists them)"
    assert frames_text(Frames.of([3, 9])) == "3 9"


@pytest.fixture(scope="module")
def gso(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("frames")
    paths = write_scenario(build_scenario("kernel-gso-v4", seed=1), tmp / "in", stem="k4")
    out = tmp / "out"
    analyze_to_dir(paths["capture"], [paths["keys"]], out, plots=False)
    return out


def test_every_frame_in_finding_csv_json_and_the_finding(gso: Path) -> None:
    packets = pd.read_parquet(gso / "packets.parquet")
    misplaced = tuple(packets.loc[packets["verdict"] == "esp_misplaced", "frame"])
    assert misplaced == GSO_FRAMES  # was cut at the first 5
    with (gso / "findings.csv").open() as fh:
        rows = {r["kind"]: r["frames"] for r in csv.DictReader(fh)}
    assert rows == {
        "cleartext_leak": "4-6 8-10 12-14 16-18",
        "esp_misplaced": "4-6 8-10 12-14 16-18",
    }
    doc = json.loads((gso / "summary.json").read_text())
    assert [f["frames"] for f in doc["finding_list"]] == [[[4, 6], [8, 10], [12, 14], [16, 18]]] * 2
    summary = load_summary(gso)
    (finding,) = [f for f in summary.finding_list if f.kind is FindingKind.ESP_MISPLACED]
    assert tuple(finding.frames) == GSO_FRAMES and finding.count == 12


def test_text_reports_shorten_and_say_where_all_are(gso: Path) -> None:
    text = (gso / "report.txt").read_text()
    assert (
        "    frames 4 5 6 8 9 ... and 7 more (Wireshark:\n"
        "        frame.number in {4..6,8..10,12..14,16..18})\n"
    ) in text
    md = (gso / "report.md").read_text()
    assert (
        "| 4 5 6 8 9 ... and 7 more (Wireshark: frame.number in {4..6,8..10,12..14,16..18}) |" in md
    )


REAL = helpers.CAPTURES / "linux-6.1"


@helpers.needs_captures
def test_real_tso_capture_lists_all_94_misplaced_frames(tmp_path: Path) -> None:
    """The issue's case: `frames 20 21 22 23 24` was all a finding of 94 gave."""
    folder = REAL / "ip6tnl-transport-tso-on"
    out = tmp_path / "out"
    analyze_to_dir(folder / "capture.pcap", folder / "xfrm-state.txt", out, plots=False)
    packets = pd.read_parquet(out / "packets.parquet")
    misplaced = packets.loc[packets["verdict"] == "esp_misplaced", "frame"].tolist()
    assert len(misplaced) == 94
    (finding,) = [f for f in load_summary(out).finding_list if f.kind is FindingKind.ESP_MISPLACED]
    assert list(finding.frames) == misplaced
    with (out / "findings.csv").open() as fh:
        (row,) = [r for r in csv.DictReader(fh) if r["kind"] == "esp_misplaced"]
    assert row["frames"] == runs_text(Frames.of(misplaced))
    assert row["frames"].startswith("20-27 32-33 40-41 ")
    text = (out / "report.txt").read_text()
    assert "    frames 20 21 22 23 24 ... and 89 more (findings.csv lists them)\n" in text


@given(st.lists(st.lists(st.integers(1, 60), max_size=20), max_size=5), st.booleans())
def test_a_union_of_frames_is_every_frame_once(parts: list[list[int]], frozen_parts: bool) -> None:
    """``Frames.union`` (the report's frames of a kind, over its findings) holds every frame
    of its parts once, in runs that neither touch nor overlap, as ``Frames.of`` makes them."""
    given_parts = [Frames.of(p) if frozen_parts else p for p in parts]
    union = Frames.union(given_parts)
    assert union == Frames.of(f for p in parts for f in p)
    assert len(union) == len({f for p in parts for f in p})
    assert all(b + 1 < a for (_, b), (a, _) in zip(union.runs, union.runs[1:], strict=False))


@given(st.lists(st.integers(1, 400), max_size=150))
def test_the_printed_filter_is_the_whole_filter_or_none(frames: list[int]) -> None:
    """``frames_filter`` makes the filter of at most its first FILTER_SHOWN runs: what it
    prints is still the filter of every frame, when that is short enough, else nothing."""
    every = Frames.of(frames)
    whole = display_filter(every)
    short = len(every) > narrative.EXAMPLES and len(whole) <= FILTER_SHOWN
    assert frames_filter(every) == (whole if short else "")


def test_frames_rise_in_bulk_as_one_by_one() -> None:
    """``with_frames`` (the leak check's lane rows) gives the runs ``with_frame`` gives,
    rising above what is held (at once) or not (one by one)."""
    for start, frames in ((None, [5, 6, 7, 9]), ([1, 2, 10], [5, 6, 7, 9]), ([3], [4, 5, 8])):
        one = None
        bulk = None
        for f in start or []:
            one, bulk = with_frame(one, f), with_frame(bulk, f)
        for f in frames:
            one = with_frame(one, f)
        bulk = with_frames(bulk, np.array(frames, np.int64))
        assert frozen(bulk) == frozen(one)


@given(st.lists(st.integers(1, 200), max_size=60))
def test_frozen_frames_count_and_list_every_frame_once(values: list[int]) -> None:
    """``frozen`` takes an ``IntervalSet``'s runs as they are and counts them by their sums:
    every frame named, once, lowest first, and as many as there are."""
    runs = None
    for value in values:
        runs = with_frame(runs, value)
    frames = frozen(runs)
    assert list(frames) == sorted(set(values))
    assert len(frames) == len(set(values))
    assert frames == Frames(frames.runs)


def test_a_finding_of_many_runs_holds_no_object_a_run() -> None:
    """A check's frames and their ``Frames``: 16 bytes a run (two int64), where lists of
    ints took 72 and tuples of ints about 120 (a keyless NULL capture's leak finding: a
    run every few frames)."""
    runs_held = 100_000
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        runs = with_frames(None, np.arange(1, 2 * runs_held, 2, dtype=np.int64))
        held = tracemalloc.get_traced_memory()[0] - start
        frames = frozen(runs)
        both = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert len(frames.runs) == runs_held and len(frames) == runs_held
    assert held < 20 * runs_held and both - held < 20 * runs_held


def test_frames_beyond_int64_read_back_are_a_value_error() -> None:
    """A summary.json whose frames no int64 holds is an error load_summary names (exit 2)."""
    with pytest.raises(ValueError, match="out of range"):
        from_runs([[2**63, 2**63]])
