"""Bad inputs that once reached a traceback, each with its minimized input.

Every case runs the whole ``analyze`` command and checks what a user would:
exit code, no traceback, every output written, and the exact words or
numbers the input calls for. Found by a bad-input campaign:

- pcapng timestamps ``datetime`` cannot hold (if_tsresol 0 with a huge
  count, a negative if_tsoffset): the report writer raised ValueError,
  OSError (errno 75) or OverflowError and report.txt/.md were never written;
- fragments adding up to more than a 16-bit length: OverflowError;
- one frame decades away from the others: the throughput plot asked for
  48 TiB of empty bins and summary.json was never written.
"""

from __future__ import annotations

import csv
import json
import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from espforensics.analysis import load_summary
from espforensics.model.records import Frame
from espforensics.plots import Table, plot_throughput
from espforensics.plots.data import TIME_BINS, plot_frames
from espforensics.report.narrative import utc
from espforensics.synth import build_scenario, keys_yaml, write_capture, write_scenario
from espforensics.synth.builder import ip
from espforensics.synth.link import frame_ip
from espforensics.synth.packets import ipv4_fragments, ipv6_fragments
from tests.support.helpers import OUTPUT_NAMES, run_cli

SCENARIO = build_scenario("ipv4-transport-tcp", seed=1)  # 98 frames, 96 ESP, all ok
OUTPUTS = sorted([*OUTPUT_NAMES, "plots"])


def analyze(tmp: Path, capture: Path, *keys: Path, code: int = 0) -> Path:
    """Run ``analyze`` (plots on, the default); check it ended with ``code``, wrote everything."""
    out = tmp / "out"
    args = ["analyze", str(capture), "--out", str(out)]
    for key in keys:
        args += ["--sa", str(key)]
    res = run_cli(*args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.code == code, res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert sorted(p.name for p in out.iterdir()) == OUTPUTS
    return out


def keys(tmp: Path) -> Path:
    path = tmp / "keys.yaml"
    path.write_text(keys_yaml(SCENARIO.sas))
    return path


# -- pcapng blocks by hand (pcapng s4.1-s4.3): the writers cannot set if_tsoffset


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def pcapng(frames: tuple[Frame, ...], options: bytes, ticks: Callable[[Frame], int]) -> bytes:
    """One section, one Ethernet interface with ``options``, an EPB per frame."""
    shb = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = _block(1, struct.pack("<HHI", 1, 0, 0) + options + _option(0, b""))
    epbs = []
    for frame in frames:
        high, low = divmod(ticks(frame), 1 << 32)
        head = struct.pack("<IIIII", 0, high, low, frame.caplen, frame.wirelen)
        epbs.append(_block(6, head + frame.data))
    return shb + idb + b"".join(epbs)


def _epoch_text(ns: int) -> str:
    """A UTC time computed without ``fromtimestamp``, as an independent check."""
    when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=(ns + 500) // 1000)
    return f"{when.year:04d}-{when:%m-%d %H:%M:%S.%f} UTC"


# pcapng s4.2: if_tsresol (code 9) 0 is 10^0 s, whole seconds; if_tsoffset
# (code 14) is a signed number of seconds. Both legal, both out of datetime.
HUGE = 2**64 - 1 - len(SCENARIO.frames)
TIMESTAMP_CASES = [
    pytest.param(
        _option(9, b"\x00"), lambda f: HUGE + f.number, (HUGE + 1) * 10**9, id="tsresol-0-huge"
    ),
    pytest.param(
        _option(14, struct.pack("<q", -(10**11))),  # microsecond ticks, then -10^11 s: year -1144
        lambda f: f.ts_ns // 1000,
        SCENARIO.frames[0].ts_ns // 1000 * 1000 - 10**20,
        id="negative-offset",
    ),
]


@pytest.mark.parametrize(("options", "ticks", "first_ns"), TIMESTAMP_CASES)
def test_timestamps_out_of_datetime_range_are_reported(
    tmp_path: Path, options: bytes, ticks: Callable[[Frame], int], first_ns: int
) -> None:
    capture = tmp_path / "c.pcapng"
    capture.write_bytes(pcapng(SCENARIO.frames, options, ticks))
    out = analyze(tmp_path, capture, keys(tmp_path))
    seconds = f"{first_ns / 1e9:.6f} s since the epoch (out of range)"
    report = (out / "report.txt").read_text()
    assert f"first:  {seconds}" in report.splitlines()
    assert f"| {seconds} |" in (out / "report.md").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["capture"]["first_time"] == first_ns / 1e9
    assert {k: v for k, v in summary["verdicts"].items() if v} == {"ok": 96, "not_esp": 2}
    with (out / "packets.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    # The tables' time is a ns timestamp (int64): a time outside 1677-2262 has none.
    assert {row["time"] for row in rows} == {""}
    assert pd.read_parquet(out / "packets.parquet")["time"].isna().all()
    assert {p.name for p in (out / "plots").iterdir()} >= {"throughput.png", "verdicts.png"}


def test_a_negative_offset_within_datetime_is_a_date(tmp_path: Path) -> None:
    capture = tmp_path / "c.pcapng"
    offset = -1_800_000_000  # s: the frames move from 2025 to 1967
    options = _option(9, b"\x09") + _option(14, struct.pack("<q", offset))
    capture.write_bytes(pcapng(SCENARIO.frames, options, lambda f: f.ts_ns))
    out = analyze(tmp_path, capture, keys(tmp_path))
    first = SCENARIO.frames[0].ts_ns + offset * 10**9
    assert f"first:  {_epoch_text(first)}" in (out / "report.txt").read_text().splitlines()
    assert _epoch_text(first).startswith("1967-")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-62_135_596_800.0, "0001-01-01 00:00:00.000000 UTC"),
        (-62_135_596_800.5, "-62135596800.500000 s since the epoch (out of range)"),
        (253_402_300_798.5, "9999-12-31 23:59:58.500000 UTC"),
        (253_402_300_799.0, "253402300799.000000 s since the epoch (out of range)"),
        (2.0**64, "18446744073709551616.000000 s since the epoch (out of range)"),
        (float("nan"), "nan s since the epoch (out of range)"),
        (None, "-"),
    ],
)
def test_utc_renders_every_timestamp(seconds: float | None, text: str) -> None:
    assert utc(seconds) == text


