"""Typed evidence in findings (issue 21): each check fills it, facts and the lead read it.

Per kind, a synth scenario's finding carries the exact values its detail
states and its frames and count agree with; the likely causes and the
lead's key sentence stay the same when every detail is reworded and change
when the evidence does; and what results/stored.py reads back from a summary.json's
words equals the evidence the check built.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from espforensics.analysis import summarize
from espforensics.keys import SaTable, Secret
from espforensics.model.enums import FindingKind
from espforensics.model.evidence import (
    EsnBelow,
    EsnEvent,
    EsnMismatch,
    EsnWrap,
    Evidence,
    HmacKeySize,
    IvChained,
    IvConstant,
    IvDeviating,
    IvReuse,
    KeyMismatch,
    Leak,
    LeakProof,
    Misplaced,
    NoIntegrity,
    Offsets,
    SeqDelta,
    SeqDuplicates,
    SeqGaps,
    SeqRange,
    SeqReorder,
    SharedKey,
)
from espforensics.model.records import Finding
from espforensics.report.causes import likely_causes
from espforensics.report.lead import lead
from espforensics.results.stored import stored_evidence
from espforensics.results.summary import Summary
from espforensics.rewrite.comments import finding_comment
from espforensics.synth import build_scenario, write_scenario
from tests.support.helpers import real_capture

WRAP = 1 << 32
_TMP: list[Path] = []


@cache
def _summary(name: str) -> Summary:
    paths = write_scenario(build_scenario(name, seed=1), _TMP[0] / name, stem=name)
    return summarize(paths["capture"], [paths["keys"]])


@pytest.fixture(autouse=True)
def _tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    if not _TMP:
        _TMP.append(tmp_path_factory.mktemp("evidence"))


def _only(name: str, kind: FindingKind, spi: int | None = None) -> Finding:
    (f,) = [
        f for f in _summary(name).finding_list if f.kind is kind and (spi is None or f.spi == spi)
    ]
    return f


def _reworded(summary: Summary) -> Summary:
    """Every finding's words replaced; its kind, frames, count and evidence kept."""
    return replace(
        summary,
        finding_list=tuple(
            replace(f, detail=f"reworded {i}") for i, f in enumerate(summary.finding_list)
        ),
    )


# -- per kind: the evidence is the finding's, exactly --------------------------------------


def test_esp_misplaced_and_its_leak() -> None:
    f = _only("kernel-gso-v4", FindingKind.ESP_MISPLACED)
    assert (f.spi, f.count) == (0x1001, 12)
    assert list(f.frames) == [4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18]
    assert f.evidence == Misplaced((Offsets(20, 40),), 12)
    leak = _only("kernel-gso-v4", FindingKind.CLEARTEXT_LEAK)
    assert leak.evidence == Leak(LeakProof.DECRYPTED, ("IPv4 version+IHL, TOS, total length",))
    assert list(leak.frames) == list(f.frames)
    six = _only("kernel-gso-v6", FindingKind.ESP_MISPLACED)
    assert six.evidence == Misplaced((Offsets(40, 60),), 12)


def test_esn_mismatch_events() -> None:
    f = _only("esn-fault-v6", FindingKind.ESN_MISMATCH)
    assert (f.count, list(f.frames)) == (2, [5, 10])
    assert f.evidence == EsnMismatch(
        (
            EsnEvent(5, WRAP - 1, 2 * WRAP - 1, 2 * WRAP - 1),  # sealed with the next high half
            EsnEvent(10, WRAP + 2, 2, 2),  # sealed with the previous one
        )
    )
    ev = f.evidence
    assert isinstance(ev, EsnMismatch) and [e.frame for e in ev.events] == list(f.frames)
    below = _only("esn-below", FindingKind.ESN_MISMATCH)
    assert below.count == 100 and below.evidence == EsnBelow((0x200,), 0x201)


def test_iv_derivation_deltas_chained_constant() -> None:
    deviating = _only("esn-fault-v6", FindingKind.IV_DERIVATION)
    assert deviating.evidence == IvDeviating(
        2, 10, (SeqDelta(WRAP, 1), SeqDelta(-WRAP, 1)), 0, False
    )
    minus = _only("iv-seq-minus-1", FindingKind.IV_DERIVATION)
    assert list(minus.frames) == [14, 26, 38, 50, 62]
    assert minus.evidence == IvDeviating(5, 44, (SeqDelta(-1, 5),), 0, False)
    assert _only("iv-policies", FindingKind.IV_DERIVATION).evidence == IvDeviating(
        6, 16, (), 6, False
    )
    assert _only("iv-counter", FindingKind.IV_DERIVATION).evidence == IvDeviating(
        1, 40, (SeqDelta(1, 1),), 0, True
    )
    chained = _only("encauth-faults", FindingKind.IV_DERIVATION, 0x7502)
    assert (chained.count, chained.evidence) == (9, IvChained(9, 10))
    assert list(chained.frames) == list(range(14, 23))
    constant = _only("iv-constant", FindingKind.IV_DERIVATION)
    ev = constant.evidence
    assert isinstance(ev, IvConstant) and (ev.repeated, ev.packets) == (constant.count, 20)
    assert f"carry IV {ev.iv:x} " in constant.detail


