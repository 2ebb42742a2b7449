"""Plots: None without data, exact series, labels and titles; files written
only for drawn plots, byte-identical across runs."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.scale import SymmetricalLogTransform

from espforensics.model.records import PlotOutcome
from espforensics.plots import (
    PLOTS,
    VERDICT_COLOURS,
    PlotData,
    Table,
    delta_label,
    plot_iv_derivation,
    plot_offsets,
    plot_sequence,
    plot_throughput,
    plot_verdicts,
    write_plots,
)
from espforensics.plots.style import _DPI, _STYLE
from espforensics.report.captions import CAPTIONS, caption

SA1 = "0x00001001 fd00:a::1>fd00:a::2"
SA2 = "0x00001002 fd00:a::2>fd00:a::1"
TIME = "time since capture start (s)"


def verdicts_df() -> Table:
    return Table(
        {
            "t": [0.0, 0.0, 0.1, 0.1, 0.2, 0.3],
            "verdict": ["esp_misplaced", "ok", "ok", "not_esp", "ok", "esp_misplaced"],
            "packets": [4, 10, 12, 1, 9, 3],
        }
    )


def offsets_df() -> Table:
    return Table(
        {"kind": ["expected", "found", "found"], "offset": [40, 40, 60], "packets": [690, 596, 94]}
    )


def iv_df() -> Table:
    return Table(
        {
            "sa": [SA1, SA1, SA1, SA1, SA2, SA2],
            "seq64": [1, 2, 3, 4, 1, 2],
            "delta": [0.0, 1.0, 1.0, 0.0, 0.0, math.nan],
            "reused": [False, False, True, True, False, False],
        }
    )


def throughput_df() -> Table:
    return Table(
        {
            "t": [0.0, 0.5, 1.5, 0.0, 0.5, 1.0, 1.5],  # SA1 has no bin at 1.0
            "sa": [SA1, SA1, SA1, SA2, SA2, SA2, SA2],
            "mbit_s": [7.1, 6.9, 7.3, 6.0, 6.5, 7.0, 5.5],
        }
    )


def sequence_df() -> Table:
    return Table(
        {
            "t": [0.4, 1.3, 1.3, 2.2, 3.5],
            "sa": [SA1, SA1, SA1, SA1, SA2],
            "event": ["gap", "gap", "reordered", "duplicate", "gap"],
            "count": [1, 12, 1, 1, 2],
        }
    )


def sample() -> PlotData:
    return PlotData(verdicts_df(), offsets_df(), iv_df(), throughput_df(), sequence_df())


def axes_of(fig: Figure | None) -> Axes:
    assert fig is not None
    (ax,) = fig.axes
    return ax


def bars(ax: Axes) -> list[BarContainer]:
    return [c for c in ax.containers if isinstance(c, BarContainer)]


def legend_texts(fig: Figure) -> list[str]:
    (legend,) = fig.legends
    return [t.get_text() for t in legend.get_texts()]


# -- verdicts ----------------------------------------------------------------


def test_verdicts_one_stacked_series_per_verdict_in_fixed_order() -> None:
    fig = plot_verdicts(verdicts_df())
    ax = axes_of(fig)
    assert fig is not None
    assert len(ax.containers) == 3
    assert legend_texts(fig) == ["ok", "esp_misplaced", "not_esp"]  # stacking order, bottom up
    assert ax.get_title() == "Packets per verdict over time (0.1 s bins)"
    assert ax.get_xlabel() == TIME
    assert ax.get_ylabel() == "packets per bin"


def test_bin_width_in_the_title_has_two_significant_digits() -> None:
    df = Table({"t": [0.0, 0.0694212, 3600.0], "verdict": "ok", "packets": [1, 2, 3]})
    assert axes_of(plot_verdicts(df)).get_title() == "Packets per verdict over time (0.069 s bins)"


def test_verdict_colours_are_fixed() -> None:
    ax = axes_of(plot_verdicts(verdicts_df()))
    colours = {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in bars(ax)}
    assert colours == {
        "ok": "#2ca02c",
        "esp_misplaced": "#d62728",
        "not_esp": "#c7c7c7",
    }
    assert set(VERDICT_COLOURS) == {
        "ok", "esp_misplaced", "auth_fail", "bad_trailer", "unknown_sa",
        "truncated", "short", "not_esp", "undecodable", "fragment", "not_selected",
    }  # fmt: skip


def test_verdicts_stack_to_the_bin_total() -> None:
    ax = axes_of(plot_verdicts(verdicts_df()))
    top: dict[float, float] = {}
    for container in bars(ax):
        for bar in container.patches:
            top[round(bar.get_x(), 6)] = max(
                top.get(round(bar.get_x(), 6), 0), bar.get_y() + bar.get_height()
            )
    assert top == {0.0: 14, 0.1: 13, 0.2: 9, 0.3: 3}  # fmt: skip


@pytest.mark.parametrize(
    "df",
    [
        Table(),
        verdicts_df().take(slice(0, 0)),
        verdicts_df().replace(packets=0),
    ],
    ids=["no columns", "no rows", "all zero"],
)
def test_verdicts_none_without_data(df: Table) -> None:
    assert plot_verdicts(df) is None


# -- offsets -----------------------------------------------------------------


def test_offsets_expected_and_found_side_by_side() -> None:
    fig = plot_offsets(offsets_df())
    ax = axes_of(fig)
    assert fig is not None
    assert len(ax.containers) == 2
    assert legend_texts(fig) == ["expected", "found"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["40", "60"]
    expected, found = bars(ax)
    assert [b.get_height() for b in expected.patches] == [690, 0]
    assert [b.get_height() for b in found.patches] == [596, 94]
    assert ax.get_title() == "ESP header offset: expected vs found"
    assert ax.get_xlabel() == "ESP header offset from the outer IP header (bytes)"
    assert ax.get_ylabel() == "packets"
    assert ax.get_yscale() == "linear"


def test_offsets_log_scale_when_counts_span_two_decades() -> None:
    df = Table({"kind": ["expected", "found"], "offset": [20, 28], "packets": [100_000, 3]})
    ax = axes_of(plot_offsets(df))
    assert ax.get_yscale() == "log"
    assert ax.get_ylabel() == "packets (log scale)"


def test_offsets_none_without_data() -> None:
    assert plot_offsets(offsets_df().take(slice(0, 0))) is None


# -- IV derivation -----------------------------------------------------------


def _points(ax: Axes, i: int) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in np.asarray(ax.collections[i].get_offsets())]


def test_iv_one_panel_per_sa_each_point_on_its_exact_delta() -> None:
    fig = plot_iv_derivation(iv_df())
    assert fig is not None
    first, second = fig.axes
    assert [ax.get_title(loc="left") for ax in fig.axes] == [SA1, SA2]
    assert _points(first, 0) == [(1, 0), (2, 1), (3, 1), (4, 0)]
    assert _points(first, 1) == [(3, 1), (4, 0)]  # the reused IVs, crossed in red
    assert _points(second, 0) == [(1, 0)]  # the NaN row has no place
    assert len(second.collections) == 1
    assert to_hex(tuple(np.asarray(first.collections[1].get_edgecolor())[0])) == "#d62728"
    assert legend_texts(fig) == ["IV reused (2)"]
    assert fig.get_suptitle() == "Sequence number each ESP IV was built from (0 = the packet's own)"
    assert fig.get_supylabel() == "IV built from seq + n"
    assert (first.get_xlabel(), second.get_xlabel()) == ("", "64-bit sequence number")
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "+1"]
        assert ax.get_ylim() == (-0.5, 1.5)


def test_iv_two_sas_at_delta_0_sit_on_0() -> None:
    """Regression: SAs were dodged by +-0.2 within the row and read as two deltas."""
    df = Table(
        {"sa": [SA1, SA1, SA2, SA2], "seq64": [1, 2, 1, 2], "delta": [0.0] * 4, "reused": False}
    )
    fig = plot_iv_derivation(df)
    assert fig is not None
    assert [_points(ax, 0) for ax in fig.axes] == [[(1, 0), (2, 0)], [(1, 0), (2, 0)]]
    assert fig.legends == []
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["0"]


def test_iv_at_most_8_panels_deviating_sas_first() -> None:
    sas = [f"0x{0x2000 + i:08x} 192.0.2.1>192.0.2.2" for i in range(10)]
    df = Table(
        {
            "sa": sas,
            "seq64": [1] * 10,
            "delta": [0.0] * 8 + [1.0, 0.0],
            "reused": [False] * 9 + [True],
        }
    )
    fig = plot_iv_derivation(df)
    assert fig is not None
    assert [ax.get_title(loc="left") for ax in fig.axes] == sas[:6] + sas[8:]
    assert fig.axes[-1].get_xlabel() == "64-bit sequence number (2 more SAs not drawn: packets.csv)"


def test_iv_without_reuse_has_no_reuse_series() -> None:
    fig = plot_iv_derivation(iv_df().replace(reused=False))
    assert fig is not None
    assert [len(ax.collections) for ax in fig.axes] == [1, 1]
    assert fig.legends == []


def test_iv_reuse_without_derivation_is_counted_not_drawn() -> None:
    df = iv_df().replace(reused=[False, False, False, False, False, True])  # the NaN row
    fig = plot_iv_derivation(df)
    assert fig is not None
    assert legend_texts(fig) == ["IV reused (0 shown, 1 not: IV not counter-derived)"]
    assert [len(ax.collections) for ax in fig.axes] == [1, 1]


@pytest.mark.parametrize(
    "df",
    [Table(), iv_df().take(slice(0, 0)), iv_df().replace(delta=math.nan)],
    ids=["no columns", "no rows", "all NaN"],
)
def test_iv_none_without_counter_derived_ivs(df: Table) -> None:
    assert plot_iv_derivation(df) is None


def test_iv_accepts_object_columns_with_none() -> None:
    """Columns given as Python values with None where empty (no NaN): None is NaN or False."""
    delta = np.array([0.0, 1.0, 1.0, 0.0, 0.0, None], dtype=object)
    reused = np.array([False, False, True, True, None, False], dtype=object)
    df = iv_df().replace(delta=delta, reused=reused)
    assert df["delta"].dtype == object
    fig = plot_iv_derivation(df)
    assert fig is not None
    assert [len(ax.collections) for ax in fig.axes] == [2, 1]


# -- throughput --------------------------------------------------------------


def test_throughput_one_line_per_sa_missing_bins_are_zero() -> None:
    fig = plot_throughput(throughput_df())
    ax = axes_of(fig)
    assert fig is not None
    assert len(ax.lines) == 2
    assert legend_texts(fig) == [SA1, SA2]
    sa1 = ax.lines[0]
    assert np.asarray(sa1.get_xdata()).tolist() == [0.25, 0.75, 1.25, 1.75]  # bin centres
    assert np.asarray(sa1.get_ydata()).tolist() == [7.1, 6.9, 0.0, 7.3]
    assert ax.get_title() == "Throughput per SA (0.5 s bins)"
    assert ax.get_xlabel() == TIME
    assert ax.get_ylabel() == "throughput (Mbit/s)"


def test_throughput_log_scale_when_sa_peaks_are_far_apart() -> None:
    df = Table({"t": [0.0, 0.0], "sa": [SA1, SA2], "mbit_s": [7.0, 0.07]})
    fig = plot_throughput(df)
    ax = axes_of(fig)
    assert ax.get_yscale() == "log"
    assert ax.get_ylabel() == "throughput (Mbit/s, log scale)"


def test_throughput_stays_linear_for_one_bursty_sa() -> None:
    df = Table({"t": [0.0, 1.0, 2.0], "sa": SA1, "mbit_s": [900.0, 0.5, 0.0]})
    assert axes_of(plot_throughput(df)).get_yscale() == "linear"


def test_throughput_more_than_twelve_sas_sums_the_quietest() -> None:
    # 20 SAs, SA k sends k+1 Mbit/s in bin 0 and 1 Mbit/s in bin 1: the 11 busiest (SA 9..19)
    # keep their line, SA 0..8 become one line of their sums (45 and 9 Mbit/s).
    sas = [f"0x{k:08x} 192.0.2.1>192.0.2.2" for k in range(20)]
    df = Table(
        {
            "t": [0.0] * 20 + [1.0] * 20,
            "sa": sas * 2,
            "mbit_s": [k + 1.0 for k in range(20)] + [1.0] * 20,
        }
    )
    fig = plot_throughput(df)
    ax = axes_of(fig)
    assert fig is not None
    assert legend_texts(fig) == [*sas[9:], "9 other SAs, summed"]
    assert len(ax.lines) == 12
    assert np.asarray(ax.lines[-1].get_ydata()).tolist() == [45.0, 9.0]
    assert np.asarray(ax.lines[0].get_ydata()).tolist() == [10.0, 1.0]  # SA 9 as it was


def test_throughput_none_without_data() -> None:
    assert plot_throughput(throughput_df().take(slice(0, 0))) is None
    assert plot_throughput(throughput_df().replace(mbit_s=math.nan)) is None


# -- sequence ----------------------------------------------------------------


def test_sequence_one_series_per_event_kind_one_row_per_sa() -> None:
    fig = plot_sequence(sequence_df())
    ax = axes_of(fig)
    assert fig is not None
    assert len(ax.collections) == 3
    assert legend_texts(fig) == ["gap (15 in all)", "duplicate (1 in all)", "reordered (1 in all)"]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        SA1.replace(" ", "\n"),
        SA2.replace(" ", "\n"),
    ]
    assert ax.get_title() == "Sequence number gaps, duplicates and reorders per SA"
    assert ax.get_xlabel() == TIME


def test_sequence_none_without_events() -> None:
    assert plot_sequence(sequence_df().take(slice(0, 0))) is None


def test_missing_column_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="lacks column"):
        plot_sequence(Table({k: sequence_df()[k] for k in ("t", "sa", "event")}))


# -- files -------------------------------------------------------------------


def test_registry_names_and_inputs() -> None:
    assert [p.name for p in PLOTS] == [
        "verdicts",
        "offsets",
        "iv_derivation",
        "throughput",
        "sequence",
    ]
    assert sorted(p.data for p in PLOTS) == sorted(PlotData.__dataclass_fields__)


def test_write_plots_writes_png_and_svg_per_plot(tmp_path: Path) -> None:
    folder = tmp_path / "plots"
    outcomes = write_plots(sample(), folder)
    assert outcomes == tuple(
        PlotOutcome(p.name, (f"plots/{p.name}.png", f"plots/{p.name}.svg")) for p in PLOTS
    )
    assert len(list(folder.iterdir())) == 10
    for o in outcomes:
        for rel in o.files:
            assert (tmp_path / rel).stat().st_size > 1000
    assert (folder / "verdicts.png").read_bytes().startswith(b"\x89PNG")


def test_write_plots_skips_plots_without_data(tmp_path: Path) -> None:
    data = sample()
    no_iv = iv_df().take(slice(0, 0))
    data = PlotData(data.verdicts, data.offsets, no_iv, data.throughput, Table())
    outcomes = {o.name: o for o in write_plots(data, tmp_path)}
    assert outcomes["iv_derivation"] == PlotOutcome(
        "iv_derivation", (), skipped="no counter-derived IVs in this capture"
    )
    assert outcomes["sequence"].skipped == (
        "no sequence gaps, duplicates or reorders in this capture"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "offsets.png", "offsets.svg", "throughput.png", "throughput.svg",
        "verdicts.png", "verdicts.svg",
    ]  # fmt: skip


def test_write_plots_with_nothing_to_draw_creates_nothing(tmp_path: Path) -> None:
    empty = Table()
    outcomes = write_plots(PlotData(empty, empty, empty, empty, empty), tmp_path / "plots")
    assert all(o.files == () and o.skipped.startswith("no ") for o in outcomes)
    assert not (tmp_path / "plots").exists()


def test_each_figure_is_laid_out_once_and_drawn_once_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """savefig lays a figure out again for each file, after a draw that outputs
    nothing; write_plots lays it out once and draws it once for its PNG, once for
    its SVG."""
    layouts: list[Figure] = []
    draws: list[Figure] = []
    execute, draw = ConstrainedLayoutEngine.execute, Figure.draw

    def count_layout(engine: ConstrainedLayoutEngine, fig: Figure) -> None:
        layouts.append(fig)
        execute(engine, fig)

    def count_draw(fig: Figure, renderer: Any) -> None:
        draws.append(fig)
        draw(fig, renderer)

    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", count_layout)
    monkeypatch.setattr(Figure, "draw", count_draw)
    write_plots(sample(), tmp_path)
    figures = list(dict.fromkeys(layouts))
    assert len(figures) == len(PLOTS)
    assert [layouts.count(fig) for fig in figures] == [1] * len(PLOTS)
    assert [draws.count(fig) for fig in figures] == [2] * len(PLOTS)
    assert set(draws) == set(figures)


def test_the_png_is_the_one_savefig_makes_with_its_layout_engine_on(tmp_path: Path) -> None:
    """Laid out once, before savefig: nothing moves in the PNG."""
    data = sample()
    write_plots(data, tmp_path)
    for spec in PLOTS:
        fig = spec.draw(getattr(data, spec.data))
        assert fig is not None
        assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
        with mpl.rc_context(_STYLE):
            fig.savefig(tmp_path / "own.png", format="png", dpi=_DPI, metadata={"Software": None})
        png = (tmp_path / f"{spec.name}.png").read_bytes()
        assert (tmp_path / "own.png").read_bytes() == png, spec.name


@pytest.mark.slow
def test_reruns_give_identical_files(tmp_path: Path) -> None:
    write_plots(sample(), tmp_path / "a")
    write_plots(sample(), tmp_path / "b")
    for p in sorted((tmp_path / "a").iterdir()):
        assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes(), p.name
    svg = (tmp_path / "a" / "verdicts.svg").read_text()
    assert "<dc:date>" not in svg
    assert "Matplotlib v" not in svg
    assert b"Software" not in (tmp_path / "a" / "verdicts.png").read_bytes()


def test_plots_never_import_pyplot() -> None:
    code = "import sys, espforensics.plots; sys.exit('matplotlib.pyplot' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize("name", ["sequence", "iv-reuse", "kernel-gso-v6", "fragments-v4"])
def test_plot_data_does_not_depend_on_the_batch_size(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plot pass reads packets.parquet in batches; tiny batches must give the same data."""
    from espforensics.analysis import analyze_to_dir
    from espforensics.plots import data as plotdata
    from espforensics.synth import build_scenario, write_scenario

    files = write_scenario(build_scenario(name), tmp_path)
    out = tmp_path / "out"
    summary = analyze_to_dir(files["capture"], [files["keys"]], out, plots=False)
    whole = plotdata.plot_frames(out / "packets.parquet", summary)
    monkeypatch.setattr(plotdata, "_PLOT_BATCH", 3)
    small = plotdata.plot_frames(out / "packets.parquet", summary)
    for key, frame in whole.items():
        assert frame == small[key], key
    packets = pd.read_parquet(out / "packets.parquet")
    esp = packets[packets["spi"].notna()]
    want = {
        f"{int(s):#010x} {a}>{b}"
        for s, a, b in zip(esp["spi"], esp["src"], esp["dst"], strict=True)
    }
    assert set(whole["throughput"]["sa"]) == want


