"""ESP placement: find the ESP header where it really is when it is not where it must be.

In: ``PacketContext`` of packets whose ICV failed at the expected offset
(``auth_fail``), whose SPI there has no usable key (``unknown_sa``,
``unsupported``) or that the capture cut (``truncated``). Out: the
record becomes ``esp_misplaced`` with ``esp_offset`` (where the header
really is), ``leaked`` and ``leaked_hex`` (the clear bytes in front of
it), and the packet's plaintext; one ``esp_misplaced`` finding per SA at
the end. Raises nothing.

Proof with a key: the SA's SPI is searched at every later offset (the
SPI at the expected offset's SA, or, when that SPI has no key, every known
SA of the same addresses) and the packet is decrypted there with the AAD
of the header found (RFC 4303 s2.1-2.2: SPI and sequence number
authenticate). Without a key the layout
is recognised structurally and reported unproven: the same SPI later in
the packet, a sequence number within ``SEQ_SLACK`` of the one at the
expected offset, and in front of it the start of an IP header whose total
length fits the bytes that follow. Offsets are found, never assumed (the
Linux GSO fault of primer s5 puts them at 56/60 for ip6tnl, 36/40 for ipip).

A packet the capture cut (a snap length, ``tcpdump -s 96``) has no ICV to
prove anything with, keyed or not: it is searched by layout as a keyless
one is, the lengths its IP header gives standing for the bytes not
captured. Its verdict stays ``truncated`` (nothing verified it) and its
record takes the header found: offset, sequence number, IV, clear bytes.

The steady lane takes a keyless packet only when its SPI does not appear
again after its header (``refuses_bytes``): then no layout is there to find.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from espforensics.bounded.frames import frozen, with_frame
from espforensics.bounded.intervals import IntervalSet
from espforensics.checks.bulk import BulkRules, FlowRows, Mask
from espforensics.checks.context import Flow, PacketContext
from espforensics.checks.coverage import CUT_DETAIL, Seen
from espforensics.crypto import IV_LEN, opener
from espforensics.decode.clear import ip_start_fits, may_start_ip
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.keys.sa import SaTable
from espforensics.model.enums import FindingKind, Severity, Verdict
from espforensics.model.evidence import Misplaced, Offsets
from espforensics.model.records import Finding

FlowFor = Callable[[int, bytes, bytes], Flow]  # the pipeline's flow of (SPI, src, dst)
MAX_CANDIDATES = 8  # SPI occurrences tried per packet, to bound the cost of noise
SEQ_SLACK = 1024
_SLOT = ESP_HEADER_LEN + IV_LEN
_SEARCHED = frozenset(
    {Verdict.AUTH_FAIL, Verdict.UNKNOWN_SA, Verdict.UNSUPPORTED, Verdict.TRUNCATED}
)


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


class PlacementCheck(BulkRules):
    """Searches failed packets for their SA's ESP header elsewhere."""

    name = "esp_placement"

    def __init__(self, sas: SaTable, flow_for: FlowFor) -> None:
        self._sas = sas
        self._flow_for = flow_for
        self._per_spi: dict[int, _PerSpi] = {}

    def observe(self, pkt: PacketContext) -> None:
        rec = pkt.rec
        if rec.verdict not in _SEARCHED or rec.expected_offset is None:
            return
        if rec.verdict is Verdict.TRUNCATED and not pkt.cut:
            return  # whole, too short to be an ESP packet: nothing to search
        if pkt.cut:  # no ICV captured: no decryption proves a place (RFC 4303 s3.4.4)
            self._recognise(pkt)
            doubt = pkt.header_doubt
            if doubt:
                rec.detail = f"{rec.detail}; {doubt}" if rec.detail else doubt
            return
        if self._prove(pkt, pkt.flow):
            return
        if rec.verdict is Verdict.UNKNOWN_SA:
            for flow in self._other_flows(pkt):
                if self._prove(pkt, flow):
                    pkt.flow = flow  # the packet belongs to the SA whose header was found
                    rec.algorithm = flow.state.sa.suite if flow.state.sa else ""
                    return
        self._recognise(pkt)  # no usable key: the layout alone, reported unproven

    # -- the steady lane's rules (checks/bulk.py) ------------------------------
    def admits(self, flow: Flow) -> bool:
        """A flow with a key (the lane takes its packets that verify where their header
        is: nothing to search), or a keyless one while no SA is known, so that no other
        SA's header could be searched for in its packets (``_other_flows``)."""
        return flow.state.sa is not None or not len(self._sas)

    def refuses_bytes(self, rows: FlowRows) -> Mask:
        """Keyless rows in which ``_recognise`` could find their SPI after the header: the
        bytes after the header and an 8-byte IV start an IP header that fits
        (``may_start_ip``, rare in ciphertext), and the SPI is there again."""
        refused = np.zeros(len(rows), np.bool_)
        if rows.flow.state.sa is not None:
            return refused
        needle, find = rows.flow.spi.to_bytes(4, "big"), rows.raw.find
        start = rows.esp_at + _SLOT  # leak_start: the row's own SPI at the expected offset
        for i in np.flatnonzero(may_start_ip(rows.buf, start, rows.ct_end)).tolist():
            refused[i] = find(needle, int(rows.esp_at[i]) + 1, int(rows.ct_end[i])) >= 0
        return refused

    def _other_flows(self, pkt: PacketContext) -> Iterator[Flow]:
        """Flows of the known SAs that could own this packet (same addresses or wildcards)."""
        src, dst = pkt.ip.src, pkt.ip.dst
        for sa in self._sas:
            if (
                sa.supported
                and not sa.any_spi  # a wildcard names no SPI to search for
                and sa.spi != pkt.flow.spi
                and (
                    (sa.src is None or sa.src.packed == src)
                    and (sa.dst is None or sa.dst.packed == dst)
                )
            ):
                yield self._flow_for(sa.spi, src, dst)

    def _prove(self, pkt: PacketContext, flow: Flow) -> bool:
        rec, data, state = pkt.rec, pkt.data, flow.state
        ctx = state.ctx
        if ctx is None or not ctx.verifies or state.sa is None or rec.expected_offset is None:
            return False  # no ICV proves a header found elsewhere (RFC 4303 s3.2)
        needle = state.sa.spi.to_bytes(4, "big")
        at = data.find(needle, rec.expected_offset + 1)
        for _ in range(MAX_CANDIDATES):
            if at < 0:
                break
            seq = int.from_bytes(data[at + 4 : at + 8], "big")
            seq64 = state.tracker.infer(seq)
            body = data[at + ESP_HEADER_LEN :]
            plain = opener(ctx)(seq64, body[: ctx.iv_len], body[ctx.iv_len :])
            if plain is not None:
                state.tracker.commit(seq64)
                state.proven = True
                problem = pkt.apply_plaintext(plain, ctx.block) if ctx.decrypts else ""
                self._mark(pkt, at, seq, seq64, proven=True, iv_len=ctx.iv_len)
                if problem:
                    rec.detail += f"; trailer: {problem}"
                return True
            at = data.find(needle, at + 1)
        return False

    def _recognise(self, pkt: PacketContext) -> None:
        rec, data = pkt.rec, pkt.data
        if rec.expected_offset is None or rec.spi is None or rec.seq is None:
            return
        needle = rec.spi.to_bytes(4, "big")
        start = leak_start(data, rec.expected_offset, rec.spi)
        at = data.find(needle, rec.expected_offset + 1)
        # A cut packet's header counts once its SPI and sequence number are captured.
        need = ESP_HEADER_LEN if pkt.cut else _SLOT
        for _ in range(MAX_CANDIDATES):
            if at < 0 or at + need > len(data):
                return
            seq = int.from_bytes(data[at + 4 : at + 8], "big")
            if abs(seq - rec.seq) <= SEQ_SLACK and ip_start_fits(data, start, at, pkt.ip.total_len):
                ctx = pkt.state.ctx
                iv_len = IV_LEN if ctx is None else ctx.iv_len
                self._mark(pkt, at, seq, pkt.state.tracker.infer(seq), False, iv_len)
                return
            at = data.find(needle, at + 1)

    def _mark(
        self, pkt: PacketContext, at: int, seq: int, seq64: int, proven: bool, iv_len: int = IV_LEN
    ) -> None:
        rec, data = pkt.rec, pkt.data
        if rec.expected_offset is None or rec.spi is None:
            return
        spi = int.from_bytes(data[at : at + 4], "big")
        start = leak_start(data, rec.expected_offset, spi)
        clear = data[start:at] if at > start else b""
        cut = pkt.cut
        if not cut:  # a cut packet stays truncated: nothing verified it
            rec.verdict = Verdict.ESP_MISPLACED
        rec.spi, rec.seq, rec.seq64, rec.esp_offset = spi, seq, seq64, at
        iv = data[at + ESP_HEADER_LEN : at + ESP_HEADER_LEN + iv_len]
        rec.iv = iv.hex()
        pkt.iv = int.from_bytes(iv) if iv_len and len(iv) == iv_len else None
        rec.esp_len = pkt.ip.total_len - at
        rec.leaked, rec.leaked_hex = len(clear), clear.hex(" ")
        if proven:
            how = "proven by decryption there"
        elif cut:
            how = "unproven: its ICV cut by the capture, found by layout"
        else:
            how = "unproven: no key, found by layout"
        rec.detail = (
            f"ESP header at offset {at}, expected at {rec.expected_offset}; "
            f"{len(clear)} bytes in clear before it; {how}"
        )
        if cut:  # first, as on every truncated packet
            rec.detail = f"{CUT_DETAIL.format(len(data) - at, rec.esp_len)}; {rec.detail}"
        acc = self._per_spi.setdefault(spi, _PerSpi())
        acc.count += 1
        acc.proven += proven
        acc.offsets.add((rec.expected_offset, at))
        acc.frames = with_frame(acc.frames, rec.frame)

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
