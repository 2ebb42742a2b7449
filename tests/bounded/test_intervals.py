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


def test_values_added_in_batches_take_8_bytes_each_in_few_levels() -> None:
    """200,000 random values in batches of 700 (a steady lane's key group at 200,000
    packets): 8 bytes a value (the hash table took 11 to 16), in at most
    log2(200,000 / 700) + 1 sorted levels, and each value found again."""
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
    assert held / len(values) < 8.1
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
