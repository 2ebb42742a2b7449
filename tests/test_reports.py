"""Reports, compare and exit codes: what a reviewer pastes and what CI gates on."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture
from espforensics.cli import app
from espforensics.model import Frame
from espforensics.synth import build_scenario, write_scenario

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "captures" / "linux-6.1"
GOLDEN = ROOT / "tests" / "golden"
runner = CliRunner()
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason="shared/captures not beside the project")


def _analyzed(tmp: Path, scenario: str) -> Path:
    paths = write_scenario(build_scenario(scenario, seed=1), tmp / "in", stem=scenario)
    out = tmp / "out"
    analyze_to_dir(paths["capture"], [paths["keys"]], out)
    return out


@pytest.fixture(scope="module")
def gso_v6(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _analyzed(tmp_path_factory.mktemp("gso6"), "kernel-gso-v6")


@pytest.fixture(scope="module")
def tso_on(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not REAL.is_dir():
        pytest.skip("shared/captures not beside the project")
    out = tmp_path_factory.mktemp("tso") / "out"
    folder = REAL / "ip6tnl-transport-tso-on"
    analyze_to_dir(folder / "capture.pcap", [folder / "xfrm-state.txt"], out)
    return out


def _ascii_72(text: str) -> None:
    assert text.isascii()
    assert max(len(line) for line in text.splitlines()) <= 72


@pytest.mark.parametrize("scenario", ["kernel-gso-v4", "sequence", "iv-reuse", "natt", "snaplen"])
def test_reports_are_ascii_72_and_deterministic(tmp_path: Path, scenario: str) -> None:
    first = _analyzed(tmp_path / "a", scenario)
    second = _analyzed(tmp_path / "b", scenario)
    for name in ("report.txt", "report.md"):
        assert (first / name).read_text() == (second / name).read_text()
    _ascii_72((first / "report.txt").read_text())
    res = runner.invoke(app, ["report", str(first)])
    assert res.exit_code == 0 and res.stdout == (first / "report.txt").read_text()


def test_golden_report(gso_v6: Path) -> None:
    """Changes to the report's wording are made on purpose: ESPF_UPDATE_GOLDEN=1 rewrites it."""
    text = (gso_v6 / "report.txt").read_text()
    golden = GOLDEN / "kernel-gso-v6.report.txt"
    if os.environ.get("ESPF_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_report_formats(gso_v6: Path) -> None:
    md = runner.invoke(app, ["report", str(gso_v6), "--format", "markdown"])
    assert md.stdout == (gso_v6 / "report.md").read_text()
    js = runner.invoke(app, ["report", str(gso_v6), "--format", "json"])
    assert json.loads(js.stdout) == json.loads((gso_v6 / "summary.json").read_text())


def test_report_of_a_folder_that_is_not_one(tmp_path: Path) -> None:
    res = runner.invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"espforensics: error: {tmp_path}: not an espforensics output")