# -- fragments that cannot make a datagram ------------------------------------


def test_fragments_beyond_65535_bytes_are_records(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 256  # 65,536 bytes: one more than a length field holds
    a4, b4, a6, b6 = ip("192.0.2.1"), ip("192.0.2.2"), ip("2001:db8::1"), ip("2001:db8::2")
    packets = [
        *ipv4_fragments(a4, b4, 50, payload, 2, ident=1),
        *ipv6_fragments(a6, b6, 50, payload, 2, ident=2),
    ]
    frames = [
        Frame(n, 10**18 + n, len(d), len(d), 1, d)
        for n, d in enumerate((frame_ip(p) for p in packets), 1)
    ]
    capture = tmp_path / "frag.pcap"
    write_capture(capture, frames)
    out = analyze(tmp_path, capture, code=4)  # no ESP packet verified: nothing was checked
    with (out / "packets.csv").open() as fh:
        rows = [(r["frame"], r["verdict"], r["detail"]) for r in csv.DictReader(fh)]
    never = "fragment of a datagram never completed: reassembled"
    assert rows == [
        ("1", "fragment", f"{never} length 65556 exceeds 65,535"),  # 20 + 65,536
        ("2", "fragment", f"{never} length 65556 exceeds 65,535"),
        ("3", "fragment", f"{never} payload length 65536 exceeds 65,535"),
        ("4", "fragment", f"{never} payload length 65536 exceeds 65,535"),
    ]


# -- one frame decades away from the others -------------------------------------


@pytest.mark.parametrize("index", [0, 49, 97])
def test_one_far_frame_keeps_the_throughput_plot_bounded(tmp_path: Path, index: int) -> None:
    frames = list(SCENARIO.frames)
    frames[index] = frames[index]._replace(ts_ns=1_000_000_000)  # 1970-01-01 00:00:01
    capture = tmp_path / "far.pcap"
    write_capture(capture, frames)
    out = analyze(tmp_path, capture, keys(tmp_path))
    packets = pd.read_parquet(out / "packets.parquet")
    packets["time"] = packets["time"].astype("int64") / 1e9  # the plots count in seconds
    table = plot_frames(out / "packets.parquet", load_summary(out))["throughput"]
    data = pd.DataFrame({name: table[name] for name in table})
    width = (packets["time"].max() - packets["time"].min()) / TIME_BINS
    assert width > 2.8e7  # 55 years in 60 bins
    assert set(data["width"]) == {width}
    assert data["t"].nunique() <= TIME_BINS + 1
    # each bin holds the ESP bytes of the frames whose time falls in it, and all of them
    esp = packets[packets["spi"].notna()]
    since = (esp["time"] - packets["time"].iloc[0]).to_numpy()  # the plots' time origin
    got = data.groupby("t")["mbit_s"].sum() * 1e6 / 8 * width
    starts = got.index.to_numpy()
    home = np.searchsorted(starts, since + width * 1e-9, side="right") - 1
    assert (home >= 0).all() and (since <= starts[home] + width * (1 + 1e-9)).all()
    expected = esp["len"].groupby(home).sum()
    assert got.to_numpy() == pytest.approx(expected.reindex(range(len(starts))).to_numpy())
    fig = plot_throughput(table)
    assert fig is not None
    ax = fig.axes[0]
    assert f"({float(f'{width:.2g}'):g} s bins" in ax.get_title()
    assert all(np.asarray(line.get_xdata()).size <= TIME_BINS + 1 for line in ax.lines)


def test_throughput_plot_merges_bins_beyond_its_limit() -> None:
    # Data with 1 s bins a million seconds apart: a bin per second would be 10^6 points.
    df = Table({"t": [0.0, 1e6], "sa": ["a", "a"], "mbit_s": [6.0, 3.0], "width": 1.0})
    fig = plot_throughput(df)
    assert fig is not None
    ax = fig.axes[0]
    (line,) = ax.lines
    x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    merge = -(-1_000_001 // 600)  # neighbours per drawn bin
    assert len(x) == 1_000_000 // merge + 1 == 600
    assert ax.get_title() == f"Throughput per SA ({float(f'{merge:.2g}'):g} s bins)"
    assert x[0] == merge / 2 and x[-1] == (599 + 0.5) * merge
    assert y[0] == 6.0 / merge and y[-1] == 3.0 / merge  # the same bytes over merge seconds
    assert y.sum() * merge == 9.0


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("count", "x", "count is 'x', not int"),
        ("count", True, "count is True, not int"),
        ("detail", 5, "detail is 5, not str"),
        ("src", None, "src is None, not str"),
    ],
)
def test_report_on_a_summary_json_with_a_mistyped_finding_field(
    tmp_path: Path, field: str, value: object, why: str
) -> None:
    """A hand-edited summary.json is an input: one line and exit 2, not an internal error."""
    paths = write_scenario(build_scenario("sequence", seed=1), tmp_path / "in")
    out = tmp_path / "out"
    run = run_cli(
        "analyze", paths["capture"], "--sa", paths["keys"], "--out", out, "-q", "--no-plots"
    )
    assert run.code == 0  # its sequence findings are below --fail-on high
    summary = out / "summary.json"
    data = json.loads(summary.read_text())
    data["finding_list"][0][field] = value
    summary.write_text(json.dumps(data))
    res = run_cli("report", out)
    assert (res.code, res.stdout) == (2, "")
    assert (
        res.stderr == f"espforensics: error: {summary}: not a summary.json of this version: {why}\n"
    )
