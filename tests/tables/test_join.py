"""The tables join: one type for one key in packets.parquet, sas.csv and findings.csv
(``spi`` an integer everywhere, ``spi_hex`` beside it), ``time`` a UTC ns timestamp
in Parquet, joined with pandas and with DuckDB (issue 19 s3)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.analysis import analyze_to_dir
from espforensics.bounded.frames import Frames
from espforensics.model.enums import FindingKind, Severity
from espforensics.model.records import Finding
from espforensics.synth import build_scenario, write_scenario
from espforensics.tables.small import every_frame, write_finding_frames

duckdb = pytest.importorskip("duckdb")  # the test extra installs it


@pytest.fixture(scope="module")
def gso(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """The kernel GSO fixture: 2 SAs, 18 + 7 ESP packets, 12 of SPI 0x1001 misplaced."""
    tmp = tmp_path_factory.mktemp("join")
    scenario = build_scenario("kernel-gso-v4", seed=1)
    paths = write_scenario(scenario, tmp / "in", stem="k4")
    out = tmp / "out"
    analyze_to_dir(paths["capture"], paths["keys"], out, plots=False)
    return out, [f.ts_ns for f in scenario.frames]


def test_packets_parquet_reads_back_with_integer_keys_and_ns_times(
    gso: tuple[Path, list[int]],
) -> None:
    out, ts_ns = gso
    packets = pd.read_parquet(out / "packets.parquet")
    assert str(packets["spi"].dtype) == "Int64"  # was float64: 4097.0, NaN off ESP
    assert str(packets["seq64"].dtype) == "UInt64"
    assert str(packets["time"].dtype) == "datetime64[ns, UTC]"
    # every capture timestamp to the ns, not float seconds
    assert packets["time"].astype("int64").tolist() == ts_ns
    assert packets["spi"].dropna().unique().tolist() == [0x1001, 0x1002]


def test_sas_and_findings_csv_have_integer_spi_and_hex(gso: tuple[Path, list[int]]) -> None:
    out, _ = gso
    with (out / "sas.csv").open() as fh:
        sas = [(r["spi"], r["spi_hex"], r["packets"]) for r in csv.DictReader(fh)]
    assert sas == [("4097", "0x00001001", "18"), ("4098", "0x00001002", "7")]
    with (out / "findings.csv").open() as fh:
        findings = [(r["kind"], r["spi"], r["spi_hex"], r["count"]) for r in csv.DictReader(fh)]
    assert findings == [
        ("cleartext_leak", "4097", "0x00001001", "12"),
        ("esp_misplaced", "4097", "0x00001001", "12"),
    ]


def test_pandas_joins_packets_sas_and_findings(gso: tuple[Path, list[int]]) -> None:
    out, _ = gso
    packets = pd.read_parquet(out / "packets.parquet")
    sas = pd.read_csv(out / "sas.csv")
    findings = pd.read_csv(out / "findings.csv")
    joined = packets.merge(sas, on=["spi", "src", "dst"], suffixes=("", "_sa"))
    assert len(joined) == 25  # every ESP packet finds its SA
    per_sa = joined.groupby("spi_hex").size().to_dict()
    assert per_sa == {"0x00001001": 18, "0x00001002": 7}
    assert per_sa == dict(zip(sas["spi_hex"], sas["packets"], strict=True))
    misplaced = packets[packets["verdict"] == "esp_misplaced"].merge(findings, on="spi")
    assert sorted(set(misplaced["kind"])) == ["cleartext_leak", "esp_misplaced"]
    assert len(misplaced) == 2 * 12


def test_duckdb_joins_packets_sas_and_findings(gso: tuple[Path, list[int]]) -> None:
    out, ts_ns = gso
    con = duckdb.connect()
    rows = con.execute(
        f"""
        SELECT spi, count(*), min(epoch_ns(p.time)), typeof(any_value(p.time)),
               typeof(any_value(spi))
        FROM '{out / "packets.parquet"}' p
        JOIN read_csv('{out / "sas.csv"}') s USING (spi, src, dst)
        GROUP BY spi ORDER BY spi
        """
    ).fetchall()
    assert [r[:2] for r in rows] == [(0x1001, 18), (0x1002, 7)]
    assert {r[3:] for r in rows} == {("TIMESTAMPTZ_NS", "BIGINT")}  # ns, not us
    assert rows[0][2] == ts_ns[0]  # frame 1, the first of SPI 0x1001, to the ns
    found = con.execute(
        f"""
        SELECT f.kind, count(*)
        FROM '{out / "packets.parquet"}' p
        JOIN read_csv('{out / "findings.csv"}') f USING (spi)
        WHERE p.verdict = 'esp_misplaced'
        GROUP BY f.kind ORDER BY f.kind
        """
    ).fetchall()
    assert found == [("cleartext_leak", 12), ("esp_misplaced", 12)]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_findings_have_ids_and_their_sas_addresses(gso: tuple[Path, list[int]]) -> None:
    """Every finding about one SA's SPI carries the addresses sas.csv gives that SA."""
    out, _ = gso
    findings = _rows(out / "findings.csv")
    assert [(r["id"], r["kind"], r["src"], r["dst"]) for r in findings] == [
        ("1", "cleartext_leak", "192.0.2.1", "192.0.2.2"),
        ("2", "esp_misplaced", "192.0.2.1", "192.0.2.2"),
    ]
    sas = {r["spi"]: (r["src"], r["dst"]) for r in _rows(out / "sas.csv")}
    assert all(sas[r["spi"]] == (r["src"], r["dst"]) for r in findings)


