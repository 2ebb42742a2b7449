"""The likely-cause table: each entry on a fixture that shows its fault, none on the clean ones.

Every fixture scenario is analyzed with its keys and the causes that match
are compared with the set each scenario should show (empty for every clean
scenario and for faults no entry describes). Three faults have no
scenario of their own and are built here with the synth builder: a first
sequence number 0, one sequence number sealed twice with different
contents, and the segments of GSO packets sharing one sequence number
in a tunnel-mode SA (the qdisc fault).
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import replace
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir, summarize
from espforensics.render.text import format_text
from espforensics.report.causes import CAUSES, LikelyCause, likely_causes
from espforensics.report.content import report_content
from espforensics.report.facts import FACT_NAMES
from espforensics.results.summary import Summary
from espforensics.synth import SCENARIOS, build_scenario, write_scenario
from espforensics.synth.builder import (
    V4_A,
    V4_B,
    CaptureBuilder,
    Fault,
    SaFlow,
    ip,
    make_sa,
    sa_pair,
)
from espforensics.synth.esp import IvFixed, IvSeqOffset
from espforensics.synth.scenarios_crypto import send_udp
from espforensics.synth.traffic import session, tunnel
from espforensics.synth.truth import Scenario
from tests.support import helpers

ROOT = Path(__file__).resolve().parents[2]
REAL = helpers.CAPTURES / "linux-6.1"
REAL7 = helpers.CAPTURES / "linux-7.3.4"

GSO = "transport-gso-inner-tunnel"
ESP6 = "esp6-iv-after-gso-increment"
QDISC = "gso-segments-share-xo-seq"
ESN = "esn-gso-wrap-early"
SEQ0 = "first-seq-zero"
DUP = "seq-duplicate-new-ciphertext"
COPY = "qdisc-duplicate-after-seq"
CHAINED = "cbc-iv-chained"

# The causes each scenario shows; every other scenario shows none.
EXPECTED: dict[str, set[str]] = {
    "kernel-gso-v4": {GSO},
    "kernel-gso-v6": {GSO},
    "esn-fault-v4": {ESN},
    "esn-fault-v6": {ESN},
    "esn-fault-late-start": {ESN},
    "encauth-faults": {ESP6, CHAINED},  # 0x7501: the esp6 fault under cbc(aes); 0x7502 chained
    **{name: {ESP6} for name in SCENARIOS if name.startswith("midstream-")},
}


def _summary(tmp: Path, sc: Scenario, keyed: bool = True) -> Summary:
    paths = write_scenario(sc, tmp, stem=sc.name)
    return summarize(paths["capture"], [paths["keys"]] if keyed else [])


def _cause(summary: Summary, cause_id: str) -> LikelyCause:
    (cause,) = [c for c in likely_causes(summary) if c.id == cause_id]
    return cause


def test_the_table_names_only_facts_that_exist() -> None:
    """A typo in a condition or a template would match nothing, silently."""
    assert len({e.id for e in CAUSES}) == len(CAUSES) == 8
    for entry in CAUSES:
        assert {c.fact for c in entry.when} <= FACT_NAMES, entry.id
        fields = {name for _, name, _, _ in string.Formatter().parse(entry.evidence) if name}
        assert fields <= FACT_NAMES, entry.id
        assert entry.frames in FACT_NAMES | {""}, entry.id
        assert "likely" not in entry.why  # the report's label says it: "why likely"
        assert entry.confirm and entry.rule_out, entry.id  # a hypothesis: how to test it


def test_every_cause_is_documented() -> None:
    docs = (ROOT / "docs" / "outputs.md").read_text()
    table = docs[docs.index("## Likely causes") :]
    for entry in CAUSES:
        assert f"| `{entry.id}` |" in table, entry.id


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_each_scenario_shows_exactly_its_causes(tmp_path: Path, scenario: str) -> None:
    summary = _summary(tmp_path, build_scenario(scenario, seed=1))
    assert {c.id for c in likely_causes(summary)} == EXPECTED.get(scenario, set())


@pytest.mark.parametrize(("scenario", "at", "expected", "clear_at"), [
    ("kernel-gso-v4", 40, 20, 36),
    ("kernel-gso-v6", 60, 40, 56),
])  # fmt: skip
def test_gso_of_an_inner_tunnel_names_offsets_bytes_and_frames(
    tmp_path: Path, scenario: str, at: int, expected: int, clear_at: int
) -> None:
    cause = _cause(_summary(tmp_path, build_scenario(scenario, seed=1)), GSO)
    assert cause.spis == (0x1001,)
    # the esp_misplaced finding lists all 12; a cause shows 10 (facts.FRAMES_SHOWN)
    assert cause.frames == (4, 5, 6, 8, 9, 10, 12, 13, 14, 16)
    (evidence,) = cause.evidence
    assert "12 packets of SPI 0x00001001 " in evidence
    assert f"at byte {at} instead of {expected} (+20)" in evidence
    assert f"4 bytes of an inner IPv4 header in clear at byte {clear_at} (45 00 05 ac)" in evidence
    assert (
        "0aae2867aa60" in cause.kernel_path and "xfrm6_transport_gso_segment" in cause.kernel_path
    )


def test_gso_of_an_inner_tunnel_is_named_without_keys_too(tmp_path: Path) -> None:
    """Keyless, the layout is found by structure and the SA's mode is unknown: still this."""
    summary = _summary(tmp_path, build_scenario("kernel-gso-v6", seed=1), keyed=False)
    cause = _cause(summary, GSO)
    assert "mode unknown" in cause.evidence[0]
    assert "at byte 60 instead of 40 (+20)" in cause.evidence[0]