def _esn_iv_df() -> Table:
    """An ESN SA across the wrap: seq low 0xffffffff sealed with hi+1 (delta +2^32),
    one IV from seq+1 and one from seq-1; a second SA all at 0."""
    wrap = 1 << 32
    seqs = list(range(wrap - 4, wrap + 4))
    deltas = [0.0, 1.0, 0.0, float(wrap), 0.0, -1.0, 0.0, 0.0]
    return Table(
        {
            "sa": [SA1] * 8 + [SA2] * 2,
            "seq64": [*seqs, wrap - 1, wrap],
            "delta": [*deltas, 0.0, 0.0],
            "reused": [False] * 10,
        }
    )


def test_iv_esn_deltas_on_a_symlog_axis_labelled_hi_lo_nothing_clipped() -> None:
    """+-1 and +2^32 readable on one axis (ESN capture: the packet sealed with hi+1)."""
    fig = plot_iv_derivation(_esn_iv_df())
    assert fig is not None
    assert fig.get_supylabel() == "IV built from seq + n\n(symmetric log scale)"
    assert fig.axes[-1].get_xlabel() == "64-bit sequence number (hi:lo)"
    fig.canvas.draw()
    for ax in fig.axes:
        assert ax.get_yscale() == "symlog"
        scale = ax.yaxis.get_transform()
        assert isinstance(scale, SymmetricalLogTransform) and scale.linthresh == 1.0
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == ["-1", "0", "+1", "+0x1:00000000"]
        ticks = {int(t.get_position()[0]): t.get_text() for t in ax.get_xticklabels()}
        assert ticks[1 << 32] == "0x1:00000000"
        assert ticks[(1 << 32) - 2] == "0x0:fffffffe"
        # every point inside the axes, at least a marker's width (8 px) from its edges
        box = ax.get_window_extent()
        points = ax.transData.transform(np.asarray(ax.collections[0].get_offsets()))
        assert (points[:, 1] > box.y0 + 8).all() and (points[:, 1] < box.y1 - 8).all()
    # 0 and +1 are rows apart (> 15 px), as are +1 and +2^32
    ax = fig.axes[0]
    y0, y1, y32 = ax.transData.transform([(0, 0), (0, 1), (0, 1 << 32)])[:, 1]
    assert y1 - y0 > 15 and y32 - y1 > 60
    bottom, top = ax.get_ylim()
    assert bottom < -1 and top > 1 << 32


