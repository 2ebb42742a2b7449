"""The order the per-frame path runs its stages and checks in is declared, and kept.

A check whose ``finish`` reads what another check writes runs after it
(checks.FINISH_READS), and so does one whose ``observe`` reads a column
another check fills (checks.OBSERVE_READS); nothing else depends on the
checks' order, because the receiver's steps (analyzer/receive.py: the ESP
header found where it is, decryption, ESN state, the plaintext decoded) are
done before any check sees a packet. The coordinator forces held packets in
a declared order (analyzer/frame.py, FrameAnalyzer._force) instead of a callback
registry.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import FrozenInstanceError, fields, replace

import pytest

from espforensics.analyzer import frame
from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.checks import FINISH_READS, OBSERVE_READS, Checks, Holds, make_checks
from espforensics.checks.context import Memo, PacketContext, Receiving
from espforensics.engine.run import iter_records
from espforensics.keys import SaTable
from espforensics.model.enums import FindingKind, IvScheme, Verdict
from espforensics.model.options import Options
from espforensics.model.records import Finding, Frame, PacketRecord, SaKey
from espforensics.synth import Scenario, build_scenario
from tests.support.helpers import PER_FRAME, run_frames, scenario


def test_every_reader_runs_after_what_it_reads() -> None:
    names = [c.name for c in make_checks(SaTable(), Holds()).order]
    assert len(set(names)) == len(names)
    for reader, reads in (*FINISH_READS.items(), *OBSERVE_READS.items()):
        assert reader in names
        for read in reads:
            assert names.index(read) < names.index(reader), (reader, read)


def _keeping_reads(names: Sequence[str]) -> list[str]:
    """``names`` in their order, each moved just after the checks it reads (declared)."""
    reads = {n: {*FINISH_READS.get(n, ()), *OBSERVE_READS.get(n, ())} for n in names}
    left, order = list(names), list[str]()
    while left:
        ready = next(n for n in left if reads[n] <= set(order))
        order.append(ready)
        left.remove(ready)
    return order


def _placement_last(names: list[str]) -> list[str]:
    return [*(n for n in names if n != "esp_placement"), "esp_placement"]


def _shuffled(seed: int) -> Callable[[list[str]], list[str]]:
    def order(names: list[str]) -> list[str]:
        random.Random(seed).shuffle(names)
        return names

    return order


ORDERS: dict[str, Callable[[list[str]], list[str]]] = {
    "placement-last": _placement_last,
    "reversed": lambda names: names[::-1],
    "shuffled-1": _shuffled(1),
    "shuffled-2": _shuffled(2),
}


def _cut(sc: Scenario, snap: int) -> tuple[Frame, ...]:
    """The scenario's frames cut to ``snap`` bytes, as ``editcap -s`` cuts them."""
    return tuple(f._replace(caplen=min(f.caplen, snap), data=f.data[:snap]) for f in sc.frames)


# (scenario, keyed, snap length): misplaced headers proven by decryption, found by layout
# without a key or in a cut capture, searched under another SA's key (unknown SPIs), and
# the other checks' own cases.
RUNS = [
    ("kernel-gso-v4", True, None),
    ("kernel-gso-v4", False, None),
    ("kernel-gso-v6", True, None),
    ("kernel-gso-v6", True, 96),
    ("kernel-gso-v4", False, 96),
    ("unknown-spi", True, None),
    ("corrupt-icv", True, None),
    ("iv-reuse", True, None),
    ("sequence", False, None),
    ("esn-fault-v4", True, None),
    ("null-icmp", False, None),
]


