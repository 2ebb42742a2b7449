"""Plots of one analysis, drawn with matplotlib and written as PNG and SVG.

In: a ``PlotData`` of five small ``Table`` values (named numpy columns,
plots/table.py) that plots/data.py derives from the packets table (column
contract on ``PlotData``). Out: each ``plot_*`` function returns a
``Figure``, or ``None`` when the capture has nothing to show; ``write_plots``
saves ``<name>.png`` and ``<name>.svg`` per drawn plot and returns one
``PlotOutcome`` per entry of ``PLOTS``. Raises ``ValueError`` when a
non-empty table lacks a contract column, and ``OSError`` from the file
system (callers wrap it).

The only package that imports matplotlib. It never imports pyplot: a figure
is a ``Figure`` with its own Agg canvas, so no backend is chosen globally,
no figure registry fills up and a figure is freed when dropped (the pyplot
rule "close every figure" has nothing to close). No pandas: a run that
draws plots never imports it (0.25 s), and the tables are small.
The shared style is applied with ``rc_context``, which changes matplotlib's
process-wide rcParams while a plot is drawn or saved: draw from one thread
at a time (batch runs use processes). ``write_plots`` lays each figure out
once (the constrained layout, on the PNG's canvas) and draws each file from
that layout: one draw a file, where ``savefig`` alone would lay the figure
out and draw it twice for each (docs/performance.md, "Plots, fewer CPU
seconds").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import matplotlib as mpl

from espforensics.model.records import PlotOutcome
from espforensics.plots.bars import plot_offsets, plot_verdicts
from espforensics.plots.iv import delta_label, plot_iv_derivation, seq_label
from espforensics.plots.lines import plot_sequence, plot_throughput
from espforensics.plots.style import _DPI, _STYLE, VERDICT_COLOURS
from espforensics.plots.table import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "PLOTS",
    "PLOTS_DIR",
    "VERDICT_COLOURS",
    "PlotData",
    "PlotSpec",
    "Table",
    "delta_label",
    "plot_iv_derivation",
    "plot_offsets",
    "plot_sequence",
    "plot_throughput",
    "plot_verdicts",
    "seq_label",
    "write_plots",
]

PLOTS_DIR = "plots"  # the folder write_plots is given, relative to the output folder


@dataclass(frozen=True, slots=True)
class PlotData:
    """The five inputs of the plots, one ``Table`` each (one row per item).

    ``verdicts``: ``t`` float (bin start, s since capture start),
    ``verdict`` str (a ``Verdict`` value), ``packets`` int.
    ``offsets``: ``kind`` str ("expected" or "found"), ``offset`` int
    (bytes from the outer IP header), ``packets`` int.
    ``iv``: ``sa`` str label, ``seq64`` int, ``delta`` float (0: IV built
    from the packet's own seq64, n: from seq64 + n, NaN: not
    counter-derived), ``reused`` bool (IV used before under the same key).
    ``throughput``: ``t`` float (bin start, s), ``sa`` str, ``mbit_s`` float,
    and optionally ``width`` float (the bin width in s; else the smallest
    step between bin starts).
    ``sequence``: ``t`` float (s since capture start), ``sa`` str,
    ``event`` str ("gap", "duplicate", "reordered"), ``count`` int (for a
    gap: sequence numbers missing).
    """

    verdicts: Table
    offsets: Table
    iv: Table
    throughput: Table
    sequence: Table


# -- registry and files ------------------------------------------------------


class PlotSpec(NamedTuple):
    """One plot: its file name, its function, its ``PlotData`` field, and
    what the capture lacks when the function returns ``None``."""

    name: str
    draw: Callable[[Table], Figure | None]
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
    """PNG without the software stamp, SVG without date or creator, from one layout.

    ``savefig`` would run the figure's constrained layout for each file, after a
    whole draw that outputs nothing: here it runs once, on the PNG's own canvas
    and resolution, and is then frozen, so that each file costs one draw. The PNG
    is the one ``savefig`` made with the layout engine on; the SVG takes the same
    layout (its own, at 72 dpi, differed in the last digits of some coordinates).
    """
    with mpl.rc_context(_STYLE):
        _lay_out_once(fig)
        fig.savefig(stem.with_suffix(".png"), format="png", dpi=_DPI, metadata={"Software": None})
        fig.savefig(
            stem.with_suffix(".svg"), format="svg", metadata={"Date": None, "Creator": None}
        )


def _lay_out_once(fig: Figure) -> None:
    """Run the figure's layout engine now, then remove it: Axes, legends and
    titles keep the positions it gave them. Call inside ``rc_context(_STYLE)``.

    Removed with ``None``, not ``"none"``: the placeholder engine ``"none"``
    leaves would still make ``savefig`` draw the figure once before the file.
    """
    engine = fig.get_layout_engine()
    if engine is None:
        return
    engine.execute(fig)
    fig.set_layout_engine(None)  # _STYLE turns the rc layouts off: None is no engine
