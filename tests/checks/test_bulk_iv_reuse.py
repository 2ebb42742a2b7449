"""The IV reuse check's bulk rule is its per-packet rule, over a key group (checks/bulk.py).

Two SAs given one key are one key group: the check's scope, shared by
their flows. For generated batches of both flows' packets (IVs rising,
repeated, below the top, jumping to new runs; CBC IVs new, repeated, or
with a fold equal to another IV's), the first row the bulk rule refuses
is the first that ``observe`` does not take as a new highest counter
value (or a new fold), and the rows before it committed in bulk leave the
group as ``observe`` leaves it: the same ``iv_reused`` for the rest of
the batch and the same findings, with their frames and XORs.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.checks import iv_groups
from espforensics.checks.context import Flow
from espforensics.checks.iv_reuse import IvReuseCheck
from espforensics.keys.sa import CBC_AES, RFC4106, SaTable
from tests.support.bulk_batches import M64, Pkt, context, first, keyed, opened, sa_of, scope_rows

KEY = bytes(range(20))
GCM = (sa_of(0x1001, RFC4106, KEY), sa_of(0x1002, RFC4106, KEY))  # one key: one group
CBC = (
    sa_of(0x2001, CBC_AES, KEY[:16], "hmac(sha256)"),
    sa_of(0x2002, CBC_AES, KEY[:16], "hmac(sha256)"),
)
C = 0x0123456789ABCDEF  # the group's constant: IV xor seq64
Row = tuple[Flow, Pkt]


def _pkt(frame: int, seq64: int, iv: bytes) -> Pkt:
    ct = frame.to_bytes(4) * 8  # each packet its own ciphertext, plaintext and ICV
    return Pkt(frame, seq64, iv, ct, frame.to_bytes(16), (frame * 3).to_bytes(16))


def _check(sas: tuple[object, ...], history: list[Row]) -> IvReuseCheck:
    check = IvReuseCheck(SaTable(sas))  # type: ignore[arg-type]
    for flow, p in history:
        check.observe(context(flow, p))
    return check


def _equivalent(flows: tuple[Flow, Flow], history: list[Row], batch: list[Row], wide: bool) -> None:
    lane, ref = (
        _check(tuple(f.state.sa for f in flows), history),
        _check(tuple(f.state.sa for f in flows), history),
    )
    assert all(lane.admits(f) for f in flows)
    group = lane.scope(flows[0])
    assert group is not None and lane.scope(flows[1]) is group  # one scope for the key
    taken = first(group.refuses(scope_rows(batch))) if batch else 0
    grp = ref.scope(flows[0])
    assert isinstance(grp, iv_groups.KeyGroup)
    refs, new = [], []
    for flow, p in batch:
        before = (grp.runs.top(), len(grp.hashed or ()), grp.unconfirmed)
        hashed, additive = grp.hashed is not None, grp.additive
        refs.append(context(flow, p))
        ref.observe(refs[-1])
        if wide or hashed:  # a value new to the group: the set grew, nothing to confirm
            fresh = len(grp.hashed or ()) == before[1] + 1 and grp.unconfirmed == before[2]
        else:  # a new highest value, still counting in runs
            iv = int.from_bytes(p.iv)
            value = (iv - grp.added) & M64 if grp.additive else iv ^ grp.const
            fresh = grp.hashed is None and value > before[0] and grp.runs.top() == value
        fresh = fresh and (additive is not None or grp.additive is None)  # no map taken here
        new.append(fresh and not refs[-1].rec.iv_reused)
    assert taken == first([not n for n in new])  # row by row up to the first refused
    if taken:
        group.commit(scope_rows(batch[:taken]), opened([p for _, p in batch[:taken]]))
    rest = [context(flow, p) for flow, p in batch[taken:]]
    for pkt in rest:
        lane.observe(pkt)
    assert [c.rec.iv_reused for c in rest] == [c.rec.iv_reused for c in refs[taken:]]
    assert list(lane.finish()) == list(ref.finish())


# Counter IVs: seqiv's xor, an additive counter, and each with a constant whose low bits
# are zero (TIED), which xor and add read alike up to value 16: the group takes its map there.
TIED = 0x0123456789AB0010
COUNTERS = {
    "xor": (C, False),
    "add": (C, True),
    "tied-xor": (TIED, False),
    "tied-add": (TIED, True),
}


def _counter_iv(scheme: str, value: int) -> bytes:
    const, additive = COUNTERS[scheme]
    return ((value + const) & M64 if additive else value ^ const).to_bytes(8)


@st.composite
def _counter_batches(draw: st.DrawFn) -> tuple[list[Row], list[Row]]:
    """Counter IVs of two SAs' packets: rising, with repeats, late values and new runs."""
    scheme = draw(st.sampled_from(sorted(COUNTERS)))
    flows = (keyed(GCM[0]), keyed(GCM[1], "192.0.2.3"))
    n_hist = draw(st.integers(2, 6))  # both flows seen
    history = [
        (flows[n % 2], _pkt(n + 1, n + 1, _counter_iv(scheme, n + 1))) for n in range(n_hist)
    ]
    value, batch = n_hist, []
    for n, step in enumerate(draw(st.lists(st.sampled_from([1, 1, 1, 1, 3, 0, -2]))), n_hist + 1):
        value = max(1, value + step)
        batch.append((flows[draw(st.integers(0, 1))], _pkt(n, n, _counter_iv(scheme, value))))
    return history, batch


