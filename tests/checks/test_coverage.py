"""Coverage, the first screen and the exit codes, on the real kernel captures in ../shared.

Issue 19: every check says how many ESP packets it examined and why not the
rest (summary.json, report.txt/md, KTAP with kselftest's SKIP and Totals);
the first two lines after the capture's name say what was checked and what
is wrong, the key doctor's proven fix first; exit 0 clean, 1 a finding, 3
fix the key file, 4 nothing verified (``--unchecked`` chooses), with
2 > 1 > 3 > 4 > 0 when several apply.
"""

from __future__ import annotations

import collections
import json
import re
from functools import cache
from pathlib import Path

import dpkt
import pytest

from espforensics.checks import COVERAGE
from espforensics.checks.coverage import NO_ICV, SEEN
from espforensics.model.enums import Verdict
from espforensics.report.check_results import CHECKS
from espforensics.results.gate import worst_code
from tests.support import helpers
from tests.support.helpers import run_cli

CAPTURES = helpers.CAPTURES / "linux-6.1"
TCP = CAPTURES / "tcp-transport-v4"
ESN = CAPTURES / "esn-wrap-v4"
TSO = CAPTURES / "ip6tnl-transport-tso-on"
NATT = CAPTURES / "natt-espinudp-v4"
NAMES = [name for name, _ in CHECKS]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("coverage")


def _keys(work: Path, name: str, text: str) -> Path:
    path = work / f"{name}.txt"
    path.write_text(text)
    return path


def _state(folder: Path) -> str:
    return (folder / "xfrm-state.txt").read_text()


def _one_sa(text: str, spi: str) -> str:
    """The block of ``ip xfrm state`` text of one SPI (the other direction's dropped)."""
    return "".join(b for b in re.split(r"(?m)^(?=src )", text) if f"spi {spi} " in b)


@cache
def _analyze(work: Path, capture: Path, keys: Path | None) -> tuple[int, Path]:
    out = work / f"out-{capture.parent.name}-{keys.stem if keys else 'nokey'}"
    args = ["analyze", str(capture), "--out", str(out), "--no-plots", "--quiet", "--force"]
    res = run_cli(*[*args, *(["--sa", str(keys)] if keys else [])])
    assert not res.stderr, res.stderr
    return res.code, out


def _report(out: Path, *args: str) -> tuple[int, list[str]]:
    res = run_cli(*["report", str(out), *args])
    assert not res.stderr, res.stderr
    return res.code, res.stdout.splitlines()


def _ktap_tail(lines: list[str]) -> list[str]:
    """The result lines, the coverage diagnostics and the Totals line."""
    return [
        x
        for x in lines
        if x.startswith(("ok ", "not ok ", "# Totals"))
        or (x.startswith("# ") and ": examined " in x)
    ]


def _no_esp(work: Path) -> Path:
    """tcp-transport-v4 without its ESP frames: the 6 frames of other traffic."""
    path = work / "no-esp.pcap"
    with (TCP / "capture.pcap").open("rb") as src, path.open("wb") as dst:
        reader = dpkt.pcap.Reader(src)
        writer = dpkt.pcap.Writer(dst, linktype=reader.datalink(), snaplen=262144)
        for ts, buf in reader:
            if not (buf[12:14] == b"\x08\x00" and buf[14 + 9] == 50):
                writer.writepkt(buf, ts)
    return path


def _natt_on_4501(work: Path) -> Path:
    """natt-espinudp-v4 with its ESP-in-UDP moved from port 4500 to 4501 (UDP checksums 0)."""
    path = work / "natt-4501.pcap"
    with (NATT / "capture.pcap").open("rb") as src, path.open("wb") as dst:
        reader = dpkt.pcap.Reader(src)
        writer = dpkt.pcap.Writer(dst, linktype=reader.datalink(), snaplen=262144)
        for ts, buf in reader:
            frame = bytearray(buf)
            if frame[12:14] == b"\x08\x00" and frame[14 + 9] == 17:
                udp = 14 + (frame[14] & 15) * 4
                for at in (udp, udp + 2):
                    if frame[at : at + 2] == (4500).to_bytes(2):
                        frame[at : at + 2] = (4501).to_bytes(2)
            writer.writepkt(bytes(frame), ts)
    return path


