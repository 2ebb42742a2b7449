"""Verdicts a reviewer can repeat: ESN high halves, keyless proof, runs that checked nothing.

Each test builds its capture with the fixture builder (or reads a real
kernel capture from ../shared/captures) and asserts the exact frames,
sequence numbers and findings a reviewer would quote.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.cli import app
from espforensics.keys import SaTable, SecurityAssociation
from espforensics.model.enums import FindingKind, Severity, Verdict
from espforensics.model.options import Options
from espforensics.model.records import Finding, Frame, PacketRecord
from espforensics.synth import SCENARIOS, build_scenario
from tests.support import helpers
from tests.support.helpers import run_frames

CAPTURES = helpers.CAPTURES / "linux-6.1"
WRAP = 1 << 32


def kinds(findings: list[Finding], kind: FindingKind) -> list[Finding]:
    return [f for f in findings if f.kind is kind]


# -- 1. ESN: a packet sealed with another high half than its place implies ---------------

ESN_FAULTS = {"esn-fault-v4": 0, "esn-fault-v6": 0, "esn-fault-late-start": 1}


@pytest.mark.parametrize("name", sorted(ESN_FAULTS))
def test_esn_mismatch_is_its_own_verdict_and_does_not_move_the_wrap(
    name: str, lane: Options
) -> None:
    sc = build_scenario(name)
    hi = ESN_FAULTS[name]
    run = run_frames(list(sc.frames), sc.sas, lane, "test")
    records, findings = run.records, run.findings
    faulty = [t for t in sc.truth if "esn-mismatch" in t.tags]
    assert len(faulty) == sc.facts["esn_mismatches"]
    for t in faulty:
        rec = records[t.frame - 1]
        assert (rec.verdict, rec.seq64) == (Verdict.ESN_MISMATCH, t.seq64)
        placed_hi = (t.seq64 or 0) >> 32
        assert rec.seq_hi_verified == (placed_hi + 1 if placed_hi == hi else hi)
        assert rec.next_header == t.next_header  # it decrypted
    [mismatch] = kinds(findings, FindingKind.ESN_MISMATCH)
    assert mismatch.severity is Severity.HIGH
    assert mismatch.frames == tuple(t.frame for t in faulty)
    assert mismatch.count == len(faulty)
    # The wrap lands on the first packet of high half hi+1, not on the faulty one.
    first_new = next(t.frame for t in sc.truth if t.seq64 == (hi + 1) * WRAP)
    wraps = [f.frames for f in kinds(findings, FindingKind.ESN_WRAP) if f.spi == 0x6101]
    assert wraps == [(first_new,)]
    assert kinds(findings, FindingKind.SEQ_GAP) == []
    late = [t.frame for t in sc.truth if "late" in t.tags]
    [reorder] = kinds(findings, FindingKind.SEQ_REORDER)
    assert (reorder.frames, reorder.severity) == (tuple(late), Severity.INFO)
    assert {r.frame for r in records if r.verdict is Verdict.OK} == {
        t.frame for t in sc.truth if t.verdict is Verdict.OK
    }


def test_esn_mismatch_finding_says_what_a_reviewer_would(lane: Options) -> None:
    sc = build_scenario("esn-fault-v6")
    findings = run_frames(list(sc.frames), sc.sas, lane, "test").findings
    [f] = kinds(findings, FindingKind.ESN_MISMATCH)
    assert f.detail.startswith(
        "2001:db8::1 -> 2001:db8::2: 2 packets sealed with the wrong ESN high half, "
        "which a receiver drops (RFC 4303 A2.2): "
        "frame 5 (seq 0x0:ffffffff) verifies only with ESN high half 0x1, where its place in "
        "the sequence implies 0x0: its IV encodes seq 0x1:ffffffff, which the SA reaches again "
        "4294967296 packets later: a nonce this key will use twice if the SA lives that long; "
        "frame 10 (seq 0x1:00000002) verifies only with ESN high half 0x0, where its place in "
        "the sequence implies 0x1: its IV encodes seq 0x0:00000002, which the SA used "
        "4294967296 packets earlier"
    )


@pytest.mark.parametrize("name", sorted(ESN_FAULTS))
def test_keyless_esn_run_places_the_wrap_on_the_same_frame(name: str, lane: Options) -> None:
    sc = build_scenario(name)
    keyed = run_frames(list(sc.frames), sc.sas, lane, "test").findings
    keyless = run_frames(list(sc.frames), (), lane, "test").findings
    frames = [[f.frames for f in kinds(x, FindingKind.ESN_WRAP)] for x in (keyed, keyless)]
    assert frames[0] == frames[1]
    assert kinds(keyless, FindingKind.SEQ_GAP) == []


def test_first_packet_teaches_the_high_half_when_esn_hi_is_not_given(lane: Options) -> None:
    """Without esn_hi, a capture that starts after a wrap is no sender fault."""
    sc = build_scenario("esn-fault-late-start")
    sas = tuple(replace(sa, esn_hi=0) for sa in sc.sas)
    records = run_frames(list(sc.frames), sas, lane, "test").records
    assert records[0].verdict is Verdict.OK
    assert records[0].seq64 == sc.truth[0].seq64 and (records[0].seq64 or 0) >> 32 == 1
    assert [r.frame for r in records if r.verdict is Verdict.ESN_MISMATCH] == [
        t.frame for t in sc.truth if "esn-mismatch" in t.tags
    ]


def test_esn_hi_at_the_top_of_the_range_and_a_failed_icv_is_no_crash(lane: Options) -> None:
    """esn_hi 0xffffffff: the retry must not try a seq64 of 2^64 (struct.error before)."""
    sc = build_scenario("esn-wrap")
    sas = tuple(replace(sa, esn_hi=0xFFFFFFFF) if sa.esn else sa for sa in sc.sas)
    records = run_frames(list(sc.frames), sas, lane, "test").records
    esn = [r for r in records if r.spi == 0x6001]
    assert esn and all(r.verdict is Verdict.AUTH_FAIL for r in esn)


@helpers.needs_captures
def test_real_esn_wrap_capture_names_the_dropped_packet(lane: Options) -> None:
    from espforensics import analyze

    folder = CAPTURES / "esn-wrap-v4"
    result = analyze(folder / "capture.pcap", [folder / "xfrm-state.txt"], lane)
    p = result.packets
    bad = p[p.verdict == "esn_mismatch"]
    assert bad["frame"].tolist() == [373]
    assert bad["seq64"].tolist() == [0xFFFFFFFF]
    assert bad["seq_hi_verified"].tolist() == [1]
    assert (p.verdict == "ok").sum() == 476  # every other ESP packet of the 477
    findings = result.summary.finding_list
    wraps = sorted(tuple(f.frames) for f in findings if f.kind is FindingKind.ESN_WRAP)
    assert wraps == [(156,), (374,)]
    assert not [f for f in findings if f.kind in (FindingKind.SEQ_GAP, FindingKind.SEQ_REORDER)]
    [f] = [f for f in findings if f.kind is FindingKind.ESN_MISMATCH]
    assert "frame 373 (seq 0x0:ffffffff) verifies only with ESN high half 0x1" in f.detail
    assert "its IV encodes seq 0x1:ffffffff" in f.detail


# -- 3. Keyless: only what the bytes prove is critical ------------------------------------


def _clear_v6_header_in_ciphertext(frame: Frame, esp_at: int) -> Frame:
    """Write an IPv6 header whose payload length fits where the ciphertext starts."""
    data = bytearray(frame.data)
    start = 14 + esp_at + 16
    remaining = len(data) - start
    plen = remaining - 40 - 20  # leaves room for a "trailer" and ICV, but none is there
    data[start : start + 8] = bytes([0x60, 0, 0, 0]) + plen.to_bytes(2, "big") + bytes([6, 64])
    data[-20:] = bytes(range(20, 40))  # no RFC 4303 trailer right after the packet
    return frame._replace(data=bytes(data))


def test_keyless_lookalike_header_is_possible_not_critical(lane: Options) -> None:
    sc = build_scenario("ipv6-tunnel")
    frames = list(sc.frames)
    target = next(t for t in sc.truth if t.verdict is Verdict.OK and t.esp_offset is not None)
    frames[target.frame - 1] = _clear_v6_header_in_ciphertext(
        frames[target.frame - 1], target.esp_offset or 0
    )
    run = run_frames(frames, (), lane, "test")
    records, findings = run.records, run.findings
    rec = records[target.frame - 1]
    assert rec.leaked is None
    assert rec.leaked_fields.startswith("possible: IPv6 version+traffic class+flow label")
    [f] = kinds(findings, FindingKind.CLEARTEXT_LEAK)
    assert (f.severity, f.frames, f.count) == (Severity.INFO, (target.frame,), 1)
    assert f.detail.startswith("possible, not proven: 1 packets")


@cache
def _criticals(name: str, keyed: bool, lane: Options) -> set[tuple[str, int | None]]:
    sc = build_scenario(name)
    findings = run_frames(
        [*sc.secrets, *sc.frames] if keyed else list(sc.frames), sc.sas if keyed else (), lane
    ).findings
    return {(f.kind.value, f.spi) for f in findings if f.severity is Severity.CRITICAL}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_keyless_makes_no_critical_finding_the_keyed_run_does_not(name: str, lane: Options) -> None:
    assert _criticals(name, False, lane) <= _criticals(name, True, lane)


@pytest.mark.parametrize("name", helpers.capture_params("linux-6.1"))
def test_real_capture_keyless_criticals_are_keyed_ones(name: str, lane: Options) -> None:
    keyed = helpers.analyze_real(name, lane).summary.finding_list
    keyless = helpers.analyze_real(name, lane, keys=False).summary.finding_list

    def crit(fs: tuple[Finding, ...]) -> set[tuple[str, int | None]]:
        return {(f.kind.value, f.spi) for f in fs if f.severity is Severity.CRITICAL}

    assert crit(keyless) <= crit(keyed)


# -- 4. A run that checked nothing must not look clean ------------------------------------


def _doctor(
    name: str, change: dict[str, object], spi: int, lane: Options
) -> tuple[list[PacketRecord], Finding]:
    sc = build_scenario(name)
    sas = tuple(replace(sa, **change) if sa.spi == spi else sa for sa in sc.sas)  # type: ignore[arg-type]
    run = run_frames(list(sc.frames), sas, lane, "test")
    records, findings = run.records, run.findings
    [f] = [f for f in findings if f.kind is FindingKind.KEY_MISMATCH]
    assert (f.spi, f.severity) == (spi, Severity.HIGH)
    return records, f


def test_key_doctor_names_a_wrong_icv_length(lane: Options) -> None:
    records, f = _doctor("ipv4-transport-tcp", {"icv_bits": 96}, 0x1001, lane)
    n = sum(1 for r in records if r.spi == 0x1001 and r.verdict is Verdict.AUTH_FAIL)
    assert n > 4
    assert f.detail == (
        f"SPI 0x00001001: 0 of {n} packets verify with the given key; all {n} that fail "
        "verify with a 128-bit ICV (the key file says 96)"
    )


def test_key_doctor_names_esn_off(lane: Options) -> None:
    records, f = _doctor("esn-wrap", {"esn": False}, 0x6001, lane)
    n = sum(1 for r in records if r.spi == 0x6001)
    assert f.detail.endswith(
        f"all {n} that fail verify with ESN on with high half 0x0 at the start "
        "(the key file says ESN off)"
    )


def test_key_doctor_names_the_other_directions_key(lane: Options) -> None:
    sc = build_scenario("ipv4-transport-tcp")
    a, b = sc.sas
    swapped = (replace(a, key=b.key), replace(b, key=a.key))
    findings = run_frames(list(sc.frames), swapped, lane, "test").findings
    got = {f.spi: f.detail for f in kinds(findings, FindingKind.KEY_MISMATCH)}
    assert set(got) == {a.spi, b.spi}
    assert f"verify with the key given for SPI {b.spi:#010x}" in got[a.spi]
    assert f"verify with the key given for SPI {a.spi:#010x}" in got[b.spi]


def test_key_doctor_says_when_nothing_fits(lane: Options) -> None:
    from espforensics.keys import Secret

    _, f = _doctor("ipv4-transport-tcp", {"key": Secret(bytes(range(20)))}, 0x1001, lane)
    assert "none of the usual mistakes makes them verify" in f.detail


def test_a_few_corrupt_packets_are_no_key_mismatch(lane: Options) -> None:
    sc = build_scenario("corrupt-icv")
    findings = run_frames(list(sc.frames), sc.sas, lane, "test").findings
    assert kinds(findings, FindingKind.KEY_MISMATCH) == []


def _swap_keys(text: str) -> str:
    """The xfrm text with the two SAs' keys exchanged (a copy-paste into the wrong block)."""
    a, b = re.findall(r"0x[0-9a-f]{40}", text)
    return text.replace(a, "KEY_A").replace(b, a).replace("KEY_A", b)


