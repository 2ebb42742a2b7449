"""The compact sets: ``U64Set``'s bulk probe and bulk insert agree with its scalar ``add``.

The steady lane asks ``contains_many`` which random IVs (or CBC IV folds)
a key group has seen and puts the new ones in with ``add_new``; the
per-frame path uses ``add``. Both must leave the same set, or the lane
and the reference would disagree on a reuse. Values added in batches are
kept in sorted levels at 8 bytes each, in few levels.
"""

from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest

from espforensics.bounded.intervals import IntervalSet, U64Set

ALL_ONES = 0xFFFFFFFFFFFFFFFF  # the table's free-slot marker, kept aside as a value


def _values(rng: random.Random, n: int) -> list[int]:
    values = {rng.getrandbits(64) for _ in range(n)}
    if rng.random() < 0.5:
        values.add(ALL_ONES)
    out = sorted(values)
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_bulk_insert_and_probe_agree_with_scalar_add(seed: int) -> None:
    rng = random.Random(seed)
    values = _values(rng, rng.randrange(1, 30_000))
    cut = rng.randrange(len(values) + 1)
    scalar, bulk = U64Set(), U64Set()
    for v in values:
        assert not scalar.add(v)  # grows the table past several loads
    for v in values[:cut]:
        bulk.add(v)
    at = cut
    while at < len(values):  # batches of any size: levels made and merged
        size = rng.choice([1, 7, 500, 4096, rng.randrange(1, 9000)])
        batch = np.array(values[at : at + size], np.uint64)
        assert not bulk.contains_many(batch).any()
        bulk.add_new(batch)
        at += size
    assert len(bulk) == len(scalar) == len(values)
    members = set(values)  # once: built per probe it was most of the suite's time
    strangers = [v for v in (rng.getrandbits(64) for _ in range(2000)) if v not in members]
    probe = np.array(values + strangers, np.uint64)
    expected = np.array([True] * len(values) + [False] * len(strangers))
    assert (bulk.contains_many(probe) == expected).all()
    assert (scalar.contains_many(probe) == expected).all()
    assert all(bulk.add(v) for v in values)  # the scalar probe finds what add_new placed


def test_probe_of_an_empty_set_and_of_nothing() -> None:
    empty = U64Set()
    assert empty.contains_many(np.array([0, 5, ALL_ONES], np.uint64)).tolist() == [False] * 3
    empty.add(7)
    assert empty.contains_many(np.zeros(0, np.uint64)).tolist() == []


def test_values_colliding_on_one_home_slot_all_land() -> None:
    """Many values whose home slot is the same probe past each other, added one by one
    and placed again in bulk when the table grows."""
    s = U64Set(capacity=16)
    grown = U64Set(capacity=16)
    grown._alloc(int(s._size * 1.5) + 1)  # the size ``_grow`` gives the table
    home = grown._slots(np.arange(1, 200_000, dtype=np.uint64))
    same = (np.flatnonzero(home == home[0])[:6] + 1).astype(np.uint64)
    assert len(same) == 6
    others = np.arange(300_000, 300_000 + s._limit, dtype=np.uint64)
    for v in [*same.tolist(), *others.tolist()]:  # past the limit: the table grows
        assert not s.add(v)
    assert s._size == grown._size
    assert s.contains_many(np.concatenate((same, others))).all()
    assert all(s.add(int(v)) for v in same)
    assert len(s) == len(same) + len(others)


def test_values_added_in_batches_take_at_most_10_bytes_each_in_few_levels() -> None:
    """200,000 random values in batches of 700 (a steady lane's key group at 200,000
    packets): 8 bytes a value and 1 to 2 of the filter (the hash table took 11 to 16),
    in at most log2(200,000 / 700) + 1 sorted levels, and each value found again."""
    rng = np.random.default_rng(7)
    values = np.unique(rng.integers(0, 2**64, 200_000, dtype=np.uint64, endpoint=False))
    rng.shuffle(values)
    tracemalloc.start()
    try:
        s = U64Set()
        before = tracemalloc.get_traced_memory()[0]
        for at in range(0, len(values), 700):
            s.add_new(values[at : at + 700])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(s) == len(values)
    assert held / len(values) <= 10
    assert len(s._levels) <= 9
    assert s.contains_many(values).all()
    assert all(s.add(int(v)) for v in values[:: len(values) // 50])


def test_interval_set_counts_runs_not_values() -> None:
    runs = IntervalSet()
    for v in [*range(100, 200), *range(300, 301), *range(201, 250)]:
        assert not runs.add(v)
    assert runs.add(150)
    assert list(runs.runs()) == [(100, 199), (201, 249), (300, 300)]
    assert list(runs.gaps()) == [(200, 200), (250, 299)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_interval_set_contains_many_is_in(seed: int) -> None:
    """The bulk probe says what ``in`` says of each value: empty, one run, many runs."""
    rng = random.Random(seed)
    runs = IntervalSet()
    some = [rng.randrange(400) for _ in range(200)]
    probes = np.array([0, 1, 2**63, 2**64 - 1, *some], np.uint64)
    assert not runs.contains_many(probes).any()
    for v in range(50, 60):
        runs.add(v)
    assert len(runs) == 1
    assert runs.contains_many(probes).tolist() == [int(v) in runs for v in probes]
    while len(runs) < 30:
        start = rng.randrange(400)
        for v in range(start, start + rng.randrange(1, 6)):
            runs.add(v)
    runs.add(2**64 - 1)
    assert runs.contains_many(probes).tolist() == [int(v) in runs for v in probes]


def test_a_batch_takes_the_values_added_one_at_a_time_into_its_level() -> None:
    """Values ``add`` put in the hash table (the free-slot marker among them) move to the
    batch's sorted level: found by both probes afterwards, none counted twice."""
    s = U64Set()
    singles = [3, ALL_ONES, 2**63, 12345678901234567]
    for v in singles:
        assert not s.add(v)
    batch = np.array([1, 5, 2**64 - 2], np.uint64)
    assert not s.contains_many(batch).any()
    s.add_new(batch)
    assert s._n == 0 and not s._has_free  # the table is empty again
    both = np.array([*singles, *batch.tolist(), 4, 0], np.uint64)
    assert s.contains_many(both).tolist() == [True] * 7 + [False, False]
    assert all(s.add(v) for v in singles) and len(s) == 7
    assert not s.add(4) and len(s) == 8  # a new value goes to the table again


@pytest.mark.parametrize("seed", range(6))
def test_any_mix_of_scalar_and_batch_adds_is_a_set(seed: int) -> None:
    """Against a Python set: scalar adds (some values again), batches of new values of
    any size, probes of held and new values, in random order; the filter regrows."""
    rng = random.Random(seed)
    s, model = U64Set(capacity=16), set[int]()

    def draw() -> int:
        return rng.choice([rng.getrandbits(64), rng.randrange(64), ALL_ONES - rng.randrange(4)])

    for _ in range(300):
        op = rng.random()
        if op < 0.5:
            v = rng.choice(sorted(model)) if model and rng.random() < 0.2 else draw()
            assert s.add(v) == (v in model)
            model.add(v)
        elif op < 0.8:
            fresh = {draw() for _ in range(rng.choice([1, 3, 40, 700]))} - model
            s.add_new(np.array(sorted(fresh), np.uint64))
            model |= fresh
        else:
            probe = [draw() for _ in range(50)] + rng.sample(sorted(model), min(50, len(model)))
            assert s.contains_many(np.array(probe, np.uint64)).tolist() == [
                v in model for v in probe
            ]
        assert len(s) == len(model)