# The table and the registries -------------------------------------------------


def test_every_verdict_and_the_new_ones_have_a_line_in_the_table() -> None:
    no_esp_packet = {"not_esp", "undecodable", "fragment", "not_selected"}  # no SA counts them
    assert {v.value for v in Verdict} - no_esp_packet <= set(SEEN)
    assert {"decrypted_no_icv", "authentic_not_decrypted"} <= set(SEEN)


def test_each_check_declares_its_coverage_under_its_ktap_name() -> None:
    assert [name for name, _ in COVERAGE] == NAMES


def test_a_check_that_did_not_examine_a_verdict_always_says_why() -> None:
    """esn_mismatch gave "" for decrypted_no_icv (tcpdump's 3des-cbc-hmac96 captures, whose
    -E secret has no integrity key): its KTAP line read "examined none of 8 ESP packets: 8"."""
    for name, rule in COVERAGE:
        for verdict, seen in SEEN.items():
            assert rule(seen) != "", (name, verdict)
    assert dict(COVERAGE)["esn_mismatch"](SEEN["decrypted_no_icv"]) == NO_ICV


@pytest.mark.parametrize(
    ("codes", "expected"),
    [([], 0), ([0, 4], 4), ([4, 3, 0], 3), ([3, 1, 4], 1), ([1, 2, 3], 2), ([0, 0], 0)],
)
def test_precedence_2_1_3_4_0(codes: list[int], expected: int) -> None:
    assert worst_code(codes) == expected


# The right key file ------------------------------------------------------------


@helpers.needs_captures
def test_right_keys_exit_0_and_every_check_passes(work: Path) -> None:
    code, out = _analyze(work, TCP / "capture.pcap", TCP / "xfrm-state.txt")
    assert code == 0
    assert _report(out, "--format", "summary")[1][:3] == [
        str(TCP / "capture.pcap"),
        "  all 447 ESP packets verified with their keys (2 SAs)",
        "  nothing wrong found in what was checked",
    ]
    ktap_code, lines = _report(out, "--format", "ktap")
    assert ktap_code == 0
    assert _ktap_tail(lines) == [
        *(f"ok {n} {name}" for n, name in enumerate(NAMES, 1)),
        "# Totals: pass:8 fail:0 xfail:0 xpass:0 skip:0 error:0",
    ]
    assert _report(out, "--unchecked", "fail")[0] == 0  # every packet verified
    text = (out / "report.txt").read_text()
    assert "\nCoverage: every check examined every ESP packet with its key\n" in text


# A wrong ICV length: the key doctor's fix leads, exit 3 -------------------------