def _swap_cbc_keys(text: str) -> str:
    """The cbc(aes) xfrm text with the two SAs' cipher and HMAC keys exchanged."""
    (a, b), (c, d) = re.findall(r"0x[0-9a-f]{32}\n", text), re.findall(r"0x[0-9a-f]{64}", text)
    for x, y in ((a, b), (c, d)):
        text = text.replace(x, "KEY_X").replace(y, x).replace("KEY_X", y)
    return text


@helpers.needs_captures
@pytest.mark.parametrize(
    ("name", "edit", "fix"),
    [
        (
            "tcp-transport-v4",
            lambda t: re.sub(r" 128\n", " 96\n", t),
            re.escape("a 128-bit ICV (the key file says 96)"),
        ),
        (  # one made-up key for both SAs: also a shared_key finding (high), so exit 1
            "tcp-transport-v4",
            lambda t: re.sub(r"0x[0-9a-f]{40}", "0x" + "5a" * 20, t),
            re.escape("none of the usual mistakes"),
        ),
        ("tcp-transport-v4", _swap_keys, re.escape("verify with the key given for SPI 0x00001002")),
        (  # `auth` without `-trunc`: Linux's default for hmac(sha256) is 96 bits, not 128
            "cbc-aes-hmac-sha256-v4",
            lambda t: re.sub(r"auth-trunc (\S+) (\S+) 128", r"auth \1 \2", t),
            re.escape("a 128-bit ICV (the key file says 96)"),
        ),
        (
            "cbc-aes-hmac-sha256-v4",
            lambda t: t.replace("0x3390fb49", "0x4390fb49").replace("0x2f0cb60f", "0x3f0cb60f"),
            # A wrong AES key leaves a sound-looking trailer now and then (pad length 0 and an
            # assigned next header: about 1 in 440), so not all 318 need to be garbled.
            r"318 of 318 packets verify their hmac\(sha256\) ICV, but 31\d of them decrypt to "
            r"no sound ESP trailer: the integrity key is right and the cbc\(aes\) key is likely",
        ),
        (
            "cbc-aes-hmac-sha256-v4",
            _swap_cbc_keys,
            re.escape("verify with the key given for SPI 0x00001001"),
        ),
    ],
    ids=["icv-96", "wrong-key", "keys-swapped", "cbc-icv-96", "cbc-wrong-key", "cbc-swapped"],
)
def test_real_capture_with_a_wrong_key_exits_3_and_names_the_fix(
    tmp_path: Path, name: str, edit: object, fix: str
) -> None:
    folder = CAPTURES / name
    keys = tmp_path / "keys.txt"
    keys.write_text(edit((folder / "xfrm-state.txt").read_text()))  # type: ignore[operator]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["analyze", str(folder / "capture.pcap"), "--sa", str(keys), "--out", str(out)]
    )
    findings = (out / "findings.csv").read_text()
    # 3: fix your key file, not a kernel fault; 1 for the made-up key, which the key file
    # gives both SAs: shared_key (high) is a finding about the SAs, not only the key file
    one_key = fix == re.escape("none of the usual mistakes")
    assert result.exit_code == (1 if one_key else 3), result.output
    assert ("shared_key" in findings) is one_key
    assert "key_mismatch" in findings and re.search(fix, findings), findings


