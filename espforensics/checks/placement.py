"""ESP placement: what a packet whose ESP header was found elsewhere says.

In: ``PacketContext`` after the receiver's steps (analyzer/receive.py):
analyzer/placement.py has searched every packet whose ICV failed at the
expected offset (``auth_fail``), whose SPI there has no usable key
(``unknown_sa``, ``unsupported``) or that the capture cut (``truncated``),
moved its header columns to the header it found and set ``pkt.placed``.
Out: one ``esp_misplaced`` finding per SPI at the end (how many packets,
the offsets expected and found, how many proven by decryption). Raises
nothing.

The rules of the bytes sit here, side by side: ``found_by_layout`` (the
per-frame rule without a key: the same SPI later in the packet, a sequence
number within ``SEQ_SLACK`` of the one at the expected offset, and in front
of it the start of an IP header whose total length fits the bytes that
follow) and the steady lane's ``refuses_bytes``: the lane takes a keyless
packet only when its SPI does not appear again after its header, so that
no layout is there to find.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from espforensics.bounded.frames import frozen, with_frame
from espforensics.bounded.intervals import IntervalSet
from espforensics.checks.bulk import BulkRules, BytesRule, FlowRows
from espforensics.checks.context import Flow, PacketContext
from espforensics.checks.coverage import Seen
from espforensics.crypto import IV_LEN
from espforensics.decode.clear import ip_start_fits, may_start_ip
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.keys.sa import SaTable
from espforensics.model.enums import FindingKind, Severity
from espforensics.model.evidence import Misplaced, Offsets
from espforensics.model.records import Finding

MAX_CANDIDATES = 8  # SPI occurrences tried per packet, to bound the cost of noise
SEQ_SLACK = 1024
_SLOT = ESP_HEADER_LEN + IV_LEN


@dataclass(slots=True)
class _PerSpi:
    frames: IntervalSet | None = None  # every one
    count: int = 0
    proven: int = 0
    offsets: set[tuple[int, int]] = field(default_factory=set)


def leak_start(data: bytes, expected: int, spi: int) -> int:
    """Where clear inner bytes begin: after a stale ESP header + IV of the same SPI, if there."""
    if data[expected : expected + 4] == spi.to_bytes(4, "big"):
        return expected + _SLOT
    return expected


def found_by_layout(data: bytes, expected: int, spi: int, seq: int, total_len: int) -> int | None:
    """Where the layout alone puts a keyless or cut packet's ESP header later (None: nowhere).

    The same SPI after the expected offset, a sequence number within
    ``SEQ_SLACK`` of the one there, and between the stale header (``leak_start``)
    and it the start of an IP header whose total length fits (``ip_start_fits``).
    A cut packet's header counts once its SPI and sequence number are captured;
    ``total_len`` (its IP header's) stands for the bytes not captured.
    """
    needle = spi.to_bytes(4, "big")
    start = leak_start(data, expected, spi)
    at = data.find(needle, expected + 1)
    need = ESP_HEADER_LEN if len(data) < total_len else _SLOT
    for _ in range(MAX_CANDIDATES):
        if at < 0 or at + need > len(data):
            return None
        found = int.from_bytes(data[at + 4 : at + 8], "big")
        if abs(found - seq) <= SEQ_SLACK and ip_start_fits(data, start, at, total_len):
            return at
        at = data.find(needle, at + 1)
    return None


class PlacementCheck(BulkRules):
    """Counts, per SPI, the packets whose ESP header the receiver found elsewhere."""

    name = "esp_placement"

    def __init__(self, sas: SaTable) -> None:
        self._sas = sas
        self._per_spi: dict[int, _PerSpi] = {}

    def observe(self, pkt: PacketContext) -> None:
        placed = pkt.placed
        if placed is None:
            return
        acc = self._per_spi.setdefault(placed.spi, _PerSpi())
        acc.count += 1
        acc.proven += placed.proven
        acc.offsets.add((placed.expected, placed.at))
        acc.frames = with_frame(acc.frames, pkt.rec.frame)

    # -- the steady lane's rules (checks/bulk.py) ------------------------------
    def admits(self, flow: Flow) -> bool:
        """A flow with a key (the lane takes its packets that verify where their header
        is: nothing to search), or a keyless one while no SA is known, so that no other
        SA's header could be searched for in its packets (analyzer/placement.py)."""
        return flow.state.sa is not None or not len(self._sas)

    def refuses_bytes(self, rows: FlowRows) -> BytesRule:
        """Keyless rows in which ``found_by_layout`` could find their SPI after the header: the
        bytes after the header and an 8-byte IV start an IP header that fits
        (``may_start_ip``, rare in ciphertext), and the SPI is there again."""
        refused = np.zeros(len(rows), np.bool_)
        if rows.flow.state.sa is not None:
            return BytesRule(refused)
        needle, find = rows.flow.spi.to_bytes(4, "big"), rows.raw.find
        start = rows.esp_at + _SLOT  # leak_start: the row's own SPI at the expected offset
        for i in np.flatnonzero(may_start_ip(rows.buf, start, rows.ct_end)).tolist():
            refused[i] = find(needle, int(rows.esp_at[i]) + 1, int(rows.ct_end[i])) >= 0
        return BytesRule(refused)

    def finish(self) -> Iterator[Finding]:
        for spi, acc in sorted(self._per_spi.items()):
            where = ", ".join(f"{e} -> {a}" for e, a in sorted(acc.offsets))
            yield Finding(
                FindingKind.ESP_MISPLACED,
                Severity.CRITICAL,
                spi,
                frozen(acc.frames),
                acc.count,
                f"{acc.count} packets carry the ESP header later than the outer headers "
                f"(expected -> found offset: {where}); {acc.proven} proven by decryption",
                evidence=Misplaced(
                    tuple(Offsets(e, a) for e, a in sorted(acc.offsets)), acc.proven
                ),
            )


def coverage(seen: Seen) -> str | None:
    """Examined: every whole ESP packet (decrypted at its offset, or searched), and every
    one the capture cut whose captured bytes showed its header where it is read or found
    it later (by layout, by its clear bytes); else why not."""
    return None if seen.whole or (seen.cut and seen.evidence) else seen.why