@helpers.needs_captures
def test_wrong_icv_leads_with_the_fix_and_exits_3(work: Path) -> None:
    keys = _keys(work, "icv96", _state(TCP).replace(" 128\n", " 96\n"))
    code, out = _analyze(work, TCP / "capture.pcap", keys)
    assert code == 3
    assert _report(out, "--format", "summary")[1][1:6] == [
        "  447 ESP packets, none verified: 447 under a key that verifies none of",
        "      them (SPIs 0x00001001, 0x00001002)",
        "  447 of 447 ESP packets fail their ICV with the key file and verify",
        "      with a 128-bit ICV (the key file says 96): fix the key file for",
        "      SPIs 0x00001001, 0x00001002",
    ]
    ktap_code, lines = _report(out, "--format", "ktap")
    assert ktap_code == 3
    assert lines[3:5] == [
        "# 447 ESP packets, none verified: 447 under a key that verifies none of them "
        "(SPIs 0x00001001, 0x00001002)",
        "# 447 of 447 ESP packets fail their ICV with the key file and verify with a "
        "128-bit ICV (the key file says 96): fix the key file for SPIs 0x00001001, 0x00001002",
    ]
    assert not any("do not decrypt" in x for x in lines)
    assert _ktap_tail(lines) == [
        "ok 1 esp_placement",
        "ok 2 cleartext_leak",
        "ok 3 iv_reuse",
        "ok 4 iv_derivation",
        "ok 5 sequence",
        "ok 6 esn_mismatch # SKIP examined none of 447 ESP packets: 447 under a key that "
        "verifies none of them",
        "not ok 7 keys # 447 packets not verifying with their key",
        "ok 8 inner_checksum # SKIP examined none of 447 ESP packets: 447 under a key that "
        "verifies none of them",
        "# Totals: pass:5 fail:1 xfail:0 xpass:0 skip:2 error:0",
    ]
    assert _report(out, "--fail-on", "never")[0] == 4  # the key file passes: nothing verified
    assert _report(out, "--fail-on", "never", "--unchecked", "ignore")[0] == 0
    report_txt = (out / "report.txt").read_text().splitlines()
    assert report_txt[3:8] == _report(out, "--format", "summary")[1][1:6]


# ESN dropped from the key file: the doctor proves ESN on -----------------------


@helpers.needs_captures
def test_esn_dropped_leads_with_esn_on_and_exits_3(work: Path) -> None:
    keys = _keys(work, "no-esn", _state(ESN).replace(" flag esn", ""))
    code, out = _analyze(work, ESN / "capture.pcap", keys)
    assert code == 3
    assert _report(out, "--format", "summary")[1][1:7] == [
        "  477 ESP packets, none verified: 477 under a key that verifies none of",
        "      them (SPIs 0x00001001, 0x00001002)",
        "  476 of 477 ESP packets fail their ICV with the key file and verify",
        "      with ESN on with high half 0x0 at the start (the key file says ESN",
        "      off): fix the key file for SPIs 0x00001001, 0x00001002",
        "  481 frames, 477 ESP packets, 2 SAs",
    ]


@helpers.needs_captures
def test_esn_with_its_key_is_a_kernel_finding_exit_1(work: Path) -> None:
    code, out = _analyze(work, ESN / "capture.pcap", ESN / "xfrm-state.txt")
    assert code == 1
    assert _report(out, "--format", "summary")[1][1:3] == [
        "  all 477 ESP packets verified with their keys (2 SAs)",
        "  found: high esn_mismatch (1 packet); high iv_derivation (1 packet)",
    ]


# No key: what was seen, SKIP for what needs a key, exit 4 ----------------------


@helpers.needs_captures
def test_no_key_says_what_was_seen_and_exits_4(work: Path) -> None:
    code, out = _analyze(work, TCP / "capture.pcap", None)
    assert code == 4
    assert _report(out, "--format", "summary")[1][1:3] == [
        "  447 ESP packets, none decrypted: no key (2 SAs)",
        "  nothing wrong found in what was checked",
    ]
    ktap_code, lines = _report(out, "--format", "ktap")
    assert ktap_code == 4
    keyless = "examined all 447 ESP packets; all of them without a key, by their clear bytes only"
    assert _ktap_tail(lines) == [
        f"# esp_placement: {keyless}",
        "ok 1 esp_placement",
        f"# cleartext_leak: {keyless}",
        "ok 2 cleartext_leak",
        f"# iv_reuse: {keyless}",
        "ok 3 iv_reuse",
        f"# iv_derivation: {keyless}",
        "ok 4 iv_derivation",
        f"# sequence: {keyless}",
        "ok 5 sequence",
        "ok 6 esn_mismatch # SKIP examined none of 447 ESP packets: 447 without a key",
        "ok 7 keys # SKIP examined none of 447 ESP packets: 447 without a key",
        "ok 8 inner_checksum # SKIP examined none of 447 ESP packets: 447 without a key",
        "# Totals: pass:5 fail:0 xfail:0 xpass:0 skip:3 error:0",
    ]
    assert not any("do not decrypt" in x for x in lines)
    assert _report(out, "--unchecked", "ignore")[0] == 0
    assert _report(out, "--unchecked", "fail")[0] == 4