@st.composite
def _random_batches(draw: st.DrawFn) -> tuple[list[Row], list[Row]]:
    """Random 8-byte IVs: a history that makes the group hash (3 runs at most, below), then
    IVs new or repeating any earlier one."""
    flows = (keyed(GCM[0]), keyed(GCM[1], "192.0.2.3"))
    ivs: list[bytes] = []
    rows: list[Row] = []
    for n in range(1, draw(st.integers(9, 30)) + 1):
        same = n > 8 and draw(st.integers(0, 4)) == 0
        iv = draw(st.sampled_from(ivs)) if same else draw(st.binary(min_size=8, max_size=8))
        ivs.append(iv)
        rows.append((flows[n % 2] if n <= 2 else flows[draw(st.integers(0, 1))], _pkt(n, n, iv)))
    return rows[:8], rows[8:]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_counter_batches(), st.sampled_from([4096, 3]))
def test_counter_bulk_rule_is_the_per_packet_rule(
    case: tuple[list[Row], list[Row]], runs_cap: int
) -> None:
    """With a cap of 3 runs, new runs reach the point where ``observe`` starts hashing."""
    history, batch = case
    flows = (history[0][0], history[1][0])
    with mock.patch.object(iv_groups, "RUNS_BEFORE_HASH", runs_cap):
        _equivalent(flows, history, batch, wide=False)


@settings(max_examples=200, deadline=None)
@given(_random_batches())
def test_hashed_bulk_rule_is_the_per_packet_rule(case: tuple[list[Row], list[Row]]) -> None:
    """Random 8-byte IVs are hashed, and the lane takes them by the hash (issue 35)."""
    history, batch = case
    flows = (history[0][0], history[1][0])
    with mock.patch.object(iv_groups, "RUNS_BEFORE_HASH", 3):
        _equivalent(flows, history, batch, wide=False)


@st.composite
def _cbc_batches(draw: st.DrawFn) -> tuple[list[Row], list[Row]]:
    """Random 16-byte IVs of two SAs' packets; some repeat an earlier IV, some only its fold."""
    flows = (keyed(CBC[0]), keyed(CBC[1], "192.0.2.3"))
    ivs: list[bytes] = []
    rows: list[Row] = []
    for n in range(1, draw(st.integers(2, 24)) + 1):
        kind = draw(st.sampled_from(["new", "new", "new", "same", "fold"])) if ivs else "new"
        if kind == "new":
            iv = draw(st.binary(min_size=16, max_size=16))
        else:
            old = draw(st.sampled_from(ivs))
            x = draw(st.integers(1, (1 << 64) - 1)) if kind == "fold" else 0
            iv = (int.from_bytes(old) ^ (x << 64 | x)).to_bytes(16)  # equal halves' xor
        ivs.append(iv)
        rows.append((flows[n % 2] if n <= 2 else flows[draw(st.integers(0, 1))], _pkt(n, n, iv)))
    cut = draw(st.integers(2, len(rows)))
    return rows[:cut], rows[cut:]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_cbc_batches())
