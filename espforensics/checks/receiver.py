"""The receiver model: what a Linux receiver holding the key file's states does
with each ESP packet, in capture order.

In: ``PacketContext`` of every ESP packet (after the sequence check, whose
``seq_anomaly`` tells a replay from a late packet). Out: the ``receiver``
column (receiver/verdict.py ``RxVerdict``) and, at the end,
``prediction()``: per destination the predicted XfrmIn* counters, per
receiving state its window and reorder depth. No findings. Raises nothing.

The receiver reads the SPI and sequence number where the ESP header
belongs (``expected_offset``): a misplaced header's packet is looked up and
replay-checked by the bytes in its slot, and its ICV fails there. A state is
found by SPI and destination (``xfrm_state_lookup``), whatever the source.
Each state's window starts just below the first packet it receives, empty:
as a new state's (at 0, its first packet 1), or one made in step with its
sender when the capture starts later (receiver/config.py says which
variant and size). Memory: one window per (SPI, destination).
Without a key file no prediction is made: the column stays empty.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from espforensics.bounded.frames import frozen, with_frame
from espforensics.bounded.intervals import IntervalSet
from espforensics.checks.bulk import BulkRules, FlowRows, Mask, PlainRule, Plaintexts
from espforensics.checks.context import Flow, PacketContext
from espforensics.keys.sa import SaTable, SecurityAssociation
from espforensics.model.enums import SeqAnomaly, Verdict
from espforensics.model.records import Finding, SaKey
from espforensics.receiver.config import LEGACY_BITS, replay_config
from espforensics.receiver.prediction import ReceiverHost, ReceiverSa
from espforensics.receiver.replay import LegacyWindow
from espforensics.receiver.verdict import COUNTER, COUNTERS, Icv, RxState, RxVerdict, cause

_ESP_HEADER = struct.Struct("!II")
_M32 = np.uint64(0xFFFFFFFF)
# Verdicts whose ICV verified at the header's own place (the trailer decides the rest).
_VERIFIED = frozenset(
    {Verdict.OK, Verdict.BAD_TRAILER, Verdict.ESN_MISMATCH, Verdict.AUTHENTIC_NOT_DECRYPTED}
)
_NOT_RECEIVED = frozenset({Verdict.NOT_ESP, Verdict.FRAGMENT, Verdict.UNDECODABLE})


@dataclass(slots=True)
class _State:
    """A receiving state, or none (``rx`` None: no state for the SPI and destination)."""

    rx: RxState | None
    window: str
    flow: SaKey  # the first flow that reached it
    shared: bool = False  # flows of other sources reached it too
    sas: int = 0  # the SAs the key files held when it was looked up
    verdicts: Counter[str] = field(default_factory=Counter)
    best: int = -1  # the highest seq64 verified as sent
    depth: int = 0  # how far below ``best`` a packet that was no replay arrived, at most


@dataclass(slots=True)
class _Host:
    counts: Counter[str] = field(default_factory=Counter)
    causes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (counter, cause)
    frames: dict[str, IntervalSet | None] = field(default_factory=dict)
    unchecked: int = 0


class ReceiverCheck(BulkRules):
    """The receiving side of every SA, state by state."""

    name = "receiver"

    def __init__(self, sas: SaTable) -> None:
        self._sas = sas
        self._states: dict[tuple[int, str], _State] = {}
        self._hosts: dict[str, _Host] = {}

    def observe(self, pkt: PacketContext) -> None:
        rec = pkt.rec
        if rec.spi is None or rec.seq is None or rec.verdict in _NOT_RECEIVED:
            return
        if not len(self._sas):  # keyless: no state to predict with
            return
        spi, seq, icv = rec.spi, rec.seq, self._icv(pkt)
        at = rec.expected_offset
        if rec.verdict is Verdict.ESP_MISPLACED and at is not None:
            if len(pkt.data) < at + 8:
                return  # the slot was not captured: what the receiver read is unknown
            spi, seq = _ESP_HEADER.unpack_from(pkt.data, at)
        hi = (rec.seq64 or 0) >> 32
        state = self._state(spi, pkt, hi << 32 | seq)
        if state.rx is None:
            verdict = RxVerdict.NO_STATE
        else:
            sent_hi = rec.seq_hi_verified
            if sent_hi is None:
                sent_hi = (rec.seq64 or 0) >> 32
            verdict = state.rx.receive(seq, icv, sent_hi)
            if icv is not Icv.FAILS and rec.verdict is not Verdict.ESP_MISPLACED:
                self._late(state, rec.seq64, rec.seq_anomaly)
        rec.receiver = verdict.value
        state.verdicts[verdict] += 1
        host = self._hosts.get(rec.dst) or self._hosts.setdefault(rec.dst, _Host())
        counter = COUNTER.get(verdict)
        if counter is not None:
            host.counts[counter] += 1
            host.causes[(counter, cause(verdict, rec.verdict))] += 1
            host.frames[counter] = with_frame(host.frames.get(counter), rec.frame)
        host.unchecked += verdict is RxVerdict.UNCHECKED

    def _icv(self, pkt: PacketContext) -> Icv:
        """What the analysis proved of the ICV at the header's own place."""
        rec = pkt.rec
        verdict = rec.verdict
        if verdict in (Verdict.AUTH_FAIL, Verdict.ESP_MISPLACED):
            return Icv.FAILS
        if verdict in _VERIFIED:
            if verdict is Verdict.AUTHENTIC_NOT_DECRYPTED:
                return Icv.VERIFIES  # the trailer is not read: assumed sound
            return Icv.VERIFIES if leaves_payload(rec.payload_len or 0) else Icv.NO_PAYLOAD
        sa = pkt.flow.state.sa
        if verdict is Verdict.DECRYPTED_NO_ICV and sa is not None and sa.icv_bits == 0:
            return Icv.VERIFIES  # no integrity at all (RFC 4303 s3.2): nothing to fail
        return Icv.UNKNOWN

    def _state(self, spi: int, pkt: PacketContext, first: int) -> _State:
        """The receiving state of (SPI, destination), made on first use; one without an SA
        looks again once a Decryption Secrets Block has added SAs."""
        dst = pkt.rec.dst
        state = self._states.get((spi, dst))
        if state is None or (state.rx is None and state.sas != len(self._sas)):
            sa = self._find(spi, pkt)
            rx, window = None, "no state"
            if sa is not None:
                config = replay_config(sa)
                rx, window = RxState(config, first), config.describe()
            if state is None:
                state = self._states[(spi, dst)] = _State(rx, window, pkt.flow.key)
            state.rx, state.window, state.sas = rx, window, len(self._sas)
        elif state.flow != pkt.flow.key:
            state.shared = True
        return state

    def _find(self, spi: int, pkt: PacketContext) -> SecurityAssociation | None:
        """The key file's SA a receiver finds by SPI and destination (xfrm_state_lookup)."""
        if spi == pkt.flow.spi and pkt.flow.state.sa is not None:
            return pkt.flow.state.sa
        found = self._sas.lookup(spi, pkt.ip.src, pkt.ip.dst)
        if found is not None:
            return found
        for sa in self._sas:
            if sa.spi == spi and (sa.dst is None or sa.dst.packed == pkt.ip.dst):
                return sa
        return None

    @staticmethod
    def _late(state: _State, seq64: int | None, anomaly: SeqAnomaly) -> None:
        """Keep the reorder depth: how far below the top a packet that is no replay came."""
        if seq64 is None or anomaly.duplicate:
            return
        if seq64 < state.best:
            state.depth = max(state.depth, state.best - seq64)
        else:
            state.best = seq64

    # -- the steady lane's rules (checks/bulk.py) ------------------------------
    def admits(self, flow: Flow) -> bool:
        """Flows whose state this check has seen, with a window, reached by no other flow;
        and every flow of a run without keys (``observe`` predicts nothing then)."""
        if not len(self._sas):
            return True
        state = self._states.get((flow.spi, flow.dst))
        return state is not None and state.rx is not None and not state.shared

    def refuses(self, rows: FlowRows) -> Mask:
        """Rows ``receive`` would not simply accept in order: at or below the previous
        number (without ESN, the window's own low half), another high half, number 0,
        or (ESN, window spanning two epochs) a number the receiver would take for the
        previous epoch."""
        if not len(self._sas):
            return np.zeros(len(rows), np.bool_)
        state = self._states[(rows.flow.spi, rows.flow.dst)]
        assert state.rx is not None  # admits
        window = state.rx.window
        top = np.uint64(max(window.top, state.best, 0))
        prev = np.concatenate(([top], rows.seq64[:-1]))
        lo = rows.seq64 & _M32
        wrong: Mask = (rows.seq64 <= prev) | (rows.seq64 >> np.uint64(32) != top >> np.uint64(32))
        wrong |= lo == 0
        if not window.esn:  # the window reads the low halves only: the sender's seq64 may
            # have another high half than its top (a damaged number moved it far ahead)
            prev_lo = np.concatenate(([np.uint64(window.top & 0xFFFFFFFF)], lo[:-1]))
            wrong |= lo <= prev_lo
        if window.esn:
            size = np.uint64(window.size)
            prev_lo = prev & _M32
            spans = prev_lo + np.uint64(1) < size  # top < size - 1: case B
            bottom = (prev_lo - size + np.uint64(1)) & _M32
            wrong |= spans & (lo >= bottom)
        return wrong

    def commit(self, rows: FlowRows) -> None:
        """``observe`` for rising numbers the lane took: each accepted and advanced.

        Only the numbers within the window of the last one change the window's
        final state: earlier ones are advanced over and cleared.
        """
        if not len(self._sas):
            return
        state = self._states[(rows.flow.spi, rows.flow.dst)]
        assert state.rx is not None  # admits
        window = state.rx.window
        seq64 = rows.seq64
        last = int(seq64[-1])
        start = int(np.searchsorted(seq64, np.uint64(max(last - window.size, 0)), "right"))
        if isinstance(window, LegacyWindow) and window.size > LEGACY_BITS:
            start = 0  # its advance shifts by diff mod 32 (a C u32 shift): every step counts
        for value in seq64[start:].tolist():
            window.advance(value & 0xFFFFFFFF)
        state.best = last
        state.verdicts[RxVerdict.ACCEPT] += len(seq64)

    def prediction(self) -> tuple[tuple[ReceiverHost, ...], tuple[ReceiverSa, ...]]:
        """Per destination the predicted counters; per receiving state what it did."""
        hosts = tuple(
            ReceiverHost(
                dst,
                {name: host.counts[name] for name in COUNTERS},
                {name: frozen(runs) for name, runs in sorted(host.frames.items())},
                host.unchecked,
                tuple((c, why, n) for (c, why), n in sorted(host.causes.items())),
            )
            for dst, host in sorted(self._hosts.items())
        )
        sas = tuple(
            ReceiverSa(spi, dst, s.window, dict(sorted(s.verdicts.items())), s.depth)
            for (spi, dst), s in sorted(self._states.items())
        )
        return hosts, sas

    def finish(self) -> Iterator[Finding]:
        return iter(())


def leaves_payload(payload_len: int) -> bool:
    """Does the receiver keep a verified packet with this payload length?

    net/ipv4/esp4.c and esp6.c ``esp_remove_trailer`` drop a packet when
    ``padlen + 2 + alen >= elen``: when the pad length leaves no payload byte.
    The pad bytes themselves are not read (RFC 4303 s2.4 leaves that check
    to the receiver; Linux does not make it).
    """
    return payload_len > 0


def plaintexts(p: Plaintexts) -> PlainRule:
    """``leaves_payload`` over a batch: the rows it refuses are no plain accept."""
    refused: Mask = p.payloads.payload <= 0
    return PlainRule(refused=refused if refused.any() else None)
