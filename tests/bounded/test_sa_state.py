"""Per-SA state kept small (issue 21): the window of recent entries, PerFlow, coverage's one walk.

A capture of many short-lived SAs (benchmarks/bench_sas.py) holds one packet per
SA; these structures must answer exactly as their plain versions do while holding
less per SA.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.bounded import window
from espforensics.bounded.intervals import IntervalSet
from espforensics.bounded.window import RecentWindow
from espforensics.checks import perflow, unused
from espforensics.checks.context import Flow, SaState
from espforensics.checks.coverage import (
    CLEAR_NO_IV,
    ICV_FAILS,
    NO_KEY,
    NO_SPI,
    NOT_VERIFIED,
    SaFacts,
    proven,
    seen,
)
from espforensics.checks.perflow import PerFlow
from espforensics.keys import SaTable
from espforensics.model.options import Options
from espforensics.results.coverage import CheckCoverage, Tally, check_coverage, tally

GCM = "rfc4106(gcm(aes))"


# -- RecentWindow ---------------------------------------------------------------


def test_window_of_one_entry_answers_like_a_dict() -> None:
    w: RecentWindow[str] = RecentWindow(3)
    assert len(w) == 0 and w.get(7) is None and w.pop(7) is None
    w.put(7, "a")
    assert (len(w), w.get(7), w.get(8)) == (1, "a", None)
    w.put(7, "b", renew=False)
    assert (len(w), w.get(7)) == (1, "b")
    assert w.pop(8) is None and len(w) == 1
    assert w.pop(7) == "b" and len(w) == 0 and w.get(7) is None


def test_window_evicts_the_oldest_and_renews_on_request() -> None:
    w: RecentWindow[str] = RecentWindow(3)
    for key, value in ((1, "a"), (2, "b"), (3, "c")):
        w.put(key, value)
    w.put(1, "a2", renew=False)  # keeps its place: still the oldest
    w.put(4, "d")
    assert [w.get(k) for k in (1, 2, 3, 4)] == [None, "b", "c", "d"]
    w.put(2, "b2")  # renewed: now the newest, 3 is the oldest
    w.put(5, "e")
    assert [w.get(k) for k in (2, 3, 4, 5)] == ["b2", None, "d", "e"]
    assert len(w) == 3


def test_window_of_size_one_keeps_the_latest_key() -> None:
    w: RecentWindow[int] = RecentWindow(1)
    w.put(1, 10)
    w.put(2, 20)
    assert (w.get(1), w.get(2), len(w)) == (None, 20, 1)


def test_window_builds_only_the_bulk_entries_it_reads() -> None:
    built: list[int] = []

    def make(i: int) -> int:
        built.append(i)
        return 100 + i

    w: RecentWindow[int] = RecentWindow(4)
    w.put(1, 1)
    w.put_many(np.array([10, 11, 12], dtype=np.uint64), make)
    assert len(w) == 4 and built == []
    assert [w.get(k) for k in (1, 10, 11, 12)] == [1, 100, 101, 102]
    w.put_many(np.array([20, 21, 22, 23, 24], dtype=np.uint64), make)
    assert len(w) == 4  # every older entry left, and the new chunk's first
    assert [w.get(k) for k in (10, 12, 20, 21, 24)] == [None, None, None, 101, 104]
    assert len(w) == 4
    assert built == [0, 1, 2, 1, 4]  # each a get: a chunk's entries are read where they lie


@pytest.mark.parametrize("seed", range(20))
def test_window_matches_an_ordered_dict_on_random_operations(seed: int) -> None:
    """The plain version: an OrderedDict evicting its first key past ``size``."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 5))
    w: RecentWindow[int] = RecentWindow(size)
    ref: OrderedDict[int, int] = OrderedDict()
    for step in range(200):
        key, op = int(rng.integers(0, 8)), int(rng.integers(0, 4))
        if op == 0:
            assert w.get(key) == ref.get(key)
        elif op == 1:
            assert w.pop(key) == ref.pop(key, None)
        else:
            renew = op == 2
            if renew:
                ref.pop(key, None)
            ref[key] = step
            if len(ref) > size:
                ref.popitem(last=False)
            w.put(key, step, renew)
        assert len(w) == len(ref)
    assert [w.get(k) for k in range(8)] == [ref.get(k) for k in range(8)]


def _values(base: int) -> Callable[[int], int]:
    return lambda i: base + i


