"""A run's state is freed when the run ends, without the cyclic collector.

A check holding a method of the ``FrameAnalyzer`` made a cycle: after a run
of 60,000 SAs its 1.26 million objects stayed alive until a full
collection, and the reports' peak came on top of them (docs/performance.md,
"Third pass, and a million SAs"). With the collector off during the run,
no analyzer, flow or check state may be left once it returns.
"""

from __future__ import annotations

import gc
from pathlib import Path

from espforensics.analysis import analyze_to_dir
from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.checks.context import Flow, SaState

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _alive(*types: type) -> int:
    return sum(isinstance(o, types) for o in gc.get_objects())


def test_a_runs_state_is_freed_as_it_ends(tmp_path: Path) -> None:
    gc.collect()
    before = _alive(FrameAnalyzer, Flow, SaState)
    gc.disable()
    try:
        summary = analyze_to_dir(
            FIXTURES / "example.pcap",
            [FIXTURES / "example.keys.yaml"],
            tmp_path / "out",
            plots=False,
        )
        after = _alive(FrameAnalyzer, Flow, SaState)
    finally:
        gc.enable()
    assert (summary.capture.frames, summary.esp_packets) == (40, 36)
    assert after == before
