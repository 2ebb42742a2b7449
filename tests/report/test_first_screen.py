"""The first screen: every critical kind named, and "no key" where no key was given.

report/lead.py names at least two kinds of finding and every critical one;
narrative.verdict_counts writes ``unknown_sa`` as "no key" in the reports
when the key table held no SA at all (no key file, or one that matched
nothing is told apart: its SAs are unused, so unknown_sa stays).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from espforensics.analysis import summarize
from espforensics.model.enums import FindingKind, Severity
from espforensics.model.records import Finding
from espforensics.report.lead import wrong_sentence
from espforensics.synth import build_scenario, write_scenario
from tests.support import helpers


def _finding(kind: FindingKind, severity: Severity, frame: int) -> Finding:
    return Finding(kind, severity, 0x1001, (frame,), 1, f"{kind.value} at frame {frame}")


def test_every_critical_kind_is_named_and_the_rest_counted(tmp_path: Path) -> None:
    paths = write_scenario(build_scenario("kernel-gso-v4", seed=1), tmp_path)
    summary = summarize(paths["capture"], [paths["keys"]])
    kinds = [
        (FindingKind.ESP_MISPLACED, Severity.CRITICAL),
        (FindingKind.CLEARTEXT_LEAK, Severity.CRITICAL),
        (FindingKind.IV_REUSE, Severity.CRITICAL),
        (FindingKind.SEQ_GAP, Severity.LOW),
        (FindingKind.IV_DERIVATION, Severity.HIGH),
    ]
    found = tuple(_finding(k, s, i) for i, (k, s) in enumerate(kinds, 1))
    assert wrong_sentence(dataclasses.replace(summary, finding_list=found)) == (
        "found: critical cleartext_leak (1 packet); critical esp_misplaced (1 packet); "
        "critical iv_reuse (1 packet); 2 more kinds of finding"
    )
    # fewer criticals than two: the next worst fills the sentence up to two kinds
    assert wrong_sentence(dataclasses.replace(summary, finding_list=found[2:])) == (
        "found: critical iv_reuse (1 packet); high iv_derivation (1 packet); 1 more kind of finding"
    )


def test_unknown_sa_reads_no_key_only_when_no_key_was_given(tmp_path: Path) -> None:
    paths = write_scenario(build_scenario("kernel-gso-v4", seed=1), tmp_path / "gso")
    keyless = helpers.run_cli("analyze", paths["capture"], "--out", tmp_path / "a", "--no-plots")
    assert keyless.code == 1, keyless.stderr
    lines = keyless.stdout.splitlines()
    assert "  verdicts: no key 13, esp_misplaced 12" in lines
    assert lines[7:10] == [
        "    18 packets: no key 6, esp_misplaced 12",
        "  SPI 0x00001002 192.0.2.2 -> 192.0.2.1 (no key)",
        "    7 packets: no key 7",
    ]
    rows = helpers.packet_rows(tmp_path / "a")
    assert sum(r["verdict"] == "unknown_sa" for r in rows) == 13  # the table keeps the value
    text = (tmp_path / "a" / "report.txt").read_text()
    assert "    ok 0, no key 7" in text.splitlines() and "unknown_sa" not in text
    # a key file whose SAs match no packet: the SPIs were looked up, unknown_sa stays
    other = write_scenario(build_scenario("unknown-spi", seed=3), tmp_path / "other")
    keyed = helpers.run_cli(
        "analyze", paths["capture"], "--sa", other["keys"], "--out", tmp_path / "b", "--no-plots"
    )
    assert "  verdicts: unknown_sa 13, esp_misplaced 12" in keyed.stdout.splitlines()
