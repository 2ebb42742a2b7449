"""Reports, compare and exit codes: what a reviewer pastes and what CI gates on."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.analysis import analyze_to_dir, load_summary
from espforensics.cli import app
from espforensics.model.enums import Proto, Severity, Verdict
from espforensics.model.records import PacketRecord
from espforensics.results.gate import exit_code
from espforensics.synth import build_scenario, write_scenario
from tests.support import helpers
from tests.support.helpers import analyzed_dir

ROOT = Path(__file__).resolve().parents[2]
REAL = helpers.CAPTURES / "linux-6.1"
GOLDEN = ROOT / "tests" / "golden"
runner = CliRunner()


@pytest.fixture(scope="module")
def gso_v6(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return analyzed_dir(tmp_path_factory.mktemp("gso6"), "kernel-gso-v6")


@pytest.fixture(scope="module")
def tso_on(tmp_path_factory: pytest.TempPathFactory, captures: Path) -> Path:
    out = tmp_path_factory.mktemp("tso") / "out"
    folder = REAL / "ip6tnl-transport-tso-on"
    analyze_to_dir(folder / "capture.pcap", [folder / "xfrm-state.txt"], out)
    return out


def _ascii_72(text: str) -> None:
    assert text.isascii()
    # Over 72 columns only a word that is longer than a line: a path is never broken.
    assert [line for line in text.splitlines() if len(line) > 72 and len(line.split()) > 1] == []


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["kernel-gso-v4", "sequence", "iv-reuse", "natt", "snaplen"])
def test_reports_are_ascii_72_and_deterministic(tmp_path: Path, scenario: str) -> None:
    first = analyzed_dir(tmp_path / "a", scenario)
    second = analyzed_dir(tmp_path / "b", scenario)
    for name in ("report.txt", "report.md"):
        assert (first / name).read_text() == (second / name).read_text()
    _ascii_72((first / "report.txt").read_text())
    res = runner.invoke(app, ["report", str(first)])
    assert res.stdout == (first / "report.txt").read_text()
    assert res.exit_code == exit_code(load_summary(first), Severity.HIGH)  # as analyze's


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
    assert res.stderr == (
        f"espforensics: error: {tmp_path}: not an output folder of analyze or batch: "
        "it holds no summary.json\n"
    )


@pytest.mark.parametrize("scenario", ["kernel-gso-v4", "kernel-gso-v6"])
def test_printed_filter_selects_exactly_the_misplaced_frames(tmp_path: Path, scenario: str) -> None:
    out = analyzed_dir(tmp_path, scenario)
    bpf = helpers.printed_filter((out / "report.txt").read_text())
    capture = tmp_path / "in" / f"{scenario}.pcap"
    packets = json.loads((out / "summary.json").read_text())
    misplaced = [
        int(line.split(",")[0])
        for line in (out / "packets.csv").read_text().splitlines()[1:]
        if '"esp_misplaced"' in line
    ]
    assert len(misplaced) == packets["verdicts"]["esp_misplaced"] == 12
    assert helpers.tcpdump_frames(capture, bpf, tmp_path) == misplaced


@helpers.needs_captures
def test_real_capture_report_states_count_and_filter(tso_on: Path, tmp_path: Path) -> None:
    report = (tso_on / "report.txt").read_text()
    _ascii_72(report)
    assert "94 of 687 ESP packets do not decrypt at offset 0 (94 esp_misplaced)." in report
    bpf = helpers.printed_filter(report)
    assert bpf == "ip6 proto 50 and ip6[56:2] = 0x4500 and ip6[60:4] = 0x1001"
    truth = json.loads((REAL / "ip6tnl-transport-tso-on" / "ground-truth.json").read_text())
    capture = REAL / "ip6tnl-transport-tso-on" / "capture.pcap"
    frames = helpers.tcpdump_frames(capture, bpf, tmp_path)
    assert len(frames) == truth["seed_filter_matches"] == 94
    csv_rows = (tso_on / "packets.csv").read_text().splitlines()[1:]
    assert frames == [int(r.split(",")[0]) for r in csv_rows if '"esp_misplaced"' in r]


@helpers.needs_captures
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
    # the label column is as wide as its longest shown label, "finding cleartext_leak"
    assert "verdict esp_misplaced             94             0        -94" in text
    assert "  Packets with verdict esp_misplaced fell from 94 to 0." in text
    md = runner.invoke(app, [*base, "--format", "markdown"]).stdout
    assert "| verdict esp\\_misplaced | 94 | 0 | \\-94 |" in md


def test_compare_output_folders(tmp_path: Path) -> None:
    a = analyzed_dir(tmp_path / "a", "kernel-gso-v4")
    b = analyzed_dir(tmp_path / "b", "ipv4-transport-tcp")
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
    from espforensics.plots.data import plot_frames

    out = analyzed_dir(tmp_path, "sequence")
    summary = json.loads((out / "summary.json").read_text())
    assert [p["skipped"] for p in summary["plots"]] == [""] * 5
    for p in summary["plots"]:
        for f in p["files"]:
            assert (out / f).stat().st_size > 1000
    from espforensics.analysis import load_summary

    frames = plot_frames(out / "packets.parquet", load_summary(out))
    assert _legend(plot_verdicts(frames["verdicts"])) == ["ok"]
    assert _legend(plot_offsets(frames["offsets"])) == ["expected", "found"]
    iv = plot_iv_derivation(frames["iv"])
    assert iv is not None
    assert [ax.get_title(loc="left") for ax in iv.axes] == ["0x0000b001 192.0.2.1>192.0.2.2"]
    assert len(_legend(plot_throughput(frames["throughput"]))) == 1
    assert _legend(plot_sequence(frames["sequence"])) == [
        "gap (5 in all)",
        "duplicate (1 in all)",
        "reordered (1 in all)",
    ]


def test_plot_gaps_are_the_checks_gaps(tmp_path: Path) -> None:
    from espforensics.analysis import load_summary
    from espforensics.plots.data import plot_frames

    out = analyzed_dir(tmp_path, "sequence")
    summary = load_summary(out)
    events = plot_frames(out / "packets.parquet", summary)["sequence"]
    gaps = events.take(events["event"] == "gap")
    assert int(gaps["count"].sum()) == summary.findings["seq_gap"] == 5


def test_printed_filter_for_esp_in_udp(tmp_path: Path) -> None:
    from espforensics.synth import keys_yaml, write_capture
    from tests.e2e.test_scenarios import _in_udp

    sc = build_scenario("kernel-gso-v4", seed=1)
    capture = tmp_path / "natt-gso.pcap"
    write_capture(capture, [_in_udp(f) for f in sc.frames])
    keys = tmp_path / "natt-gso.keys.yaml"
    keys.write_text(keys_yaml(sc.sas))
    out = tmp_path / "out"
    analyze_to_dir(capture, [keys], out, plots=False)
    bpf = helpers.printed_filter((out / "report.txt").read_text())
    assert bpf == "ip proto 17 and ip[44:2] = 0x4500 and ip[48:4] = 0x1001"
    csv_rows = (out / "packets.csv").read_text().splitlines()[1:]
    misplaced = [int(r.split(",")[0]) for r in csv_rows if '"esp_misplaced"' in r]
    assert helpers.tcpdump_frames(capture, bpf, tmp_path) == misplaced


# -- damaged captures, misplaced layouts, no local paths ------------------------


def test_damaged_capture_says_so_first(tmp_path: Path) -> None:
    """The damage is the first sentence after the capture's name, before the lead (what
    was checked, what is wrong) and the verdict, in the capture's name only (no local
    path); said once."""
    paths = write_scenario(build_scenario("kernel-gso-v4", seed=1), tmp_path / "in", stem="c")
    data = paths["capture"].read_bytes()
    paths["capture"].write_bytes(data[:-30])  # cut inside the last of 25 frames
    out = tmp_path / "out"
    res = runner.invoke(
        app,
        ["analyze", str(paths["capture"]), "--sa", str(paths["keys"]), "--out", str(out)],
    )
    assert res.exit_code == 2
    damage = (
        "The capture is damaged: c.pcap: capture ends inside frame 25: read 24 complete "
        "frames. Everything below covers only what was read before the damage"
    )
    text = (out / "report.txt").read_text()
    _ascii_72(text)
    lines = text.splitlines()
    assert lines[2] == f"file:   c.pcap ({len(data) - 30:,} bytes)"
    assert " ".join(x.strip() for x in lines[3:6]) == damage
    assert lines[6:9] == [
        "  all 24 ESP packets verified with their keys (2 SAs)",
        "  found: critical cleartext_leak (12 packets); critical esp_misplaced",
        "      (12 packets)",
    ]
    verdict = lines.index("Verdict:")
    assert lines[verdict + 1] == (
        "  12 of 24 ESP packets do not decrypt at offset 0 (12 esp_misplaced)."
    )
    assert text.count("The capture is damaged") == 1
    assert str(tmp_path) not in text
    md = (out / "report.md").read_text().splitlines()
    first = md.index(f"**{damage}.**")
    assert md[first + 2] == "**all 24 ESP packets verified with their keys (2 SAs).**"
    short = runner.invoke(app, ["report", str(out), "--format", "summary"]).stdout.splitlines()
    assert " ".join(x.strip() for x in short[1:4]) == damage
    assert short[4:8] == [  # the lead: what was checked (of what was read), what is wrong
        "  all 24 ESP packets verified with their keys (2 SAs)",
        "  found: critical cleartext_leak (12 packets); critical esp_misplaced",
        "      (12 packets)",
        "  24 frames, 24 ESP packets, 2 SAs",
    ]


def test_whole_capture_has_no_damage_line(gso_v6: Path) -> None:
    for name in ("report.txt", "report.md"):
        assert "damaged" not in (gso_v6 / name).read_text()


def _misplaced_record(frame: int, clear: str) -> PacketRecord:
    """An esp_misplaced record of the IPv4 GSO layout: clear bytes at 36, ESP at 40."""
    n = len(clear.split())
    return PacketRecord(
        frame, frame * 10**9, 100, 100, Verdict.ESP_MISPLACED, Proto.ESP, 4, "192.0.2.1",
        "192.0.2.2", spi=0x1001, esp_offset=36 + n, expected_offset=20, leaked=n,
        leaked_hex=clear,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("clears", "masked", "shown", "fields"),
    [
        (["45 00 05 ac"] * 2, "45 00 05 ac", "45 00 05 ac", "IPv4 version+IHL, TOS, total length"),
        (
            ["45 00 05 ac", "45 00 02 1c", "45 00 05 ac"],
            "45 00 .. ..",
            "45 00 LL LL",
            "IPv4 version+IHL, TOS, total length; LL varies per packet",
        ),
        (["45 00 05 ac", "45 00 05 9c"], "45 00 05 ..", "45 00 05 LL", None),
        (
            ["60 00 00 00 05 ac 06 40", "60 00 bc de 05 80 06 40"],
            "60 00 .. .. 05 .. 06 40",
            "60 00 xx xx 05 LL 06 40",
            "IPv6 version+traffic class+flow label, payload length, next header, "
            "hop limit; LL varies per packet; xx varies per packet",
        ),
    ],
    ids=["same", "length varies", "low byte varies", "ipv6 inner"],
)
def test_layout_keeps_the_clear_bytes_masked_where_they_vary(
    clears: list[str], masked: str, shown: str, fields: str | None
) -> None:
    from espforensics.render.text import format_text
    from espforensics.report.content import report_content
    from espforensics.report.narrative import clear_bytes, clear_fields
    from espforensics.results.builder import SummaryBuilder
    from espforensics.results.summary import CaptureInfo, Summary

    builder = SummaryBuilder()
    for i, clear in enumerate(clears, 1):
        builder.observe(_misplaced_record(i, clear))
    summary = builder.finish(CaptureInfo("/home/me/c.pcap", "00" * 32), [])
    (layout,) = summary.layouts
    n = len(clears[0].split())
    assert (layout.clear_offset, layout.esp_offset, layout.packets) == (36, 36 + n, len(clears))
    assert (layout.clear_prefix, layout.clear_hex) == (clears[0].replace(" ", "")[:4], masked)
    assert clear_bytes(layout) == shown
    if fields is not None:
        assert clear_fields(layout) == fields
    assert Summary.from_json(json.loads(json.dumps(summary.to_json()))) == summary
    text = " ".join(x.strip() for x in format_text(report_content(summary)).splitlines())
    assert f"in clear at byte 36: {shown} (" in text
    assert "/home/me" not in text


def test_summary_json_without_clear_hex_still_loads() -> None:
    """summary.json written before clear_hex: the prefix is shown, not invented."""
    from espforensics.report.narrative import clear_bytes
    from espforensics.results.builder import SummaryBuilder
    from espforensics.results.summary import CaptureInfo, Summary

    builder = SummaryBuilder()
    builder.observe(_misplaced_record(1, "45 00 05 ac"))
    doc = builder.finish(CaptureInfo("c.pcap", "00" * 32), []).to_json()
    del doc["layouts"][0]["clear_hex"]
    (layout,) = Summary.from_json(doc).layouts
    assert (layout.clear_hex, clear_bytes(layout)) == ("", "45 00 ...")


def test_plot_paths_only_in_report_md(gso_v6: Path) -> None:
    text = (gso_v6 / "report.txt").read_text()
    assert "plots/" not in text and "Plots" not in text
    md = (gso_v6 / "report.md").read_text()
    title = "Sequence number each ESP IV was built from"
    assert f"- ![{title}](plots/iv_derivation.png)\n  **{title}.** One panel per SA" in md


def test_misplaced_section_in_markdown(gso_v6: Path) -> None:
    md = (gso_v6 / "report.md").read_text().splitlines()
    start = md.index("## Misplaced ESP headers")
    assert md[start + 6] == (
        "| 0x00001001 | IPv6 esp | 12 | 40 | 60 | 56 | `45 00 05 ac` "
        "| IPv4 version+IHL, TOS, total length |"
    )


@helpers.needs_captures
def test_real_capture_shows_the_clear_bytes_with_lengths_masked(tso_on: Path) -> None:
    summary = json.loads((tso_on / "summary.json").read_text())
    assert summary["layouts"] == [
        {
            "ip_version": 6,
            "proto": "esp",
            "expected_offset": 40,
            "clear_offset": 56,
            "clear_prefix": "4500",
            "esp_offset": 60,
            "spi": "0x00001001",
            "packets": 94,
            "clear_hex": "45 00 .. ..",
            "carriers": "",
            "reassembled": False,
        }
    ]
    text = " ".join(x.strip() for x in (tso_on / "report.txt").read_text().splitlines())
    assert (
        "SPI 0x00001001 over IPv6 (esp): 94 packets with the ESP header at byte 60 "
        "instead of 40 in clear at byte 56: 45 00 LL LL (IPv4 version+IHL, TOS, total "
        "length; LL varies per packet)"
    ) in text
    md = (tso_on / "report.md").read_text()
    assert "| 0x00001001 | IPv6 esp | 94 | 40 | 60 | 56 | `45 00 LL LL` |" in md


def test_a_report_of_many_sas_lists_the_worst_twenty_and_counts_the_rest(
    gso_v6: Path,
) -> None:
    """A capture of a scan: report.txt/.md stay short, sas.csv keeps every SA."""
    from dataclasses import replace as _replace

    from espforensics.analysis import load_summary
    from espforensics.render.markdown import format_markdown
    from espforensics.render.text import format_text
    from espforensics.report import narrative
    from espforensics.report.content import report_content

    base = load_summary(gso_v6)
    sa = base.sas[0]
    many = tuple(
        _replace(sa, spi=0x10000 + i, packets=i + 1, verdicts={"ok": i + 1})
        if i != 7
        else _replace(sa, spi=0x10000 + i, packets=1, verdicts={"auth_fail": 1})
        for i in range(50)
    )
    summary = _replace(base, sas=many)
    shown, rest = narrative.shown_sas(summary)
    assert [s.spi for s in shown] == [0x10007, *range(0x10000 + 31, 0x10000 + 50)]
    assert rest == "... and 30 more SAs, fewer packets or all ok: every SA is in sas.csv"
    report = report_content(summary)
    text, md = format_text(report), format_markdown(report)
    assert text.count("  SPI 0x0001") == 20 and md.count("| 0x0001") == 20
    assert rest in text and rest in md
    assert "SPI 0x00010007" in text and "SPI 0x00010000 " not in text


def test_summary_json_lays_out_one_line_per_sa_and_finding(gso_v6: Path) -> None:
    from espforensics.analysis import load_summary
    from espforensics.render.json import format_json
    from espforensics.report.content import report_content
    from espforensics.results.summary import Summary

    summary = load_summary(gso_v6)
    text = format_json(report_content(summary))
    assert Summary.from_json(json.loads(text)) == summary
    sas = [line for line in text.splitlines() if line.startswith('    {"spi"')]
    findings = [line for line in text.splitlines() if line.startswith('    {"kind"')]
    assert (len(sas), len(findings)) == (len(summary.sas), len(summary.finding_list)) == (2, 2)
