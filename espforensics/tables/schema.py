"""The packets table's columns: their Arrow types, packets.parquet's schema and packets.csv's.

In: the record's fields (model/records.py ``PACKET_COLUMNS``). Out: the
schema (``packet_schema``, with the b"pandas" metadata ``pd.read_parquet``
reads the dtypes from), packets.csv's (``CSV_SCHEMA``, ``csv_table``,
``ns_to_seconds``), the dictionary-encoded columns and the row group's
size. Raises nothing. tables/rows.py makes the tables, tables/packets.py
writes and reads them.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.metadata import version

import numpy as np
import pyarrow as pa

from espforensics.model.records import PACKET_COLUMNS
from espforensics.tables.arrow import from_numpy

_INT_COLUMNS = frozenset(
    {
        "frame",
        "caplen",
        "len",
        "ip_version",
        "udp_sport",
        "udp_dport",
        "spi",
        "seq",
        "esp_offset",
        "expected_offset",
        "esp_len",
        "fragments",
        "pad_len",
        "next_header",
        "payload_len",
        "inner_sport",
        "inner_dport",
        "leaked",
        "iv_seq_delta",
        "seq_hi_verified",
        "tfc_len",
        "layer",
        "ipcomp_cpi",
        "ipcomp_len",
        "quoted_spi",
        "quoted_seq",
    }
)
_UINT64_COLUMNS = frozenset({"seq64"})
_BOOL_COLUMNS = frozenset({"iv_reused"})
TIME_TYPE = pa.timestamp("ns", tz="UTC")  # what the capture stores: ns since the epoch, UTC


def arrow_type(name: str) -> pa.DataType:
    if name in _INT_COLUMNS:
        return pa.int64()
    if name in _UINT64_COLUMNS:
        return pa.uint64()
    if name == "time":
        return TIME_TYPE
    if name in _BOOL_COLUMNS:
        return pa.bool_()
    return pa.string()


# The pandas dtype each column reads back as, in packets.parquet's b"pandas" metadata
# (pandas_type, numpy_type): nullable integers stay integers. Without it ``pd.read_parquet``
# makes an int64 column with empty cells float64 (``spi`` 4097.0), and
# ``packets.merge(sas, on="spi")`` fails. Keyed by the Arrow type of the column.
_PANDAS_TYPES: dict[str, tuple[str, str]] = {
    "int64": ("int64", "Int64"),
    "uint64": ("uint64", "UInt64"),
    "timestamp[ns, tz=UTC]": ("datetimetz", "datetime64[ns]"),
    "bool": ("bool", "boolean"),
    "string": ("unicode", "object"),
}


def pandas_metadata(schema: pa.Schema) -> bytes:
    """The b"pandas" metadata ``pa.Schema.from_pandas`` writes for ``schema``'s columns.

    What pyarrow gives for an empty DataFrame of the dtypes of ``_PANDAS_TYPES``
    (``preserve_index=False``; tests/tables/test_metadata.py compares the bytes),
    built without importing pandas: its version comes from the installed
    package's metadata, pyarrow's is what pyarrow writes (``pa.__version__``).
    """
    columns = []
    for field in schema:
        pandas_type, numpy_type = _PANDAS_TYPES[str(field.type)]
        tz = getattr(field.type, "tz", None)
        columns.append(
            {
                "name": field.name,
                "field_name": field.name,
                "pandas_type": pandas_type,
                "numpy_type": numpy_type,
                "metadata": None if tz is None else {"timezone": tz},
            }
        )
    meta = {
        "index_columns": [],
        "column_indexes": [],
        "columns": columns,
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": version("pandas"),
    }
    return json.dumps(meta).encode()


_ARROW_SCHEMA = pa.schema([pa.field(n, arrow_type(n)) for n in PACKET_COLUMNS])
# packets.parquet's dictionary-encoded columns: the text that repeats (verdicts, addresses,
# algorithms, details). Not ``iv``, new in every packet, nor the numbers: on the 2M-frame
# bench capture's table the writer then takes 0.67-0.83 of the CPU and the file is 10%
# smaller (benchmarks/bench_tables.py).
DICTIONARY_COLUMNS = [f.name for f in _ARROW_SCHEMA if f.type == pa.string() and f.name != "iv"]


@cache
def packet_schema() -> pa.Schema:
    """The packets table's schema, with the pandas metadata (built on first use)."""
    return _ARROW_SCHEMA.with_metadata({b"pandas": pandas_metadata(_ARROW_SCHEMA)})


# packets.csv: ``time`` as seconds since the epoch (what sas.csv's times are), not ISO text.
CSV_SCHEMA = _ARROW_SCHEMA.set(PACKET_COLUMNS.index("time"), pa.field("time", pa.float64()))
_TIME = PACKET_COLUMNS.index("time")


def csv_table(table: pa.Table) -> pa.Table:
    """The packets table as packets.csv writes it: ``time`` in seconds (ns / 1e9)."""
    return table.set_column(_TIME, CSV_SCHEMA.field(_TIME), ns_to_seconds(table.column(_TIME)))


def ns_to_seconds(time: pa.Array | pa.ChunkedArray) -> pa.Array:
    """ns / 1e9 as Python computes it: the int rounded to a float, then divided; null where
    ``time`` is. In numpy, from the buffers: the same two IEEE operations as Arrow's cast
    and divide, without importing pyarrow.compute (35 ms of a small run's start-up,
    docs/performance.md)."""
    array = time.combine_chunks() if isinstance(time, pa.ChunkedArray) else time
    n, offset = len(array), array.offset
    validity, data = array.buffers()[:2]
    if data is None or not n:
        return from_numpy(np.zeros(n, np.float64), pa.float64(), np.zeros(n, np.bool_))
    ns = np.frombuffer(data, np.int64, count=n, offset=offset * 8)
    present = None
    if array.null_count:
        bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        present = bits[offset : offset + n].astype(np.bool_)
    return from_numpy(ns.astype(np.float64) / 1e9, pa.float64(), present)


ROW_GROUP = 8192  # rows of packets.parquet's row groups, and of the tables made at once
