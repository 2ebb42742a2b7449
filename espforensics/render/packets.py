"""``--format packets``: one line per ESP packet, as a tshark user reads a capture.

In: an output folder of ``analyze`` (its packets.parquet, finding_frames.parquet
and summary's findings). Out: lines of text, a packet each, in capture order:
frame, seconds since the first frame, outer addresses, SPI, sequence number,
the verdict and the findings that name the packet. Frames without ESP are not
printed (packets.parquet has them). Raises ``OSError`` from reading the folder.

    4   0.000187 fd00:a::1 -> fd00:a::2 ESP SPI 0x00001001 seq 4 esp_misplaced
                 [1 cleartext_leak, 2 esp_misplaced]

(on one line: the findings in brackets are ``id kind`` of findings.csv).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from espforensics.model.enums import Proto, Verdict
from espforensics.model.records import Finding, PacketRecord

COLUMNS = ("src", "dst", "spi", "seq", "seq64", "verdict", "proto")  # and frame, time, layer
_PROTO = {Proto.ESP: "ESP", Proto.ESP_UDP: "ESP-in-UDP"}


def packet_line(
    rec: PacketRecord, first_ns: int, findings: Sequence[Finding], ids: Sequence[int]
) -> str:
    """One packet's line; ``ids`` the findings (1-based ids) that name it."""
    seconds = (rec.time - first_ns) / 1e9
    spi = "SPI ?" if rec.spi is None else f"SPI {rec.spi:#010x}"
    seq = "" if rec.seq is None else f" seq {rec.seq}"
    if rec.seq64 is not None and rec.seq is not None and rec.seq64 != rec.seq:
        seq += f" (seq64 {rec.seq64:#x})"
    layer = f" layer {rec.layer}" if rec.layer > 1 else ""
    named = ", ".join(f"{i} {findings[i - 1].kind.value}" for i in ids)
    tail = f" [{named}]" if named else ""
    return (
        f"{rec.frame:>7} {seconds:>11.6f} {rec.src} -> {rec.dst} "
        f"{_PROTO.get(rec.proto, 'ESP')}{layer} {spi}{seq} {rec.verdict.value}{tail}"
    )


def packet_lines(
    records: Iterable[PacketRecord],
    findings: Sequence[Finding],
    on: Mapping[tuple[int, int], list[int]],
) -> Iterator[str]:
    """A line per ESP packet of ``records`` (every layer), times from the first record."""
    first_ns: int | None = None
    for rec in records:
        if first_ns is None:
            first_ns = rec.time
        if rec.verdict in (Verdict.NOT_ESP, Verdict.NOT_SELECTED):
            continue
        yield packet_line(rec, first_ns, findings, on.get((rec.frame, rec.layer), ())) + "\n"


def packets_view(folder: Path, findings: Sequence[Finding]) -> Iterator[str]:
    """The lines of an output folder's packets (``--format packets``)."""
    # Imported here: the table readers are needed only by this view and the copies.
    from espforensics.tables.packets import iter_packet_records  # noqa: PLC0415
    from espforensics.tables.small import read_finding_frames  # noqa: PLC0415

    links = folder / "finding_frames.parquet"
    on = read_finding_frames(links) if links.exists() else {}
    records = iter_packet_records(folder / "packets.parquet", COLUMNS, every_layer=True)
    return packet_lines(records, findings, on)
