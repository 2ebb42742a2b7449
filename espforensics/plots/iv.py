"""The IV derivation plot: which sequence number each IV was built from; reuse marked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import matplotlib as mpl
import numpy as np
import numpy.typing as npt
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

from espforensics.plots.style import (
    _SA_COLOURS,
    _SA_MARKERS,
    _SIZE,
    _STYLE,
    F64,
    _flags,
    _floats,
    _has,
    _labels,
    _ordered,
)
from espforensics.plots.table import Table

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_IV_PANELS = 8  # SAs the IV derivation plot draws, one panel each
_ROWS = 12  # IV deltas spanning more rows than this go on a symmetric log axis
_SYMLOG_TICKS = 8  # on it, each delta present is a tick, up to this many
_HI_LO_FROM = 1 << 16  # deltas this large are labelled hi:lo (+0x1:00000000 = 2^32)
_Y_MARGIN = 0.08  # of the symlog axis' height, beyond the outermost points
# The linear part (-1..+1) of the symlog axis takes as much height as 3 decades each
# side, so 0 and +-1 stay rows apart beside the 9.6 decades up to 2^32.
_LINSCALE = 3.0


class _Points(NamedTuple):
    """The IV plot's points: SA label, sequence number, delta (NaN: not counter-derived)
    and whether the IV was used before."""

    sa: npt.NDArray[np.object_]
    seq64: F64
    delta: F64
    reused: npt.NDArray[np.bool_]

    def take(self, rows: npt.NDArray[np.bool_]) -> _Points:
        return _Points(self.sa[rows], self.seq64[rows], self.delta[rows], self.reused[rows])


def plot_iv_derivation(table: Table) -> Figure | None:
    """One panel per SA: which sequence number each IV was built from; reuse marked.

    Each point sits on its exact whole n: SAs get panels of their own rather
    than offsets within a row, which read as other values of n.
    """
    if not _has(table, "sa", "seq64", "delta", "reused"):
        return None
    points = _Points(
        np.array(_labels(table, "sa"), dtype=object),
        _floats(table, "seq64"),
        _floats(table, "delta"),
        _flags(table, "reused"),
    )
    known = points.take(~np.isnan(points.delta))
    if not len(known.sa):
        return None
    sas, hidden = _iv_panels(known)
    with mpl.rc_context(_STYLE):
        fig = Figure(figsize=(_SIZE[0], 1.2 + 1.5 * len(sas)), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(sas), 1, sharey=True, squeeze=False)[:, 0]
        fig.suptitle("Sequence number each ESP IV was built from (0 = the packet's own)")
        more = f" ({hidden} more SA{'s' * (hidden > 1)} not drawn: packets.csv)" if hidden else ""
        deltas = known.delta
        wide = float(deltas.max() - deltas.min()) > _ROWS
        # two lines on a symmetric log axis: one would be taller than a one-panel figure
        fig.supylabel(
            "IV built from seq + n" + ("\n(symmetric log scale)" if wide else ""), fontsize=10
        )
        hi_lo = float(np.nanmax(known.seq64)) >= 2.0**32  # ESN: seq64 past 32 bits
        for i, (ax, sa) in enumerate(zip(axes, sas, strict=True)):
            rows = known.take(known.sa == sa)
            ax.set_title(sa, loc="left", fontsize=9, fontweight="normal")
            ax.scatter(
                rows.seq64, rows.delta, s=18, facecolors="none", linewidths=0.9,
                edgecolors=_SA_COLOURS[i % len(_SA_COLOURS)],
                marker=_SA_MARKERS[i % len(_SA_MARKERS)],
            )  # fmt: skip
            _mark_reused(ax, rows.take(rows.reused))
            _integer_rows(ax, deltas)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
            if hi_lo:
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: seq_label(v)))
        axes[-1].set_xlabel("64-bit sequence number" + (" (hi:lo)" if hi_lo else "") + more)
        unplaced = int((points.reused & np.isnan(points.delta)).sum())
        _reuse_legend(fig, known, unplaced=unplaced)
    return fig


def _iv_panels(known: _Points) -> tuple[list[str], int]:
    """The SAs to draw (at most ``_IV_PANELS``, those with a deviation or reuse
    first) in label order, and how many are left out."""
    sas = _ordered(known.sa.tolist())
    odd = set(known.sa[(known.delta != 0) | known.reused].tolist())
    chosen = sorted(sas, key=lambda sa: (sa not in odd, sas.index(sa)))[:_IV_PANELS]
    return [sa for sa in sas if sa in chosen], len(sas) - len(chosen)


def _integer_rows(ax: Axes, deltas: np.ndarray[Any, np.dtype[np.float64]]) -> None:
    """Whole n on the y axis, each point on its row, rows ruled at n +- 0.5.

    Deltas more than ``_ROWS`` apart (an ESN packet sealed with hi+1 sits at
    +2^32, beside the 0s and +1s) go on a symmetric log axis instead.
    """
    low, high = float(deltas.min()), float(deltas.max())
    if high - low > _ROWS:
        _symlog_rows(ax, deltas)
        return
    ax.set_ylim(low - 0.5, high + 0.5)
    rows = np.arange(low, high + 1)
    ax.set_yticks(rows, [delta_label(v) for v in rows])
    ax.set_yticks(np.arange(low - 0.5, high + 1), minor=True)
    ax.grid(False, axis="y", which="major")
    ax.grid(True, axis="y", which="minor")
    ax.tick_params(axis="y", which="minor", length=0)


def delta_label(value: float) -> str:
    """0, +1, -3 ... and past 16 bits in the hi:lo style of the reports: +0x1:00000000."""
    n = int(value)
    if abs(n) < _HI_LO_FROM:
        return f"{n:+d}" if n else "0"
    sign, m = ("-" if n < 0 else "+"), abs(n)
    return f"{sign}{m >> 32:#x}:{m & 0xFFFFFFFF:08x}"


def seq_label(value: float) -> str:
    """A 64-bit sequence number as hi:lo, as the reports write ESN numbers."""
    n = max(0, int(value))
    return f"{n >> 32:#x}:{n & 0xFFFFFFFF:08x}"


def _symlog_rows(ax: Axes, deltas: np.ndarray[Any, np.dtype[np.float64]]) -> None:
    """Linear within +-1, logarithmic beyond: 0, +-1 and +-2^32 all readable.

    The ticks are the deltas present, 0 and +-1; the limits leave a margin of
    ``_Y_MARGIN`` of the axis beyond the outermost points, so none is clipped.
    """
    ax.set_yscale("symlog", linthresh=1.0, linscale=_LINSCALE)
    present = np.unique(np.append(deltas, [-1.0, 0.0, 1.0]))  # the linear part, labelled
    ticks = present if present.size <= _SYMLOG_TICKS else _symlog_ticks(present)
    ax.set_yticks(ticks, [delta_label(v) for v in ticks])
    ax.yaxis.set_minor_locator(NullLocator())
    scale = ax.yaxis.get_transform()
    lo, hi = scale.transform(np.array([[present[0]], [present[-1]]]))[:, 0]
    pad = _Y_MARGIN * (hi - lo)
    bottom, top = scale.inverted().transform(np.array([[lo - pad], [hi + pad]]))[:, 0]
    ax.set_ylim(float(bottom), float(top))


def _symlog_ticks(present: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[Any, Any]:
    """Too many deltas to label each: 0, +-1 and the powers 2^8, 2^16, 2^32 ... in range."""
    marks = [0.0, 1.0, -1.0] + [s * 2.0**e for e in (8, 16, 32, 48) for s in (1.0, -1.0)]
    low, high = float(present[0]), float(present[-1])
    return np.array(sorted(m for m in marks if low <= m <= high or m == 0.0))


def _mark_reused(ax: Axes, reused: _Points) -> None:
    """Red crosses on the panel's reused IVs."""
    if not len(reused.sa):
        return
    ax.scatter(
        reused.seq64, reused.delta, s=40, marker="x", color="#d62728",
        linewidths=1.4, zorder=3,
    )  # fmt: skip


def _reuse_legend(fig: Figure, known: _Points, unplaced: int) -> None:
    """One legend below the panels for the red crosses; it counts the reused IVs
    that have no delta and so no place on the plot."""
    shown = int(known.reused.sum())
    if not shown and not unplaced:
        return
    label = f"IV reused ({shown}"
    label += f" shown, {unplaced} not: IV not counter-derived)" if unplaced else ")"
    cross = Line2D([], [], linestyle="none", marker="x", color="#d62728", markeredgewidth=1.4)
    fig.legend([cross], [label], loc="outside lower center")