@helpers.needs_captures
def test_keyless_misplaced_headers_are_a_finding_exit_1(work: Path) -> None:
    code, out = _analyze(work, TSO / "capture.pcap", None)
    assert code == 1  # 1 > 4: the layout alone is a finding
    # every critical kind is named on the first screen (iv_reuse too); no key file was
    # given, so unknown_sa reads "no key" there (packets.csv keeps the verdict's value)
    assert _report(out, "--format", "summary")[1][1:11] == [
        "  687 ESP packets, none decrypted: no key (2 SAs)",
        "  found: critical cleartext_leak (94 packets); critical esp_misplaced",
        "      (94 packets); critical iv_reuse (64 packets); 1 more kind of",
        "      finding",
        "  690 frames, 687 ESP packets, 2 SAs",
        "  verdicts: no key 593, not_esp 3, esp_misplaced 94",
        "  SPI 0x00001001 fd00:a::1 -> fd00:a::2 (no key)",
        "    452 packets: no key 358, esp_misplaced 94",
        "  SPI 0x00001002 fd00:a::2 -> fd00:a::1 (no key)",
        "    235 packets: no key 235",
    ]
    verdicts = collections.Counter(r["verdict"] for r in helpers.packet_rows(out))
    assert verdicts["unknown_sa"] == 593
    lines = _report(out, "--format", "ktap")[1]
    assert not any("do not decrypt" in x for x in lines)


# One direction's key ------------------------------------------------------------


@helpers.needs_captures
def test_one_direction_partial_coverage_and_the_unchecked_policies(work: Path) -> None:
    keys = _keys(work, "a-to-b", _one_sa(_state(TCP), "0x00001001"))
    code, out = _analyze(work, TCP / "capture.pcap", keys)
    assert code == 0  # --unchecked skip: something was verified
    assert _report(out, "--format", "summary")[1][1:4] == [
        "  325 of 447 ESP packets verified with their keys; not: 122 without a",
        "      key (SPI 0x00001002)",
        "  nothing wrong found in what was checked",
    ]
    assert _report(out, "--unchecked", "fail")[0] == 4
    assert _report(out, "--unchecked", "ignore")[0] == 0
    lines = _report(out, "--format", "ktap")[1]
    assert "# esn_mismatch: examined 325 of 447 ESP packets (122 without a key)" in lines
    assert "# keys: examined 325 of 447 ESP packets (122 without a key)" in lines
    assert lines[-1] == "# Totals: pass:8 fail:0 xfail:0 xpass:0 skip:0 error:0"
    doc = json.loads((out / "summary.json").read_text())
    assert doc["coverage"][6] == {
        "name": "keys",
        "esp_packets": 447,
        "examined": 325,
        "keyless": 0,
        "skipped": {"without a key": 122},
    }
    assert [c["examined"] for c in doc["coverage"]] == [447, 447, 447, 447, 447, 325, 325, 325]
    text = (out / "report.txt").read_text()
    assert "  keys: examined 325 of 447 ESP packets (122 without a key)\n" in text, text
    md = (out / "report.md").read_text()
    assert "| keys | examined 325 of 447 ESP packets (122 without a key) |" in md


