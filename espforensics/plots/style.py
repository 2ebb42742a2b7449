"""The plots' shared style, palettes and helpers (the drawing modules use them).

Everything here is private to the ``espforensics.plots`` package: the
underscore names are shared between its modules only. The inputs are
``Table`` values (plots/table.py); ``_pivot`` sums a value per (row key,
column key) cell in the order and with the arithmetic pandas' ``pivot_table``
used before it, so the plots stay byte-identical.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from espforensics.model.enums import Verdict
from espforensics.plots.table import Table

F64 = np.ndarray[Any, np.dtype[np.float64]]

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.typing import RcKeyType  # matplotlib >= 3.10; annotations only

_SIZE = (8.0, 4.5)  # inches
_DPI = 120

# One shared style, applied with rc_context while drawing and while saving.
_STYLE: dict[RcKeyType, Any] = {
    "figure.figsize": _SIZE,
    "figure.dpi": _DPI,
    "figure.autolayout": False,  # no layout unless a figure asks for one, so that
    "figure.constrained_layout.use": False,  # set_layout_engine(None) removes it (_save)
    "savefig.dpi": _DPI,
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "axes.grid": True,
    "axes.axisbelow": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.formatter.useoffset": False,  # "+4.295e9" offsets hide 64-bit sequence numbers
    "axes.formatter.limits": (-5, 12),
    "grid.alpha": 0.35,
    "grid.linewidth": 0.6,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "svg.fonttype": "path",  # glyphs as paths: the same file whatever fonts the viewer has
    "svg.hashsalt": "espforensics",  # stable clip-path ids, so reruns give identical SVGs
}

# Fixed per verdict, so plots of different captures compare at a glance;
# the order is the stacking order, bottom up.
VERDICT_COLOURS: dict[str, str] = {
    Verdict.OK: "#2ca02c",  # green
    Verdict.ESP_MISPLACED: "#d62728",  # red
    Verdict.AUTH_FAIL: "#ff7f0e",  # orange
    Verdict.BAD_TRAILER: "#9467bd",  # purple
    Verdict.UNKNOWN_SA: "#7f7f7f",  # grey
    Verdict.TRUNCATED: "#8c564b",  # brown
    Verdict.SHORT: "#c49c94",  # light brown: whole, yet too short
    Verdict.FRAGMENT: "#1f77b4",  # blue
    Verdict.UNDECODABLE: "#000000",  # black
    Verdict.NOT_ESP: "#c7c7c7",  # light grey
    Verdict.NOT_SELECTED: "#f0f0f0",  # lighter still: not analyzed
}
_OTHER_COLOURS = ("#e377c2", "#bcbd22", "#17becf")  # for values outside a fixed palette
# Per SA (in label order): tab10 without red, which marks reused IVs.
_SA_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_SA_MARKERS = ("o", "s", "^", "D", "v", "P")


def _has(table: Table, *columns: str) -> bool:
    """False for an empty table; raises ValueError when a column is missing."""
    if table.empty:
        return False
    missing = [c for c in columns if c not in table]
    if missing:
        raise ValueError(f"plot input lacks column(s) {', '.join(missing)}")
    return True


def _floats(table: Table, column: str) -> F64:
    """A column as float64, NaN where empty (None in a text or object column)."""
    values = table[column]
    if values.dtype.kind == "O":
        return np.array([np.nan if v is None else v for v in values.tolist()], np.float64)
    return np.asarray(values, dtype=np.float64)


def _flags(table: Table, column: str) -> npt.NDArray[np.bool_]:
    """A column as bool, False where empty (None or NaN in an object column)."""
    values = table[column]
    if values.dtype.kind == "O":
        return np.array([v is not None and not np.isnan(v) and bool(v) for v in values.tolist()])
    return np.asarray(values, dtype=np.bool_)


def _labels(table: Table, column: str) -> list[str]:
    return [str(v) for v in table[column].tolist()]


def _ordered(values: Iterable[str], first: Iterable[str] = ()) -> list[str]:
    """The distinct values: those in ``first`` in that order, then the rest sorted."""
    present = set(values)
    known = [v for v in first if v in present]
    return known + sorted(present - set(known))


def _colour(palette: dict[str, str], value: str, index: int) -> str:
    return palette.get(value, _OTHER_COLOURS[index % len(_OTHER_COLOURS)])


def _bin_width(starts: np.ndarray[Any, np.dtype[np.float64]]) -> float:
    """The smallest step between distinct bin starts (1 s for a single bin)."""
    steps = np.diff(np.unique(starts))
    return float(steps.min()) if steps.size else 1.0


def _seconds(width: float) -> str:
    """A bin width for a title, to 2 significant digits: 0.0694212 -> "0.069 s"."""
    return f"{float(f'{width:.2g}'):g} s"


def _far_apart(values: np.ndarray[Any, np.dtype[np.float64]], ratio: float) -> bool:
    """True when the largest positive value is ``ratio`` times the smallest."""
    positive = values[values > 0]
    return bool(positive.size) and float(positive.max()) >= ratio * float(positive.min())


class _Pivot(NamedTuple):
    """Sums per cell: ``cells[i, j]`` for row key ``keys[i]`` and column ``columns[j]``.

    ``cells`` is C-ordered, rows by columns, as the values of the DataFrame
    ``pivot_table`` made: its sums along either axis add in the same order.
    """

    keys: F64
    columns: list[str]
    cells: F64


def _pivot(keys: F64, labels: list[str], values: F64) -> _Pivot:
    """``values`` summed per (key, label), keys sorted, labels sorted; 0 where no row.

    Rows whose key is NaN are left out and NaN values are skipped, as in
    ``pivot_table(aggfunc="sum")``; a cell's rows are added in row order with
    Kahan's compensation, as pandas' grouped sum adds them.
    """
    keep = ~np.isnan(keys)
    index, row = np.unique(keys[keep], return_inverse=True)
    columns, column = np.unique(np.array(labels, dtype=object)[keep], return_inverse=True)
    cell = row.astype(np.int64) * len(columns) + column
    values = values[keep]
    sums = np.zeros(len(index) * len(columns))
    carry = np.zeros(len(sums))
    order = np.argsort(cell, kind="stable")
    ordered = cell[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(cell) else cell
    rank = np.arange(len(cell)) - np.repeat(starts, np.diff(np.r_[starts, len(cell)]))
    for k in range(int(rank.max()) + 1 if len(rank) else 0):  # 1 pass but for repeated cells
        rows = order[rank == k]
        at, value = cell[rows], values[rows]
        add = ~np.isnan(value)
        at, value = at[add], value[add]
        y = value - carry[at]
        t = sums[at] + y
        c = (t - sums[at]) - y
        carry[at] = np.where(np.isnan(c), 0.0, c)  # an infinite value: no compensation
        sums[at] = t
    cells = sums.reshape(len(index), len(columns))
    return _Pivot(index, [str(c) for c in columns.tolist()], cells)


def _counts(keys: F64, labels: list[str], packets: F64) -> tuple[F64, list[str], F64]:
    """Packets summed per (key, label) cell, as whole numbers (floats holding integers);
    the labels without packets dropped."""
    pivot = _pivot(keys, labels, packets)
    counts = pivot.cells.astype(np.int64)
    used = counts.sum(axis=0) > 0
    columns = [c for c, u in zip(pivot.columns, used.tolist(), strict=True) if u]
    return pivot.keys, columns, counts[:, used].astype(np.float64)


def _axes(title: str, xlabel: str, ylabel: str, height: float = _SIZE[1]) -> tuple[Figure, Axes]:
    """A figure with one Axes, labelled; call inside ``rc_context(_STYLE)``."""
    fig = Figure(figsize=(_SIZE[0], height), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return fig, ax


def _legend_below(fig: Figure, ax: Axes, title: str | None = None) -> None:
    """One legend below the plot, in rows: it never covers data and leaves the
    plot its full width (SA labels are ~30 characters long)."""
    handles, labels = ax.get_legend_handles_labels()
    longest = max(len(label) for label in labels)
    ncols = min(len(labels), 2 if longest > 24 else 5)
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, title=title)


def _log_y(ax: Axes, nonpositive: str = "clip") -> None:
    """A log y axis labelled 0.01, 0.1, 1, 10, 1,000 rather than 10^-2 ... 10^3.

    Bars need ``clip`` (they start at 0); lines use ``mask`` so that a bin
    without traffic breaks the line instead of plunging to 10^-300.
    """
    ax.set_yscale("log", nonpositive=nonpositive)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