def test_a_tunnel_mode_sa_is_not_the_transport_gso_fault(tmp_path: Path) -> None:
    """The same layout on an SA the key file calls tunnel mode does not match."""
    sc = build_scenario("kernel-gso-v4", seed=1)
    sc = replace(sc, sas=tuple(replace(sa, mode="tunnel") for sa in sc.sas))
    summary = _summary(tmp_path, sc)
    assert summary.layouts and {sa.mode for sa in summary.sas} == {"tunnel"}
    assert likely_causes(summary) == ()


@pytest.mark.parametrize("scenario", ["midstream-even-2", "midstream-odd-100"])
def test_esp6_iv_from_seq_plus_1_names_the_reused_ivs(tmp_path: Path, scenario: str) -> None:
    summary = _summary(tmp_path, build_scenario(scenario, seed=1))
    cause = _cause(summary, ESP6)
    reuse = [f for f in summary.finding_list if f.kind.value == "iv_reuse"]
    assert len(reuse) == 9 and cause.spis == (0x1501,)
    assert cause.frames == tuple(sorted(n for f in reuse for n in f.frames))[:10]
    (evidence,) = cause.evidence
    assert evidence.startswith("9 IVs of SPI 0x00001501 (fd00:c::1 -> fd00:c::2, IPv6)")
    deviating = next(sa.iv_deviating for sa in summary.sas if sa.spi == 0x1501)
    assert f"IVs not built from their own sequence number: seq+1 x{deviating}" in evidence


def test_the_same_ivs_on_ipv4_are_not_the_esp6_fault(tmp_path: Path) -> None:
    """iv-seq-minus-1 repeats IVs of neighbouring packets on an IPv4 SA: no cause."""
    summary = _summary(tmp_path, build_scenario("iv-seq-minus-1", seed=1))
    assert summary.reused_ivs == 5
    assert likely_causes(summary) == ()


def _qdisc(seed: int = 1) -> Scenario:
    """A tunnel-mode SA whose GSO packets of 4 segments share one sequence number's IV.

    Data segments 8-11, 20-23 and 32-35 are sealed with the IV of the group's
    last sequence number (+3, +2, +1, 0): IVs 1 to 3 ahead, each used 4 times.
    """
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0xD201, 0xD202), V4_A, V4_B, mode="tunnel")
    faults = {s + k: Fault(iv=IvSeqOffset(3 - k)) for s in (8, 20, 32) for k in range(4)}
    inner_a, inner_b = ip("10.0.0.1"), ip("10.0.0.2")
    session(cb, tunnel(ab, inner_a, inner_b), tunnel(ba, inner_b, inner_a), 44, 700, faults=faults)
    return cb.scenario("qdisc", "GSO segments share one seq", (ab.sealer, ba.sealer))


def test_segments_sharing_one_sequence_number_in_tunnel_mode(tmp_path: Path) -> None:
    summary = _summary(tmp_path, _qdisc())
    assert {c.id for c in likely_causes(summary)} == {QDISC}
    cause = _cause(summary, QDISC)
    assert cause.spis == (0xD201,)
    assert cause.frames == (16, 17, 19, 20, 34, 35, 37, 38, 52, 53)  # 12 frames, 10 shown
    (evidence,) = cause.evidence
    assert evidence.startswith("3 IVs of SPI 0x0000d201 (192.0.2.1 -> 192.0.2.2, tunnel)")
    assert "at most 3 sequence numbers apart" in evidence
    assert "seq+3 x3, seq+2 x3, seq+1 x3" in evidence
    assert "xfrm_output_gso" in cause.kernel_path


