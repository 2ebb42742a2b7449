"""Time plots of SAs: throughput per SA, sequence gaps, duplicates and reorders."""

from __future__ import annotations

from typing import Any, NamedTuple

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from espforensics.plots.style import (
    _OTHER_COLOURS,
    _SA_COLOURS,
    _SIZE,
    _STYLE,
    F64,
    _axes,
    _bin_width,
    _far_apart,
    _floats,
    _has,
    _labels,
    _legend_below,
    _log_y,
    _ordered,
    _pivot,
    _seconds,
)
from espforensics.plots.table import Table

# throughput: log axis when one SA's peak is under 1/20 of another's, as its line
# would lie flat on zero (the GSO bug: Gbit/s one way, Mbit/s the other)
_PEAK_RATIO = 20.0
_MAX_BINS = 600  # throughput points per SA at most, whatever the capture's time span
_MAX_LINES = 12  # SAs drawn as lines of their own; more are summed into one line
_WIDE_SPAN = 1e6  # s: a time axis this long gets fewer ticks, as its labels are long
# event -> (colour, marker, lane offset within the SA's row)
_EVENT_STYLE = {
    "gap": ("#d62728", "v", -0.22),
    "duplicate": ("#ff7f0e", "s", 0.0),
    "reordered": ("#9467bd", "^", 0.22),
}


class _Lines(NamedTuple):
    """Mbit/s per bin (rows, bins 0, 1, 2 ...) and SA (columns, in ``sas`` order)."""

    sas: list[str]
    rates: F64


