"""Bar plots: packets per verdict over time, ESP header offsets expected vs found."""

from __future__ import annotations

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
from espforensics.plots.table import Table

_LOG_SPAN = 100.0  # bar counts: log axis when they span 2 decades or more
_OFFSET_COLOURS = {"expected": "#9e9e9e", "found": "#1f77b4"}


def plot_verdicts(table: Table) -> Figure | None:
    """Stacked bars: packets per verdict per time bin, a fixed colour per verdict."""
    if not _has(table, "t", "verdict", "packets"):
        return None
    starts, verdicts, counts = _counts(
        _floats(table, "t"), _labels(table, "verdict"), _floats(table, "packets")
    )
    if not len(starts) or not verdicts:
        return None
    width = _bin_width(starts)
    with mpl.rc_context(_STYLE):
        fig, ax = _axes(
            f"Packets per verdict over time ({_seconds(width)} bins)",
            "time since capture start (s)",
            "packets per bin",
        )
        bottom = np.zeros(len(starts))
        for i, verdict in enumerate(_ordered(verdicts, VERDICT_COLOURS)):
            heights = counts[:, verdicts.index(verdict)]
            colour = _colour(VERDICT_COLOURS, verdict, i)
            ax.bar(starts, heights, width, bottom, align="edge", color=colour, label=verdict)
            bottom += heights
        ax.set_xlim(float(starts.min()), float(starts.max()) + width)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        _legend_below(fig, ax)
    return fig


def plot_offsets(table: Table) -> Figure | None:
    """Grouped bars: packets per ESP header offset, where expected vs where found."""
    if not _has(table, "kind", "offset", "packets"):
        return None
    offsets, found, counts = _counts(
        _floats(table, "offset"), _labels(table, "kind"), _floats(table, "packets")
    )
    if not len(offsets) or not found:
        return None
    log = _far_apart(counts.ravel(), _LOG_SPAN)
    kinds = _ordered(found, _OFFSET_COLOURS)
    with mpl.rc_context(_STYLE):
        fig, ax = _axes(
            "ESP header offset: expected vs found",
            "ESP header offset from the outer IP header (bytes)",
            "packets (log scale)" if log else "packets",
        )
        slots = np.arange(len(offsets))
        width = 0.8 / len(kinds)
        for i, kind in enumerate(kinds):
            heights = counts[:, found.index(kind)]
            x = slots + (i - (len(kinds) - 1) / 2) * width
            bars = ax.bar(x, heights, width, color=_colour(_OFFSET_COLOURS, kind, i), label=kind)
            ax.bar_label(bars, labels=[f"{c:,.0f}" if c else "" for c in heights], fontsize=8)
        ax.set_xticks(slots, [f"{o:.0f}" for o in offsets])
        ax.grid(False, axis="x")
        if log:
            _log_y(ax)
        ax.margins(y=0.12)  # room for the count labels
        _legend_below(fig, ax)
    return fig