def test_iv_symlog_label_of_one_panel_fits_the_figure() -> None:
    """One SA on a symmetric log axis: the figure's y label, the tallest text, is inside
    the figure once laid out (on one line it was taller than the figure, cut at both ends)."""
    deltas = [0.0, 1.0, 0.0, float(1 << 32)]
    fig = plot_iv_derivation(
        Table({"sa": SA1, "seq64": range(1, 5), "delta": deltas, "reused": False})
    )
    assert fig is not None and len(fig.axes) == 1
    assert fig.axes[0].get_yscale() == "symlog"
    with mpl.rc_context(_STYLE):
        fig.canvas.draw()
        (label,) = [t for t in fig.texts if t.get_text() == fig.get_supylabel()]
        box = label.get_window_extent()
    assert box.y0 >= 0 and box.y1 <= fig.bbox.height


def test_iv_more_than_8_deltas_on_symlog_get_power_of_2_ticks() -> None:
    deltas = [0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 300.0, 70000.0]
    df = Table({"sa": SA1, "seq64": range(1, 11), "delta": deltas, "reused": False})
    fig = plot_iv_derivation(df)
    assert fig is not None
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "-1",
        "0",
        "+1",
        "+256",
        "+0x0:00010000",
    ]
    bottom, top = ax.get_ylim()
    assert bottom < -1 and top > 70000


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (1, "+1"), (-3, "-3"), (65535, "+65535"), (1 << 32, "+0x1:00000000"),
     (-(1 << 32), "-0x1:00000000"), ((1 << 32) + 5, "+0x1:00000005")],
)  # fmt: skip
def test_delta_labels_are_hi_lo_past_16_bits(value: int, text: str) -> None:
    assert delta_label(float(value)) == text


def test_every_plot_has_a_caption_saying_how_to_read_it() -> None:
    assert sorted(CAPTIONS) == sorted(spec.name for spec in PLOTS)
    for name, c in CAPTIONS.items():
        assert c.title and c.shows and c.reading, name
        assert name not in c.title  # the plot's subject, not its file stem
    assert caption("verdicts").title == "Packets per verdict over time"