def _throughput_table(t: F64, sa: list[str], rate: F64, given: F64) -> tuple[_Lines, float, float]:
    """Mbit/s per (bin, SA), missing bins 0; the bin width and the first bin's start.

    The width is the data's own (``given``, the ``width`` column), else the smallest
    step between bin starts. Whatever the time span, at most ``_MAX_BINS`` bins are made:
    beyond, ``k`` neighbouring bins become one whose rate is their mean (the
    same bytes over ``k`` times the time), and the title gives that width.
    """
    given = given[np.isfinite(given) & (given > 0)]
    width = float(given.max()) if given.size else _bin_width(t)
    first = float(t.min())
    steps = np.rint((t - first) / width)  # floats: a bin count may not fit int64
    merge = float(max(1.0, np.ceil((float(steps.max()) + 1) / _MAX_BINS)))
    bins = (steps // merge).astype(np.int64).astype(np.float64)
    pivot = _pivot(bins, sa, rate / merge)
    rates = np.zeros((int(pivot.keys.max()) + 1, len(pivot.columns)))
    rates[pivot.keys.astype(np.int64)] = pivot.cells
    return _Lines(pivot.columns, rates), width * merge, first


def _busiest(table: _Lines) -> tuple[_Lines, list[str]]:
    """The table with at most ``_MAX_LINES`` columns, and their drawing order.

    Beyond that a legend of one entry per SA covers the plot (a capture of
    60 SAs collapsed the axes): the ``_MAX_LINES - 1`` SAs that sent the
    most bytes keep their line, the others are summed into one last line.
    """
    if len(table.sas) <= _MAX_LINES:
        return table, _ordered(table.sas)
    total = dict(zip(table.sas, table.rates.sum(axis=0).tolist(), strict=True))
    by_bytes = sorted(table.sas, key=lambda sa: (-total[sa], sa))
    keep = sorted(by_bytes[: _MAX_LINES - 1])
    rest = by_bytes[_MAX_LINES - 1 :]
    other = f"{len(rest)} other SAs, summed"
    at = {sa: i for i, sa in enumerate(table.sas)}
    summed = table.rates[:, [at[sa] for sa in rest]].sum(axis=1)
    rates = np.column_stack([table.rates[:, [at[sa] for sa in keep]], summed])
    return _Lines([*keep, other], rates), [*keep, other]


def plot_throughput(table: Table) -> Figure | None:
    """One line per SA: Mbit/s per time bin (missing bins are 0)."""
    if not _has(table, "t", "sa", "mbit_s"):
        return None
    t, rate = _floats(table, "t"), _floats(table, "mbit_s")
    given = _floats(table, "width") if "width" in table else np.empty(0)
    rows = ~np.isnan(rate) & ~np.isnan(t)
    if not rows.any():
        return None
    sas = [label for label, row in zip(_labels(table, "sa"), rows.tolist(), strict=True) if row]
    lines, width, first = _throughput_table(t[rows], sas, rate[rows], given[rows[: len(given)]])
    lines, order = _busiest(lines)
    centres = first + (np.arange(len(lines.rates), dtype=np.float64) + 0.5) * width
    log = _far_apart(lines.rates.max(axis=0), _PEAK_RATIO)
    gaps = log and bool((lines.rates <= 0).any())  # log axes cannot show a 0
    with mpl.rc_context(_STYLE):
        fig, ax = _axes(
            f"Throughput per SA ({_seconds(width)} bins{'; a break = no packets' if gaps else ''})",
            "time since capture start (s)",
            "throughput (Mbit/s, log scale)" if log else "throughput (Mbit/s)",
        )
        marker = "o" if len(centres) <= 60 else None
        for i, sa in enumerate(order):
            values = lines.rates[:, lines.sas.index(sa)]
            colour = _SA_COLOURS[i % len(_SA_COLOURS)]
            style = "-" if i < len(_SA_COLOURS) else "--"  # colours repeat: tell them apart
            ax.plot(centres, values, style, color=colour, marker=marker, markersize=3, label=sa)
        if log:
            _log_y(ax, nonpositive="mask")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlim(left=min(0.0, first))
        if width * len(centres) >= _WIDE_SPAN:  # 11-digit tick labels: fewer of them
            ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        _legend_below(fig, ax)
    return fig


def plot_sequence(table: Table) -> Figure | None:
    """Sequence events over time: one band per SA, one marker per event kind."""
    if not _has(table, "t", "sa", "event", "count"):
        return None
    sa = np.array(_labels(table, "sa"), dtype=object)
    event = np.array(_labels(table, "event"), dtype=object)
    t, count = _floats(table, "t"), _floats(table, "count")
    sas = _ordered(sa.tolist())
    row = {label: i for i, label in enumerate(sas)}
    with mpl.rc_context(_STYLE):
        fig, ax = _axes(
            "Sequence number gaps, duplicates and reorders per SA",
            "time since capture start (s)",
            "",
            height=max(_SIZE[1], 1.8 + 0.4 * len(sas)),
        )
        for i in range(0, len(sas), 2):  # shade every other SA's band
            ax.axhspan(i - 0.5, i + 0.5, color="#f0f0f0", zorder=0, linewidth=0)
        for i, kind in enumerate(_ordered(event.tolist(), _EVENT_STYLE)):
            rows = event == kind
            colour, marker, lane = _EVENT_STYLE.get(kind, (_OTHER_COLOURS[i % 3], "o", 0.0))
            counts = count[rows]
            ax.scatter(
                t[rows], [row[label] + lane for label in sa[rows].tolist()],
                s=_marker_area(counts), color=colour, marker=marker, alpha=0.85, zorder=3,
                label=f"{kind} ({int(np.nansum(counts))} in all)",
            )  # fmt: skip
        # "0x00001001 a>b" on two lines: the SA labels would take half the width
        ax.set_yticks(range(len(sas)), [label.replace(" ", "\n", 1) for label in sas])
        ax.set_ylim(len(sas) - 0.5, -0.5)  # first SA on top
        ax.set_xlim(left=min(0.0, _least(t)))
        ax.grid(False, axis="y")
        _legend_below(fig, ax, title="marker area grows with the count")
    return fig


def _least(values: F64) -> float:
    """The smallest value that is not NaN; NaN when there is none."""
    present = values[~np.isnan(values)]
    return float(present.min()) if present.size else float("nan")


def _marker_area(counts: np.ndarray[Any, np.dtype[np.float64]]) -> list[float]:
    """Marker area grows with the count (a gap of 100 shows bigger than one of 1)."""
    clipped = np.nan_to_num(counts, nan=1.0).clip(1.0, 400.0)
    return [20.0 + 14.0 * float(np.sqrt(c - 1.0)) for c in clipped]