@helpers.needs_captures
def test_a_capture_fault_outranks_a_wrong_key_file(work: Path) -> None:
    """0x1001 right (94 misplaced headers, critical), 0x1002 with a 96-bit ICV: 1, not 3."""
    text = _state(TSO)
    wrong = _one_sa(text, "0x00001002").replace(" 128\n", " 96\n")
    code, out = _analyze(
        work, TSO / "capture.pcap", _keys(work, "tso-mixed", _one_sa(text, "0x00001001") + wrong)
    )
    assert code == 1
    assert _report(out, "--format", "summary")[1][1:9] == [
        "  452 of 687 ESP packets verified with their keys; not: 235 under a key",
        "      that verifies none of them (SPI 0x00001002)",
        "  235 of 687 ESP packets fail their ICV with the key file and verify",
        "      with a 128-bit ICV (the key file says 96): fix the key file for",
        "      SPI 0x00001002; also found: critical cleartext_leak (94 packets);",
        "      critical esp_misplaced (94 packets); critical iv_reuse (64",
        "      packets)",
        "  690 frames, 687 ESP packets, 2 SAs",
    ]
    assert _report(out, "--fail-on", "never")[0] == 0  # 452 verified: skip is satisfied
    assert _report(out, "--fail-on", "never", "--unchecked", "fail")[0] == 4


# No ESP at all ---------------------------------------------------------------------


@helpers.needs_captures
def test_no_esp_at_all_skips_every_check_and_exits_4(work: Path) -> None:
    code, out = _analyze(work, _no_esp(work), TCP / "xfrm-state.txt")
    assert code == 4
    ktap_code, lines = _report(out, "--format", "ktap")
    assert ktap_code == 4
    assert _ktap_tail(lines) == [
        *(f"ok {n} {name} # SKIP no ESP packet in the capture" for n, name in enumerate(NAMES, 1)),
        "# Totals: pass:0 fail:0 xfail:0 xpass:0 skip:8 error:0",
    ]
    assert _report(out, "--format", "summary")[1][1:4] == [
        "  no ESP packet in this capture: nothing was checked; 2 SAs of the key",
        "      file matched no packet",
        "  nothing to find without ESP packets",
    ]
    assert _report(out, "--unchecked", "ignore")[0] == 0
    unused = json.loads((out / "summary.json").read_text())["unused_sas"]
    assert [(u["spi"], u["src"], u["dst"], u["reason"], u["packets"]) for u in unused] == [
        ("0x00001002", "192.0.2.2", "192.0.2.1", "no_such_spi", 0),
        ("0x00001001", "192.0.2.1", "192.0.2.2", "no_such_spi", 0),
    ]
    assert (
        f"# SPI 0x00001002 ({TCP / 'xfrm-state.txt'}:line 1) saw no packet: its SPI is nowhere "
        "in the capture (not as ESP, nor at the start of a UDP payload)"
    ) in lines


@helpers.needs_captures
def test_an_sa_given_with_the_other_directions_addresses_is_named(work: Path) -> None:
    text = _state(TCP).replace("src 192.0.2.2 dst 192.0.2.1", "src 192.0.2.1 dst 192.0.2.2")
    code, out = _analyze(work, TCP / "capture.pcap", _keys(work, "swapped", text))
    assert code == 0  # 0x1001 verified: --unchecked skip is satisfied
    lines = _report(out, "--format", "ktap")[1]
    assert (
        f"# SPI 0x00001002 ({work / 'swapped.txt'}:line 1) saw no packet: its SPI goes from "
        "192.0.2.2 to 192.0.2.1 (122 packets), the other direction: swap src and dst, or give "
        "that direction's SA"
    ) in lines
    assert "# keys: examined 325 of 447 ESP packets (122 without a key)" in lines


@helpers.needs_captures
def test_batch_exit_follows_the_same_precedence(work: Path) -> None:
    folder = work / "batch-in"
    folder.mkdir()
    (folder / "no-esp.pcap").write_bytes(_no_esp(work).read_bytes())
    args = ["batch", str(folder), "--no-plots", "-q", "--jobs", "1"]
    res = run_cli(*[*args, "--out", str(work / "batch-a")])
    assert res.code == 4, res.stderr
    res = run_cli(*[*args, "--out", str(work / "batch-b"), "--unchecked", "ignore"])
    assert res.code == 0, res.stderr