def test_sequence_findings() -> None:
    assert _only("sequence", FindingKind.SEQ_DUPLICATE).evidence == SeqDuplicates(1, 1)
    gap = _only("sequence", FindingKind.SEQ_GAP)
    assert (gap.count, gap.evidence) == (5, SeqGaps(5, 1, (SeqRange(15, 19),)))
    reorder = _only("sequence", FindingKind.SEQ_REORDER)
    assert (list(reorder.frames), reorder.evidence) == ([23], SeqReorder(1, 1))
    gaps = _only("corrupt-icv", FindingKind.SEQ_GAP).evidence
    assert gaps == SeqGaps(3, 3, (SeqRange(6, 6), SeqRange(11, 11), SeqRange(14, 14)))


def test_iv_reuse_uses_and_shared_key() -> None:
    reuse = [f for f in _summary("shared-key").finding_list if f.kind is FindingKind.IV_REUSE]
    assert len(reuse) == 6
    for f in reuse:
        ev = f.evidence
        assert isinstance(ev, IvReuse) and f"IV {ev.iv:0{2 * ev.iv_len}x} used" in f.detail
        assert [u.frame for u in ev.uses] == list(f.frames)[:6] and len(f.frames) == f.count
        assert ev.ciphertext_xor.hex() in f.detail and len(ev.ciphertext_xor) > 0
    key = _only("shared-key", FindingKind.SHARED_KEY)
    assert (key.count, key.evidence) == (3, SharedKey((0xC001, 0xC002, 0xC003)))


def test_every_finding_of_a_check_carries_evidence() -> None:
    for name in ("kernel-gso-v4", "esn-fault-v6", "encauth-faults", "sequence", "esn-below"):
        for f in _summary(name).finding_list:
            assert f.evidence is not None, (name, f.kind)


# -- facts, causes and the lead read the evidence, never the words ------------------------

CAUSED = ("kernel-gso-v4", "esn-fault-v4", "encauth-faults", "midstream-even-2")


@pytest.mark.parametrize("name", CAUSED)
def test_causes_do_not_read_the_words(name: str) -> None:
    summary = _summary(name)
    causes = [c.to_json() for c in likely_causes(summary)]
    assert causes  # each of these scenarios shows one cause at least (tests/report/test_causes.py)
    assert [c.to_json() for c in likely_causes(_reworded(summary))] == causes


def test_causes_follow_the_evidence() -> None:
    summary = _summary("esn-fault-v4")
    assert [c.id for c in likely_causes(summary)] == ["esn-gso-wrap-early"]
    # The same words, but the event verified with its own high half: no early ESN wrap.
    moved = tuple(
        replace(f, evidence=EsnMismatch((EsnEvent(5, WRAP - 1, WRAP - 1, WRAP - 1),)))
        if f.kind is FindingKind.ESN_MISMATCH
        else f
        for f in summary.finding_list
    )
    assert [c.id for c in likely_causes(replace(summary, finding_list=moved))] == []


def _icv_96(name: str, spi: int) -> Summary:
    sc = build_scenario(name, seed=1)
    paths = write_scenario(sc, _TMP[0] / f"{name}-96", stem=name)
    sas = tuple(replace(sa, icv_bits=96) if sa.spi == spi else sa for sa in sc.sas)
    return summarize(paths["capture"], SaTable(sas))


def test_the_lead_reads_the_key_doctors_evidence() -> None:
    summary = _icv_96("ipv4-transport-tcp", 0x1001)
    (f,) = [f for f in summary.finding_list if f.kind is FindingKind.KEY_MISMATCH]
    ev = f.evidence
    assert isinstance(ev, KeyMismatch) and ev.cure == "a 128-bit ICV (the key file says 96)"
    assert (ev.verified, ev.failed, ev.cured, ev.key_unusable) == (0, f.count, f.count, False)
    said = lead(summary)
    assert said == lead(_reworded(summary))
    assert f"verify with {ev.cure}: fix the key file for SPI 0x00001001" in said[1]


# -- summary.json keeps words only: results/stored.py reads back the evidence the check built

STORED = (
    "kernel-gso-v4",
    "esn-fault-v6",
    "esn-below",
    "esn-wrap",
    "encauth-faults",
    "iv-policies",
    "iv-counter",
    "sequence",
    "shared-key",
)


# The evidence report/facts.py, report/lead.py and the annotated copy's comments read
# (results/stored.py restores it)
READ = (IvReuse, IvChained, IvDeviating, SeqDuplicates, EsnWrap, EsnMismatch, KeyMismatch)


