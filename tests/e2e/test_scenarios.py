"""End to end on every synthetic scenario: each frame against its truth, checks against facts.

The builder (espforensics.synth) makes packets with dpkt and records, per
frame, the verdict a correct analyzer must give and where the ESP header
is; these tests compare the analyzer's records to that, frame by frame,
and the checks' findings to the scenario's facts.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import pytest

from espforensics import analyze
from espforensics.keys import SaTable
from espforensics.model.enums import FindingKind, Proto, Verdict
from espforensics.model.options import Options
from espforensics.model.records import Finding, Frame
from espforensics.synth import SCENARIOS, build_scenario, write_scenario
from tests.support.helpers import run_frames, run_scenario


def _facts(findings: list[Finding], kind: FindingKind) -> list[Finding]:
    return [f for f in findings if f.kind is kind]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_frame_matches_its_truth(name: str, lane: Options) -> None:
    sc, records, _ = run_scenario(name, lane, secrets=True)
    assert [r.frame for r in records] == list(range(1, len(sc.frames) + 1))
    for rec, truth in zip(records, sc.truth, strict=True):
        got = (rec.verdict, rec.esp_offset, rec.expected_offset, rec.seq64, rec.leaked)
        want = (truth.verdict, truth.esp_offset, truth.expected_offset, truth.seq64, truth.leaked)
        assert got == want, f"frame {rec.frame}: {rec.detail}"
        if truth.next_header is not None:
            assert rec.next_header == truth.next_header
        if truth.fragments is not None:
            assert rec.fragments == truth.fragments
        if truth.leaked_hex:
            assert rec.leaked_hex.replace(" ", "") == truth.leaked_hex.replace(" ", "")
        if truth.iv_seq_delta is not None:
            assert rec.iv_seq_delta == truth.iv_seq_delta, f"frame {rec.frame}: {rec.detail}"


def test_fragments_name_the_frame_that_completes_them(lane: Options) -> None:
    sc, records, _ = run_scenario("fragments-v6", lane, secrets=True)
    for rec, truth in zip(records, sc.truth, strict=True):
        if truth.verdict is Verdict.FRAGMENT and truth.reassembled_in is not None:
            assert (
                rec.detail == f"fragment of the datagram completed in frame {truth.reassembled_in}"
            )
        elif truth.verdict is Verdict.FRAGMENT:
            assert rec.detail.startswith("fragment of a datagram never completed")


@pytest.mark.parametrize("name", ["kernel-gso-v4", "kernel-gso-v6"])
def test_kernel_layout_found_with_and_without_keys(name: str, lane: Options) -> None:
    sc, records, findings = run_scenario(name, lane, secrets=True)
    misplaced = [r for r in records if r.verdict is Verdict.ESP_MISPLACED]
    assert len(misplaced) == sc.facts["esp_misplaced"] == 12
    outer = 40 if name.endswith("v6") else 20
    assert {(r.expected_offset, r.esp_offset, r.leaked) for r in misplaced} == {
        (outer, outer + 20, 4)
    }
    assert all(r.leaked_hex.startswith("45 00") for r in misplaced)
    assert all(r.leaked_fields == "IPv4 version+IHL, TOS, total length" for r in misplaced)
    assert all("proven by decryption" in r.detail for r in misplaced)
    assert [f.count for f in _facts(findings, FindingKind.ESP_MISPLACED)] == [12]
    assert [f.count for f in _facts(findings, FindingKind.CLEARTEXT_LEAK)] == [12]

    _, keyless, keyless_findings = run_scenario(name, lane, keys=False)
    unproven = [r for r in keyless if r.verdict is Verdict.ESP_MISPLACED]
    assert [r.frame for r in unproven] == [r.frame for r in misplaced]
    assert all(r.esp_offset == outer + 20 and r.leaked == 4 for r in unproven)
    assert all("unproven" in r.detail for r in unproven)
    assert Counter(r.verdict for r in keyless) == Counter(
        {Verdict.UNKNOWN_SA: 13, Verdict.ESP_MISPLACED: 12}
    )
    assert _facts(keyless_findings, FindingKind.IV_REUSE) == []


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        (n, k)
        for n in ("iv-reuse", "iv-seq-minus-1", "iv-policies", "shared-key")
        for k in (True, False)
    ],
)
def test_iv_reuse_counts_match_facts(name: str, keys: bool, lane: Options) -> None:
    sc, records, findings = run_scenario(name, lane, keys=keys, secrets=True)
    reuse = _facts(findings, FindingKind.IV_REUSE)
    if name == "shared-key" and not keys:
        # Without keys the SAs are separate groups: one key shared by three SAs is invisible.
        assert reuse == []
        return
    assert sum(f.count - 1 for f in reuse) == sc.facts["iv_repeats"]
    assert sum(bool(r.iv_reused) for r in records) == sc.facts["iv_repeats"]
    fixed = [t.frame for t in sc.truth if "iv_fixed" in t.tags]  # one IV, several frames
    reused_frames = {t.frame for t in sc.truth if "iv_reuse" in t.tags} | set(fixed[1:])
    assert {r.frame for r in records if r.iv_reused} == reused_frames


def test_iv_reuse_evidence_is_the_plaintext_xor(lane: Options) -> None:
    _, _, findings = run_scenario("iv-reuse", lane, secrets=True)
    [f] = _facts(findings, FindingKind.IV_REUSE)
    assert "(equal: same keystream)" in f.detail
    ct_xor = f.detail.split("ciphertext XOR ")[1].split(";")[0]
    pt_xor = f.detail.split("plaintext XOR ")[1].split(" ")[0]
    assert ct_xor == pt_xor and len(ct_xor) == 32


@pytest.mark.parametrize("name", ["iv-reuse", "iv-seq-minus-1", "iv-policies"])
def test_iv_derivation_counts_deviating_packets(name: str, lane: Options) -> None:
    sc, records, findings = run_scenario(name, lane, secrets=True)
    assert (
        sum(1 for r in records if r.iv_seq_delta)
        + sum(1 for r in records if r.iv_seq_delta is None and r.spi is not None)
        == sc.facts["iv_not_seqiv"]
    )
    [f] = _facts(findings, FindingKind.IV_DERIVATION)
    assert f.count == sc.facts["iv_not_seqiv"]


def test_iv_built_from_seq_minus_one(lane: Options) -> None:
    _, records, findings = run_scenario("iv-seq-minus-1", lane, secrets=True)
    assert Counter(r.iv_seq_delta for r in records) == Counter({0: 61, -1: 5})
    [f] = _facts(findings, FindingKind.IV_DERIVATION)
    assert "IV built from seq-1 x5" in f.detail


def test_sequence_duplicates_gaps_reorder(lane: Options) -> None:
    sc, records, findings = run_scenario("sequence", lane, secrets=True)
    [dup] = _facts(findings, FindingKind.SEQ_DUPLICATE)
    [gap] = _facts(findings, FindingKind.SEQ_GAP)
    [late] = _facts(findings, FindingKind.SEQ_REORDER)
    assert dup.count == sc.facts["seq_duplicates"] and "1 byte-identical" in dup.detail
    assert gap.count == sc.facts["seq_missing"] == 5 and "(15-19)" in gap.detail
    assert late.count == sc.facts["seq_reordered"]
    assert Counter(r.seq_anomaly for r in records if r.seq_anomaly) == Counter(
        {"duplicate-identical": 1, "reordered": 1}
    )
    assert _facts(findings, FindingKind.IV_REUSE) == []  # a replay reuses no keystream


def test_esn_wrap_verifies_on_both_sides(lane: Options) -> None:
    sc, records, findings = run_scenario("esn-wrap", lane, secrets=True)
    assert all(r.verdict is Verdict.OK for r in records)
    assert [r.seq64 for r in records] == [t.seq64 for t in sc.truth]
    assert any(r.seq64 is not None and r.seq64 >= 1 << 32 for r in records)
    assert len(_facts(findings, FindingKind.ESN_WRAP)) == sc.facts["esn_wraps"]


def test_shared_key_is_a_finding(lane: Options) -> None:
    sc, _, findings = run_scenario("shared-key", lane, secrets=True)
    [f] = _facts(findings, FindingKind.SHARED_KEY)
    assert f.count == sc.facts["shared_key_sas"]


@pytest.mark.parametrize("compression", [None, "gzip", "bzip2", "xz", "zstd"])
def test_written_captures_analyze_alike(tmp_path: Path, compression: str | None) -> None:
    sc = build_scenario("link-all", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap", compression=compression)  # type: ignore[arg-type]
    result = analyze(paths["capture"], [paths["keys"]])
    assert len(result.packets) == len(sc.frames)
    assert list(result.packets["verdict"]) == [t.verdict.value for t in sc.truth]
    assert result.summary.verdicts["ok"] == sc.verdict_counts()["ok"]


@pytest.mark.parametrize("role", ["keys", "xfrm", "esp_sa"])
def test_each_key_format_gives_the_same_result(tmp_path: Path, role: str) -> None:
    sc = build_scenario("natt", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap")
    # esp_sa files carry no encap port: ESP-in-UDP on 14500 needs --natt-port there.
    result = analyze(paths["capture"], [paths[role]], Options(natt_ports=frozenset({4500, 14500})))
    assert list(result.packets["verdict"]) == [t.verdict.value for t in sc.truth]


def test_encap_port_from_keys_recognises_esp_in_udp(tmp_path: Path) -> None:
    sc = build_scenario("natt", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap")
    with_port = analyze(paths["capture"], [paths["keys"]]).packets  # keys.yaml: encap 14500
    without = analyze(paths["capture"], [paths["esp_sa"]]).packets
    assert list(with_port["verdict"]) == [t.verdict.value for t in sc.truth]
    changed = with_port[with_port["verdict"] != without["verdict"]]
    assert list(changed["frame"]) == [28, 29, 30, 31]
    assert set(changed["udp_dport"]) | set(changed["udp_sport"]) >= {14500}


def test_decryption_secrets_block_needs_no_key_file(tmp_path: Path) -> None:
    sc = build_scenario("pcapng-dsb", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap")
    alone = analyze(paths["capture"])
    both = analyze(paths["capture"], [paths["keys"]])  # the same SAs twice are kept once
    assert alone.summary.verdicts["ok"] == both.summary.verdicts["ok"] == len(sc.frames)


def test_misplaced_header_found_when_the_slot_holds_no_known_spi(lane: Options) -> None:
    """The SA's header is found and proven later even if nothing at the expected offset names it."""
    sc = build_scenario("kernel-gso-v4", seed=1)
    frames = list(sc.frames)
    targets = [t for t in sc.truth if t.verdict is Verdict.ESP_MISPLACED]
    for t in targets:
        f = frames[t.frame - 1]
        at = 14 + (t.expected_offset or 0)  # Ethernet header, then the slot
        frames[t.frame - 1] = f._replace(data=f.data[:at] + b"\xde\xad\xbe\xef" + f.data[at + 4 :])
    records = run_frames(frames, SaTable(sc.sas), lane, "slot").records
    misplaced = [r for r in records if r.verdict is Verdict.ESP_MISPLACED]
    assert [r.frame for r in misplaced] == [t.frame for t in targets]
    # nothing at the expected offset belongs to the SA: all 20 bytes before the header are clear
    assert {(r.spi, r.esp_offset, r.leaked) for r in misplaced} == {(0x1001, 40, 20)}
    assert all("proven by decryption" in r.detail for r in misplaced)
    assert all(r.algorithm == "rfc4106(gcm(aes))" for r in misplaced)


