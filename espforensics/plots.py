"""Plots of one analysis, drawn with matplotlib and written as PNG and SVG.

In: a ``PlotData`` of five small pandas DataFrames that tables.py derives
from the packets table (column contract on ``PlotData``). Out: each
``plot_*`` function returns a ``Figure``, or ``None`` when the capture has
nothing to show; ``write_plots`` saves ``<name>.png`` and ``<name>.svg`` per
drawn plot and returns one ``PlotOutcome`` per entry of ``PLOTS``.
Raises ``ValueError`` when a non-empty DataFrame lacks a contract column,
and ``OSError`` from the file system (callers wrap it).

The only module that imports matplotlib. It never imports pyplot: a figure
is a ``Figure`` with its own Agg canvas, so no backend is chosen globally,
no figure registry fills up and a figure is freed when dropped (the pyplot
rule "close every figure" has nothing to close). pandas is imported for
type checking only; the frames are read through their own methods, with
explicit dtypes so numpy- and Arrow-backed columns (NaN or NA) both work.
The shared style is applied with ``rc_context``, which changes matplotlib's
process-wide rcParams while a plot is drawn or saved: draw from one thread
at a time (batch runs use processes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import matplotlib as mpl
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter, NullLocator

from espforensics.model import PlotOutcome, Verdict

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.typing import RcKeyType  # matplotlib >= 3.10; annotations only

PLOTS_DIR = "plots"  # the folder write_plots is given, relative to the output folder
_SIZE = (8.0, 4.5)  # inches
_DPI = 120
_LOG_SPAN = 100.0  # bar counts: log axis when they span 2 decades or more
# throughput: log axis when one SA's peak is under 1/20 of another's, as its line
# would lie flat on zero (the GSO bug: Gbit/s one way, Mbit/s the other)
_PEAK_RATIO = 20.0
_MAX_BINS = 600  # throughput points per SA at most, whatever the capture's time span
_WIDE_SPAN = 1e6  # s: a time axis this long gets fewer ticks, as its labels are long

# One shared style, applied with rc_context while drawing and while saving.
_STYLE: dict[RcKeyType, Any] = {
    "figure.figsize": _SIZE,
    "figure.dpi": _DPI,
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
    Verdict.FRAGMENT: "#1f77b4",  # blue
    Verdict.UNDECODABLE: "#000000",  # black
    Verdict.NOT_ESP: "#c7c7c7",  # light grey
}
_OTHER_COLOURS = ("#e377c2", "#bcbd22", "#17becf")  # for values outside a fixed palette
# Per SA (in label order): tab10 without red, which marks reused IVs.
_SA_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_SA_MARKERS = ("o", "s", "^", "D", "v", "P")
_IV_PANELS = 8  # SAs the IV derivation plot draws, one panel each
_ROWS = 12  # IV deltas spanning more rows than this go on a symmetric log axis
_SYMLOG_TICKS = 8  # on it, each delta present is a tick, up to this many
_HI_LO_FROM = 1 << 16  # deltas this large are labelled hi:lo (+0x1:00000000 = 2^32)
_Y_MARGIN = 0.08  # of the symlog axis' height, beyond the outermost points
# The linear part (-1..+1) of the symlog axis takes as much height as 3 decades each
# side, so 0 and +-1 stay rows apart beside the 9.6 decades up to 2^32.
_LINSCALE = 3.0
_OFFSET_COLOURS = {"expected": "#9e9e9e", "found": "#1f77b4"}
# event -> (colour, marker, lane offset within the SA's row)
_EVENT_STYLE = {
    "gap": ("#d62728", "v", -0.22),
    "duplicate": ("#ff7f0e", "s", 0.0),
    "reordered": ("#9467bd", "^", 0.22),
}


@dataclass(frozen=True, slots=True)
class PlotData:
    """The five inputs of the plots, one DataFrame each (one row per item).

    ``verdicts``: ``t`` float (bin start, s since capture start),
    ``verdict`` str (a ``Verdict`` value), ``packets`` int.
    ``offsets``: ``kind`` str ("expected" or "found"), ``offset`` int
    (bytes from the outer IP header), ``packets`` int.
    ``iv``: ``sa`` str label, ``seq64`` int, ``delta`` float (0: IV built
    from the packet's own seq64, n: from seq64 + n, NaN/NA: not
    counter-derived), ``reused`` bool (IV used before under the same key).
    ``throughput``: ``t`` float (bin start, s), ``sa`` str, ``mbit_s`` float,
    and optionally ``width`` float (the bin width in s; else the smallest
    step between bin starts).
    ``sequence``: ``t`` float (s since capture start), ``sa`` str,
    ``event`` str ("gap", "duplicate", "reordered"), ``count`` int (for a
    gap: sequence numbers missing).
    """

    verdicts: pd.DataFrame
    offsets: pd.DataFrame
    iv: pd.DataFrame
    throughput: pd.DataFrame
    sequence: pd.DataFrame


# -- helpers ---------------------------------------------------------------


def _has(df: pd.DataFrame, *columns: str) -> bool:
    """False for an empty frame; raises ValueError when a column is missing."""
    if df.empty:
        return False
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"plot input lacks column(s) {', '.join(missing)}")
    return True


def _floats(df: pd.DataFrame, column: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    return df[column].to_numpy(dtype=np.float64, na_value=np.nan)


def _labels(df: pd.DataFrame, column: str) -> list[str]:
    return [str(v) for v in df[column].tolist()]


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


def _counts(df: pd.DataFrame, index: str, columns: str) -> pd.DataFrame:
    """Packets summed per (index, columns) cell; columns without packets dropped."""
    table = df.pivot_table(index=index, columns=columns, values="packets", aggfunc="sum")
    table = table.fillna(0).astype(np.int64)
    return table.loc[:, table.sum() > 0]


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


# -- the plots ---------------------------------------------------------------


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


def plot_iv_derivation(df: pd.DataFrame) -> Figure | None:
    """One panel per SA: which sequence number each IV was built from; reuse marked.

    Each point sits on its exact whole n: SAs get panels of their own rather
    than offsets within a row, which read as other values of n.
    """
    if not _has(df, "sa", "seq64", "delta", "reused"):
        return None
    df = df.assign(
        sa=_labels(df, "sa"),
        seq64=_floats(df, "seq64"),
        delta=_floats(df, "delta"),
        reused=df["reused"].to_numpy(dtype=bool, na_value=False),
    )
    known = df[df["delta"].notna()]
    if known.empty:
        return None
    sas, hidden = _iv_panels(known)
    with mpl.rc_context(_STYLE):
        fig = Figure(figsize=(_SIZE[0], 1.2 + 1.5 * len(sas)), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(sas), 1, sharey=True, squeeze=False)[:, 0]
        fig.suptitle("Sequence number each ESP IV was built from (0 = the packet's own)")
        more = f" ({hidden} more SA{'s' * (hidden > 1)} not drawn: packets.csv)" if hidden else ""
        deltas = known["delta"].to_numpy(dtype=np.float64)
        wide = float(deltas.max() - deltas.min()) > _ROWS
        fig.supylabel(
            "IV built from seq + n" + (" (symmetric log scale)" if wide else ""), fontsize=10
        )
        hi_lo = float(known["seq64"].max()) >= 2.0**32  # ESN: seq64 past 32 bits
        for i, (ax, sa) in enumerate(zip(axes, sas, strict=True)):
            rows = known[known["sa"] == sa]
            ax.set_title(sa, loc="left", fontsize=9, fontweight="normal")
            ax.scatter(
                rows["seq64"], rows["delta"], s=18, facecolors="none", linewidths=0.9,
                edgecolors=_SA_COLOURS[i % len(_SA_COLOURS)],
                marker=_SA_MARKERS[i % len(_SA_MARKERS)],
            )  # fmt: skip
            _mark_reused(ax, rows[rows["reused"]])
            _integer_rows(ax, deltas)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
            if hi_lo:
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: seq_label(v)))
        axes[-1].set_xlabel("64-bit sequence number" + (" (hi:lo)" if hi_lo else "") + more)
        _reuse_legend(fig, known, unplaced=int((df["reused"] & df["delta"].isna()).sum()))
    return fig


def _iv_panels(known: pd.DataFrame) -> tuple[list[str], int]:
    """The SAs to draw (at most ``_IV_PANELS``, those with a deviation or reuse
    first) in label order, and how many are left out."""
    sas = _ordered(known["sa"])
    odd = set(known.loc[(known["delta"] != 0) | known["reused"], "sa"])
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


def _mark_reused(ax: Axes, reused: pd.DataFrame) -> None:
    """Red crosses on the panel's reused IVs."""
    if reused.empty:
        return
    ax.scatter(
        reused["seq64"], reused["delta"], s=40, marker="x", color="#d62728",
        linewidths=1.4, zorder=3,
    )  # fmt: skip


