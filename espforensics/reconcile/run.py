"""Two captures of one run, the sender's and the receiver's: what became of each packet.

In: the two capture files (any format ``open_capture`` reads), the UDP
ports of ESP-in-UDP and, optionally, the key files' ``SaTable`` (then the
receiver capture is read through the analysis's own pass, reconcile/wire.py,
and each row of an SA that ran towards RECEIVER carries the receiver
model's verdict of its copy). Out: ``FateRow``s through ``sink`` as they
are decided, and ``Reconciled``: the count per fate, per SA and, with keys,
per receiver verdict, and ``Clock``, what the packets say of the two
captures' clocks (reconcile/out.py writes and prints them). Raises
``CaptureError`` (from the reader) for a capture it cannot read. No key
is needed: packets are joined on their wire bytes.

Both captures are read once, side by side in time order, and memory is
bounded by what is in flight, not by the captures' size:

1. The first ``PREFIX_PACKETS`` ESP packets of each are read and joined
   on their ESP bytes: which way each SA ran and the clocks' offset are
   estimated from them (``find_directions``).
2. The two captures are then merged in time, the receiver's times moved
   by that estimate (``_shift``), from their first packet (the prefixes
   first), and each packet goes to its SA's join (reconcile/join.py),
   which writes each row once it is decided and forgets what is beyond
   its horizon.

Each SA's packets are joined as reconcile/join.py says. Both captures
usually hold both directions: an SA whose packets went from the RECEIVER
capture's host to the SENDER's is joined the other way, its rows'
``direction`` ``receiver->sender``; the frame columns stay those of each
file. Reordering is per SA.

The two captures' clocks are not assumed to agree: which way an SA ran is
found from receiver time minus sender time over its packets joined in the
prefixes, which is the clock offset plus the one-way delay forward and the
offset minus it backward, so of the two ways between two hosts the forward
one is higher whatever the offset (reconcile/clock.py). An SA not joined
in the prefixes runs the way its outer addresses ran there; else, once its
first packet is joined, forward when receiver time minus sender time is
above the offset (forward when no offset is known); an SA none of whose
packets is joined within the horizon runs from the capture that holds its
first packet.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, islice

from espforensics.analyzer.collector import fewer_collections
from espforensics.keys import SaTable
from espforensics.reconcile.clock import (
    Clock,
    Spread,
    Way,
    find_directions,
    spread_of,
    usual_decrement,
)
from espforensics.reconcile.join import (
    FORWARD,
    HORIZON_NS,
    HORIZON_PACKETS,
    REVERSE,
    Emit,
    Fate,
    FateRow,
    SaJoin,
)
from espforensics.reconcile.wire import WirePacket, WireReader

__all__ = [
    "FORWARD",
    "REVERSE",
    "Clock",
    "Fate",
    "FateRow",
    "Reconciled",
    "Reconciliation",
    "Spread",
    "reconcile",
]

# The packets of each capture the clocks and directions are estimated from.
PREFIX_PACKETS = 32_768
# Packets read between two sweeps of the SAs for what the clocks have passed.
_SWEEP = 4096
_END = 1 << 63  # a capture read to its end is past every time


@dataclass(frozen=True, slots=True)
class Reconciled:
    """The counts of every row written: per fate, per SA, per receiver verdict."""

    counts: dict[str, int]  # every fate, 0 if none
    sas: dict[tuple[int, str], dict[str, int]]  # (SPI, direction) -> every fate's count
    # (SPI, direction) -> the SA's usual TTL / hop limit decrement on the way (None: no
    # packet joined on its bytes), against which outer_rewritten is judged
    decrements: dict[tuple[int, str], int | None]
    verdicts: dict[str, dict[str, int]] | None  # fate -> receiver verdict -> count (keys)
    rows: int
    sender_esp: int
    receiver_esp: int
    sender_other: int  # frames of each capture that are not whole ESP datagrams
    receiver_other: int
    clock: Clock


def reconcile(
    sender: str | os.PathLike[str],
    receiver: str | os.PathLike[str],
    natt_ports: frozenset[int] = frozenset({4500}),
    sas: SaTable | None = None,
    sink: Emit | None = None,
) -> Reconciled:
    """Join the two captures' ESP packets, reading each once; each row to ``sink``."""
    return Reconciliation(sender, receiver, natt_ports, sas).run(sink)