def _analyze(name: str, keyed: bool, snap: int | None) -> tuple[list[PacketRecord], list[Finding]]:
    sc = scenario(name)
    frames = sc.frames if snap is None else _cut(sc, snap)
    run = run_frames(frames, sc.sas if keyed else (), PER_FRAME, name)
    return run.records, sorted(run.findings, key=repr)


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize(("name", "keyed", "snap"), RUNS)
def test_the_checks_give_the_same_outputs_in_any_order_that_keeps_their_reads(
    monkeypatch: pytest.MonkeyPatch, order: str, name: str, keyed: bool, snap: int | None
) -> None:
    """Placement does no receiver work any more: run last, or in any order that keeps
    the declared reads, the checks fill the same columns and make the same findings."""
    expected = _analyze(name, keyed, snap)
    assert any(r.misplaced for r in expected[0]) == name.startswith("kernel-gso")

    def reordered(sas: SaTable, holds: Holds) -> Checks:
        made = make_checks(sas, holds)
        checks = {c.name: c for c in made.order}
        names = _keeping_reads(ORDERS[order](list(checks)))
        assert names != list(checks)  # another order than the registry's
        return replace(made, order=tuple(checks[n] for n in names))

    monkeypatch.setattr(frame, "make_checks", reordered)
    assert _analyze(name, keyed, snap) == expected


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
    monkeypatch.setattr(frame, "MAX_BEHIND_CHECK", 100)
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


class _Spy:
    """A check that keeps every packet it is given."""

    name = "spy"

    def __init__(self) -> None:
        self.seen: list[PacketContext] = []

    def observe(self, pkt: PacketContext) -> None:
        self.seen.append(pkt)

    def finish(self) -> Iterator[Finding]:
        return iter(())


def test_the_checks_read_a_frozen_packet_the_receiver_has_placed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a check is given cannot be changed by it: the misplaced packets arrive with
    their header found, their plaintext read (keyed) and their flow the SA's."""
    spy = _Spy()

    def with_spy(sas: SaTable, holds: Holds) -> Checks:
        made = make_checks(sas, holds)
        return replace(made, order=(spy, *made.order))

    monkeypatch.setattr(frame, "make_checks", with_spy)
    sc = scenario("kernel-gso-v4")
    run = run_frames(sc.frames, sc.sas, PER_FRAME, "frozen")
    placed = [p for p in spy.seen if p.placed is not None]
    assert len(placed) == sum(r.misplaced for r in run.records) > 0
    for pkt in placed:
        assert pkt.placed is not None and pkt.placed.proven
        assert pkt.rec.esp_offset == pkt.placed.at != pkt.rec.expected_offset
        assert pkt.plain_head is not None and pkt.flow.state.proven
    with pytest.raises(FrozenInstanceError):
        placed[0].flow = spy.seen[0].flow  # type: ignore[misc]


def test_the_frozen_copy_holds_every_field_of_the_packet() -> None:
    """``Receiving.frozen`` sets the copy's slots one by one: none may be left out."""
    values: dict[str, object] = {f.name: object() for f in fields(Receiving)}  # each its own
    values["rec"], values["memo"] = PacketRecord(1, 0, 10, 10), Memo(b"d")
    received = Receiving(**values)  # type: ignore[arg-type]
    copy = received.frozen()
    assert [getattr(copy, f.name) for f in fields(PacketContext)] == list(values.values())
    assert [f.name for f in fields(PacketContext)] == list(values)
    assert copy == PacketContext(**values)  # type: ignore[arg-type]


def test_the_checks_are_named_and_hand_the_summary_one_typed_value() -> None:
    """make_checks is the registry by name (no search by type); after ``finish`` the
    analyzer hands the summary what the checks settled as one frozen ``Finished``."""
    checks = make_checks(SaTable(), Holds())
    assert [c.name for c in checks.order] == [
        "esp_placement",
        "cleartext_leak",
        "iv_reuse",
        "iv_derivation",
        "sequence",
        "reserved_spi",
        "receiver",
        "esn_mismatch",
        "keys",
        "integrity",
        "inner_checksum",
    ]
    assert checks.iv_derivation is checks.order[3] and checks.receiver is checks.order[6]
    sc = build_scenario("iv-constant", seed=1)
    analyzer = FrameAnalyzer(SaTable(sc.sas), Options(), "finished")
    list(iter_records(sc.frames, analyzer))
    done = analyzer.finished()
    assert done.iv_schemes == {SaKey(0xB201, "192.0.2.1", "192.0.2.2"): IvScheme.CONSTANT}
    assert [f.kind for f in done.findings] == [FindingKind.IV_REUSE, FindingKind.IV_DERIVATION]
    assert [h.dst for h in done.receivers[0]] == ["192.0.2.2"]
    assert done.unused_sas == ()