@helpers.needs_captures
@pytest.mark.parametrize(
    ("name", "edit"),
    [
        # a cipher not opened with an HMAC not verified (a cipher not opened alone still
        # has its ICVs verified, an HMAC not verified alone its packets decrypted:
        # tests/crypto/test_algorithms_issue20.py)
        ("cbc-aes-hmac-sha256-v4", (("cbc(aes)", "cbc(twofish)"), ("hmac(sha256)", "hmac(sm3)"))),
    ],
)
def test_algorithm_not_decrypted_is_unsupported_and_exits_1(
    tmp_path: Path, name: str, edit: tuple[tuple[str, str], ...]
) -> None:
    folder = CAPTURES / name
    out = tmp_path / "out"
    keys = tmp_path / "keys.txt"
    text = (folder / "xfrm-state.txt").read_text()
    for old, new in edit:
        text = text.replace(old, new)
    keys.write_text(text)
    result = CliRunner().invoke(
        app,
        [
            *("analyze", str(folder / "capture.pcap"), "--sa", str(keys)),
            *("--out", str(out), "--format", "text", "--no-plots"),
        ],
    )
    assert result.exit_code == 1, result.output
    import json

    summary = json.loads((out / "summary.json").read_text())
    esp = summary["esp_packets"]
    assert summary["verdicts"]["unsupported"] == esp > 0
    assert summary["verdicts"]["unknown_sa"] == 0
    verdict = result.output.split("Verdict:\n")[1]
    assert verdict.startswith(f"  {esp} of {esp} ESP packets were not checked ({esp} of an")
    assert "decrypts at offset 0" not in result.output
    assert summary["findings"]["unsupported"] == esp


