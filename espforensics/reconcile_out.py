"""What ``espforensics reconcile`` writes and prints, from a ``Reconciled``.

In: the ``Reconciled`` of reconcile.py, what each capture is
(``CaptureFile``: path, sha256, frames) and, with keys, the receiver
model's verdict of each receiver frame (``Verdicts``). Out: summary.json's dict
(``summary_dict``), report.txt's lines (``report_lines``, ASCII, at most
72 columns, a long path on a line of its own), the stdout summary lines,
and the folder (``write_folder``: reconcile.csv, reconcile.parquet,
report.txt and summary.json, each written as ``.partial`` then renamed
into place, summary.json last, as analyze does). Raises ``OutputError``
for a folder it cannot write.
"""

from __future__ import annotations

import csv
import json
import os
import textwrap
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from espforensics.analysis_outdir import partial
from espforensics.errors import OutputError
from espforensics.reconcile import COLUMNS, FORWARD, Clock, Fate, FateRow, Reconciled
from espforensics.summary import TOOL_VERSION

WIDTH = 72
FILES = ("reconcile.csv", "reconcile.parquet", "report.txt", "summary.json")  # in that order
MEANING = {
    Fate.DELIVERED: "arrived as sent, in order",
    Fate.LOST: "sent, never received",
    Fate.CHANGED: "other ESP bytes arrived (ciphertext or ICV)",
    Fate.DUPLICATED: "an extra copy of a packet received",
    Fate.REORDERED: "arrived after a packet sent later",
    Fate.OUTER_REWRITTEN: "outer addresses or UDP ports rewritten (NAT)",
    Fate.UNEXPECTED: "received, never sent in the sender's capture",
}
SCHEMA = pa.schema(
    [
        ("fate", pa.string()),
        ("direction", pa.string()),
        ("spi", pa.uint32()),
        ("seq64", pa.uint64()),
        ("sender_frame", pa.int64()),
        ("receiver_frame", pa.int64()),
        ("delay_ns", pa.int64()),
        ("detail", pa.string()),
        ("receiver_verdict", pa.string()),
    ]
)
Verdicts = Mapping[int, str]  # receiver frame -> the receiver model's verdict (with keys)


@dataclass(frozen=True, slots=True)
class CaptureFile:
    """One of the two captures as summary.json names it."""

    path: str
    sha256: str
    frames: int
    esp_packets: int


def per_sa(rows: tuple[FateRow, ...]) -> list[dict[str, object]]:
    """Each SA (SPI and direction) with its packets per fate, by SPI."""
    counts: dict[tuple[int, str], Counter[str]] = {}
    for row in rows:
        counts.setdefault((row.spi, row.direction), Counter())[row.fate.value] += 1
    return [
        {"spi": spi, "direction": way, "fates": {f.value: c[f.value] for f in Fate}}
        for (spi, way), c in sorted(counts.items())
    ]


def clock_dict(clock: Clock) -> dict[str, object]:
    """summary.json's ``clock``: what the joined packets say of the two clocks."""
    spread = clock.spread
    return {
        "method": _method(clock),
        "offset_ns": clock.offset_ns,
        "one_way_delay_ns": clock.delay_ns,
        "receiver_minus_sender_ns": None
        if spread is None
        else {"low": spread.low, "median": spread.median, "high": spread.high},
    }


def _method(clock: Clock) -> str:
    if clock.offset_ns is not None:
        return "both directions"
    return "one direction" if clock.spread is not None else "no packet joined"


def verdicts_by_fate(
    result: Reconciled, verdicts: Verdicts | None
) -> dict[str, dict[str, int]] | None:
    """Per fate, the receiver model's verdicts of the receiver capture's copies."""
    if verdicts is None:
        return None
    counts: dict[str, Counter[str]] = {}
    for row in result.rows:
        verdict = _verdict(row, verdicts)
        if verdict is not None:
            counts.setdefault(row.fate.value, Counter())[verdict] += 1
    return {f.value: dict(sorted(counts[f.value].items())) for f in Fate if f.value in counts}


def summary_dict(
    result: Reconciled, sender: CaptureFile, receiver: CaptureFile, verdicts: Verdicts | None
) -> dict[str, object]:
    """summary.json: the two captures, the packets per fate, per SA, the clocks and, with
    keys, the receiver model's verdicts per fate."""
    return {
        "tool": "espforensics",
        "version": TOOL_VERSION,
        "command": "reconcile",
        "sender": _capture(sender, result.sender_other),
        "receiver": _capture(receiver, result.receiver_other),
        "fates": dict(result.counts),
        "rows": len(result.rows),
        "sas": per_sa(result.rows),
        "clock": clock_dict(result.clock),
        "receiver_verdicts": verdicts_by_fate(result, verdicts),
    }


def _capture(capture: CaptureFile, other: int) -> dict[str, object]:
    return {
        "path": capture.path,
        "sha256": capture.sha256,
        "frames": capture.frames,
        "esp_packets": capture.esp_packets,
        "other_frames": other,
    }


def _us(ns: int) -> str:
    """A signed time in microseconds, three decimals: ``+5000000.000 us``."""
    return f"{ns / 1000:+.3f} us"


def clock_lines(clock: Clock) -> list[str]:
    """What the captures' clocks are estimated to be, in words."""
    spread = clock.spread
    if clock.offset_ns is not None and clock.delay_ns is not None:
        return [
            f"receiver clock minus sender clock: {_us(clock.offset_ns)}",
            f"  (from both directions; one-way delay about {clock.delay_ns / 1000:.3f} us)",
        ]
    if spread is not None:
        return [
            f"receiver time minus sender time: {_us(spread.median)} median",
            f"  ({_us(spread.low)} to {_us(spread.high)}; one direction only: the",
            "  one-way delay plus the clock offset, not told apart)",
        ]
    return ["clocks: no packet was seen in both captures"]


