"""``--format ktap``: the checks as KTAP test results, with the exit code of the other formats."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from espforensics.model.version import TOOL_VERSION
from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import run_cli

CHECKS = ["esp_placement", "cleartext_leak", "iv_reuse", "iv_derivation", "sequence"]
CHECKS += ["esn_mismatch", "keys", "inner_checksum"]


def _run(tmp: Path, scenario: str, *args: str) -> tuple[int, list[str], Path]:
    paths = write_scenario(build_scenario(scenario, seed=1), tmp / "in", stem=scenario)
    cmd = ["analyze", str(paths["capture"]), "--sa", str(paths["keys"]), "--out", str(tmp / "o")]
    res = run_cli(*[*cmd, "--no-plots", "--format", "ktap", *args])
    assert not res.stderr, res.stderr
    return res.code, res.stdout.splitlines(), paths["capture"]


def _head(capture: Path) -> list[str]:
    sha = hashlib.sha256(capture.read_bytes()).hexdigest()
    return [
        "KTAP version 1",
        "1..8",
        f"# espforensics {TOOL_VERSION} report: {capture.name}, sha256 {sha}",
    ]


def _results(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(("ok ", "not ok "))]


def test_a_clean_capture(tmp_path: Path) -> None:
    code, lines, capture = _run(tmp_path, "example")
    assert code == 0
    assert lines == [
        *_head(capture),
        "# all 36 ESP packets verified with their keys (2 SAs)",
        "# nothing wrong found in what was checked",
        "# 40 frames, 36 ESP packets in 2 SAs; verdicts: ok 36, not_esp 4",
        "# every ESP packet decrypts at offset 0 (36 of 36)",
        "# no inner header byte in clear",
        "# no IV reused",
        *(f"ok {n} {name}" for n, name in enumerate(CHECKS, 1)),
        "# Totals: pass:8 fail:0 xfail:0 xpass:0 skip:0 error:0",
    ]


def test_the_kernel_gso_fault(tmp_path: Path) -> None:
    code, lines, capture = _run(tmp_path, "kernel-gso-v6")
    assert code == 1  # --fail-on high, as for every format
    assert lines[:3] == _head(capture)
    assert _results(lines) == [
        "not ok 1 esp_placement # 12 ESP headers misplaced",
        "not ok 2 cleartext_leak # 12 packets with inner header bytes in clear",
        "ok 3 iv_reuse",
        "ok 4 iv_derivation",
        "ok 5 sequence",
        "ok 6 esn_mismatch",
        "ok 7 keys",
        "ok 8 inner_checksum",
    ]
    at = lines.index("not ok 1 esp_placement # 12 ESP headers misplaced")
    assert lines[at - 1].startswith(
        "# esp_placement: critical esp_misplaced: 1 finding, 12 packets"
    )
    assert (
        "# likely cause: transport-mode GSO of an inner tunnel (transport-gso-inner-tunnel)"
        in lines
    )


def test_iv_reuse_counts_the_ivs_and_fail_on_moves_the_line(tmp_path: Path) -> None:
    """midstream-even-2: 9 IVs reused (critical), 26 IVs built from seq+1 (high)."""
    code, lines, _ = _run(tmp_path / "high", "midstream-even-2")
    assert code == 1
    assert _results(lines)[2:4] == [
        "not ok 3 iv_reuse # 9 IVs reused",
        "not ok 4 iv_derivation # 26 IVs not built from their sequence number",
    ]
    code, lines, _ = _run(tmp_path / "critical", "midstream-even-2", "--fail-on", "critical")
    assert code == 1
    assert _results(lines)[2:4] == ["not ok 3 iv_reuse # 9 IVs reused", "ok 4 iv_derivation"]
    code, lines, _ = _run(tmp_path / "never", "midstream-even-2", "--fail-on", "never")
    assert code == 0
    assert _results(lines) == [f"ok {n} {name}" for n, name in enumerate(CHECKS, 1)]
    at = lines.index("ok 3 iv_reuse")
    assert lines[at - 1].startswith("# iv_reuse: critical iv_reuse: 9 findings, 18 packets: IV ")


def test_findings_below_fail_on_are_diagnostics_of_an_ok_line(tmp_path: Path) -> None:
    code, lines, _ = _run(tmp_path, "sequence")  # medium, low and info findings only
    assert code == 0
    at = lines.index("ok 5 sequence")
    assert [line.split(":")[1].strip() for line in lines[at - 3 : at]] == [
        "medium seq_duplicate",
        "low seq_gap",
        "info seq_reorder",
    ]


def test_a_damaged_capture_is_an_error_on_every_line(tmp_path: Path) -> None:
    paths = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), tmp_path, stem="cut")
    capture = paths["capture"]
    capture.write_bytes(capture.read_bytes()[:-40])  # inside its last record
    out = tmp_path / "out"
    res = run_cli(*["analyze", str(capture), "--sa", str(paths["keys"]), "--out", str(out)])
    assert res.code == 2
    assert json.loads((out / "summary.json").read_text())["error"]
    res = run_cli(*["report", str(out), "--format", "ktap"])
    assert res.code == 2  # as analyze exited
    results = _results(res.stdout.splitlines())
    assert results == [
        f"not ok {n} {name} # ERROR the capture is damaged" for n, name in enumerate(CHECKS, 1)
    ]
    assert res.stdout.splitlines()[-1] == "# Totals: pass:0 fail:0 xfail:0 xpass:0 skip:0 error:8"
    assert "# The capture is damaged: cut.pcap: " in res.stdout


def test_no_key_in_the_ktap_output(tmp_path: Path) -> None:
    """No 6-byte window of any key of the scenario, in hex, in what KTAP prints."""
    for scenario in ("ipv4-transport-tcp", "kernel-gso-v6", "midstream-even-2"):
        keys = [sa.key.reveal().hex() for sa in build_scenario(scenario, seed=1).sas]
        windows = {k[i : i + 12] for k in keys for i in range(0, len(k) - 11, 2)}
        _, lines, _ = _run(tmp_path / scenario, scenario)
        text = "\n".join(lines).lower()
        assert len(lines) > 10 and not [w for w in windows if w in text]