def test_the_same_ivs_in_transport_mode_are_not_the_qdisc_fault(tmp_path: Path) -> None:
    sc = _qdisc()
    sc = replace(sc, sas=tuple(replace(sa, mode="transport") for sa in sc.sas))
    assert likely_causes(_summary(tmp_path, sc)) == ()


def _first_seq(first: int, seed: int = 1) -> Scenario:
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    flow = SaFlow(make_sa(rng, 0xD001, V4_A, V4_B), V4_A, V4_B)
    for seq in range(first, first + 8):
        send_udp(cb, flow, seq)
    return cb.scenario("first-seq", f"seq {first}..", (flow.sealer,))


def test_a_first_sequence_number_0(tmp_path: Path) -> None:
    summary = _summary(tmp_path, _first_seq(0))
    (cause,) = likely_causes(summary)
    assert cause.id == SEQ0 and cause.spis == (0xD001,)
    assert cause.evidence == (
        "the first packet of SPI 0x0000d001 (192.0.2.1 -> 192.0.2.2) in the capture "
        "carries sequence number 0",
    )
    assert likely_causes(_summary(tmp_path / "one", _first_seq(1))) == ()


def _duplicate(different: bool, seed: int = 1, other_iv: bool = False) -> Scenario:
    """Seq 1-11; seq 5 sent again after seq 8: the same bytes, or another datagram
    (under seq 5's own IV, or ``other_iv``: under another transform's IV)."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    flow = SaFlow(make_sa(rng, 0xD101, V4_A, V4_B), V4_A, V4_B)
    for seq in range(1, 9):
        packet = send_udp(cb, flow, seq)
        if seq == 5 and not different:
            again = packet
    if different:
        fault = Fault(iv=IvFixed(bytes.fromhex("5eed5eed5eed5eed"))) if other_iv else Fault()
        send_udp(cb, flow, 5, fault, size=40)
    else:
        cb.emit_ip(again, cb.truth[4])
    for seq in range(9, 12):
        send_udp(cb, flow, seq)
    return cb.scenario("duplicate", "seq 5 twice", (flow.sealer,))


def test_one_sequence_number_sealed_twice_under_another_iv(tmp_path: Path) -> None:
    summary = _summary(tmp_path, _duplicate(different=True, other_iv=True))
    assert summary.reused_ivs == 0
    (cause,) = likely_causes(summary)
    assert cause.id == DUP and cause.frames == (9,)
    assert cause.evidence == (
        "1 sequence number of SPI 0x0000d101 (192.0.2.1 -> 192.0.2.2) sent again by a "
        "different packet with another IV (not a retransmission of the same bytes); frames 9",
    )


def test_one_sequence_number_sealed_twice_under_its_own_iv_is_a_duplicating_qdisc(
    tmp_path: Path,
) -> None:
    """Seq 5 again, 4 frames later, under seq 5's IV: one transform sealed it twice."""
    summary = _summary(tmp_path, _duplicate(different=True))
    assert summary.reused_ivs == 1
    (cause,) = likely_causes(summary)
    assert cause.id == COPY and cause.frames == (5, 9)
    assert cause.evidence == (
        "1 sequence number of SPI 0x0000d101 (192.0.2.1 -> 192.0.2.2) sent again by a "
        "different packet under the same IV as the first (one nonce twice), at most 4 "
        "frames later; no repeat under another IV; frames 5 9",
    )
    replayed = _summary(tmp_path / "same", _duplicate(different=False))
    assert replayed.findings["seq_duplicate"] == 1
    assert likely_causes(replayed) == ()


def test_the_esn_wrap_fault_names_the_packet_sealed_with_hi_plus_1(tmp_path: Path) -> None:
    """esn-fault-v6 has two mismatches; only frame 5 (0x0:ffffffff sealed with 0x1) is this."""
    summary = _summary(tmp_path, build_scenario("esn-fault-v6", seed=1))
    assert summary.findings["esn_mismatch"] == 2
    cause = _cause(summary, ESN)
    assert cause.frames == (5,) and cause.spis == (0x6101,)
    assert cause.evidence[0].startswith("1 packet of SPI 0x00006101 (2001:db8::1 -> 2001:db8::2)")
    assert "4b549ccce941" in cause.kernel_path and "c05c5e5aa163" in cause.kernel_path


def test_chained_cbc_ivs(tmp_path: Path) -> None:
    summary = _summary(tmp_path, build_scenario("encauth-faults", seed=1))
    cause = _cause(summary, CHAINED)
    (finding,) = [f for f in summary.finding_list if f.spi == 0x7502 and "chained" in f.detail]
    assert cause.spis == (0x7502,) and cause.frames == finding.frames
    assert f"{finding.count} of " in cause.evidence[0]


