"""Bar plots: packets per verdict over time, ESP header offsets expected vs found."""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from espforensics.plots.style import (
    _STYLE,
    VERDICT_COLOURS,
    _axes,
    _bin_width,
    _colour,
    _counts,
    _far_apart,
    _floats,
    _has,
    _labels,
    _legend_below,
    _log_y,
    _ordered,
    _seconds,
)

if TYPE_CHECKING:
    import pandas as pd

_LOG_SPAN = 100.0  # bar counts: log axis when they span 2 decades or more
_OFFSET_COLOURS = {"expected": "#9e9e9e", "found": "#1f77b4"}


def plot_verdicts(df: pd.DataFrame) -> Figure | None:
    """Stacked bars: packets per verdict per time bin, a fixed colour per verdict."""
    if not _has(df, "t", "verdict", "packets"):
        return None
    table = _counts(df.assign(verdict=_labels(df, "verdict"), t=_floats(df, "t")), "t", "verdict")
    if table.empty:
        return None
    starts = table.index.to_numpy(dtype=np.float64)
    width = _bin_width(starts)
    with mpl.rc_context(_STYLE):
        fig, ax = _axes(
            f"Packets per verdict over time ({_seconds(width)} bins)",
            "time since capture start (s)",
            "packets per bin",
        )
        bottom = np.zeros(len(starts))
        for i, verdict in enumerate(_ordered(table.columns, VERDICT_COLOURS)):
            heights = table[verdict].to_numpy(dtype=np.float64)
            colour = _colour(VERDICT_COLOURS, verdict, i)
            ax.bar(starts, heights, width, bottom, align="edge", color=colour, label=verdict)
            bottom += heights
        ax.set_xlim(float(starts.min()), float(starts.max()) + width)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        _legend_below(fig, ax)
    return fig


def plot_offsets(df: pd.DataFrame) -> Figure | None:
    """Grouped bars: packets per ESP header offset, where expected vs where found."""
    if not _has(df, "kind", "offset", "packets"):
        return None
    df = df.assign(kind=_labels(df, "kind"), offset=_floats(df, "offset"))
    table = _counts(df[df["offset"].notna()], "offset", "kind")
    if table.empty:
        return None
    log = _far_apart(table.to_numpy(dtype=np.float64).ravel(), _LOG_SPAN)
    kinds = _ordered(table.columns, _OFFSET_COLOURS)
    with mpl.rc_context(_STYLE):
        fig, ax = _axes(
            "ESP header offset: expected vs found",
            "ESP header offset from the outer IP header (bytes)",
            "packets (log scale)" if log else "packets",
        )
        slots = np.arange(len(table.index))
        width = 0.8 / len(kinds)
        for i, kind in enumerate(kinds):
            counts = table[kind].to_numpy(dtype=np.float64)
            x = slots + (i - (len(kinds) - 1) / 2) * width
            bars = ax.bar(x, counts, width, color=_colour(_OFFSET_COLOURS, kind, i), label=kind)
            ax.bar_label(bars, labels=[f"{c:,.0f}" if c else "" for c in counts], fontsize=8)
        ax.set_xticks(slots, [f"{o:.0f}" for o in table.index])
        ax.grid(False, axis="x")
        if log:
            _log_y(ax)
        ax.margins(y=0.12)  # room for the count labels
        _legend_below(fig, ax)
    return fig
