"""The order the per-frame path runs its stages and checks in is declared, and kept.

A check whose ``finish`` reads what another check writes runs after it
(checks.FINISH_READS); the coordinator forces held packets in a declared
order (pipeline.FrameAnalyzer._force) instead of a callback registry.
"""

from __future__ import annotations

import pytest

from espforensics import pipeline
from espforensics.checks import FINISH_READS, Holds, make_checks
from espforensics.checks.context import Flow, SaState
from espforensics.engine.run import iter_records
from espforensics.keys import SaTable
from espforensics.model.enums import FindingKind, Verdict
from espforensics.model.records import Frame
from espforensics.pipeline import FrameAnalyzer, Options
from espforensics.synth import build_scenario


def _no_flow(spi: int, src: bytes, dst: bytes) -> Flow:
    return Flow(spi, "", "", SaState(None))


def test_every_finish_reader_runs_after_what_it_reads() -> None:
    names = [c.name for c in make_checks(SaTable(), Holds(), _no_flow)]
    assert len(set(names)) == len(names)
    for reader, reads in FINISH_READS.items():
        assert reader in names
        for read in reads:
            assert names.index(read) < names.index(reader), (reader, read)


def test_esn_mismatch_words_read_the_iv_delta_settled_at_finish() -> None:
    """13 frames: fewer than the IV derivation window, so the SA's constant (and frame 5's
    iv_seq_delta) is settled only in iv_derivation's finish, which esn_mismatch's reads."""
    sc = build_scenario("esn-fault-v4", seed=1)
    analyzer = FrameAnalyzer(SaTable(sc.sas), Options(steady_lane=False), "order")
    records = {r.frame: r for r in iter_records(sc.frames, analyzer)}
    assert (records[5].verdict, records[5].iv_seq_delta) == (Verdict.ESN_MISMATCH, 1 << 32)
    [finding] = [f for f in analyzer.findings if f.kind is FindingKind.ESN_MISMATCH]
    assert finding.detail == (
        "192.0.2.1 -> 192.0.2.2: 1 packet sealed with the wrong ESN high half, which a "
        "receiver drops (RFC 4303 A2.2): frame 5 (seq 0x0:ffffffff) verifies only with ESN "
        "high half 0x1, where its place in the sequence implies 0x0: its IV encodes seq "
        "0x1:ffffffff, which the SA reaches again 4294967296 packets later: a nonce this key "
        "will use twice if the SA lives that long"
    )


ARP = bytes(12) + b"\x08\x06" + bytes(28)


def test_forcing_settles_iv_derivation_then_confirms_the_esn_first_packet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ESN SA's only packet verified with the next high half waits for its place. Past
    MAX_BEHIND_CHECK waiting records the IV derivation check is told to settle, then ESN
    placement confirms the packet and hands it to the checks: the IV derivation check
    holds it then, until the next frame forces again (the declared order)."""
    monkeypatch.setattr(pipeline, "MAX_BEHIND_CHECK", 100)
    sc = build_scenario("esn-fault-v4", seed=1)
    analyzer = FrameAnalyzer(SaTable(sc.sas), Options(steady_lane=False), "force")
    assert analyzer.process(sc.frames[4]._replace(number=1)) == ()  # seq low 0xffffffff
    assert analyzer.busy
    arp = [Frame(n, 10**9 + n, len(ARP), len(ARP), 1, ARP) for n in range(2, 104)]
    released = [analyzer.process(f) for f in arp]
    assert released[:100] == [()] * 100  # frames 2-101: 101 records wait, the first forced
    assert [r.frame for r in released[100]] == list(range(1, 103))
    assert [r.frame for r in released[101]] == [103] and not analyzer.busy
    head = released[100][0]
    assert (head.verdict, head.seq64, head.seq_hi_verified) == (Verdict.OK, 0x1_FFFF_FFFF, 1)
    assert head.iv_seq_delta is None  # one packet is no evidence of an IV scheme
