"""IV schemes of senders that are not Linux; ESP packets with no IV or nothing at all.

The window reader (checks/ivscheme.py) on (seq64, IV) tables; the scenarios
of synth/scenarios_ivschemes.py through the pipeline, keyed and keyless,
with the exact iv_scheme, deltas, verdicts and findings; sas.csv,
summary.json and the report of one analysis; and the real Linux captures,
each of whose SAs keeps the scheme its kernel uses.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.checks.iv_derivation import IvDerivationCheck
from espforensics.checks.ivscheme import MIN_RANDOM, MIN_SCHEME, Candidate, read_ivs
from espforensics.keys import load_sas
from espforensics.model.enums import FindingKind, IvScheme, Severity, Verdict
from espforensics.model.options import Options
from espforensics.model.records import Finding, PacketRecord
from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import capture_params, real_capture, run_frames, scenario

M64 = (1 << 64) - 1
C = 0x5A17_C0DE_0BAD_F00D


def _counter(seqs: range, c: int = C) -> list[tuple[int, int]]:
    return [(s, (s + c) & M64) for s in seqs]


# -- the window reader ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("samples", "scheme", "candidates"),
    [
        (_counter(range(1, 41)), IvScheme.COUNTER, (Candidate(True, C),)),
        ([(s, s ^ C) for s in range(1, 41)], IvScheme.SEQIV, (Candidate(False, C),)),
        # even seqs from seq+1, as Linux's esp6 GSO fault: still seqiv (c xor 1 reads them)
        ([(s, (s + 1) ^ C) for s in range(2, 82, 2)], IvScheme.SEQIV, (Candidate(False, C ^ 1),)),
        # c's low 8 bits zero and seqs below 256: xor and add read every IV alike
        (
            [(s, s ^ 0x7700) for s in range(1, 41)],
            IvScheme.SEQIV,
            (Candidate(False, 0x7700), Candidate(True, 0x7700)),
        ),
        ([(s, 0xABCD) for s in range(1, 41)], IvScheme.CONSTANT, ()),
        (_counter(range(1, MIN_SCHEME)), IvScheme.UNKNOWN, ()),  # 3 packets: no evidence
        # A multiplicative hash: no xor or add constant shared by two packets
        ([(s, (s * 0x9E3779B97F4A7C15) & M64) for s in range(1, 41)], IvScheme.RANDOM, ()),
        # ... but 15 of them are too few to call random
        (
            [(s, (s * 0x9E3779B97F4A7C15) & M64) for s in range(1, MIN_RANDOM)],
            IvScheme.UNKNOWN,
            (),
        ),
        # 20 counter IVs and 20 random ones: a counter must hold half the window
        (
            _counter(range(1, 21)) + [(s, (s * 0x9E3779B97F4A7C15) & M64) for s in range(21, 43)],
            IvScheme.UNKNOWN,
            (),
        ),
    ],
    ids=[
        "counter",
        "seqiv",
        "seqiv-from-seq+1",
        "xor-or-add",
        "constant",
        "three",
        "random",
        "fifteen",
        "half-counter",
    ],
)
def test_window_reading(
    samples: list[tuple[int, int]], scheme: IvScheme, candidates: tuple[Candidate, ...]
) -> None:
    reading = read_ivs(samples)
    assert (reading.scheme, reading.candidates) == (scheme, candidates)


def test_a_counter_with_a_deviation_keeps_its_scheme_and_its_delta() -> None:
    samples = _counter(range(1, 41))
    samples[9] = (10, (11 + C) & M64)  # seq 10 built from seq 11
    reading = read_ivs(samples)
    assert (reading.scheme, reading.candidates) == (IvScheme.COUNTER, (Candidate(True, C),))
    assert reading.candidates[0].built_from(samples[9][1]) == 11


def test_xor_or_add_is_decided_by_the_first_packet_only_one_reads() -> None:
    """c = 0x7700 reads seqs 1..64 alike as xor or add; seq 0x100 tells them apart."""
    from espforensics.checks.context import Flow, PacketContext, SaState
    from espforensics.checks.perflow import Holds
    from espforensics.decode.ip import OuterIp

    ip = OuterIp(4, bytes(4), bytes(4), 50, 20, 0, None, 0, False, 20, 9)
    for additive in (False, True):
        check = IvDerivationCheck(Holds())
        flow = Flow(0x1001, "0.0.0.0", "0.0.0.0", SaState())
        seqs = [*range(1, 65), 0x100, 0x101]
        recs = [PacketRecord(n, 0, 0, 0, spi=0x1001, seq=s, seq64=s) for n, s in enumerate(seqs)]
        for rec, s in zip(recs, seqs, strict=True):
            iv = s + 0x7700 if additive else s ^ 0x7700
            check.observe(PacketContext(rec, b"", ip, flow, iv))
        assert list(check.finish()) == []
        assert [r.iv_seq_delta for r in recs] == [0] * len(seqs)
        want = IvScheme.COUNTER if additive else IvScheme.SEQIV
        assert check.schemes() == {(0x1001, "0.0.0.0", "0.0.0.0"): want}


# -- the scenarios through the pipeline -------------------------------------------------


def _run(
    name: str, keys: bool, lane: Options
) -> tuple[list[PacketRecord], list[Finding], dict[int, str]]:
    sc = scenario(name)
    run = run_frames(sc.frames, sc.sas if keys else (), lane, name)
    ivd = run.analyzer.checks.iv_derivation
    schemes = {spi: str(s) for (spi, _, _), s in ivd.schemes().items()}
    return run.records, run.findings, schemes


def _rows(findings: list[Finding]) -> list[tuple[str, str, int, tuple[int, ...]]]:
    return [(f.kind.value, f.severity.value, f.count, tuple(f.frames)) for f in findings]


@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "keyless"])
def test_additive_counter_is_sound_and_its_break_is_one_finding(keys: bool, lane: Options) -> None:
    records, findings, schemes = _run("iv-counter", keys, lane)
    assert schemes == {0xB001: "counter", 0xB002: "counter"}
    assert [(r.frame, r.iv_seq_delta) for r in records if r.iv_seq_delta != 0] == [(40, 1)]
    assert [r.frame for r in records if r.iv_reused] == [42]
    assert _rows(findings) == [
        ("iv_reuse", "critical", 2, (40, 42)),
        ("iv_derivation", "high", 1, (40,)),
    ]
    assert findings[1].detail == (
        "192.0.2.2 -> 192.0.2.1: 1 of 40 IVs not built from their own sequence number "
        "(IV built from seq+1 x1); the SA's IVs are an additive counter, IV = seq64 + c"
    )


@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "keyless"])
def test_random_ivs_are_named_and_no_finding(keys: bool, lane: Options) -> None:
    records, findings, schemes = _run("iv-random", keys, lane)
    assert schemes == {0xB101: "random"}
    assert {r.iv_seq_delta for r in records} == {None}
    assert {r.iv_reused for r in records} == {False}
    assert findings == []


@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "keyless"])
def test_a_constant_iv_is_a_finding_of_its_own(keys: bool, lane: Options) -> None:
    records, findings, schemes = _run("iv-constant", keys, lane)
    assert schemes == {0xB201: "constant"}
    assert [r.frame for r in records if r.iv_reused] == list(range(2, 21))
    assert _rows(findings) == [
        ("iv_reuse", "critical", 20, tuple(range(1, 21))),  # every frame (findings.csv)
        ("iv_derivation", "high", 20, tuple(range(1, 21))),
    ]
    iv = records[0].iv
    assert findings[1].detail == (
        f"192.0.2.1 -> 192.0.2.2: a constant IV: 20 of 20 packets carry IV {int(iv, 16):x} "
        "(an IV must not repeat under one key: RFC 4106 s3.1, RFC 3602 s2.1)"
    )


@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "keyless"])
def test_null_encryption_has_no_iv_to_read(keys: bool, lane: Options) -> None:
    """The clear ICMP header (08 00 cksum id seq) is no IV: no IV column, no IV finding."""
    records, findings, schemes = _run("null-icmp", keys, lane)
    assert schemes == {0xB301: "none"}
    assert records[0].iv.startswith("0800") or keys  # keyless: the 8 bytes are shown, not read
    assert {(r.iv_seq_delta, r.iv_reused) for r in records} == {(None, None)}
    assert [
        f for f in findings if f.kind in (FindingKind.IV_REUSE, FindingKind.IV_DERIVATION)
    ] == []
    want = Verdict.OK if keys else Verdict.UNKNOWN_SA
    assert {r.verdict for r in records} == {want}


@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "keyless"])
def test_a_header_only_esp_packet_is_short_and_says_nothing_of_the_key(
    keys: bool, lane: Options
) -> None:
    records, findings, _ = _run("esp-header-only", keys, lane)
    rec = records[8]
    assert (rec.frame, rec.verdict, rec.seq, rec.esp_len) == (9, Verdict.SHORT, 9, 8)
    need = 34 if keys else 10  # keyed: 8 + IV 8 + 2 + ICV 16 (rfc4106, 128-bit ICV)
    assert rec.detail == (
        f"ESP packet of 8 bytes: shorter than the {need} that the ESP header, IV, pad length, "
        "next header and ICV take (RFC 4303 s2)"
    )
    assert rec.algorithm == ("rfc4106(gcm(aes))" if keys else "")
    others = Verdict.OK if keys else Verdict.UNKNOWN_SA
    assert [r.verdict for r in records if r.frame != 9] == [others] * 16
    assert findings == []  # no key_mismatch, and seq 9 is no gap


def test_esn_below_the_key_files_high_half_is_reported(lane: Options) -> None:
    """A receiver at the key file's 0x201 infers 0x201 and drops each packet (RFC 4303
    A2.2): esn_mismatch as the packet sealed with the next high half, never ok."""
    records, findings, _ = _run("esn-below", True, lane)
    assert {(r.verdict, r.seq_hi_verified) for r in records} == {(Verdict.ESN_MISMATCH, 0x200)}
    assert [r.seq64 for r in records] == [0x201 << 32 | seq for seq in range(1, 101)]
    assert {r.detail for r in records} == {
        "ICV verifies only with ESN high half 0x200; its place in the sequence implies "
        "0x201; 0x200 is below the key file's esn_hi 0x201"
    }
    assert {r.pad_len for r in records} == {2}  # decrypted all the same
    assert [(f.kind, f.severity, f.count, tuple(f.frames)) for f in findings] == [
        (FindingKind.ESN_MISMATCH, Severity.HIGH, 100, tuple(range(1, 101)))
    ]
    assert findings[0].detail == (
        "192.0.2.1 -> 192.0.2.2: 100 packets verify only with ESN high half 0x200, below the "
        "0x201 the key file gives (esn_hi): the key file's high half is wrong, or the sender "
        "seals with one a receiver at 0x201 has left behind and drops (RFC 4303 A2.2)"
    )


# -- outputs ----------------------------------------------------------------------------


def test_iv_scheme_in_sas_csv_summary_json_and_the_report(tmp_path: Path) -> None:
    written = write_scenario(build_scenario("iv-counter", seed=1), tmp_path)
    out = tmp_path / "out"
    analyze_to_dir(written["capture"], load_sas([written["xfrm"]]), out, plots=False)
    with (out / "sas.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["spi_hex"], r["iv_scheme"]) for r in rows] == [
        ("0x0000b001", "counter"),
        ("0x0000b002", "counter"),
    ]
    doc = json.loads((out / "summary.json").read_text())
    assert [sa["iv_scheme"] for sa in doc["sas"]] == ["counter", "counter"]
    report = (out / "report.txt").read_text()
    assert report.count("    IV scheme: counter\n") == 2


# -- the real Linux captures keep their kernels' schemes ---------------------------------


@pytest.mark.parametrize("name", capture_params())
@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "keyless"])
def test_real_captures_keep_their_schemes(name: str, keys: bool, lane: Options) -> None:
    from espforensics.analysis import analyze

    cap = real_capture(name)
    folder = cap.folder
    sas = load_sas([cap.keys]) if keys else None
    result = analyze(cap.pcap, sas, lane)
    schemes = {sa.spi: sa.iv_scheme for sa in result.summary.sas}
    cbc = folder.name.startswith("cbc-")
    want = ("echainiv" if keys else "random") if cbc else "seqiv"
    assert schemes == {0x1001: want, 0x1002: want}
    assert not [f for f in result.summary.finding_list if "constant IV" in f.detail]


def test_a_lone_header_only_packet_makes_no_key_mismatch(lane: Options) -> None:
    """The SA's only packet is 8 bytes: before, auth_fail and a high key_mismatch."""
    sc = build_scenario("esp-header-only", seed=1)
    run = run_frames([sc.frames[8]._replace(number=1)], sc.sas, lane, "lone")
    [rec] = run.records
    assert (rec.verdict, rec.esp_len) == (Verdict.SHORT, 8)
    assert run.findings == []