class Reconciliation:
    """The two captures, open (a capture that cannot be read raises here, before
    anything is written); ``run`` reads them once and closes them."""

    def __init__(
        self,
        sender: str | os.PathLike[str],
        receiver: str | os.PathLike[str],
        natt_ports: frozenset[int] = frozenset({4500}),
        sas: SaTable | None = None,
    ) -> None:
        if sas is not None:  # the SAs' own ESP-in-UDP ports, in both captures alike
            natt_ports |= {sa.encap_port for sa in sas if sa.encap_port is not None}
        self._a = WireReader(sender, natt_ports)
        try:
            self._b = WireReader(receiver, natt_ports, sas)
        except BaseException:
            self._a.close()
            raise
        self._keyed = sas is not None

    def close(self) -> None:
        self._a.close()
        self._b.close()

    def run(self, sink: Emit | None = None) -> Reconciled:
        a, b = self._a, self._b
        tally = _Tally(sink, self._keyed)
        try:
            with fewer_collections():  # as the analysis: few cycles, many objects alive
                joiner = _join(iter(a), iter(b), tally.emit)
        finally:
            self.close()
        return tally.result((a.esp, b.esp, a.other, b.other), joiner)


def _join(a: Iterator[WirePacket], b: Iterator[WirePacket], emit: Emit) -> _Joiner:
    """The prefixes read and planned from, then both captures merged into the joins."""
    first_a, first_b = list(islice(a, PREFIX_PACKETS)), list(islice(b, PREFIX_PACKETS))
    plan = _plan(first_a, first_b)
    joiner = _Joiner(plan, emit)
    _merge(chain(first_a, a), chain(first_b, b), plan.shift, joiner)
    joiner.finish()
    return joiner


def _by_fate(verdicts: dict[str, Counter[str]]) -> dict[str, dict[str, int]]:
    return {f.value: dict(sorted(verdicts[f.value].items())) for f in Fate if f.value in verdicts}


class _Tally:
    """Counts each row (by SA, fate and receiver verdict) and hands it on."""

    def __init__(self, sink: Emit | None, keyed: bool) -> None:
        self._sink = sink
        self._keyed = keyed
        self._counts: Counter[tuple[int, str, Fate, str | None]] = Counter()

    def emit(self, row: FateRow) -> None:
        self._counts[row.spi, row.direction, row.fate, row.receiver_verdict] += 1
        if self._sink is not None:
            self._sink(row)

    def result(
        self,
        counts: tuple[int, int, int, int],
        joiner: _Joiner,
    ) -> Reconciled:
        """``counts``: each capture's ESP packets, then each capture's other frames."""
        fates: Counter[str] = Counter()
        sas: dict[tuple[int, str], Counter[str]] = {}
        verdicts: dict[str, Counter[str]] = {}
        for (spi, direction, fate, verdict), n in self._counts.items():
            fates[fate.value] += n
            sas.setdefault((spi, direction), Counter())[fate.value] += n
            if verdict:
                verdicts.setdefault(fate.value, Counter())[verdict] += n
        return Reconciled(
            {f.value: fates[f.value] for f in Fate},
            {sa: {f.value: c[f.value] for f in Fate} for sa, c in sorted(sas.items())},
            {sa: joiner.decrement(*sa) for sa in sorted(sas)},
            _by_fate(verdicts) if self._keyed else None,
            sum(self._counts.values()),
            *counts,
            joiner.clock(),
        )


