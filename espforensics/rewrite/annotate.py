"""``analyze --annotate``: the capture again, as pcapng, with the findings as packet comments.

In: the capture path, its packets.parquet (one row per frame, in capture
order) and the findings of the same analysis; a binary stream. Out: a
pcapng file with every frame, in order, with its bytes, lengths and
timestamp, each commented frame carrying one ``opt_comment`` per comment
of ``comments.FindingMarks``; returns the number of frames written.
Raises ``CaptureError`` / ``CaptureTruncated`` when the capture is damaged
(after everything before the damage was written, as the analysis did)
and ``OSError`` from the stream.

pcapng input is copied block by block (capture.blocks): section headers,
interfaces with all their options (names, timestamp resolutions),
name-resolution and statistics blocks and the packets' own options stay
as stored; a comment is appended to an EPB's or OPB's options. A Simple
Packet Block has no options and stays as it was, uncommented. The SHB's
section length is set to -1 (unknown), as the comments change it.
Decryption Secrets Blocks are NOT copied: the annotated file holds no key.
pcap input becomes one pcapng section with one interface of the pcap's
link type and nanosecond timestamps (exactly the input's, micro or nano),
written in batches: the rows of a batch that get no comment
(``FindingMarks.quiet``) are not made records, the others are and get
``FindingMarks.comments``, and the batch's blocks are written at once
(``PcapngStream.write_run``); ``batch=0`` writes a frame at a time, the
reference (tests/rewrite/test_bulk_copies.py holds the two byte-identical).
Memory: a batch of frames and their rows at a time, plus ``FindingMarks``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from espforensics.capture import open_capture
from espforensics.capture.batch import FrameBatch
from espforensics.capture.blocks import Block, iter_blocks, packet_options, with_options
from espforensics.capture.pcapng import DSB, EPB, OPB, SHB
from espforensics.capture.writer import (
    Data,
    FrameRun,
    PcapngStream,
    Writable,
    comment_options,
    encode_options,
)
from espforensics.model.records import DecryptionSecrets, Finding, Frame, PacketRecord
from espforensics.rewrite.comments import DERIVED, MARKING, QUIET_VERDICTS, FindingMarks
from espforensics.rewrite.onepass import copy_alone
from espforensics.rewrite.rows import RowSlice, same_frame
from espforensics.tables.packets import iter_packet_records

COLUMNS = (
    "verdict",
    "spi",
    "seq",
    "seq64",
    "iv",
    "esp_offset",
    "expected_offset",
    "leaked",
    "leaked_fields",
    "iv_reused",
    "seq_anomaly",
    "detail",
)
BATCH = 4096  # frames a batch (pcap input)


def _records(parquet: Path) -> Iterator[PacketRecord]:
    return iter_packet_records(parquet, COLUMNS)


def _commented(block: Block, comments: Sequence[str]) -> bytes:
    """An EPB or OPB with ``comments`` after the options it had."""
    if not comments or block.btype not in (EPB, OPB):
        return block.raw
    body, options = packet_options(block)
    return with_options(
        block, body, encode_options(block.order, [*options, *comment_options(comments)])
    )


def _copy_pcapng(
    capture: Path, rows: Iterator[PacketRecord], marks: FindingMarks, out: Writable
) -> int:
    frames = 0
    for block in iter_blocks(capture):
        if block.btype == DSB:
            continue  # keys: never copied into an output
        if block.btype == SHB:
            raw = bytearray(block.raw)
            struct.pack_into(block.order + "q", raw, 16, -1)  # pcapng s4.1: section length
            out.write(raw)
            continue
        if block.frame:
            rec = next(rows, None)
            if rec is None:  # the analysis stopped before this frame (a damaged capture)
                break
            same_frame(rec.frame, block.frame)
            out.write(_commented(block, marks.comments(rec)))
            frames += 1
            continue
        out.write(block.raw)
    return frames


def _convert_pcap(
    capture: Path, rows: Iterator[PacketRecord], marks: FindingMarks, out: Writable
) -> int:
    stream = PcapngStream(out)
    with open_capture(capture) as cap:
        for item in cap:
            if not isinstance(item, Frame):
                continue
            rec = next(rows, None)
            if rec is None:
                break
            same_frame(rec.frame, item.number)
            stream.write(item, marks.comments(rec))
    return stream.frames


def annotated_run(
    batch: FrameBatch, rows: RowSlice, views: Sequence[Data], marks: FindingMarks
) -> FrameRun:
    """The batch's frames (``views``: their bytes, ``FrameBatch.views``), each with
    ``marks.comments`` of its row (a record is made only for a row ``marks.quiet`` does
    not clear)."""
    numbers = rows.ints("frame", -1)
    marked = ~rows.is_in("verdict", QUIET_VERDICTS) | rows.contains("detail", DERIVED)
    for name in MARKING:
        marked |= rows.truthy(name)
    loud = np.flatnonzero(~marks.quiet(numbers, marked)).tolist()
    comments: list[tuple[str, ...]] = [()] * len(batch)
    for i, rec in zip(loud, rows.records(loud), strict=True):
        comments[i] = marks.comments(rec)
    data = list(views)
    return FrameRun(batch.number, batch.ts_ns, batch.wirelen, batch.linktype, data, comments)


class AnnotatedCopy:
    """``--annotate`` of a pcap written a batch at a time (rewrite/onepass.py's
    ``BatchCopy``)."""

    columns = COLUMNS

    def __init__(self, findings: Sequence[Finding], out: Writable) -> None:
        self._marks = FindingMarks(findings)
        self._stream = PcapngStream(out)

    @property
    def frames(self) -> int:
        return self._stream.frames

    def secrets(self, item: DecryptionSecrets) -> None:
        del item  # keys: never copied into an output

    def frame(self, frame: Frame, rec: PacketRecord) -> None:
        self._stream.write(frame, self._marks.comments(rec))

    def run(self, batch: FrameBatch, rows: RowSlice, views: Sequence[Data]) -> None:
        self._stream.write_run(annotated_run(batch, rows, views, self._marks))

    def close(self) -> None:
        """Nothing is pending: every block is written whole."""


def _convert_pcap_batches(
    capture: Path, parquet: Path, findings: Sequence[Finding], out: Writable, batch: int
) -> int:
    """``_convert_pcap`` in batches of ``batch`` frames: the same bytes."""
    return copy_alone(capture, parquet, AnnotatedCopy(findings, out), batch)


def write_annotated(
    capture: Path, parquet: Path, findings: Sequence[Finding], out: Writable, batch: int = BATCH
) -> int:
    """Write the annotated pcapng of ``capture`` to ``out``; the number of frames written.
    ``batch``: frames a batch for a pcap (0: a frame at a time, the reference)."""
    with open_capture(capture) as cap:
        fmt = cap.format
    if fmt == "pcapng":
        return _copy_pcapng(capture, _records(parquet), FindingMarks(findings), out)
    if batch:
        return _convert_pcap_batches(capture, parquet, findings, out, batch)
    return _convert_pcap(capture, _records(parquet), FindingMarks(findings), out)
