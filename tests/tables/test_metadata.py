"""packets.parquet's pandas metadata, built without pandas, is what pyarrow builds with it.

tables/packets.py writes the b"pandas" schema metadata (the dtypes ``pd.read_parquet``
gives back) from the schema itself, so that a run needs no pandas; these tests
hold its bytes equal to ``pa.Schema.from_pandas`` of a DataFrame of those dtypes,
and check the files a run writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from espforensics.analysis import analyze_to_dir
from espforensics.model.records import PACKET_COLUMNS
from espforensics.tables.schema import CSV_SCHEMA, packet_schema, pandas_metadata
from espforensics.tables.small import write_rows

ROOT = Path(__file__).resolve().parents[2]

# The pandas dtype each Arrow type of the packets table reads back as, and a value of it.
DTYPES: dict[str, tuple[str, object]] = {
    "int64": ("Int64", 4097),
    "uint64": ("UInt64", 2**32 + 1),
    "timestamp[ns, tz=UTC]": (
        "datetime64[ns, UTC]",
        pd.Timestamp(1_700_000_000, unit="s", tz="UTC"),
    ),
    "bool": ("boolean", True),
    "string": ("object", "ok"),
}


def _from_pandas(schema: pa.Schema) -> pa.Schema:
    """What pyarrow makes of a one-row DataFrame with ``schema``'s columns' dtypes."""
    frame = pd.DataFrame(
        {f.name: pd.Series([DTYPES[str(f.type)][1]], dtype=DTYPES[str(f.type)][0]) for f in schema}
    )
    return pa.Schema.from_pandas(frame, preserve_index=False)


def test_the_packets_metadata_is_the_bytes_pyarrow_writes_from_pandas() -> None:
    schema = packet_schema()
    reference = _from_pandas(schema)
    assert schema.metadata == reference.metadata  # the b"pandas" key alone, byte for byte
    assert schema.remove_metadata().equals(reference.remove_metadata())
    meta = json.loads(schema.metadata[b"pandas"])
    assert meta["pandas_version"] == pd.__version__
    assert meta["creator"] == {"library": "pyarrow", "version": pa.__version__}
    assert [c["name"] for c in meta["columns"]] == list(PACKET_COLUMNS)


def test_an_empty_dataframe_gives_the_same_bytes_once_empty_columns_say_unicode() -> None:
    """What main built at import time: ``from_pandas`` of an empty DataFrame, whose object
    columns pyarrow calls "empty", renamed "unicode" (what they hold)."""
    plain = packet_schema().remove_metadata()
    empty = pd.DataFrame({f.name: pd.Series([], dtype=DTYPES[str(f.type)][0]) for f in plain})
    meta = json.loads(pa.Schema.from_pandas(empty, preserve_index=False).metadata[b"pandas"])
    for column in meta["columns"]:
        if column["pandas_type"] == "empty":
            column["pandas_type"] = "unicode"
    assert pandas_metadata(plain) == json.dumps(meta).encode()


def test_the_schema_is_built_once_and_packets_csv_has_no_pandas_metadata() -> None:
    assert packet_schema() is packet_schema()
    assert CSV_SCHEMA.metadata is None
    assert CSV_SCHEMA.field("time").type == pa.float64()


def test_the_files_of_a_run_carry_it_and_the_small_tables_none(tmp_path: Path) -> None:
    out = tmp_path / "out"
    keys = ROOT / "fixtures" / "example.keys.yaml"
    analyze_to_dir(ROOT / "fixtures" / "example.pcap", keys, out, plots=False)
    written = pq.read_schema(out / "packets.parquet")
    assert written.metadata == _from_pandas(packet_schema()).metadata
    packets = pd.read_parquet(out / "packets.parquet")
    assert len(packets) == 40  # the example's 40 frames
    assert str(packets["spi"].dtype) == "Int64"
    # batch's small tables (small_tables.write_rows) are written from Arrow, not pandas
    write_rows(tmp_path / "runs", ["capture", "frames"], [["a.pcap", 40]])
    assert pq.read_schema(tmp_path / "runs.parquet").metadata is None