def _capture_lines(role: str, capture: CaptureFile, other: int) -> list[str]:
    head = f"{role}: {capture.path}"
    lines = [head] if len(head) <= WIDTH else [f"{role}:", f"  {capture.path}"]
    return [
        *lines,
        f"  {capture.frames} frames: {capture.esp_packets} ESP packets, {other} other",
        f"sha256 {capture.sha256}",  # unindented: 71 columns
    ]


def report_lines(
    result: Reconciled, sender: CaptureFile, receiver: CaptureFile, verdicts: Verdicts | None
) -> list[str]:
    """report.txt: the captures, the fates and what each means, each SA, the clocks, and
    with keys the receiver model's verdicts per fate."""
    lines = ["espforensics reconcile: the fate of every ESP packet", ""]
    lines += _capture_lines("sender", sender, result.sender_other)
    lines += _capture_lines("receiver", receiver, result.receiver_other)
    lines += ["", "Packets per fate:"]
    lines += [f"  {f.value:<16}{result.counts[f.value]:>8}  {MEANING[f]}" for f in Fate]
    lines += ["", "Per SA:"]
    for sa in per_sa(result.rows):
        fates = sa["fates"]
        assert isinstance(fates, dict)
        said = ", ".join(f"{k} {v}" for k, v in fates.items() if v)
        text = f"SPI 0x{sa['spi']:08x} {sa['direction']}: {said}"
        lines += textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="    ")
    lines += ["", "Clocks (no clock is trusted; from the joined packets):"]
    lines += [f"  {line}" for line in clock_lines(result.clock)]
    by_fate = verdicts_by_fate(result, verdicts)
    if by_fate is not None:
        lines += ["", "The receiver's verdicts (the receiver model, with the keys):"]
        for fate, counts in by_fate.items():
            said = ", ".join(f"{k} {v}" for k, v in counts.items())
            lines += textwrap.wrap(
                f"{fate}: {said}", WIDTH, initial_indent="  ", subsequent_indent="    "
            )
    return lines


def summary_lines(result: Reconciled) -> list[str]:
    """A few lines for stdout: what each capture held, the packets per fate, the clocks."""
    counts = ", ".join(f"{k} {v}" for k, v in result.counts.items() if v) or "none"
    return [
        f"sender: {result.sender_esp} ESP packets ({result.sender_other} other frames); "
        f"receiver: {result.receiver_esp} ({result.receiver_other} other frames)",
        f"fates: {counts}",
        *clock_lines(result.clock),
    ]


def _cells(row: FateRow, verdicts: Verdicts) -> Iterator[object]:
    yield row.fate.value
    yield row.direction
    yield row.spi
    yield row.seq64
    for value in (row.sender_frame, row.receiver_frame, row.delay_ns):
        yield "" if value is None else value
    yield row.detail
    yield _verdict(row, verdicts) or ""


def _verdict(row: FateRow, verdicts: Verdicts) -> str | None:
    """The receiver model's verdict of the RECEIVER capture's copy, for an SA that ran
    towards it (a receiver->sender SA's receiving side is the SENDER capture: none)."""
    if row.receiver_frame is None or row.direction != FORWARD:
        return None
    return verdicts.get(row.receiver_frame)


def _write_csv(rows: tuple[FateRow, ...], verdicts: Verdicts, path: Path) -> None:
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow((*COLUMNS, "receiver_verdict"))
        for row in rows:
            out.writerow(_cells(row, verdicts))


def _write_parquet(rows: tuple[FateRow, ...], verdicts: Verdicts, path: Path) -> None:
    columns = {
        "fate": [r.fate.value for r in rows],
        "direction": [r.direction for r in rows],
        "spi": [r.spi for r in rows],
        "seq64": [r.seq64 for r in rows],
        "sender_frame": [r.sender_frame for r in rows],
        "receiver_frame": [r.receiver_frame for r in rows],
        "delay_ns": [r.delay_ns for r in rows],
        "detail": [r.detail for r in rows],
        "receiver_verdict": [_verdict(r, verdicts) for r in rows],
    }
    pq.write_table(pa.table(columns, schema=SCHEMA), path)


def write_folder(
    result: Reconciled,
    folder: Path,
    files: tuple[CaptureFile, CaptureFile],
    verdicts: Verdicts | None,
) -> None:
    """The four files, each ``.partial`` first, renamed into place with summary.json last;
    the folder exists (``prepare_out_dir``)."""
    try:
        _write_csv(result.rows, verdicts or {}, partial(folder, "reconcile.csv"))
        _write_parquet(result.rows, verdicts or {}, partial(folder, "reconcile.parquet"))
        report = "\n".join(report_lines(result, *files, verdicts)) + "\n"
        partial(folder, "report.txt").write_text(report, encoding="ascii", errors="replace")
        text = json.dumps(summary_dict(result, *files, verdicts), indent=2) + "\n"
        partial(folder, "summary.json").write_text(text)
        if (folder / "summary.json").exists():
            (folder / "summary.json").unlink()  # an earlier run's, first: its mark of done
        for name in FILES:
            os.replace(partial(folder, name), folder / name)
    except OSError as exc:
        raise OutputError(str(folder), f"cannot write: {exc.strerror}") from exc