def test_key_one_byte_short_loads_and_the_doctor_puts_the_zero_back(
    tmp_path: Path, lane: Options
) -> None:
    """A key whose leading 00 byte a copy-paste dropped: not refused, proven by the packets."""
    import random

    from espforensics.keys import load_sas
    from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, SaFlow, make_sa
    from espforensics.synth.keytext import keys_yaml
    from espforensics.synth.scenarios_crypto import send_udp

    rng, cb = random.Random(7), CaptureBuilder(7)
    material = b"\x00" + rng.randbytes(19)
    flow = SaFlow(make_sa(rng, 0x1001, V4_A, V4_B, material=material), V4_A, V4_B)
    for _ in range(6):
        send_udp(cb, flow)
    sc = cb.scenario("short-key", "one SA whose key begins with 00", (flow.sealer,))
    text = keys_yaml(sc.sas)
    assert material.hex() in text
    path = tmp_path / "keys.yaml"
    path.write_text(text.replace("0x" + material.hex(), "0x" + material.hex()[2:]))
    [short] = load_sas([path])
    assert len(short.key) == 19 and not short.key_usable
    run = run_frames(list(sc.frames), (short,), lane, "test")
    records, findings = run.records, run.findings
    assert [r.verdict for r in records] == [Verdict.AUTH_FAIL] * 6
    [f] = kinds(findings, FindingKind.KEY_MISMATCH)
    assert f.detail == (
        "SPI 0x00001001: 0 of 6 packets verify with the given key; all 6 that fail verify "
        "with a 00 byte in front of the key: it is 19 bytes, one short (a leading zero "
        "dropped by a copy-paste?)"
    )
    assert material.hex()[2:] not in f.detail


