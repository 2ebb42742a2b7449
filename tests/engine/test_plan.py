"""engine/plan.py: the distinct flows of a batch, against a sort of the whole keys."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.engine.plan import Plan, Unit, distinct_flows
from espforensics.engine.wire import ADDR_LEN, WireColumns

# A flow: (SPI, IP version, a source and destination byte); several may share an SPI.
FLOWS = st.tuples(
    st.sampled_from([0, 1, 0x100, 0xFFFFFFFF]),
    st.sampled_from([4, 6]),
    st.integers(0, 2),
    st.integers(0, 2),
)


def _wire(flows: list[tuple[int, int, int, int]]) -> WireColumns:
    n = len(flows)
    addrs = np.zeros((n, 2 * ADDR_LEN), np.uint8)
    addrs[:, 0] = [src for _, _, src, _ in flows]
    addrs[:, ADDR_LEN + 3] = [dst for _, _, _, dst in flows]
    ints = np.zeros(n, np.int64)
    return WireColumns(
        np.ones(n, np.bool_), ints, np.array([v for _, v, _, _ in flows], np.int64), ints, ints,
        np.zeros(n, np.bool_), ints, ints, np.array([s for s, _, _, _ in flows], np.int64), ints,
        addrs, ints, np.zeros(n, np.bool_),
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(FLOWS, min_size=1, max_size=30))
def test_distinct_flows_are_the_distinct_keys_in_their_bytes_order(
    flows: list[tuple[int, int, int, int]],
) -> None:
    """Each flow once, at its first row, ordered by (SPI as 4 bytes, version, addresses);
    each row maps to its own flow, whether an SPI has one flow or several."""
    rows = np.arange(len(flows))
    first, inverse = distinct_flows(_wire(flows), rows)
    keys = [(s.to_bytes(4), v, a, d) for s, v, a, d in flows]
    expected = sorted(set(keys))
    assert [keys[i] for i in first.tolist()] == expected
    assert first.tolist() == [keys.index(k) for k in expected]
    assert [expected[i] for i in inverse.tolist()] == keys


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_invalidate_gives_back_the_units_taken_rows_after_the_frame(data: st.DataObject) -> None:
    """Of a unit's taken rows (``rows[:cut]``), those after the frame go back; its rows
    past ``cut``, its earlier rows and another unit's stay as they were."""
    n = data.draw(st.integers(1, 40))
    cand_rows = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    plan = Plan(np.zeros(n, np.bool_), np.full(n, -1, np.int64))
    plan.rows = np.array(cand_rows, np.intp)
    mine = sorted(data.draw(st.sets(st.integers(0, len(cand_rows) - 1))))
    unit = Unit(rows=mine, cut=data.draw(st.integers(0, len(mine))))
    plan.taken[:] = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    for pos in mine[: unit.cut]:
        plan.taken[cand_rows[pos]] = True
    after = data.draw(st.integers(-1, n))
    before = plan.taken.copy()
    plan.invalidate(unit, after)
    back = {cand_rows[pos] for pos in mine[: unit.cut] if cand_rows[pos] > after}
    assert plan.taken.tolist() == [False if r in back else bool(before[r]) for r in range(n)]
