"""The plots' tables (plots/table.py) and the cell sums the drawing makes of them
(plots/style.py ``_pivot``), the latter against pandas' ``pivot_table``, which the
plots used before: the same sums to the last bit keep the files byte-identical."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from espforensics.plots.style import _pivot
from espforensics.plots.table import Table

SA = "0x00001001 192.0.2.1>192.0.2.2"


def test_columns_are_typed_read_only_arrays() -> None:
    table = Table({"t": [0.0, 1.5], "sa": [SA, SA], "count": [1, 2], "reused": [True, False]})
    assert table.names == ("t", "sa", "count", "reused")
    assert len(table) == 2 and not table.empty
    assert [table[n].dtype.kind for n in table] == ["f", "O", "i", "b"]
    assert table["count"].dtype == np.int64
    assert table["sa"].tolist() == [SA, SA]
    assert Table(sa=["a\x00", "b"])["sa"].tolist() == ["a\x00", "b"]  # kept whole
    with pytest.raises(ValueError, match="read-only"):
        table["t"][0] = 9.0
    with pytest.raises(AttributeError, match="frozen"):
        table._rows = 3


def test_a_given_array_is_copied() -> None:
    t = np.array([0.0, 1.0])
    table = Table(t=t)
    t[0] = 7.0
    assert table["t"].tolist() == [0.0, 1.0]


def test_a_scalar_is_repeated_and_lengths_must_agree() -> None:
    table = Table({"t": [0.0, 1.0, 2.0], "verdict": "ok", "width": 0.5})
    assert table["verdict"].tolist() == ["ok"] * 3
    assert table["width"].tolist() == [0.5] * 3
    with pytest.raises(ValueError, match="different lengths"):
        Table(t=[0.0, 1.0], sa=[SA])
    with pytest.raises(ValueError, match="not a scalar"):
        Table(t=0.0)


def test_empty_tables() -> None:
    assert Table().empty and len(Table()) == 0
    assert Table(t=[]).empty
    assert Table(t=[1.0]).take(slice(0, 0)).empty


def test_take_replace_and_equality() -> None:
    table = Table(t=[0.0, 1.0, 2.0], delta=[0.0, math.nan, 1.0], sa=[SA, "b", SA])
    picked = table.take(table["sa"] == SA)
    assert picked == Table(t=[0.0, 2.0], delta=[0.0, 1.0], sa=[SA, SA])
    assert table == Table(t=[0.0, 1.0, 2.0], delta=[0.0, math.nan, 1.0], sa=[SA, "b", SA])
    assert table.replace(delta=0.0)["delta"].tolist() == [0.0, 0.0, 0.0]
    assert table != table.replace(t=[0, 1, 2])  # int64 is not float64
    assert table != Table(delta=[0.0, math.nan, 1.0], t=[0.0, 1.0, 2.0], sa=[SA, "b", SA])


@pytest.mark.parametrize("seed", range(8))
def test_pivot_sums_are_pandas_pivot_table_to_the_bit(seed: int) -> None:
    """Repeated cells (Kahan-compensated in pandas), NaN keys left out, NaN values
    skipped, keys and labels sorted; an empty cell is 0."""
    rng = np.random.default_rng(seed)
    n = 400
    keys = rng.integers(0, 30, n).astype(np.float64) * 0.1
    keys[rng.random(n) < 0.05] = np.nan
    labels = [f"sa{i}" for i in rng.integers(0, 12, n)]
    values = rng.random(n) * 10.0 ** rng.integers(-6, 7, n)
    values[rng.random(n) < 0.05] = np.nan
    frame = pd.DataFrame({"k": keys, "sa": labels, "v": values})
    want = frame.pivot_table(index="k", columns="sa", values="v", aggfunc="sum").fillna(0.0)
    got = _pivot(keys, labels, values)
    assert got.keys.tolist() == want.index.tolist()
    assert got.columns == list(want.columns)
    assert np.array_equal(got.cells, want.to_numpy())
    # the drawing's sums along either axis add as pandas' DataFrame.sum did
    assert np.array_equal(got.cells.sum(axis=0), want.sum().to_numpy())
    assert np.array_equal(got.cells.sum(axis=1), want.sum(axis=1).to_numpy())
