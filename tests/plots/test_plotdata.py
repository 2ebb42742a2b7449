"""The plots' data (plots/data.py) against the packets table it is made from, counted
here independently with pandas; every entry of the plot registry draws; matplotlib is
imported only when plots are drawn."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from espforensics.analysis import analyze_to_dir, load_summary
from espforensics.plots import PLOTS, PlotData, PlotSpec, Table
from espforensics.plots import data as plotdata
from espforensics.synth import build_scenario, write_scenario
from espforensics.tables import rows as table_rows


def _run(tmp: Path, scenario: str) -> Path:
    files = write_scenario(build_scenario(scenario, seed=1), tmp / "in", stem=scenario)
    out = tmp / "out"
    analyze_to_dir(files["capture"], [files["keys"]], out, plots=False)
    return out


def _frames(out: Path) -> dict[str, pd.DataFrame]:
    """The plots' tables of a run, as DataFrames to count with pandas."""
    data = plotdata.plot_frames(out / "packets.parquet", load_summary(out))
    return {name: pd.DataFrame({n: table[n] for n in table}) for name, table in data.items()}


def _packets(out: Path) -> pd.DataFrame:
    packets = pd.read_parquet(out / "packets.parquet")
    packets["sa"] = [
        "" if pd.isna(spi) else f"{int(spi):#010x} {src}>{dst}"
        for spi, src, dst in zip(packets["spi"], packets["src"], packets["dst"], strict=True)
    ]
    return packets


@pytest.mark.parametrize("scenario", ["sequence", "kernel-gso-v6", "iv-reuse"])
def test_counts_are_the_packets_tables(tmp_path: Path, scenario: str) -> None:
    out = _run(tmp_path, scenario)
    packets = _packets(out)
    esp = packets[packets["spi"].notna()]
    data = _frames(out)
    verdicts = data["verdicts"].groupby("verdict")["packets"].sum().to_dict()
    assert verdicts == packets["verdict"].value_counts().to_dict()
    offsets = data["offsets"].set_index(["kind", "offset"])["packets"].to_dict()
    want = {
        (kind, int(str(o))): n
        for kind, column in (("expected", "expected_offset"), ("found", "esp_offset"))
        for o, n in esp[column].value_counts().items()
    }
    assert offsets == want
    tp = data["throughput"]
    wire = tp["mbit_s"] * 1e6 / 8 * tp["width"]  # bytes per bin
    got = wire.groupby(tp["sa"]).sum().round().astype(int).to_dict()
    assert got == esp.groupby("sa")["len"].sum().to_dict()


def test_sequence_events_are_the_checks_marks(tmp_path: Path) -> None:
    """Duplicates and reorders: one event per packet the sequence check marked, at its
    time; gaps: as many numbers as the check's seq_gap finding counts."""
    out = _run(tmp_path, "sequence")
    packets = _packets(out)
    summary = load_summary(out)
    events = _frames(out)["sequence"]
    marked = packets[packets["seq_anomaly"].fillna("") != ""]
    t0 = summary.capture.first_time
    assert t0 is not None
    seconds = marked["time"].astype("int64") / 1e9 - t0
    want = sorted(
        zip(seconds, marked["sa"], marked["seq_anomaly"].str.replace("-identical", ""), strict=True)
    )
    others = events[events["event"] != "gap"]
    assert sorted(zip(others["t"], others["sa"], others["event"], strict=True)) == want
    assert int(events.loc[events["event"] == "gap", "count"].sum()) == summary.findings["seq_gap"]


def test_iv_points_keep_every_deviation_and_reuse(tmp_path: Path) -> None:
    out = _run(tmp_path, "iv-reuse")
    packets = _packets(out)
    iv = _frames(out)["iv"]
    esp = packets[packets["spi"].notna() & packets["seq64"].notna()]
    odd = esp[(esp["iv_seq_delta"].fillna(0) != 0) | esp["iv_reused"].fillna(False)]
    assert len(odd) > 0
    shown = set(zip(iv["sa"], iv["seq64"], iv["reused"], strict=True))
    assert set(zip(odd["sa"], odd["seq64"].astype(int), odd["iv_reused"], strict=True)) <= shown
    assert int(iv["reused"].sum()) == int(esp["iv_reused"].sum())


