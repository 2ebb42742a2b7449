"""What ``espforensics reconcile`` writes and prints, from a ``Reconciled``.

In: the rows of reconcile/run.py as they are decided (``FolderWriter.write``),
then its ``Reconciled`` and what each capture is (``CaptureFile``: path,
sha256, frames). Out: summary.json's dict (``summary_dict``), report.txt's
lines (``report_lines``, ASCII, at most 72 columns, a long path on a line
of its own), the stdout summary lines, and the folder (``FolderWriter``:
reconcile.csv and reconcile.parquet written row by row, the parquet in
row groups, then report.txt and summary.json; each written as
``.partial`` then renamed into place, summary.json last, as analyze
does). Raises ``OutputError`` for a folder it cannot write.
"""

from __future__ import annotations

import csv
import json
import os
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from espforensics.errors import OutputError
from espforensics.model.version import TOOL_VERSION
from espforensics.reconcile.run import Clock, Fate, FateRow, Reconciled
from espforensics.results.folder import partial

WIDTH = 72
FILES = ("reconcile.csv", "reconcile.parquet", "report.txt", "summary.json")  # in that order
MEANING = {
    Fate.DELIVERED: "arrived as sent, in order",
    Fate.LOST: "sent, never received",
    Fate.CHANGED: "other ESP bytes arrived (ciphertext or ICV)",
    Fate.DUPLICATED: "an extra copy of a packet received",
    Fate.REORDERED: "arrived after a packet sent later",
    Fate.OUTER_REWRITTEN: "outer header rewritten: NAT, DSCP, ECN, TTL",
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
        ("outer_changes", pa.string()),
    ]
)
ROW_GROUP = 65_536  # reconcile.parquet's rows per row group


@dataclass(frozen=True, slots=True)
class CaptureFile:
    """One of the two captures as summary.json names it."""

    path: str
    sha256: str
    frames: int
    esp_packets: int