def _read_back(f: Finding) -> Evidence | None:
    return stored_evidence(f.kind, f.detail, f.count)


@pytest.mark.parametrize("name", STORED)
def test_stored_words_give_back_the_evidence(name: str) -> None:
    summary = _summary(name)
    for f in summary.finding_list:
        if isinstance(f.evidence, READ):
            assert _read_back(f) == f.evidence, (f.kind, f.detail)
        else:  # what no reader of findings reads is not read back
            assert _read_back(f) is None, (f.kind, f.detail)
    loaded = Summary.from_json(summary.to_json())
    assert [c.to_json() for c in likely_causes(loaded)] == [
        c.to_json() for c in likely_causes(summary)
    ]


def test_stored_key_mismatch() -> None:
    summary = _icv_96("ipv4-transport-tcp", 0x1001)
    (f,) = [f for f in summary.finding_list if f.kind is FindingKind.KEY_MISMATCH]
    assert _read_back(f) == f.evidence
    assert lead(Summary.from_json(summary.to_json())) == lead(summary)


def test_the_annotated_copy_reads_the_esn_wrap_evidence() -> None:
    f = _only("esn-wrap", FindingKind.ESN_WRAP)
    assert (list(f.frames), f.evidence) == ([7], EsnWrap(7, 1))
    said = finding_comment(f)
    assert said.endswith("esn_wrap: sequence number crossed into high half 0x1")
    assert finding_comment(replace(f, detail="reworded")) == said


# -- a real capture: Linux 6.1's GSO fault (ip6tnl over IPv6 transport ESP, TSO on) --------


def test_real_gso_fault_evidence() -> None:
    cap = real_capture("linux-6.1/ip6tnl-transport-tso-on")
    s = summarize(cap.pcap, [cap.keys])

    def one(kind: FindingKind) -> Finding:
        (f,) = [f for f in s.finding_list if f.kind is kind]
        return f

    misplaced, deviating = one(FindingKind.ESP_MISPLACED), one(FindingKind.IV_DERIVATION)
    # ground-truth.json: 94 packets the receiver counted as XfrmInStateProtoError
    assert (misplaced.count, misplaced.evidence) == (94, Misplaced((Offsets(40, 60),), 94))
    assert deviating.evidence == IvDeviating(94, 452, (SeqDelta(1, 94),), 0, False)
    assert list(deviating.frames) == list(misplaced.frames)  # each took seq+1's IV
    reuse = [f for f in s.finding_list if f.kind is FindingKind.IV_REUSE]
    assert len(reuse) == 32
    for f in reuse:
        ev = f.evidence
        assert isinstance(ev, IvReuse) and len(ev.uses) == 2 == f.count
        a, b = ev.uses
        assert [a.frame, b.frame] == list(f.frames) and b.seq64 == a.seq64 + 1
        assert len({a.frame, b.frame} & set(misplaced.frames)) == 1
        # AES-GCM: one nonce, one keystream, so the XORs of ciphertexts and plaintexts agree
        assert ev.plaintext_xor == ev.ciphertext_xor and len(ev.ciphertext_xor) == 16


def test_a_short_hmac_key_its_note_its_mismatch_and_the_lead() -> None:
    sc = build_scenario("encauth", seed=1)
    paths = write_scenario(sc, _TMP[0] / "encauth-short", stem="encauth")
    sas = tuple(
        replace(sa, auth_key=Secret(sa.auth_key.reveal()[:16]))
        if sa.spi == 0x7403 and sa.auth_key is not None
        else sa
        for sa in sc.sas
    )
    summary = summarize(paths["capture"], SaTable(sas))
    mine = {f.kind: f for f in summary.finding_list if f.spi == 0x7403}
    assert mine[FindingKind.HMAC_KEY_SIZE].evidence == HmacKeySize("hmac(sha256)", 16, 32)
    mismatch = mine[FindingKind.KEY_MISMATCH]
    assert mismatch.evidence == KeyMismatch(0, 8, 8, "", 0, False) and mismatch.count == 8
    assert _read_back(mismatch) == mismatch.evidence
    said = lead(summary)[1]
    assert said.startswith("8 of ") and "nor with its usual mistakes (SPI 0x00007403)" in said
    assert lead(_reworded(summary))[1] == said


def test_no_integrity_on_the_scapy_capture() -> None:
    data = Path(__file__).resolve().parents[1] / "data" / "scapy"
    summary = summarize(data / "algos.pcap", [data / "algos.keys.yaml"])
    missing = [f for f in summary.finding_list if f.kind is FindingKind.NO_INTEGRITY]
    assert [(f.spi, list(f.frames), f.evidence) for f in missing] == [
        (spi, list(range(n, n + 5)), NoIntegrity(5, 5))
        for spi, n in ((0xA006, 26), (0xA007, 31), (0xA008, 36), (0xA009, 41))
    ]
