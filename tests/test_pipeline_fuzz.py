"""The whole pipeline never raises on any frame, and gives exactly one record per frame.

Random frames of every link type, and real fixture frames with bytes
changed or cut anywhere, go through every stage and every check.
"""

from __future__ import annotations

from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.engine.run import iter_records
from espforensics.keys import SaTable
from espforensics.model import Frame, Verdict
from espforensics.pipeline import FrameAnalyzer, Options
from espforensics.synth import Scenario, build_scenario

LINKTYPES = [0, 1, 12, 101, 108, 113, 228, 229, 276, 147]


@cache
def _scenario(name: str) -> Scenario:
    return build_scenario(name, seed=1)


def _run(frames: list[Frame], sas: SaTable) -> list[Verdict]:
    records = list(iter_records(frames, FrameAnalyzer(sas, Options(), "fuzz")))
    assert [r.frame for r in records] == [f.number for f in frames]
    return [r.verdict for r in records]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LINKTYPES), st.binary(max_size=300)), max_size=12))
def test_random_frames(items: list[tuple[int, bytes]]) -> None:
    frames = [
        Frame(i + 1, i * 1000, len(d), len(d) + 7 * (i % 2), lt, d)
        for i, (lt, d) in enumerate(items)
    ]
    _run(frames, SaTable(_scenario("kernel-gso-v6").sas))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["kernel-gso-v4", "fragments-v6", "natt", "esn-wrap", "link-all"]),
    st.data(),
)
def test_damaged_fixture_frames(name: str, data: st.DataObject) -> None:
    sc = _scenario(name)
    frames = list(sc.frames)
    i = data.draw(st.integers(0, len(frames) - 1))
    f = frames[i]
    raw = bytearray(f.data)
    for _ in range(data.draw(st.integers(1, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    frames[i] = f._replace(data=bytes(raw[:cut]), caplen=cut)
    verdicts = _run(frames, SaTable(sc.sas))
    assert len(verdicts) == len(sc.frames)