def _in_udp(frame: Frame, port: int = 4500) -> Frame:
    """The same IPv4/ESP frame with its ESP carried in UDP (RFC 3948), addresses unchanged."""
    eth, ip, esp = frame.data[:14], bytearray(frame.data[14:34]), frame.data[34:]
    udp = struct.pack(">HHHH", port, port, 8 + len(esp), 0)
    ip[2:4] = (20 + 8 + len(esp)).to_bytes(2, "big")
    ip[9] = 17
    data = eth + bytes(ip) + udp + esp
    return frame._replace(data=data, caplen=len(data), wirelen=len(data))


@pytest.mark.parametrize("keys", [True, False])
def test_misplaced_header_inside_esp_in_udp(keys: bool, lane: Options) -> None:
    sc = build_scenario("kernel-gso-v4", seed=1)
    frames = [_in_udp(f) for f in sc.frames]
    records = run_frames(frames, SaTable(sc.sas if keys else ()), lane, "natt-gso").records
    misplaced = [r for r in records if r.verdict is Verdict.ESP_MISPLACED]
    want = [t.frame for t in sc.truth if t.verdict is Verdict.ESP_MISPLACED]
    assert [r.frame for r in misplaced] == want
    assert {(r.proto, r.expected_offset, r.esp_offset, r.leaked) for r in misplaced} == {
        (Proto.ESP_UDP, 28, 48, 4)
    }
    proven = "proven by decryption" if keys else "unproven"
    assert all(proven in r.detail for r in misplaced)