def test_batches_across_row_groups_give_the_same_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row groups of 7 rows, each with its own string dictionaries, joined into batches
    of 64 or cut into batches of 3: the same five tables."""
    monkeypatch.setattr(table_rows, "ROW_GROUP", 7)
    out = _run(tmp_path, "kernel-gso-v6")
    summary = load_summary(out)
    joined = plotdata.plot_frames(out / "packets.parquet", summary)
    monkeypatch.setattr(plotdata, "_PLOT_BATCH", 3)
    cut = plotdata.plot_frames(out / "packets.parquet", summary)
    monkeypatch.setattr(plotdata, "_PLOT_BATCH", 64)
    assert plotdata.plot_frames(out / "packets.parquet", summary).keys() == joined.keys()
    for key, frame in joined.items():
        assert frame == cut[key], key


def _sample() -> PlotData:
    sa = "0x00001001 192.0.2.1>192.0.2.2"
    return PlotData(
        verdicts=Table({"t": [0.0, 1.0], "verdict": ["ok", "ok"], "packets": [3, 4]}),
        offsets=Table({"kind": ["expected", "found"], "offset": [20, 20], "packets": [7, 7]}),
        iv=Table({"sa": [sa, sa], "seq64": [1, 2], "delta": [0.0, 1.0], "reused": [0, 1]}),
        throughput=Table({"t": [0.0, 1.0], "sa": [sa, sa], "mbit_s": [1.0, 2.0]}),
        sequence=Table({"t": [0.5], "sa": [sa], "event": ["gap"], "count": [2]}),
    )


@pytest.mark.parametrize("spec", PLOTS, ids=[p.name for p in PLOTS])
def test_every_registered_plot_draws_and_skips(spec: PlotSpec) -> None:
    """Each entry draws a figure from its PlotData field, and draws none from an empty one."""
    fig = spec.draw(getattr(_sample(), spec.data))
    assert fig is not None
    png = io.BytesIO()
    fig.savefig(png, format="png")
    assert png.getvalue().startswith(b"\x89PNG")
    assert spec.draw(Table()) is None
    assert spec.missing


def test_registry_is_a_literal_of_unique_names() -> None:
    assert len({p.name for p in PLOTS}) == len(PLOTS)
    assert {p.data for p in PLOTS} == set(PlotData.__dataclass_fields__)


@pytest.mark.slow
def test_matplotlib_only_when_plots_are_drawn(tmp_path: Path) -> None:
    files = write_scenario(build_scenario("sequence", seed=1), tmp_path / "in", stem="s")
    code = (
        "import sys\n"
        "from espforensics.analysis import analyze_to_dir\n"
        f"analyze_to_dir({str(files['capture'])!r}, [{str(files['keys'])!r}], "
        f"{str(tmp_path)!r} + '/out-' + sys.argv[1], plots=sys.argv[1] == 'plots')\n"
        "sys.exit(2 if 'matplotlib' in sys.modules else 3)\n"
    )
    run = [sys.executable, "-c", code]
    assert subprocess.run([*run, "no-plots"], check=False).returncode == 3
    assert subprocess.run([*run, "plots"], check=False).returncode == 2
    assert sorted(p.name for p in (tmp_path / "out-plots" / "plots").iterdir())[:2] == [
        "iv_derivation.png",
        "iv_derivation.svg",
    ]


def test_an_empty_cell_and_an_empty_string_are_one_value() -> None:
    """seq_anomaly read as codes: a missing cell is no anomaly, as "" is."""
    import pyarrow as pa

    column = pa.array(["", None, "reordered", ""]).dictionary_encode()
    codes, values = plotdata._strings(column)
    assert [values[c] for c in codes.tolist()] == ["", "", "reordered", ""]
    assert values.count("") == 1