@pytest.mark.parametrize("joined_past", [1, 2, window.MAX_CHUNKS])
@pytest.mark.parametrize("seed", range(40))
def test_window_with_bulk_chunks_matches_an_ordered_dict(
    seed: int, joined_past: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady lane's chunks (``put_many``, keys new to the window) between single
    ``put``s and ``get``s, as a packet the per-frame path takes between two lane runs
    reads and joins them: the same answers as the plain version, and no chunk entry
    built but those read or put again; chunks joined past ``joined_past`` of them."""
    monkeypatch.setattr(window, "MAX_CHUNKS", joined_past)
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 9))
    w: RecentWindow[int] = RecentWindow(size)
    ref: OrderedDict[int, int] = OrderedDict()
    for step in range(300):
        key, op = int(rng.integers(0, 16)), int(rng.integers(0, 5))
        if op == 0:
            assert w.get(key) == ref.get(key)
        elif op == 1:
            assert w.pop(key) == ref.pop(key, None)
        elif op == 4:
            new = [k for k in rng.permutation(16).tolist() if k not in ref][: rng.integers(1, 6)]
            for i, k in enumerate(new):
                ref[k] = 1000 * step + i
                if len(ref) > size:
                    ref.popitem(last=False)
            w.put_many(np.array(new, np.uint64), _values(1000 * step))
            continue
        else:
            renew = op == 2
            if renew:
                ref.pop(key, None)
            ref[key] = step
            if len(ref) > size:
                ref.popitem(last=False)
            w.put(key, step, renew)
        assert len(w) == len(ref)
    assert [w.get(k) for k in range(16)] == [ref.get(k) for k in range(16)]


# -- PerFlow --------------------------------------------------------------------


def test_flows_of_one_sa_share_a_check_state_and_each_is_known_once_asked() -> None:
    first = Flow(0x1001, "10.0.0.1", "10.0.0.2", SaState())
    again = Flow(0x1001, "10.0.0.1", "10.0.0.2", SaState())  # after a secrets block
    other = Flow(0x1002, "10.0.0.1", "10.0.0.2", SaState())
    states: PerFlow[list[int]] = PerFlow(list)
    assert states.known(first) is None
    made = states.get(first)
    made.append(1)
    assert states.known(first) is made
    assert states.known(again) is None  # no packet of this flow was observed yet
    assert states.get(again) is made and states.known(again) is made
    assert states.get(other) == [] and states.get(other) is not made
    assert states.items() == [
        ((0x1001, "10.0.0.1", "10.0.0.2"), [1]),
        ((0x1002, "10.0.0.1", "10.0.0.2"), []),
    ]


def test_two_checks_on_one_flow_keep_their_own_state() -> None:
    flow = Flow(0x1001, "192.0.2.1", "2001:db8::2", SaState())
    one: PerFlow[list[int]] = PerFlow(list)
    two: PerFlow[list[int]] = PerFlow(list)
    one.get(flow).append(1)
    assert two.known(flow) is None
    assert two.get(flow) == [] and one.get(flow) == [1]
    assert flow.key == (0x1001, "192.0.2.1", "2001:db8::2")
    assert one.items() == [((0x1001, "192.0.2.1", "2001:db8::2"), [1])]


def test_items_where_names_and_sorts_only_the_states_it_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A check's finish walks the few SAs it reports: the filtered list is the unfiltered
    # one less the others, in the same (SPI, src, dst) order, and the others are never
    # named (a scan's tens of thousands of SAs would each make a key and be sorted).
    states: PerFlow[list[int]] = PerFlow(list)
    for spi, src in ((0x3003, "10.0.0.9"), (0x1001, "10.0.0.2"), (0x2002, "2001:db8::1")):
        states.get(Flow(spi, src, "10.0.0.1", SaState())).append(spi)
    states.get(Flow(0x1001, "10.0.0.1", "10.0.0.1", SaState())).append(0)
    kept = states.items(lambda s: s[0] != 0x2002)
    assert kept == [kv for kv in states.items() if kv[1][0] != 0x2002]
    assert [key for key, _ in kept] == [
        (0x1001, "10.0.0.1", "10.0.0.1"),
        (0x1001, "10.0.0.2", "10.0.0.1"),
        (0x3003, "10.0.0.9", "10.0.0.1"),
    ]
    named: list[bytes] = []
    real = perflow._named

    def counting(wire: bytes, names: dict[bytes, str]) -> tuple[int, str, str]:
        named.append(wire)
        return real(wire, names)

    monkeypatch.setattr(perflow, "_named", counting)
    assert states.items(lambda s: s == [0]) == [((0x1001, "10.0.0.1", "10.0.0.1"), [0])]
    assert len(named) == 1  # the one state kept, not all four


def test_the_holders_of_one_run_take_distinct_small_bits_of_a_flow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each holder of per-flow state (a PerFlow, the unused-SA tracker) marks the flows it
    # knows with a bit of Flow.known_to: two holders of one run on one bit would read each
    # other's flows as known. Below 256, known_to is an int Python keeps once (no object
    # per flow). Every bit a run's analyzer takes is counted, whoever takes it.
    taken: list[int] = []
    original = perflow.flow_bit

    def counted() -> int:
        bit = original()
        taken.append(bit)
        return bit

    monkeypatch.setattr(perflow, "flow_bit", counted)
    monkeypatch.setattr(unused, "flow_bit", counted)
    for _ in range(3):  # runs made one after the other in one thread
        taken.clear()
        FrameAnalyzer(SaTable(), Options())
        assert len(taken) >= 6 and len(set(taken)) == len(taken), taken
        assert max(taken) < 256


# -- coverage: one walk, grouped by verdict and kind of SA ------------------------


@dataclass(frozen=True)
class _Row:
    spi: int
    algorithm: str
    verdicts: dict[str, int] = field(default_factory=dict)
    cut: int = 0
    cut_read: int = 0
    cut_found: int = 0
    iv_scheme: str = ""
    no_iv: int = 0

    @property
    def packets(self) -> int:
        return sum(self.verdicts.values())


ROWS = (
    _Row(1, "", {"unknown_sa": 5}),
    _Row(2, GCM, {"ok": 3, "auth_fail": 1}),  # its key verified others: the failure is tried
    _Row(3, GCM, {"auth_fail": 2}),  # a key that verified none
    _Row(4, "", {"unknown_sa": 2}),
    _Row(5, "", {"unknown_sa": 0}),  # a row of summary.json may say 0
)
ESP = 5 + 4 + 2 + 2 + 3  # and 3 cut before their SPI


def test_tally_counts_what_decryption_tried_over_every_sa() -> None:
    assert tally(ROWS, ESP) == Tally(
        esp_packets=ESP,
        tried=4,
        proven=3,
        verified=3,
        authentic=0,
        verdicts={"ok": 3, "auth_fail": 1},
        untried={NO_KEY: 7, NO_SPI: 3, NOT_VERIFIED: 2},
        untried_spis={NO_KEY: (1, 4, 5), NOT_VERIFIED: (3,), NO_SPI: ()},
    )
    assert ICV_FAILS not in tally(ROWS, ESP).untried


def _row_by_row(rows: tuple[_Row, ...], esp: int) -> tuple[CheckCoverage, ...]:
    """check_coverage as it walked before: one row per SA and verdict."""
    from espforensics.checks import COVERAGE

    examined = dict.fromkeys((name for name, _ in COVERAGE), 0)
    keyless = dict.fromkeys(examined, 0)
    skipped: dict[str, Counter[str]] = {name: Counter() for name in examined}
    owned = 0
    for sa in rows:
        owned += sa.packets
        facts = SaFacts(sa.algorithm, proven(sa.verdicts, sa.algorithm))
        for v, n in sa.verdicts.items():
            s = seen(v, facts)
            for name, declared in COVERAGE:
                why = declared(s)
                if why is None:
                    examined[name] += n
                    keyless[name] += 0 if s.keyed else n
                else:
                    skipped[name][why] += n
    extra = {NO_SPI: esp - owned} if esp > owned else {}
    return tuple(
        CheckCoverage(
            name, esp, examined[name], keyless[name], {**dict(skipped[name].most_common()), **extra}
        )
        for name, _ in COVERAGE
    )


def test_coverage_in_one_walk_says_what_the_walk_row_by_row_says() -> None:
    got = check_coverage(ROWS, ESP)
    assert got == _row_by_row(ROWS, ESP)
    sequence = next(c for c in got if c.name == "sequence")
    # headers count without a key, and under a key that verified none; not failed ICVs
    assert (sequence.examined, sequence.keyless, sequence.skipped) == (
        12,
        7,
        {ICV_FAILS: 1, NO_SPI: 3},
    )
    reordered = ROWS[::-1]
    assert check_coverage(reordered, ESP) == _row_by_row(reordered, ESP)


def test_the_iv_checks_skip_exactly_the_keyless_packets_without_iv() -> None:
    """A keyless SA some of whose packets were clear from their ESP header on (a leak
    amid ciphertext, ``no_iv``): the IV checks examined the others only, and skipped
    those with the reason; every other check counts the SA as before. An old
    summary.json's SA without ``no_iv`` whose scheme is ``none`` had none with an IV."""
    mixed = (_Row(1, "", {"unknown_sa": 5, "esp_misplaced": 2}, no_iv=3), *ROWS[1:])
    got = {c.name: c for c in check_coverage(mixed, ESP + 2)}
    before = {c.name: c for c in check_coverage((replace(mixed[0], no_iv=0), *ROWS[1:]), ESP + 2)}
    for name in ("iv_reuse", "iv_derivation"):
        assert got[name].examined == before[name].examined - 3
        assert got[name].skipped == {**before[name].skipped, CLEAR_NO_IV: 3}
    assert {n: c for n, c in got.items() if not n.startswith("iv_")} == {
        n: c for n, c in before.items() if not n.startswith("iv_")
    }
    old = (replace(mixed[0], iv_scheme="none", no_iv=0), *ROWS[1:])
    assert {c.name: c.skipped.get(CLEAR_NO_IV) for c in check_coverage(old, ESP + 2)} == {
        name: 7 if name in ("iv_reuse", "iv_derivation") else None for name in got
    }


# -- IntervalSet: one run held as two ints ------------------------------------------


def test_interval_set_of_one_run_grows_both_ways_then_splits() -> None:
    s = IntervalSet()
    assert (len(s), s.top(), list(s.runs()), 5 in s) == (0, -1, [], False)
    assert [s.add(v) for v in (5, 6, 4, 6)] == [False, False, False, True]
    assert (len(s), s.top(), list(s.runs()), list(s.gaps())) == (1, 6, [(4, 6)], [])
    assert s.add(9) is False  # a second run
    assert (list(s.runs()), list(s.gaps()), s.top(), 8 in s, 9 in s) == (
        [(4, 6), (9, 9)],
        [(7, 8)],
        9,
        False,
        True,
    )
    assert s.add(7) is False and s.add(8) is False
    assert (len(s), list(s.runs())) == (1, [(4, 9)])


def test_interval_set_extends_its_one_run_in_bulk() -> None:
    s = IntervalSet()
    s.extend_above(np.array([10, 11, 12], dtype=np.uint64))
    s.extend_above(np.array([13, 14], dtype=np.uint64))
    assert list(s.runs()) == [(10, 14)]
    s.extend_above(np.array([16, 17, 20], dtype=np.uint64))
    assert list(s.runs()) == [(10, 14), (16, 17), (20, 20)]
    assert list(s.gaps()) == [(15, 15), (18, 19)]


@given(
    st.lists(
        st.lists(st.integers(1, 3), min_size=1, max_size=8),  # the steps within a batch
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 2**40),
)
def test_interval_set_extends_in_bulk_as_it_adds_one_by_one(
    batches: list[list[int]], start: int
) -> None:
    """``extend_above`` (one run by its ends when the values are consecutive, else cut at
    each gap) holds what ``add`` of each value holds: batches of steps 1 (consecutive),
    2 and 3 (gaps), each batch above the last."""
    bulk, one = IntervalSet(), IntervalSet()
    value = start
    for steps in batches:
        values = []
        for step in steps:
            value += step
            values.append(value)
        bulk.extend_above(np.array(values, np.uint64))
        for v in values:
            one.add(v)
        assert list(bulk.runs()) == list(one.runs())
        assert bulk.top() == one.top()


@pytest.mark.parametrize("seed", range(10))
def test_interval_set_holds_what_a_set_holds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s, ref = IntervalSet(), set[int]()
    for value in rng.integers(0, 40, 120).tolist():
        assert s.add(value) == (value in ref)
        ref.add(value)
        assert sum(b - a + 1 for a, b in s.runs()) == len(ref)
        assert s.top() == max(ref)
    assert [v for v in range(41) if v in s] == sorted(ref)