def test_clear_icmp_is_told_from_ciphertext() -> None:
    """decode/clear.py: a NULL packet's ICMP echo is clear; one flipped byte, or GCM, is not."""
    from espforensics.decode.clear import KEYLESS_ICV_LENS, clear_icmp

    def esp(name: str) -> tuple[bytes, bytes, bytes]:
        frame = build_scenario(name, seed=1).frames[0].data[14:]  # Ethernet, then IPv4
        return frame, frame[12:16], frame[16:20]

    data, src, dst = esp("null-icmp")
    assert clear_icmp(data, 28, src, dst, KEYLESS_ICV_LENS)  # IPv4 20 + ESP header 8
    broken = data[:40] + bytes([data[40] ^ 1]) + data[41:]  # a byte of the echo's data
    assert not clear_icmp(broken, 28, src, dst, KEYLESS_ICV_LENS)
    data, src, dst = esp("iv-random")
    assert not clear_icmp(data, 28, src, dst, KEYLESS_ICV_LENS)
    assert not clear_icmp(data, 36, src, dst, KEYLESS_ICV_LENS)  # after an 8-byte IV


@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "keyless"])
def test_chained_cbc_ivs_are_found_with_and_without_the_key(keys: bool, lane: Options) -> None:
    """encauth-faults' SA 0x7502 (cbc(aes) + hmac(sha1)) chains 9 of its 10 IVs."""
    records, findings, schemes = _run("encauth-faults", keys, lane)
    assert schemes[0x7502] == "chained"
    chained = [f for f in findings if "chained" in f.detail]
    assert [(f.spi, f.severity, f.count, tuple(f.frames)) for f in chained] == [
        (0x7502, Severity.HIGH, 9, tuple(range(14, 23)))
    ]
    noted = [r.frame for r in records if "(chained)" in r.detail]
    assert noted == list(range(14, 23))
