"""A damaged capture: what was read is reported on stdout in every format, damage first.

``analyze`` of a capture cut short (``head -c 100000 capture.pcap``) wrote
its files and exited 2 with the error on stderr, but printed nothing on
stdout, whatever ``--format``; and report.txt led with "nothing wrong
found" before it said the capture was damaged. Now stdout holds what the
format prints for a whole capture (what ``report --format`` prints of the
same folder), the damage is the first sentence after the capture's name in
every format, summary.json (``--format json``) names it in ``error``, and
the exit code stays 2. A file that is no capture at all (nothing read)
stays one line on stderr.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import CliRun, real_capture, run_cli

FORMATS = ["summary", "text", "markdown", "json", "ktap"]
CUT = 100_000  # bytes kept, as `head -c 100000 capture.pcap`


def cut_real(tmp: Path) -> tuple[Path, Path]:
    real = real_capture("linux-6.1/tcp-transport-v4")
    capture = tmp / "capture.pcap"
    capture.write_bytes(real.pcap.read_bytes()[:CUT])
    return capture, real.keys


def cut_synthetic(tmp: Path) -> tuple[Path, Path]:
    paths = write_scenario(build_scenario("kernel-gso-v4", seed=1), tmp / "in", stem="c")
    data = paths["capture"].read_bytes()
    paths["capture"].write_bytes(data[:-30])  # inside the last of its 25 frames
    return paths["capture"], paths["keys"]


CUTS = {"real": cut_real, "synthetic": cut_synthetic}
ERRORS = {
    "real": "capture ends inside frame 46: read 45 complete frames",
    "synthetic": "capture ends inside frame 25: read 24 complete frames",
}


def analyzed(tmp: Path, cut: str, fmt: str) -> tuple[CliRun, Path, Path]:
    capture, keys = CUTS[cut](tmp)
    out = tmp / "out"
    res = run_cli("analyze", capture, "--sa", keys, "--out", out, "--format", fmt, "--no-plots")
    return res, capture, out


def damage_first(lines: list[str], damage: str, lead: list[str]) -> None:
    """The damage's line comes before every line of the lead, and each is there."""
    at = [i for i, line in enumerate(lines) if damage in line]
    assert at, lines
    for sentence in lead:
        found = [i for i, line in enumerate(lines) if sentence in line]
        assert found and found[0] > at[0], (sentence, lines)


@pytest.mark.parametrize("cut", ["real", "synthetic"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cut_capture_prints_its_report_damage_first(tmp_path: Path, cut: str, fmt: str) -> None:
    res, capture, out = analyzed(tmp_path, cut, fmt)
    error = f"{capture}: {ERRORS[cut]}"
    assert (res.code, res.stderr) == (2, f"espforensics: error: {error}\n")
    assert json.loads((out / "summary.json").read_text())["error"] == error
    again = run_cli("report", out, "--format", fmt)
    assert again.code == 2
    outputs = f"  outputs: {out}/\n" if fmt == "summary" else ""
    assert res.stdout == again.stdout + outputs  # as for a whole capture, and as `report`
    if fmt == "json":
        assert json.loads(res.stdout)["error"] == error
        return
    verified = "ESP packets verified with their keys (2 SAs)"
    damage_first(res.stdout.splitlines(), f"The capture is damaged: {capture.name}", [verified])
    if cut == "real":  # nothing wrong in what was read: said after the damage
        damage_first(
            res.stdout.splitlines(),
            "The capture is damaged",
            ["nothing wrong found in what was checked"],
        )
    if fmt == "ktap":  # and every check an ERROR, as kselftest counts it
        assert res.stdout.splitlines()[-1].endswith("error:8")


@pytest.mark.parametrize("cut", ["real", "synthetic"])
def test_every_report_file_says_the_damage_first(tmp_path: Path, cut: str) -> None:
    res, _, out = analyzed(tmp_path, cut, "summary")
    assert res.code == 2
    verified = "ESP packets verified with their keys (2 SAs)"
    for name in ("report.txt", "report.md", "report.html"):
        lines = (out / name).read_text().splitlines()
        damage_first(lines, "The capture is damaged", [verified, "Verdict"])
        assert sum("The capture is damaged" in line for line in lines) == 1, name


@pytest.mark.parametrize("content", [b"", b"hello, not a capture at all"])
def test_a_file_that_is_no_capture_is_one_line(tmp_path: Path, content: bytes) -> None:
    capture = tmp_path / "c.pcap"
    capture.write_bytes(content)
    res = run_cli("analyze", capture, "--out", tmp_path / "out")
    assert res.code == 2
    assert res.stdout == ""
    assert len(res.stderr.splitlines()) == 1