def _merge(a: Iterator[WirePacket], b: Iterator[WirePacket], shift: int, joiner: _Joiner) -> None:
    """Both captures into ``joiner`` in time order, the receiver's times less ``shift``
    (ties: the sender's first); ``(side, None, _END)`` when a side is read to its end."""
    read = joiner.read
    na, nb = next(a, None), next(b, None)
    if na is None:
        read(True, None, _END)
    if nb is None:
        read(False, None, _END)
    while na is not None and nb is not None:
        if na.ts_ns <= nb.ts_ns - shift:
            read(True, na, na.ts_ns)
            na = next(a, None)
        else:
            read(False, nb, nb.ts_ns - shift)
            nb = next(b, None)
    if na is None and nb is not None:
        read(True, None, _END)
        for packet in chain((nb,), b):
            read(False, packet, packet.ts_ns - shift)
        read(False, None, _END)
    elif na is not None:
        read(False, None, _END)
        for packet in chain((na,), a):
            read(True, packet, packet.ts_ns)
        read(True, None, _END)


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the prefixes say: each SA's direction found there, the ways between hosts,
    the clocks, and the shift that puts the receiver's times on the sender's clock."""

    reverse: frozenset[int]
    joined: frozenset[int]  # the SAs joined in the prefixes (their direction is known)
    ways: dict[Way, str]  # outer (source, destination) -> direction
    clock: Clock
    shift: int
    decrements: dict[int, int]  # SPI -> its usual TTL / hop limit decrement there


def _plan(first_a: list[WirePacket], first_b: list[WirePacket]) -> _Plan:
    sent_by: dict[int, list[WirePacket]] = {}
    got_by: dict[int, list[WirePacket]] = {}
    for p in first_a:
        sent_by.setdefault(p.spi, []).append(p)
    for p in first_b:
        got_by.setdefault(p.spi, []).append(p)
    spreads = {spi: spread_of(sent, got_by.get(spi, [])) for spi, sent in sent_by.items()}
    joined = {spi: spread for spi, spread in spreads.items() if spread is not None}
    ways = {spi: (sent_by[spi][0].outer.src, sent_by[spi][0].outer.dst) for spi in joined}
    reverse, clock = find_directions(dict(joined), ways, set())
    directions = {way: REVERSE if spi in reverse else FORWARD for spi, way in ways.items()}
    decrements = {
        spi: usual_decrement(sent_by[spi], got_by[spi], -1 if spi in reverse else 1)
        for spi in joined
    }
    return _Plan(reverse, frozenset(joined), directions, clock, _shift(clock), decrements)


def _shift(clock: Clock) -> int:
    """What to take from the receiver's times to merge them with the sender's: the
    offset when known (each copy then comes after its sent one, by about the delay),
    else the least receiver minus sender time seen (every SA then runs forward)."""
    if clock.offset_ns is not None:
        return clock.offset_ns
    return 0 if clock.spread is None else clock.spread.low


class _Joiner:
    """Every SA's join, and the SAs whose direction waits for their first join."""

    def __init__(self, plan: _Plan, emit: Emit) -> None:
        self._plan, self._emit = plan, emit
        self._sas: dict[int, SaJoin] = {}
        self._waiting: dict[int, _Undecided] = {}
        self._at = [-_END, -_END]  # how far each capture is read: [receiver, sender]
        self._reads = 0

    def read(self, from_sender: bool, packet: WirePacket | None, key: int) -> None:
        self._at[from_sender] = key
        if packet is not None:
            sa = self._sas.get(packet.spi)
            if sa is None:
                self._start(from_sender, packet, key)
            elif from_sender == sa.forward:
                sa.sent(packet, key)
            else:
                sa.got(packet, key)
            self._reads += 1
        if packet is None or self._reads % _SWEEP == 0:
            self._sweep()

    def finish(self) -> None:
        for spi in sorted(self._waiting):
            waiting = self._waiting[spi]
            self._decide(spi, FORWARD if waiting.events[0][0] else REVERSE)
        for spi in sorted(self._sas):
            self._sas[spi].finish()

    def decrement(self, spi: int, direction: str) -> int | None:
        """The SA's usual TTL / hop limit decrement (None: no packet joined on its bytes)."""
        sa = self._sas.get(spi)
        return None if sa is None or sa.direction != direction else sa.usual

    def clock(self) -> Clock:
        """The prefixes' estimate, with the lowest and highest receiver minus sender time
        over every packet of a sender->receiver SA joined on its bytes."""
        clock = self._plan.clock
        ahead = [sa for sa in self._sas.values() if sa.direction == FORWARD and sa.low is not None]
        if not ahead:
            return clock
        low = min(sa.low for sa in ahead if sa.low is not None)
        high = max(sa.high for sa in ahead if sa.high is not None)
        median = None if clock.spread is None else clock.spread.median
        return Clock(clock.offset_ns, clock.delay_ns, Spread(low, median, high))

    def _start(self, from_sender: bool, packet: WirePacket, key: int) -> None:
        spi, plan = packet.spi, self._plan
        if spi in plan.joined:
            direction: str | None = REVERSE if spi in plan.reverse else FORWARD
        else:
            direction = plan.ways.get((packet.outer.src, packet.outer.dst))
        if direction is not None:
            sa = self._sas[spi] = SaJoin(spi, direction, self._emit, plan.decrements.get(spi))
            _feed(sa, from_sender, packet, key)
            return
        waiting = self._waiting.setdefault(spi, _Undecided())
        copy = waiting.add(from_sender, packet, key)
        if copy is not None:
            self._decide(spi, self._way_of(copy))

    def _way_of(self, gap: int) -> str:
        """An SA first joined after the prefixes, ``gap`` its receiver minus sender time:
        forward above the offset, or when no offset is known."""
        offset = self._plan.clock.offset_ns
        return FORWARD if offset is None or gap > offset else REVERSE

    def _decide(self, spi: int, direction: str) -> None:
        waiting = self._waiting.pop(spi)
        sa = self._sas[spi] = SaJoin(spi, direction, self._emit)
        for from_sender, packet, key in waiting.events:
            _feed(sa, from_sender, packet, key)

    def _sweep(self) -> None:
        receiver_at, sender_at = self._at
        for spi, waiting in list(self._waiting.items()):
            first_side = waiting.events[0][0]
            if waiting.gone_by(self._at[not first_side]):
                self._decide(spi, FORWARD if first_side else REVERSE)
        for sa in self._sas.values():
            if sa.direction == FORWARD:
                sa.expire(sender_at, receiver_at)
            else:
                sa.expire(receiver_at, sender_at)