def _reuse_legend(fig: Figure, known: pd.DataFrame, unplaced: int) -> None:
    """One legend below the panels for the red crosses; it counts the reused IVs
    that have no delta and so no place on the plot."""
    shown = int(known["reused"].sum())
    if not shown and not unplaced:
        return
    label = f"IV reused ({shown}"
    label += f" shown, {unplaced} not: IV not counter-derived)" if unplaced else ")"
    cross = Line2D([], [], linestyle="none", marker="x", color="#d62728", markeredgewidth=1.4)
    fig.legend([cross], [label], loc="outside lower center")


def _throughput_table(df: pd.DataFrame) -> tuple[pd.DataFrame, float, float]:
    """Mbit/s per (bin, SA), missing bins 0; the bin width and the first bin's start.

    The width is the data's own (``width``), else the smallest step between
    bin starts. Whatever the time span, at most ``_MAX_BINS`` bins are made:
    beyond, ``k`` neighbouring bins become one whose rate is their mean (the
    same bytes over ``k`` times the time), and the title gives that width.
    """
    starts = df["t"].to_numpy(dtype=np.float64)
    given = _floats(df, "width") if "width" in df.columns else np.empty(0)
    given = given[np.isfinite(given) & (given > 0)]
    width = float(given.max()) if given.size else _bin_width(starts)
    first = float(starts.min())
    steps = np.rint((starts - first) / width)  # floats: a bin count may not fit int64
    merge = float(max(1.0, np.ceil((float(steps.max()) + 1) / _MAX_BINS)))
    df = df.assign(bin=(steps // merge).astype(np.int64), mbit_s=df["mbit_s"] / merge)
    table = df.pivot_table(index="bin", columns="sa", values="mbit_s", aggfunc="sum")
    return table.reindex(range(int(table.index.max()) + 1)).fillna(0.0), width * merge, first


def plot_throughput(df: pd.DataFrame) -> Figure | None:
    """One line per SA: Mbit/s per time bin (missing bins are 0)."""
    if not _has(df, "t", "sa", "mbit_s"):
        return None
    df = df.assign(sa=_labels(df, "sa"), t=_floats(df, "t"), mbit_s=_floats(df, "mbit_s"))
    df = df[df["mbit_s"].notna() & df["t"].notna()]
    if df.empty:
        return None
    table, width, first = _throughput_table(df)
    centres = first + (table.index.to_numpy(dtype=np.float64) + 0.5) * width
    log = _far_apart(table.max().to_numpy(dtype=np.float64), _PEAK_RATIO)
    gaps = log and bool((table.to_numpy() <= 0).any())  # log axes cannot show a 0
    with mpl.rc_context(_STYLE):
        fig, ax = _axes(
            f"Throughput per SA ({_seconds(width)} bins{'; a break = no packets' if gaps else ''})",
            "time since capture start (s)",
            "throughput (Mbit/s, log scale)" if log else "throughput (Mbit/s)",
        )
        marker = "o" if len(centres) <= 60 else None
        for i, sa in enumerate(_ordered(table.columns)):
            values = table[sa].to_numpy(dtype=np.float64)
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


def plot_sequence(df: pd.DataFrame) -> Figure | None:
    """Sequence events over time: one band per SA, one marker per event kind."""
    if not _has(df, "t", "sa", "event", "count"):
        return None
    df = df.assign(
        sa=_labels(df, "sa"), event=_labels(df, "event"), t=_floats(df, "t"),
        count=_floats(df, "count"),
    )  # fmt: skip
    sas = _ordered(df["sa"])
    row = {sa: i for i, sa in enumerate(sas)}
    with mpl.rc_context(_STYLE):
        fig, ax = _axes(
            "Sequence number gaps, duplicates and reorders per SA",
            "time since capture start (s)",
            "",
            height=max(_SIZE[1], 1.8 + 0.4 * len(sas)),
        )
        for i in range(0, len(sas), 2):  # shade every other SA's band
            ax.axhspan(i - 0.5, i + 0.5, color="#f0f0f0", zorder=0, linewidth=0)
        for i, event in enumerate(_ordered(df["event"], _EVENT_STYLE)):
            rows = df[df["event"] == event]
            colour, marker, lane = _EVENT_STYLE.get(event, (_OTHER_COLOURS[i % 3], "o", 0.0))
            counts = rows["count"].to_numpy(dtype=np.float64)
            ax.scatter(
                rows["t"], [row[sa] + lane for sa in rows["sa"]], s=_marker_area(counts),
                color=colour, marker=marker, alpha=0.85, zorder=3,
                label=f"{event} ({int(np.nansum(counts))} in all)",
            )  # fmt: skip
        # "0x00001001 a>b" on two lines: the SA labels would take half the width
        ax.set_yticks(range(len(sas)), [sa.replace(" ", "\n", 1) for sa in sas])
        ax.set_ylim(len(sas) - 0.5, -0.5)  # first SA on top
        ax.set_xlim(left=min(0.0, float(df["t"].min())))
        ax.grid(False, axis="y")
        _legend_below(fig, ax, title="marker area grows with the count")
    return fig


def _marker_area(counts: np.ndarray[Any, np.dtype[np.float64]]) -> list[float]:
    """Marker area grows with the count (a gap of 100 shows bigger than one of 1)."""
    clipped = np.nan_to_num(counts, nan=1.0).clip(1.0, 400.0)
    return [20.0 + 14.0 * float(np.sqrt(c - 1.0)) for c in clipped]


# -- registry and files ------------------------------------------------------


class PlotSpec(NamedTuple):
    """One plot: its file name, its function, its ``PlotData`` field, and
    what the capture lacks when the function returns ``None``."""

    name: str
    draw: Callable[[pd.DataFrame], Figure | None]
    data: str
    missing: str


PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("verdicts", plot_verdicts, "verdicts", "packets"),
    PlotSpec("offsets", plot_offsets, "offsets", "ESP header offsets"),
    PlotSpec("iv_derivation", plot_iv_derivation, "iv", "counter-derived IVs"),
    PlotSpec("throughput", plot_throughput, "throughput", "ESP traffic of a known SA"),
    PlotSpec("sequence", plot_sequence, "sequence", "sequence gaps, duplicates or reorders"),
)


def write_plots(data: PlotData, folder: Path) -> tuple[PlotOutcome, ...]:
    """Draw every plot of ``PLOTS``; save ``folder/<name>.png`` and ``.svg``.

    ``folder`` is ``<output folder>/plots``, created only if a plot is
    drawn. The files are byte-identical across reruns on the same data.
    """
    outcomes = []
    for spec in PLOTS:
        fig = spec.draw(getattr(data, spec.data))
        if fig is None:
            outcomes.append(
                PlotOutcome(spec.name, (), skipped=f"no {spec.missing} in this capture")
            )
            continue
        folder.mkdir(parents=True, exist_ok=True)
        _save(fig, folder / spec.name)
        files = (f"{PLOTS_DIR}/{spec.name}.png", f"{PLOTS_DIR}/{spec.name}.svg")
        outcomes.append(PlotOutcome(spec.name, files))
    return tuple(outcomes)


def _save(fig: Figure, stem: Path) -> None:
    """PNG without the software stamp, SVG without date or creator."""
    with mpl.rc_context(_STYLE):
        fig.savefig(stem.with_suffix(".png"), format="png", dpi=_DPI, metadata={"Software": None})
        fig.savefig(
            stem.with_suffix(".svg"), format="svg", metadata={"Date": None, "Creator": None}
        )