def test_likely_causes_in_summary_json_and_the_reports(tmp_path: Path) -> None:
    paths = write_scenario(build_scenario("kernel-gso-v6", seed=1), tmp_path / "in")
    out = tmp_path / "out"
    summary = analyze_to_dir(paths["capture"], [paths["keys"]], out, plots=False)
    doc = json.loads((out / "summary.json").read_text())
    (entry,) = doc["likely_causes"]
    assert entry == _cause(summary, GSO).to_json()
    keys = ["id", "title", "kernel_path", "why", "rule_out", "confirm", "evidence", "spis"]
    keys.append("frames")
    assert list(entry) == keys
    assert entry["spis"] == ["0x00001001"]
    assert entry["frames"] == [4, 5, 6, 8, 9, 10, 12, 13, 14, 16]  # 10 of the 12
    assert list(doc).index("likely_causes") == list(doc).index("layouts") + 1
    assert Summary.from_json(doc) == summary  # the causes are derived, not stored
    text = " ".join((out / "report.txt").read_text().split())
    assert (
        "Likely cause: transport-mode GSO of an inner tunnel (transport-gso-inner-tunnel)" in text
    )
    assert "why likely: that path writes" in text
    assert "### transport-mode GSO of an inner tunnel" in (out / "report.md").read_text()


def test_high_findings_no_entry_explains_say_so(tmp_path: Path) -> None:
    summary = _summary(tmp_path, build_scenario("iv-reuse", seed=1))
    text = " ".join(format_text(report_content(summary)).split())
    assert "Likely cause: None of the 8 known fault patterns matches these findings" in text


@helpers.needs_captures
@pytest.mark.parametrize(("folder", "expected"), [
    ("ip6tnl-transport-tso-on", [GSO, ESP6]),  # an IPv6 SA with TSO on shows both
    ("ip6tnl-transport-tso-off", []),
    ("tcp-transport-v4", []),
    ("tcp-tunnel-4in4", []),
    ("esn-wrap-v4", [ESN]),  # the receiver dropped the one sealed with hi+1
    ("natt-espinudp-v4", []),
    ("rfc4309-ccm-v4", []),
    ("cbc-aes-hmac-sha256-v4", []),
])  # fmt: skip
def test_real_captures(folder: str, expected: list[str]) -> None:
    where = REAL / folder
    summary = summarize(where / "capture.pcap", [where / "xfrm-state.txt"])
    causes = likely_causes(summary)
    assert [c.id for c in causes] == expected
    if GSO in expected:
        gso = _cause(summary, GSO).evidence[0]
        assert gso.startswith(f"{summary.verdicts['esp_misplaced']} packets of SPI 0x00001001")
        assert "(+20)" in gso and "(45 00 LL LL)" in gso
    if ESP6 in expected:
        esp6 = _cause(summary, ESP6).evidence[0]
        assert esp6.startswith(f"{summary.reused_ivs} IVs of SPI 0x00001001")


@helpers.needs_captures
def test_real_tfc_capture_has_no_cause() -> None:
    where = REAL7 / "tfc-tunnel-6in6"
    assert likely_causes(summarize(where / "capture.pcap", [where / "xfrm-state.txt"])) == ()


@helpers.needs_captures
def test_real_netem_duplicate_is_the_duplicating_qdisc_not_a_counter_reset() -> None:
    """Linux 7.3.4, netem duplicate 5% on the sender's egress, one SA, no reinstall:
    frames 121-124 repeat seqs 90-93 of frames 117-120 under the same IVs, with other
    TCP data (ground-truth.json: both ICVs verify, the same keystream); frame 10 is a
    byte-identical copy, which is no nonce reuse."""
    where = REAL7 / "netem-duplicate-v4"
    truth = json.loads((where / "ground-truth.json").read_text())["summary"]["seq"]["0x1001"]
    assert truth["duplicate_frames_different"] == [121, 122, 123, 124]
    summary = summarize(where / "capture.pcap", [where / "xfrm-state.txt"])
    causes = likely_causes(summary)
    assert [c.id for c in causes] == [COPY]
    (cause,) = causes
    assert cause.spis == (0x1001,)
    assert cause.frames == (117, 118, 119, 120, 121, 122, 123, 124)
    assert cause.evidence == (
        "4 sequence numbers of SPI 0x00001001 (192.0.2.1 -> 192.0.2.2) sent again by a "
        "different packet under the same IV as the first (one nonce twice), at most 4 frames "
        "later; no repeat under another IV; frames 117 118 119 120 121 122 123 124",
    )
    text = " ".join(format_text(report_content(summary)).split())
    assert "reset" not in text.split("Likely cause:")[1].split("kernel path:")[0]
    assert "would confirm it: tc -s qdisc show dev DEV on the sender listing netem" in text