def _feed(sa: SaJoin, from_sender: bool, packet: WirePacket, key: int) -> None:
    if from_sender == sa.forward:
        sa.sent(packet, key)
    else:
        sa.got(packet, key)


class _Undecided:
    """An SA whose direction is not known yet: its packets, kept until its first join or
    until the other capture has gone past its first packet by the horizon."""

    def __init__(self) -> None:
        self.events: list[tuple[bool, WirePacket, int]] = []
        self._times: tuple[dict[bytes, int], dict[bytes, int]] = ({}, {})  # [receiver, sender]
        self._counts = [0, 0]

    def add(self, from_sender: bool, packet: WirePacket, key: int) -> int | None:
        """Keep ``packet``; when the other capture holds its bytes, receiver time minus
        sender time of them."""
        self.events.append((from_sender, packet, key))
        self._counts[from_sender] += 1
        self._times[from_sender].setdefault(packet.digest, packet.ts_ns)
        other = self._times[not from_sender].get(packet.digest)
        if other is None:
            return None
        return other - packet.ts_ns if from_sender else packet.ts_ns - other

    def gone_by(self, other_at: int) -> bool:
        """Has the other capture read past the first packet by the horizon?"""
        first_side, _, key = self.events[0]
        return other_at > key + HORIZON_NS or self._counts[not first_side] > HORIZON_PACKETS