@pytest.mark.parametrize("name", sorted(ESN_FAULTS))
def test_a_capture_that_starts_with_the_faulty_packet_still_names_it(
    name: str, lane: Options
) -> None:
    """Cut just before the packet sealed with the wrong high half: the next packet decides."""
    sc = build_scenario(name)
    cut = next(t.frame for t in sc.truth if "esn-mismatch" in t.tags) - 1
    esn = [f.frame for f in sc.truth if f.spi == 0x6101 and f.frame > cut]
    frames = [f._replace(number=f.number - cut) for f in sc.frames[cut:]]
    run = run_frames(frames, sc.sas, lane, "test")
    records, findings = run.records, run.findings
    for rec, truth in zip(records, sc.truth[cut:], strict=True):
        assert (rec.verdict, rec.seq64) == (truth.verdict, truth.seq64), rec.frame
    assert [f.frames for f in kinds(findings, FindingKind.ESN_MISMATCH)] == [
        tuple(t.frame - cut for t in sc.truth[cut:] if "esn-mismatch" in t.tags)
    ]
    assert kinds(findings, FindingKind.SEQ_GAP) == [] and esn


@pytest.mark.parametrize("start", [6, 7, 8])
def test_a_capture_that_starts_after_the_wrap_learns_the_high_half(
    start: int, lane: Options
) -> None:
    """Cut after the wrap, esn_hi 0 in the key file: the first packet is no fault."""
    sc = build_scenario("esn-fault-v4")
    frames = [f._replace(number=f.number - start + 1) for f in sc.frames[start - 1 :]]
    run = run_frames(frames, sc.sas, lane, "test")
    records, findings = run.records, run.findings
    for rec, truth in zip(records, sc.truth[start - 1 :], strict=True):
        assert (rec.verdict, rec.seq64) == (truth.verdict, truth.seq64), rec.frame
    assert kinds(findings, FindingKind.ESN_MISMATCH) == []


