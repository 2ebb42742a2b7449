"""The sequence and key checks' bulk rules are their per-packet rules (checks/bulk.py).

For generated batches (rising, duplicated, reordered, crossing a 2^32
wrap), the first row the bulk rule refuses is the first row ``observe``
does not pass over in silence; the rows before it committed in bulk
leave the check as ``observe`` leaves it: the same columns for the rest
of the batch, the same findings. Also RFC 4303 A2.2 for a run of packets
(``EsnTracker.nearest_run``) against the scalar inference.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.checks.context import Flow
from espforensics.checks.keys import KeyCheck
from espforensics.checks.sequence import SequenceCheck
from espforensics.decode.esn import EsnTracker
from espforensics.keys.sa import RFC4106, SaTable
from espforensics.model.enums import Verdict
from tests.support.bulk_batches import Pkt, context, first, flow_rows, keyed, sa_of

SA = sa_of(0x1001, RFC4106, bytes(20))
HALF = 1 << 31


def _pkt(frame: int, seq64: int, replay: bool = False) -> Pkt:
    icv = (seq64 * 2 + (not replay)).to_bytes(16, "big")  # a replay repeats its ICV
    return Pkt(frame, seq64, (seq64 ^ 0x5A).to_bytes(8), bytes(32), icv)


@st.composite
def _batches(draw: st.DrawFn) -> tuple[list[Pkt], list[Pkt]]:
    """A flow's history (rising, with holes) and a batch after it: mostly rising by one,
    with repeats (replays or not), late packets, holes and, near 2^32, a wrap."""
    start = draw(st.sampled_from([1, 5000, (1 << 32) - 12, (3 << 32) + 7]))
    hist = sorted(set(draw(st.lists(st.integers(0, 30), min_size=1, max_size=8))))
    history = [_pkt(n, start + d) for n, d in enumerate(hist, 1)]
    seq, batch = history[-1].seq64, []
    for n, (step, replay) in enumerate(
        draw(st.lists(st.tuples(st.sampled_from([1, 1, 1, 2, 0, -1, -3]), st.booleans()))),
        len(history) + 1,
    ):
        seq = max(0, seq + step)
        batch.append(_pkt(n, seq, replay and step <= 0))
    return history, batch


def _sequence(flow: Flow, history: list[Pkt]) -> SequenceCheck:
    check = SequenceCheck()
    for p in history:
        check.observe(context(flow, p))
    return check


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_batches())
def test_sequence_bulk_rule_is_its_per_packet_rule(case: tuple[list[Pkt], list[Pkt]]) -> None:
    history, batch = case
    flow = keyed(SA)
    lane, ref = _sequence(flow, history), _sequence(flow, history)
    assert lane.admits(flow)
    taken = first(lane.refuses(flow_rows(flow, batch))) if batch else 0
    refs, silent = [], []
    for p in batch:
        wraps = len(ref._sas.get(flow).wraps or ())
        refs.append(context(flow, p))
        ref.observe(refs[-1])
        state = ref._sas.get(flow)
        silent.append(not refs[-1].rec.seq_anomaly and len(state.wraps or ()) == wraps)
    assert taken == first([not s for s in silent])  # row by row up to the first refused
    if taken:
        lane.commit(flow_rows(flow, batch[:taken]))
    rest = [context(flow, p) for p in batch[taken:]]
    for pkt in rest:
        lane.observe(pkt)
    assert [c.rec.seq_anomaly for c in rest] == [c.rec.seq_anomaly for c in refs[taken:]]
    assert lane.counts() == ref.counts()
    assert list(lane.finish()) == list(ref.finish())


def test_sequence_refuses_a_duplicate_a_late_packet_and_a_wrap() -> None:
    flow = keyed(SA)
    check = _sequence(flow, [_pkt(1, 10)])
    seqs = [11, 12, 12, 13]  # the second 12: a duplicate
    assert check.refuses(flow_rows(flow, [_pkt(n, s) for n, s in enumerate(seqs, 2)])).tolist() == [
        False,
        False,
        True,
        False,
    ]
    late = [_pkt(2, 11), _pkt(3, 9)]  # 9: below the top, never seen
    assert check.refuses(flow_rows(flow, late)).tolist() == [False, True]
    wrap = [_pkt(2, 11), _pkt(3, 1 << 32)]  # a new high half: an esn_wrap
    assert check.refuses(flow_rows(flow, wrap)).tolist() == [False, True]


def _keys(flow: Flow, history: list[Pkt]) -> KeyCheck:
    check = KeyCheck(SaTable((SA,)))
    for p in history:
        check.observe(context(flow, p))
    return check


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 12), st.integers(1, 12), st.integers(1, 30))
def test_key_bulk_commit_counts_as_observe_does(failed: int, verified: int, batch: int) -> None:
    """Failed packets before the batch: the mismatch finding's counts show the commit's."""
    flow = keyed(SA)
    bad = [
        Pkt(n, n, bytes(8), bytes(32), bytes(16), verdict=Verdict.AUTH_FAIL)
        for n in range(1, failed + 1)
    ]
    good = [_pkt(failed + n, failed + n) for n in range(1, verified + 1)]
    rows = [_pkt(len(bad) + len(good) + n, 100 + n) for n in range(1, batch + 1)]
    lane, ref = _keys(flow, bad + good), _keys(flow, bad + good)
    assert lane.admits(flow)
    assert not lane.refuses(flow_rows(flow, rows)).any()
    lane.commit(flow_rows(flow, rows))
    for p in rows:
        ref.observe(context(flow, p))
    assert list(lane.finish()) == list(ref.finish())
    acc, want = lane._sas[flow.state], ref._sas[flow.state]
    assert (
        (acc.packets, acc.verified)
        == (want.packets, want.verified)
        == (
            failed + verified + batch,
            verified + batch,
        )
    )


def test_key_check_admits_only_an_sa_it_has_seen() -> None:
    flow = keyed(SA)
    assert not _keys(flow, []).admits(flow)
    assert _keys(flow, [_pkt(1, 1)]).admits(flow)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(
    st.integers(0, (1 << 40) - 1),
    st.lists(
        st.one_of(st.integers(-50, 50), st.integers(-(1 << 32), 1 << 32)), min_size=1, max_size=12
    ),
)
def test_esn_run_is_the_scalar_inference_from_every_running_top(top: int, steps: list[int]) -> None:
    """``nearest_run`` gives, or refuses, what ``nearest`` gives from each running top."""
    seq64s = [max(0, top + s) for s in steps]
    lows = np.array([s & 0xFFFFFFFF for s in seq64s], np.uint64)
    run = EsnTracker.nearest_run(top, lows)
    tracker = EsnTracker()
    tracker.rebase(top)
    scalar = []
    for lo in lows.tolist():
        scalar.append(tracker.infer(lo))
        tracker.commit(scalar[-1])
    if run is not None:  # a refused run goes per frame: only what it gives must be right
        assert run.tolist() == scalar
        assert {s >> 32 for s in scalar} == {top >> 32}  # one high half


def test_esn_run_refuses_a_batch_across_a_wrap() -> None:
    lows = np.array([0xFFFFFFFE, 0xFFFFFFFF, 0, 1], np.uint64)
    assert EsnTracker.nearest_run((5 << 32) | 0xFFFFFFF0, lows) is None
    same = np.array([0xFFFFFFF1, 0xFFFFFFF2], np.uint64)
    got = EsnTracker.nearest_run((5 << 32) | 0xFFFFFFF0, same)
    assert got is not None and got.tolist() == [(5 << 32) | 0xFFFFFFF1, (5 << 32) | 0xFFFFFFF2]