def per_sa(result: Reconciled) -> list[dict[str, object]]:
    """Each SA (SPI and direction) with its packets per fate, by SPI."""
    return [
        {
            "spi": spi,
            "direction": way,
            "fates": dict(fates),
            "hop_decrement": result.decrements[spi, way],
        }
        for (spi, way), fates in result.sas.items()
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


def summary_dict(
    result: Reconciled, sender: CaptureFile, receiver: CaptureFile
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
        "rows": result.rows,
        "sas": per_sa(result),
        "clock": clock_dict(result.clock),
        "receiver_verdicts": result.verdicts,
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
        # no median: no packet of the prefixes the estimate is made from was joined
        said = "no median" if spread.median is None else f"{_us(spread.median)} median"
        return [
            f"receiver time minus sender time: {said}",
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


def report_lines(result: Reconciled, sender: CaptureFile, receiver: CaptureFile) -> list[str]:
    """report.txt: the captures, the fates and what each means, each SA, the clocks, and
    with keys the receiver model's verdicts per fate."""
    lines = ["espforensics reconcile: the fate of every ESP packet", ""]
    lines += _capture_lines("sender", sender, result.sender_other)
    lines += _capture_lines("receiver", receiver, result.receiver_other)
    lines += ["", "Packets per fate:"]
    lines += [f"  {f.value:<16}{result.counts[f.value]:>8}  {MEANING[f]}" for f in Fate]
    lines += ["", "Per SA:"]
    for sa in per_sa(result):
        fates = sa["fates"]
        assert isinstance(fates, dict)
        said = ", ".join(f"{k} {v}" for k, v in fates.items() if v)
        text = f"SPI 0x{sa['spi']:08x} {sa['direction']}: {said}"
        lines += textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="    ")
        lines += _path(sa["hop_decrement"])
    lines += ["", "Clocks (no clock is trusted; from the joined packets):"]
    lines += [f"  {line}" for line in clock_lines(result.clock)]
    by_fate = result.verdicts
    if by_fate is not None:
        lines += ["", "The receiver's verdicts (the receiver model, with the keys):"]
        for fate, counts in by_fate.items():
            said = ", ".join(f"{k} {v}" for k, v in counts.items())
            lines += textwrap.wrap(
                f"{fate}: {said}", WIDTH, initial_indent="  ", subsequent_indent="    "
            )
    return lines


def _path(decrement: object) -> list[str]:
    """The SA's usual TTL / hop limit change on the way (outer_rewritten is judged
    against it), a line under its fates."""
    if not isinstance(decrement, int):
        return []
    said = "unchanged" if decrement == 0 else f"{-decrement:+d}"
    return [f"    usual TTL/hop limit change on the way: {said}"]


def summary_lines(result: Reconciled) -> list[str]:
    """A few lines for stdout: what each capture held, the packets per fate, the clocks."""
    counts = ", ".join(f"{k} {v}" for k, v in result.counts.items() if v) or "none"
    return [
        f"sender: {result.sender_esp} ESP packets ({result.sender_other} other frames); "
        f"receiver: {result.receiver_esp} ({result.receiver_other} other frames)",
        f"fates: {counts}",
        *clock_lines(result.clock),
    ]


def _cells(row: FateRow) -> Iterator[object]:
    yield row.fate.value
    yield row.direction
    yield row.spi
    yield row.seq64
    for value in (row.sender_frame, row.receiver_frame, row.delay_ns):
        yield "" if value is None else value
    yield row.detail
    yield row.receiver_verdict or ""
    yield row.outer_changes


class FolderWriter:
    """reconcile.csv and reconcile.parquet as the rows come, then the rest of the folder
    (``finish``); the folder exists (``prepare_out_dir``). ``abort`` removes what an
    unfinished run wrote."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._columns: dict[str, list[object]] = {name: [] for name in SCHEMA.names}
        try:
            self._fh = partial(folder, "reconcile.csv").open("w", newline="")
            self._csv = csv.writer(self._fh)
            self._csv.writerow(SCHEMA.names)
            self._parquet = pq.ParquetWriter(partial(folder, "reconcile.parquet"), SCHEMA)
        except OSError as exc:
            raise _cannot(folder, exc) from exc

    def write(self, row: FateRow) -> None:
        try:
            self._csv.writerow(_cells(row))
        except OSError as exc:
            raise _cannot(self._folder, exc) from exc
        cols = self._columns
        cols["fate"].append(row.fate.value)
        cols["direction"].append(row.direction)
        cols["spi"].append(row.spi)
        cols["seq64"].append(row.seq64)
        cols["sender_frame"].append(row.sender_frame)
        cols["receiver_frame"].append(row.receiver_frame)
        cols["delay_ns"].append(row.delay_ns)
        cols["detail"].append(row.detail)
        cols["receiver_verdict"].append(row.receiver_verdict)
        cols["outer_changes"].append(row.outer_changes)
        if len(cols["fate"]) >= ROW_GROUP:
            self._row_group()

    def _row_group(self) -> None:
        try:
            self._parquet.write_table(pa.table(self._columns, schema=SCHEMA))
        except OSError as exc:
            raise _cannot(self._folder, exc) from exc
        self._columns = {name: [] for name in SCHEMA.names}

    def finish(self, result: Reconciled, files: tuple[CaptureFile, CaptureFile]) -> None:
        """The last rows, report.txt and summary.json, and every file renamed into place,
        summary.json last."""
        folder = self._folder
        try:
            if self._columns["fate"]:
                self._row_group()
            self._parquet.close()
            self._fh.close()
            report = "\n".join(report_lines(result, *files)) + "\n"
            partial(folder, "report.txt").write_text(report, encoding="ascii", errors="replace")
            text = json.dumps(summary_dict(result, *files), indent=2) + "\n"
            partial(folder, "summary.json").write_text(text)
            if (folder / "summary.json").exists():
                (folder / "summary.json").unlink()  # an earlier run's, first: its mark of done
            for name in FILES:
                os.replace(partial(folder, name), folder / name)
        except OSError as exc:
            raise _cannot(folder, exc) from exc

    def abort(self) -> None:
        """The run stopped: close and remove the partial files (the outputs of an earlier
        run, with --force, stay)."""
        self._fh.close()
        self._parquet.close()
        for name in FILES:
            partial(self._folder, name).unlink(missing_ok=True)


def _cannot(folder: Path, exc: OSError) -> OutputError:
    return OutputError(str(folder), f"cannot write: {exc.strerror}")