def test_cbc_bulk_rule_is_the_per_packet_rule(case: tuple[list[Row], list[Row]]) -> None:
    history, batch = case
    flows = (history[0][0], history[1][0])
    _equivalent(flows, history, batch, wide=True)


def test_a_reused_counter_iv_is_refused_and_reported_once_per_frame_path() -> None:
    flows = (keyed(GCM[0]), keyed(GCM[1], "192.0.2.3"))
    history = [
        (flows[0], _pkt(1, 1, (1 ^ C).to_bytes(8))),
        (flows[1], _pkt(2, 2, (2 ^ C).to_bytes(8))),
    ]
    check = _check(GCM, history)
    group = check.scope(flows[0])
    assert group is not None
    batch = [
        (flows[1], _pkt(3, 3, (3 ^ C).to_bytes(8))),
        (flows[0], _pkt(4, 4, (2 ^ C).to_bytes(8))),
    ]
    assert group.refuses(scope_rows(batch)).tolist() == [False, True]


def test_a_group_of_random_ivs_hashes_them_and_is_admitted() -> None:
    """Past RUNS_BEFORE_HASH runs, more than half its packets, a group hashes its values;
    the lane takes it, refusing an IV seen before (in the runs or in the hash)."""
    flow = keyed(GCM[0])
    ivs = [(n * 0x9E3779B97F4A7C15 & M64).to_bytes(8) for n in range(1, 2 * iv_groups.WINDOW)]
    check = _check(GCM, [(flow, _pkt(n, n, iv)) for n, iv in enumerate(ivs, 1)])
    group = check.scope(flow)
    assert isinstance(group, iv_groups.KeyGroup) and group.hashed is not None
    assert len(group.runs) == iv_groups.RUNS_BEFORE_HASH + 1  # frozen when hashing began
    assert check.admits(flow)
    n = len(ivs) + 1
    batch = [(flow, _pkt(n + k, n + k, iv)) for k, iv in enumerate([b"new iv 1", ivs[3], ivs[-1]])]
    assert group.refuses(scope_rows(batch)).tolist() == [False, True, True]


def test_an_additive_counter_is_counted_in_one_run() -> None:
    """IV = seq64 + c: mapped by ``iv - c``, one run, every packet new (none refused)."""
    flow = keyed(GCM[0])
    check = _check(GCM, [(flow, _pkt(n, n, _counter_iv("add", n))) for n in range(1, 100)])
    group = check.scope(flow)
    assert isinstance(group, iv_groups.KeyGroup)
    assert (group.additive, len(group.runs), group.hashed) == (True, 1, None)
    batch = [(flow, _pkt(n, n, _counter_iv("add", n))) for n in range(100, 140)]
    assert not group.refuses(scope_rows(batch)).any()


def test_iv_equal_to_seq_keeps_both_maps() -> None:
    """IV = seq64: xor and add of c = 0 read every IV alike, and the lane never waits."""
    flow = keyed(GCM[0])
    check = _check(GCM, [(flow, _pkt(n, n, n.to_bytes(8))) for n in range(1, 100)])
    group = check.scope(flow)
    assert isinstance(group, iv_groups.KeyGroup)
    assert (group.additive, group.const, group.added, len(group.runs)) == (None, 0, 0, 1)
    batch = [(flow, _pkt(f, n, n.to_bytes(8))) for f, n in ((100, 100), (101, 101), (102, 1 << 40))]
    assert group.refuses(scope_rows(batch)).tolist() == [False, False, False]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 5), max_size=40))
def test_a_value_again_is_one_an_earlier_row_has(values: list[int]) -> None:
    """The hashed groups' test for a value repeated within a batch: every row whose value
    an earlier row has, and no other (random IVs, none repeated, take a short cut)."""
    again = iv_groups.again(np.array(values, np.uint64))
    assert again.tolist() == [v in values[:i] for i, v in enumerate(values)]
