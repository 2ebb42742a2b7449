"""Synthetic IPsec ESP captures with known truth: fixtures and benchmarks.

In: a scenario name (or frame count) and a seed. Out: ``Scenario`` values
(frames, per-frame truth, SAs, facts), capture files written through
``espforensics.capture``'s writers, and key files in the three formats the
analyzer loads. Raises ``KeyError`` for an unknown scenario and
``ValueError`` for packets that cannot be built.

This package is the project's dpkt *builder* adapter: it packs headers with
dpkt (and struct where dpkt has no builder), independently of the
analyzer's decoders, and encrypts through ``espforensics.crypto``.
Everything is deterministic from the seed; the keys are random lab keys.

    >>> from espforensics.synth import build_scenario, write_scenario
    >>> scenario = build_scenario("kernel-gso-v6", seed=1)
    >>> scenario.verdict_counts()
    {'ok': 13, 'esp_misplaced': 12}
"""

from __future__ import annotations

from espforensics.synth.bench import bench_sas, iter_bench_frames
from espforensics.synth.builder import CaptureBuilder, Fault, SaFlow, make_sa, sa_pair
from espforensics.synth.capture import write_capture, write_scenario
from espforensics.synth.esp import (
    EspSealer,
    IvFixed,
    IvFromSeq,
    IvRandom,
    IvSeqOffset,
    Trailer,
    build_plaintext,
    seqiv,
)
from espforensics.synth.kernel import gso_misplaced_payload
from espforensics.synth.keytext import esp_sa_secrets, esp_sa_text, keys_yaml, xfrm_state_text
from espforensics.synth.scenarios import SCENARIOS, build_scenario
from espforensics.synth.truth import FrameTruth, Scenario, expected_json

__all__ = [
    "SCENARIOS",
    "CaptureBuilder",
    "EspSealer",
    "Fault",
    "FrameTruth",
    "IvFixed",
    "IvFromSeq",
    "IvRandom",
    "IvSeqOffset",
    "SaFlow",
    "Scenario",
    "Trailer",
    "bench_sas",
    "build_plaintext",
    "build_scenario",
    "esp_sa_secrets",
    "esp_sa_text",
    "expected_json",
    "gso_misplaced_payload",
    "iter_bench_frames",
    "keys_yaml",
    "make_sa",
    "sa_pair",
    "seqiv",
    "write_capture",
    "write_scenario",
    "xfrm_state_text",
]
