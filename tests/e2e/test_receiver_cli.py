"""``--expect`` and ``--xfrm-stat-before/--xfrm-stat-after`` on the command line: KTAP
lines, exit codes, one-line usage errors, and the receiver's counters beside the
prediction in the reports and summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from espforensics.analysis import load_summary
from espforensics.results.summary import Summary
from espforensics.synth import write_scenario
from tests.support.helpers import CAPTURES, needs_captures, run_cli, scenario

STAT_NAMES = ("XfrmInError", "XfrmInNoStates", "XfrmInStateProtoError", "XfrmInStateSeqError")


@pytest.fixture(scope="module")
def k4(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """kernel-gso-v4: 12 misplaced headers to 192.0.2.2, 25 ESP packets verified."""
    return write_scenario(scenario("kernel-gso-v4"), tmp_path_factory.mktemp("k4"))


def _stat(path: Path, **counts: int) -> Path:
    path.write_text("".join(f"{n:<24}\t{counts.get(n, 0)}\n" for n in STAT_NAMES))
    return path


def test_expect_as_ktap_lines_and_exit_1(k4: dict[str, Path], tmp_path: Path) -> None:
    run = run_cli(
        "analyze", k4["capture"], "--sa", k4["keys"], "--out", tmp_path / "o", "--no-plots",
        "--format", "ktap",
        "--expect", "esp_misplaced=0, iv_reuse=0,verified>=20,XfrmInStateProtoError@192.0.2.2=12",
    )  # fmt: skip
    assert run.code == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == ["KTAP version 1", "1..4"]
    assert lines[3:] == [
        "not ok 1 esp_misplaced=0 # esp_misplaced is 12",
        "ok 2 iv_reuse=0 # iv_reuse is 0",
        "ok 3 verified>=20 # verified is 25",
        "ok 4 XfrmInStateProtoError@192.0.2.2=12 # XfrmInStateProtoError@192.0.2.2 is 12",
        "# Totals: pass:3 fail:1 xfail:0 xpass:0 skip:0 error:0",
    ]


def test_expect_that_holds_exits_0_whatever_the_findings(
    k4: dict[str, Path], tmp_path: Path
) -> None:
    """The assertions decide the code: the critical findings do not (--fail-on would)."""
    out = tmp_path / "o"
    args = ("--expect", "esp_misplaced=12,receiver.icv_fail=12,XfrmInStateSeqError=0")
    run = run_cli("analyze", k4["capture"], "--sa", k4["keys"], "--out", out, "--no-plots", *args)
    assert run.code == 0, run.stderr
    assert run.stdout.splitlines()[-4:] == [
        "expect:",
        "  ok esp_misplaced=12 (got 12)",
        "  ok receiver.icv_fail=12 (got 12)",
        "  ok XfrmInStateSeqError=0 (got 0)",
    ]
    again = run_cli("report", out, "--format", "ktap", "--expect", "esp_misplaced<12")
    assert again.code == 1
    assert "not ok 1 esp_misplaced<12 # esp_misplaced is 12" in again.stdout.splitlines()


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        (
            "iv_resue=0",
            "--expect: 'iv_resue=0': unknown name 'iv_resue'; known: a finding kind, "
            "esp_packets, verified, proven, frames, verdicts.NAME, an XfrmIn* counter "
            "(optionally @HOST) or receiver.NAME",
        ),
        ("iv_reuse", "--expect: 'iv_reuse' is not NAME OP NUMBER (OP: = != < <= > >=)"),
        ("iv_reuse@192.0.2.2=0", "--expect: 'iv_reuse@192.0.2.2=0': unknown name "
         "'iv_reuse@192.0.2.2'; known: a finding kind, esp_packets, verified, proven, frames, "
         "verdicts.NAME, an XfrmIn* counter (optionally @HOST) or receiver.NAME"),
    ],
)  # fmt: skip
def test_an_unreadable_assertion_is_refused_before_the_run(
    k4: dict[str, Path], tmp_path: Path, expect: str, message: str
) -> None:
    out = tmp_path / "o"
    run = run_cli("analyze", k4["capture"], "--sa", k4["keys"], "--out", out, "--expect", expect)
    assert (run.code, run.stderr) == (2, f"espforensics: error: {message}\n")
    assert not out.exists()


def test_an_assertion_the_run_cannot_answer_is_a_usage_error(
    k4: dict[str, Path], tmp_path: Path
) -> None:
    keyless = run_cli(
        "analyze", k4["capture"], "--out", tmp_path / "a", "--no-plots",
        "--expect", "XfrmInStateProtoError=0",
    )  # fmt: skip
    assert (keyless.code, keyless.stderr) == (
        2,
        "espforensics: error: --expect: 'XfrmInStateProtoError=0': no receiver prediction "
        "without a key file (--sa)\n",
    )
    elsewhere = run_cli(
        "analyze", k4["capture"], "--sa", k4["keys"], "--out", tmp_path / "b", "--no-plots",
        "--expect", "XfrmInStateSeqError@10.9.8.7=0",
    )  # fmt: skip
    assert elsewhere.code == 2
    assert elsewhere.stderr == (
        "espforensics: error: --expect: 'XfrmInStateSeqError@10.9.8.7=0': no ESP to 10.9.8.7 "
        "in the capture (hosts: 192.0.2.1, 192.0.2.2)\n"
    )


def test_observed_counters_beside_the_prediction(k4: dict[str, Path], tmp_path: Path) -> None:
    """One more ProtoError than the capture explains, and a counter the model does not
    cover: each said; summary.json keeps the increases."""
    before = _stat(tmp_path / "before")
    after = _stat(tmp_path / "after", XfrmInStateProtoError=13, XfrmInError=2)
    out = tmp_path / "o"
    run = run_cli(
        "analyze", k4["capture"], "--sa", k4["keys"], "--out", out, "--no-plots", "-q",
        "--xfrm-stat-before", before, "--xfrm-stat-after", after, "--xfrm-stat-host", "192.0.2.2",
    )  # fmt: skip
    assert run.code == 1, run.stderr  # the critical findings, as without the files
    report = (out / "report.txt").read_text()
    said = report[report.index("  observed at") : report.index("Likely cause")]
    assert " ".join(said.split()) == (
        "observed at 192.0.2.2 (before -> after): XfrmInStateProtoError: predicted +12, "
        "observed +13: 1 more than the capture explains: drops of packets the capture does "
        "not hold (taken before the capture point, or on another path), or states the key "
        "file does not describe XfrmInStateSeqError: predicted +0, observed +0: equal "
        "XfrmInNoStates: predicted +0, observed +0: equal not predicted (the model does not "
        "cover them): XfrmInError +2"
    )
    doc = json.loads((out / "summary.json").read_text())
    assert doc["receiver_observed"]["deltas"]["XfrmInStateProtoError"] == 13
    assert doc["receiver_observed"]["host"] == "192.0.2.2"


def test_whose_counters_when_esp_goes_to_two_hosts(k4: dict[str, Path], tmp_path: Path) -> None:
    """Both directions are in the capture: the report asks whose the files are."""
    out = tmp_path / "o"
    run_cli(
        "analyze", k4["capture"], "--sa", k4["keys"], "--out", out, "--no-plots", "-q",
        "--xfrm-stat-before", _stat(tmp_path / "b"), "--xfrm-stat-after", _stat(tmp_path / "a"),
    )  # fmt: skip
    report = " ".join((out / "report.txt").read_text().split())
    assert (
        "observed (b -> a): ESP goes to several hosts (192.0.2.1, 192.0.2.2); give "
        "--xfrm-stat-host to say whose counters these are" in report
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--xfrm-stat-before", "B"), "--xfrm-stat-before and --xfrm-stat-after go together"),
        (("--xfrm-stat-host", "192.0.2.2"), "--xfrm-stat-host needs --xfrm-stat-before and "
         "--xfrm-stat-after"),
        (("--xfrm-stat-before", "B", "--xfrm-stat-after", "BAD"), "BAD: line 2: not a "
         "/proc/net/xfrm_stat line"),
        (("--xfrm-stat-before", "A", "--xfrm-stat-after", "B"), "B: XfrmInStateSeqError went "
         "down from 5 to 0"),
        (("--xfrm-stat-before", "B", "--xfrm-stat-after", "NONE"), "NONE: cannot read it: No "
         "such file or directory"),
    ],
)  # fmt: skip
def test_bad_counter_files_are_one_line(
    k4: dict[str, Path], tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    files = {
        "A": _stat(tmp_path / "A", XfrmInStateSeqError=5),
        "B": _stat(tmp_path / "B"),
        "BAD": tmp_path / "BAD",
        "NONE": tmp_path / "NONE",
    }
    files["BAD"].write_text("XfrmInError 0\nnot a counter\n")
    argv = [str(files.get(a, a)) for a in args]
    out = tmp_path / "o"
    run = run_cli("analyze", k4["capture"], "--sa", k4["keys"], "--out", out, *argv)
    shown = message.replace("B:", f"{files['B']}:").replace("BAD:", f"{files['BAD']}:")
    shown = shown.replace("NONE:", f"{files['NONE']}:")
    assert (run.code, run.stderr) == (2, f"espforensics: error: {shown}\n")
    assert not out.exists()


def test_the_prediction_survives_summary_json(k4: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "o"
    before, after = _stat(tmp_path / "b"), _stat(tmp_path / "a", XfrmInStateProtoError=12)
    run_cli(
        "analyze", k4["capture"], "--sa", k4["keys"], "--out", out, "--no-plots", "-q",
        "--xfrm-stat-before", before, "--xfrm-stat-after", after, "--xfrm-stat-host", "192.0.2.2",
    )  # fmt: skip
    loaded = load_summary(out)
    assert loaded == Summary.from_json(loaded.to_json())
    assert loaded.observed is not None and loaded.observed.host == "192.0.2.2"
    (host,) = [h for h in loaded.receivers if h.dst == "192.0.2.2"]
    assert host.causes == (("XfrmInStateProtoError", "misplaced ESP headers", 12),)
    assert list(host.frames["XfrmInStateProtoError"]) == [4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18]


@needs_captures
@pytest.mark.parametrize("name", ["reorder-window32", "reorder-esn32"])
def test_the_wire_receivers_counters_are_equal(name: str, tmp_path: Path) -> None:
    folder = CAPTURES / "linux-6.1-wire" / name
    out = tmp_path / "o"
    run = run_cli(
        "analyze", folder / "receiver.pcap", "--sa", folder / "xfrm-state.txt", "--out", out,
        "--no-plots", "-q", "--xfrm-stat-before", folder / "xfrm_stat-b-before.txt",
        "--xfrm-stat-after", folder / "xfrm_stat-b-after.txt", "--xfrm-stat-host", "198.51.100.2",
        "--expect", "XfrmInStateProtoError@192.0.2.1=0,XfrmInStateSeqError@192.0.2.1=0",
    )  # fmt: skip
    assert run.code == 0, run.stderr
    report = (out / "report.txt").read_text()
    for counter in ("XfrmInStateProtoError", "XfrmInStateSeqError", "XfrmInNoStates"):
        line = next(x for x in report.splitlines() if x.strip().startswith(f"{counter}: pred"))
        assert line.endswith("equal"), line


IP_S_XFRM_STATE = """src 192.0.2.1 dst 192.0.2.2
\tproto esp spi 0x00001001(4097) reqid 1(0x00000001) mode transport
\treplay-window 32 seq 0x00000000 flag  (0x00000000)
\tstats:
\t  replay-window 0 replay 0 failed 12
src 192.0.2.2 dst 192.0.2.1
\tproto esp spi 0x00001002(4098) reqid 2(0x00000002) mode transport
\tstats:
\t  replay-window 0 replay 1 failed 0
"""


def test_ip_s_xfrm_state_stats_beside_the_model(k4: dict[str, Path], tmp_path: Path) -> None:
    """Each state's stats: replay-window (too_old), replay, failed (ICV failures)."""
    states = tmp_path / "states.txt"
    states.write_text(IP_S_XFRM_STATE)
    out = tmp_path / "o"
    run = run_cli(
        "analyze", k4["capture"], "--sa", k4["keys"], "--out", out, "--no-plots", "-q",
        "--xfrm-state-stats", states,
    )  # fmt: skip
    assert run.code == 1, run.stderr
    report = " ".join((out / "report.txt").read_text().split())
    assert (
        "per state (states.txt, counted since each state was made): SPI 0x00001001 to "
        "192.0.2.2: replay-window predicted 0, observed 0, replay predicted 0, observed 0, "
        "failed predicted 12, observed 12: equal SPI 0x00001002 to 192.0.2.1: replay-window "
        "predicted 0, observed 0, replay predicted 0, observed 1, failed predicted 0, "
        "observed 0: differ" in report
    )
    assert "observed at" not in report  # no xfrm_stat files given
    loaded = load_summary(out).observed
    assert loaded is not None  # read back as the run made it: SPIs as integers
    assert loaded.sa_stats == (
        (0x1001, "192.0.2.2", 0, 0, 12),
        (0x1002, "192.0.2.1", 0, 1, 0),
    )
    again = run_cli("report", out, "--format", "text")
    assert again.stdout == (out / "report.txt").read_text()


def test_a_file_without_stats_is_refused(k4: dict[str, Path], tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text(k4["keys"].read_text())
    run = run_cli("analyze", k4["capture"], "--sa", k4["keys"], "--out", tmp_path / "o",
                  "--xfrm-state-stats", plain)  # fmt: skip
    assert (run.code, run.stderr) == (
        2,
        f"espforensics: error: {plain}: no `stats:` line of an ESP state: not "
        "`ip -s xfrm state` output\n",
    )