@helpers.needs_captures
def test_esp_in_udp_on_another_port_names_the_unused_keys_and_exits_4(work: Path) -> None:
    """No `encap` in the key file, ESP-in-UDP on 4501: the keys matched nothing; say so."""
    keys = _keys(
        work, "no-encap", "".join(x for x in _state(NATT).splitlines(True) if "encap" not in x)
    )
    code, out = _analyze(work, _natt_on_4501(work), keys)
    assert code == 4
    summary = _report(out, "--format", "summary")[1]
    assert summary[1:5] == [
        "  no ESP packet in this capture: nothing was checked; 2 SAs of the key",
        "      file matched no packet: ESP-in-UDP on port 4501; run with",
        "      --natt-port 4501",
        "  nothing to find without ESP packets",
    ]
    args = ["analyze", str(work / "natt-4501.pcap"), "--sa", str(keys), "--natt-port", "4501"]
    res = run_cli(*[*args, "--out", str(work / "natt-4501-out"), "--no-plots", "-q"])
    assert res.code == 0, res.stderr
    doc = json.loads((work / "natt-4501-out" / "summary.json").read_text())
    assert (doc["verdicts"]["ok"], doc["unused_sas"]) == (590, [])


@helpers.needs_captures
def test_a_summary_json_written_before_coverage_still_reports_it(work: Path) -> None:
    keys = _keys(work, "a-to-b", _one_sa(_state(TCP), "0x00001001"))
    _, out = _analyze(work, TCP / "capture.pcap", keys)
    old = work / "old-summary"
    old.mkdir()
    doc = json.loads((out / "summary.json").read_text())
    (old / "summary.json").write_text(
        json.dumps({k: v for k, v in doc.items() if k not in ("coverage", "unused_sas")})
    )
    assert _report(old, "--format", "ktap") == _report(out, "--format", "ktap")


@helpers.needs_captures
def test_swapped_keys_lead_as_one_fix(work: Path) -> None:
    text = _state(TCP)
    a, b = re.findall(r"0x[0-9a-f]{40}", text)
    keys = _keys(work, "swapped-keys", text.replace(a, "KEY").replace(b, a).replace("KEY", b))
    code, out = _analyze(work, TCP / "capture.pcap", keys)
    assert code == 3
    assert _report(out, "--format", "summary")[1][1:6] == [
        "  447 ESP packets, none verified: 447 under a key that verifies none of",
        "      them (SPIs 0x00001001, 0x00001002)",
        "  447 of 447 ESP packets fail their ICV with the key file and verify",
        "      with the key given for the other direction: the directions' keys",
        "      are swapped, fix the key file for SPIs 0x00001001, 0x00001002",
    ]


def test_a_wrong_key_without_an_icv_verifies_nothing(tmp_path: Path) -> None:
    """An SA with no integrity whose key is wrong decrypts to unsound trailers
    (``bad_trailer``): no ICV was checked, so nothing is verified, not 24 of 36."""
    example = Path(__file__).resolve().parents[2] / "fixtures" / "example.pcap"
    keys = tmp_path / "no-icv.yaml"
    keys.write_text(
        f"sas:\n  - spi: 0x1001\n    dst: 192.0.2.2\n    enc: cbc(aes)\n    key: 0x{'11' * 16}\n"
    )
    _, out = _analyze(tmp_path, example, keys)
    assert _report(out, "--format", "summary")[1][1:4] == [
        "  36 ESP packets, none verified: 24 decrypted to no sound trailer, with",
        "      no ICV to check (SPI 0x00001001); 12 without a key (SPI",
        "      0x00001002)",
    ]
    doc = json.loads((out / "summary.json").read_text())
    keys_row = next(c for c in doc["coverage"] if c["name"] == "esn_mismatch")
    assert keys_row["examined"] == 0
    assert _report(out, "--fail-on", "never")[0] == 4  # nothing verified