@helpers.needs_captures
@pytest.mark.parametrize("first", [370, 372, 373, 374, 375])
def test_real_esn_capture_cut_near_the_wrap(first: int, lane: Options) -> None:
    """The real ESN capture cut at frames around the dropped packet (frame 373)."""
    from espforensics.capture import open_capture
    from espforensics.keys import load_sas

    folder = CAPTURES / "esn-wrap-v4"
    with open_capture(folder / "capture.pcap") as cap:
        frames = [
            f._replace(number=f.number - first + 1)
            for f in cap
            if isinstance(f, Frame) and f.number >= first
        ]
    run = run_frames(frames, tuple(load_sas([folder / "xfrm-state.txt"])), lane, "test")
    records, findings = run.records, run.findings
    mismatched = [r.frame + first - 1 for r in records if r.verdict is Verdict.ESN_MISMATCH]
    assert mismatched == ([373] if first <= 373 else [])
    assert not [r for r in records if r.spi is not None and r.verdict is Verdict.AUTH_FAIL]
    assert kinds(findings, FindingKind.SEQ_GAP) == []
    assert kinds(findings, FindingKind.SEQ_REORDER) == []


def _wrong_keys(sas: tuple[SecurityAssociation, ...]) -> tuple[SecurityAssociation, ...]:
    """Every SA with a key of the right length that is not its own (each a different one)."""
    from espforensics.keys import Secret

    return tuple(
        replace(sa, key=Secret(bytes((i + 1 + b) % 256 for b in range(len(sa.key)))))
        for i, sa in enumerate(sas)
    )


@pytest.mark.parametrize("name", ["kernel-gso-v4", "kernel-gso-v6", "iv-reuse", "sequence"])
def test_a_wrong_key_hides_nothing_a_keyless_run_shows(name: str, lane: Options) -> None:
    """A key that verifies nothing proves nothing either way: its packets count as keyless."""
    sc = build_scenario(name)
    keyless = run_frames(list(sc.frames), (), lane, "test").findings
    wrong = run_frames(list(sc.frames), _wrong_keys(sc.sas), lane, "test").findings

    def shown(findings: list[Finding]) -> set[tuple[str, str, int | None, tuple[int, ...]]]:
        return {
            (f.kind.value, f.severity.value, f.spi, tuple(f.frames))
            for f in findings
            if f.kind not in (FindingKind.KEY_MISMATCH, FindingKind.SHARED_KEY)
        }

    assert shown(keyless) <= shown(wrong)
    assert {f.spi for f in kinds(wrong, FindingKind.KEY_MISMATCH)} == {sa.spi for sa in sc.sas}


@helpers.needs_captures
def test_real_tso_on_capture_with_a_wrong_key_still_shows_the_misplaced_packets(
    lane: Options,
) -> None:
    from espforensics import analyze
    from espforensics.keys import load_sas

    folder = CAPTURES / "ip6tnl-transport-tso-on"
    keyless = analyze(folder / "capture.pcap", None, lane).summary
    wrong_keys = SaTable(_wrong_keys(tuple(load_sas([folder / "xfrm-state.txt"]))))
    wrong = analyze(folder / "capture.pcap", wrong_keys, lane).summary
    assert wrong.verdicts["esp_misplaced"] == keyless.verdicts["esp_misplaced"] == 94
    for kind in ("esp_misplaced", "cleartext_leak", "iv_reuse"):
        assert wrong.findings[kind] == keyless.findings[kind] > 0, kind
    assert wrong.findings["key_mismatch"] > 0


def test_the_doctor_does_not_try_another_sas_key_that_is_one_byte_short(lane: Options) -> None:
    """fuzz/ seed 3 #677321: an SA whose key is one byte short (here 35 ASCII bytes, as
    Wireshark reads a key without 0x) was offered as 'the other direction's key' to an
    SA whose packets fail, and AESGCM refused it: a ValueError, exit 70."""
    from espforensics.keys import Secret

    sc = build_scenario("ipv4-transport-tcp")
    a, b = sc.sas
    failing = replace(a, key=Secret(bytes(20)))  # verifies nothing: the doctor runs
    short = replace(b, key=Secret(b"AES-GCM with 16 octet ICV [RFC4106]"))
    assert len(short.key) == 35 and not short.key_usable
    findings = run_frames(list(sc.frames), (failing, short), lane, "test").findings
    assert {f.spi for f in kinds(findings, FindingKind.KEY_MISMATCH)} == {a.spi, b.spi}
