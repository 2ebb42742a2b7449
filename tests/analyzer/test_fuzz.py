"""The whole pipeline never raises on any frame, and gives exactly one record per frame.

Random frames of every link type, and real fixture frames with bytes
changed or cut anywhere, go through every stage and every check, with the
steady lane off and on; where the lane takes packets (a long steady SA,
damaged here and there) its records and findings are the per-frame path's.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.keys import SaTable
from espforensics.model.enums import Verdict
from espforensics.model.options import Options
from espforensics.model.records import Frame
from espforensics.synth import Scenario
from tests.support.helpers import PER_FRAME, run_frames, scenario

LINKTYPES = [0, 1, 12, 101, 108, 113, 228, 229, 276, 147]
# Hypothesis draws inside one test call, so the lanes are parameters (not the ``lane``
# fixture); batches of 16 frames, that the lane sees an SA steady after a few packets.
STEADY = Options(batch_frames=16)
LANES = [pytest.param(PER_FRAME, id="per-frame"), pytest.param(STEADY, id="steady-batch16")]


def _scenario(name: str) -> Scenario:
    return scenario(name)


def _run(frames: list[Frame], sas: SaTable, lane: Options) -> list[Verdict]:
    records = run_frames(frames, sas, lane, "fuzz").records
    assert [r.frame for r in records] == [f.number for f in frames]
    return [r.verdict for r in records]


@pytest.mark.parametrize("lane", LANES)
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LINKTYPES), st.binary(max_size=300)), max_size=12))
def test_random_frames(lane: Options, items: list[tuple[int, bytes]]) -> None:
    frames = [
        Frame(i + 1, i * 1000, len(d), len(d) + 7 * (i % 2), lt, d)
        for i, (lt, d) in enumerate(items)
    ]
    _run(frames, SaTable(_scenario("kernel-gso-v6").sas), lane)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["kernel-gso-v4", "fragments-v6", "natt", "esn-wrap", "link-all"]),
    st.data(),
)
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@pytest.mark.parametrize("lane", LANES)
def test_damaged_fixture_frames(lane: Options, keyed: bool, name: str, data: st.DataObject) -> None:
    sc = _scenario(name)
    frames = list(sc.frames)
    i = data.draw(st.integers(0, len(frames) - 1))
    f = frames[i]
    raw = bytearray(f.data)
    for _ in range(data.draw(st.integers(1, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    frames[i] = f._replace(data=bytes(raw[:cut]), caplen=cut)
    verdicts = _run(frames, SaTable(tuple(sc.sas) if keyed else ()), lane)
    assert len(verdicts) == len(sc.frames)


# The lane takes 36 of iv-reuse's first 100 frames in batches of 16 (all of them ok); without
# keys (the keyless lane), most of them.
STEADY_FRAMES = 100


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_damaged_steady_sa_same_records_in_both_lanes(keyed: bool, data: st.DataObject) -> None:
    sc = _scenario("iv-reuse")
    sas = sc.sas if keyed else ()
    frames = list(sc.frames[:STEADY_FRAMES])
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(frames) - 1))
        raw = bytearray(frames[i].data)
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
        cut = data.draw(st.integers(0, len(raw)))
        frames[i] = frames[i]._replace(data=bytes(raw[:cut]), caplen=cut)
    per_frame = run_frames(frames, sas, PER_FRAME, "fuzz")
    steady = run_frames(frames, sas, STEADY, "fuzz")
    assert [r.frame for r in steady.records] == list(range(1, STEADY_FRAMES + 1))
    assert steady.records == per_frame.records
    assert steady.findings == per_frame.findings