def _tcpdump_frames(capture: Path, bpf: str, tmp: Path) -> list[int]:
    """Frame numbers tcpdump selects with ``bpf`` (matched back by time and bytes)."""
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        if os.environ.get("CI"):
            pytest.fail("tcpdump is not installed in CI")
        pytest.skip("tcpdump not installed")
    picked = tmp / "picked.pcap"
    subprocess.run(
        [tcpdump, "-r", str(capture), "-w", str(picked), bpf], check=True, capture_output=True
    )
    # tcpdump writes microsecond timestamps: match on those and the bytes.
    with open_capture(capture) as cap:
        index = {(f.ts_ns // 1000, f.data): f.number for f in cap if isinstance(f, Frame)}
    with open_capture(picked) as cap:
        return [index[(f.ts_ns // 1000, f.data)] for f in cap if isinstance(f, Frame)]


def _printed_filter(report: str) -> str:
    lines = report.splitlines()
    start = lines.index("tcpdump filter selecting the misplaced ESP packets (no keys needed):")
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        body.append(line.strip())
    return " ".join(body)


@pytest.mark.parametrize("scenario", ["kernel-gso-v4", "kernel-gso-v6"])
def test_printed_filter_selects_exactly_the_misplaced_frames(tmp_path: Path, scenario: str) -> None:
    out = _analyzed(tmp_path, scenario)
    bpf = _printed_filter((out / "report.txt").read_text())
    capture = tmp_path / "in" / f"{scenario}.pcap"
    packets = json.loads((out / "summary.json").read_text())
    misplaced = [
        int(line.split(",")[0])
        for line in (out / "packets.csv").read_text().splitlines()[1:]
        if '"esp_misplaced"' in line
    ]
    assert len(misplaced) == packets["verdicts"]["esp_misplaced"] == 12
    assert _tcpdump_frames(capture, bpf, tmp_path) == misplaced


@needs_real
def test_real_capture_report_states_count_and_filter(tso_on: Path, tmp_path: Path) -> None:
    report = (tso_on / "report.txt").read_text()
    _ascii_72(report)
    assert "94 of 687 ESP packets do not decrypt at offset 0 (94 esp_misplaced)." in report
    bpf = _printed_filter(report)
    assert bpf == "ip6 proto 50 and ip6[56:2] = 0x4500 and ip6[60:4] = 0x1001"
    truth = json.loads((REAL / "ip6tnl-transport-tso-on" / "ground-truth.json").read_text())
    frames = _tcpdump_frames(REAL / "ip6tnl-transport-tso-on" / "capture.pcap", bpf, tmp_path)
    assert len(frames) == truth["seed_filter_matches"] == 94
    csv_rows = (tso_on / "packets.csv").read_text().splitlines()[1:]
    assert frames == [int(r.split(",")[0]) for r in csv_rows if '"esp_misplaced"' in r]


@needs_real
def test_compare_tso_on_and_off() -> None:
    on, off = REAL / "ip6tnl-transport-tso-on", REAL / "ip6tnl-transport-tso-off"
    base = [
        "compare",
        str(on / "capture.pcap"),
        str(off / "capture.pcap"),
        "--sa-before",
        str(on / "xfrm-state.txt"),
        "--sa-after",
        str(off / "xfrm-state.txt"),
    ]
    js = runner.invoke(app, [*base, "--format", "json"])
    assert js.exit_code == 0, js.stderr
    rows = {
        r["label"]: (r["before"], r["after"], r["change"]) for r in json.loads(js.stdout)["rows"]
    }
    assert rows["frames"] == ("690", "255", "-435")
    assert rows["ESP packets"] == ("687", "251", "-436")
    assert rows["verdict ok"] == ("593", "251", "-342")
    assert rows["verdict esp_misplaced"] == ("94", "0", "-94")
    assert rows["verdict auth_fail"] == ("0", "0", "")
    assert rows["finding cleartext_leak"] == ("94", "0", "-94")
    assert rows["finding iv_reuse"] == ("64", "0", "-64")
    assert rows["finding iv_derivation"] == ("94", "0", "-94")
    text = runner.invoke(app, base).stdout
    _ascii_72(text)
    assert "verdict esp_misplaced             94             0        -94" in text
    assert "  Packets with verdict esp_misplaced fell from 94 to 0." in text
    md = runner.invoke(app, [*base, "--format", "markdown"]).stdout
    assert "| verdict esp_misplaced | 94 | 0 | -94 |" in md


def test_compare_output_folders(tmp_path: Path) -> None:
    a = _analyzed(tmp_path / "a", "kernel-gso-v4")
    b = _analyzed(tmp_path / "b", "ipv4-transport-tcp")
    res = runner.invoke(app, ["compare", str(a), str(b), "--format", "json", "--fail-on", "high"])
    assert res.exit_code == 0  # the after side has no finding
    rows = {r["label"]: r for r in json.loads(res.stdout)["rows"]}
    assert (rows["verdict esp_misplaced"]["before"], rows["verdict esp_misplaced"]["after"]) == (
        "12",
        "0",
    )


@pytest.mark.parametrize(
    ("scenario", "fail_on", "code"),
    [
        ("kernel-gso-v4", None, 1),  # critical findings, default --fail-on high
        ("kernel-gso-v4", "never", 0),
        ("ipv4-transport-tcp", None, 0),
        ("esn-wrap", None, 0),  # info findings only
        ("esn-wrap", "info", 1),
        ("sequence", "high", 0),  # medium/low/info only
        ("sequence", "medium", 1),
    ],
)
def test_exit_codes(tmp_path: Path, scenario: str, fail_on: str | None, code: int) -> None:
    paths = write_scenario(build_scenario(scenario, seed=1), tmp_path, stem="c")
    args = [
        "analyze",
        str(paths["capture"]),
        "--sa",
        str(paths["keys"]),
        "-q",
        "--no-plots",
        "--out",
        str(tmp_path / "o"),
    ]
    res = runner.invoke(app, args + (["--fail-on", fail_on] if fail_on else []))
    assert res.exit_code == code, res.stderr


def test_usage_error_exits_2(tmp_path: Path) -> None:
    assert runner.invoke(app, ["analyze"]).exit_code == 2
    assert runner.invoke(app, ["analyze", "x.pcap", "--fail-on", "sometimes"]).exit_code == 2


def test_every_command_and_option_is_documented() -> None:
    docs = (ROOT / "docs" / "cli.md").read_text()
    for command in app.registered_commands:
        name = command.name or (command.callback.__name__ if command.callback else "")
        assert f"espforensics {name}" in docs, name
        params = command.callback.__annotations__ if command.callback else {}
        res = runner.invoke(app, [name, "--help"])
        for opt in set(re.findall(r"(--[a-z][a-z-]+)", res.stdout)) - {"--help"}:
            assert f"`{opt}" in docs, f"{name} {opt}"
        assert params


def _legend(fig: object) -> list[str]:
    (legend,) = fig.legends  # type: ignore[attr-defined]
    return [t.get_text() for t in legend.get_texts()]


def test_plots_from_a_fixture_have_the_expected_series(tmp_path: Path) -> None:
    """Every plot drawn from a real pipeline run, with as many series as the data has."""
    from espforensics.plots import (
        plot_iv_derivation,
        plot_offsets,
        plot_sequence,
        plot_throughput,
        plot_verdicts,
    )
    from espforensics.tables import plot_frames

    out = _analyzed(tmp_path, "sequence")
    summary = json.loads((out / "summary.json").read_text())
    assert [p["skipped"] for p in summary["plots"]] == [""] * 5
    for p in summary["plots"]:
        for f in p["files"]:
            assert (out / f).stat().st_size > 1000
    from espforensics.analysis import load_summary

    frames = plot_frames(out / "packets.parquet", load_summary(out))
    assert _legend(plot_verdicts(frames["verdicts"])) == ["ok"]
    assert _legend(plot_offsets(frames["offsets"])) == ["expected", "found"]
    assert _legend(plot_iv_derivation(frames["iv"])) == ["0x0000b001 192.0.2.1>192.0.2.2"]
    assert len(_legend(plot_throughput(frames["throughput"]))) == 1
    assert _legend(plot_sequence(frames["sequence"])) == [
        "gap (5 in all)",
        "duplicate (1 in all)",
        "reordered (1 in all)",
    ]


def test_plot_gaps_are_the_checks_gaps(tmp_path: Path) -> None:
    from espforensics.analysis import load_summary
    from espforensics.tables import plot_frames

    out = _analyzed(tmp_path, "sequence")
    summary = load_summary(out)
    events = plot_frames(out / "packets.parquet", summary)["sequence"]
    gaps = events[events["event"] == "gap"]
    assert int(gaps["count"].sum()) == summary.findings["seq_gap"] == 5


def test_printed_filter_for_esp_in_udp(tmp_path: Path) -> None:
    from espforensics.synth import keys_yaml, write_capture
    from tests.test_scenarios import _in_udp

    sc = build_scenario("kernel-gso-v4", seed=1)
    capture = tmp_path / "natt-gso.pcap"
    write_capture(capture, [_in_udp(f) for f in sc.frames])
    keys = tmp_path / "natt-gso.keys.yaml"
    keys.write_text(keys_yaml(sc.sas))
    out = tmp_path / "out"
    analyze_to_dir(capture, [keys], out, plots=False)
    bpf = _printed_filter((out / "report.txt").read_text())
    assert bpf == "ip proto 17 and ip[44:2] = 0x4500 and ip[48:4] = 0x1001"
    csv_rows = (out / "packets.csv").read_text().splitlines()[1:]
    misplaced = [int(r.split(",")[0]) for r in csv_rows if '"esp_misplaced"' in r]
    assert _tcpdump_frames(capture, bpf, tmp_path) == misplaced