@pytest.mark.parametrize("role", ["keys", "xfrm"])
def test_ccm_and_chacha20_verify_from_each_kernel_key_format(tmp_path: Path, role: str) -> None:
    """aeads: AES-CCM and ChaCha20-Poly1305 SAs, IPv4 transport, IPv6 tunnel, two ESN wraps."""
    sc = build_scenario("aeads", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap")
    packets = analyze(paths["capture"], [paths[role]]).packets
    assert list(packets["verdict"]) == [t.verdict.value for t in sc.truth] == ["ok"] * 108
    per_algorithm = packets.groupby("algorithm")["frame"].count().to_dict()
    assert per_algorithm == {
        "rfc4309(ccm(aes))": 54,
        "rfc7539esp(chacha20,poly1305)": 30,
        "rfc4543(gcm(aes))": 24,
    }
    gmac = packets[packets["algorithm"] == "rfc4543(gcm(aes))"]
    assert set(gmac["inner_proto"]) == {"tcp"} and gmac["leaked"].isna().all()  # clear by design
    wrapped = packets[packets["spi"].isin([0x7204, 0x7205])]
    assert [int(s) for s in wrapped["seq64"]] == [(1 << 32) + d for d in range(-3, 3)] * 2
    tunnel = packets[packets["spi"] == 0x7203]
    assert set(tunnel["next_header"]) == {4} and set(tunnel["inner_proto"]) == {"tcp"}


def test_esp_sa_lines_carry_chacha20_and_leave_ccm_out(tmp_path: Path) -> None:
    """Wireshark's esp_sa has no AES-CCM or GMAC: those SAs are not written, ChaCha20's are."""
    sc = build_scenario("aeads", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap")
    packets = analyze(paths["capture"], [paths["esp_sa"]]).packets
    chacha = packets["spi"].isin([0x7203, 0x7303])
    assert set(packets[chacha]["verdict"]) == {"ok"} and chacha.sum() == 24
    # esp_sa lines cannot say ESN (a Wireshark preference): the ESN SA's ICVs fail.
    assert set(packets[packets["spi"] == 0x7205]["verdict"]) == {"auth_fail"}
    ccm = packets["spi"].isin([0x7201, 0x7301, 0x7202, 0x7302, 0x7204])
    assert set(packets[ccm]["verdict"]) == {"unknown_sa"} and ccm.sum() == 54
    gmac = packets["spi"].isin([0x7206, 0x7306])  # not an esp_sa encryption either
    assert set(packets[gmac]["verdict"]) == {"unknown_sa"} and gmac.sum() == 24