def test_finding_frames_link_findings_to_packets_without_parsing(
    gso: tuple[Path, list[int]],
) -> None:
    out, _ = gso
    links = pd.read_parquet(out / "finding_frames.parquet")
    assert links.equals(pd.read_csv(out / "finding_frames.csv"))
    assert list(links.columns) == ["finding", "frame", "layer"]
    misplaced = [4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18]  # findings.csv: 4-6 8-10 12-14 16-18
    assert links[links["finding"] == 2]["frame"].tolist() == misplaced
    assert set(links["layer"]) == {1}
    packets = pd.read_parquet(out / "packets.parquet")
    findings = pd.read_csv(out / "findings.csv")
    joined = links.merge(findings, left_on="finding", right_on="id").merge(
        packets, on=["frame", "layer"], suffixes=("", "_packet")
    )
    assert len(joined) == len(links) == 24
    assert set(joined["verdict"]) == {"esp_misplaced"}
    assert (joined["spi"] == joined["spi_packet"]).all()
    con = duckdb.connect()
    per_kind = con.execute(
        f"""
        SELECT f.kind, count(*), count(DISTINCT p.frame)
        FROM read_csv('{out / "finding_frames.csv"}') l
        JOIN read_csv('{out / "findings.csv"}') f ON f.id = l.finding
        JOIN '{out / "packets.parquet"}' p ON p.frame = l.frame AND p.layer = l.layer
        GROUP BY f.kind ORDER BY f.kind
        """
    ).fetchall()
    assert per_kind == [("cleartext_leak", 12, 12), ("esp_misplaced", 12, 12)]


def test_finding_frames_name_the_layer_of_esp_inside_esp(tmp_path: Path) -> None:
    """A finding about the inner SA of ESP inside ESP links to its layer-2 row."""
    data = Path(__file__).parents[1] / "data" / "scapy"
    out = tmp_path / "out"
    analyze_to_dir(data / "nested.pcap", [data / "nested.keys.yaml"], out, plots=False)
    links = pd.read_csv(out / "finding_frames.csv")
    findings = pd.read_csv(out / "findings.csv")
    dup = findings[findings["kind"] == "seq_duplicate"]
    assert dup["spi"].tolist() == [0xB002]
    linked = links[links["finding"] == int(dup["id"].iloc[0])]
    assert linked[["frame", "layer"]].values.tolist() == [[3, 2]]
    packets = pd.read_csv(out / "packets.csv")
    row = packets.merge(linked, on=["frame", "layer"])
    assert row["spi"].tolist() == [0xB002] and row["seq_anomaly"].notna().all()


def test_finding_frames_csv_is_what_the_csv_module_writes(tmp_path: Path) -> None:
    """finding_frames.csv, written by Arrow's CSV writer, has the bytes ``csv.writer``
    gives the same rows: the header, one row per (finding, frame, layer), CRLF line ends;
    a frame's layer from ``layers`` where it is not the outermost ESP layer."""
    findings = [
        Finding(FindingKind.CLEARTEXT_LEAK, Severity.HIGH, 7, Frames.of([2, 3, 4, 9]), 4, "a"),
        Finding(FindingKind.SEQ_GAP, Severity.INFO, None, Frames.of([5]), 1, "b"),
        Finding(FindingKind.SEQ_GAP, Severity.INFO, 8, Frames(), 0, "c"),
    ]
    write_finding_frames(tmp_path / "f.csv", tmp_path / "f.parquet", findings, {(3, 7): 2})
    want = io.StringIO(newline="")
    out = csv.writer(want)
    out.writerow(["finding", "frame", "layer"])
    out.writerows([(1, 2, 1), (1, 3, 2), (1, 4, 1), (1, 9, 1), (2, 5, 1)])
    assert (tmp_path / "f.csv").read_bytes() == want.getvalue().encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 400), max_size=200), st.integers(1, 70))
def test_every_frame_in_parts_of_rows_frames(frames: list[int], rows: int) -> None:
    """A finding's frames, given in arrays of ``rows`` frames made from the runs each
    spans (a run cut at either end, or spanning several parts), are its frames in order."""
    parts = list(every_frame(Frames.of(frames), rows))
    assert [len(p) for p in parts[:-1]] == [rows] * (len(parts) - 1)
    assert all(0 < len(p) <= rows for p in parts)
    assert [int(n) for p in parts for n in p] == sorted(set(frames))
