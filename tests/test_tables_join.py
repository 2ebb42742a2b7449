"""The tables join: one type for one key in packets.parquet, sas.csv and findings.csv
(``spi`` an integer everywhere, ``spi_hex`` beside it), ``time`` a UTC ns timestamp
in Parquet, joined with pandas and with DuckDB (issue 19 s3)."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.synth import build_scenario, write_scenario

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
