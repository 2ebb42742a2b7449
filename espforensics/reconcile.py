"""Two captures of one run, the sender's and the receiver's: what became of each packet.

In: the two capture files (any format ``open_capture`` reads) and the UDP
ports of ESP-in-UDP. Out: ``Reconciled``: one ``Fate`` row per packet the
sender sent and per packet the receiver got that matches none, and the
count per fate, and ``Clock``, what they say of the two captures' clocks
(reconcile_out.py writes and prints them). Raises
``CaptureError`` (from the reader) for a capture it cannot read. No key
is needed: packets are joined on their wire bytes.

Each ESP datagram of a capture (outer IPv4/IPv6, ESP or ESP in UDP; not
outer fragments, nor ESP inside tunnels) is read as (SPI, 64-bit sequence
number, digest of the ESP bytes from the SPI to the end, outer addresses
and UDP ports). The high half of the number is inferred per SPI as RFC
4303 A2.2 does (the one that puts it closest to the highest seen), so the
join holds across a 32-bit wrap. The receiver's packets are joined in
arrival order:

- the same ESP bytes as a sender packet not joined yet: that packet's
  fate is ``delivered``, or ``reordered`` (it arrived after a packet the
  sender sent later), or ``outer_rewritten`` (its outer addresses or UDP
  ports differ: a NAT on the way; reordered too is said in ``detail``);
- the same ESP bytes as a sender packet already joined: ``duplicated``;
- another packet's (SPI, number) with other bytes: ``changed`` (a byte
  flipped in flight; the sender packet is joined to it);
- neither: ``unexpected`` (the receiver got what this sender capture never
  showed);

and a sender packet the receiver never got is ``lost``. Both captures
usually hold both directions: an SA whose packets went from the RECEIVER
capture's host to the SENDER's is joined the other way, its rows'
``direction`` ``receiver->sender``; the frame columns stay those of each
file. Reordering is per SA.

The two captures' clocks are not assumed to agree: which way an SA ran is
found from receiver time minus sender time over its joined packets, which
is the clock offset plus the one-way delay forward and the offset minus it
backward, so of the two ways between two hosts the forward one is higher
whatever the offset (``_directions``); ``Clock`` says what that gives of
the offset.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Generic, TypeVar

from espforensics.capture import open_capture
from espforensics.decode.esp import EspLocation, locate_esp, parse_esp_header
from espforensics.decode.inner import ntop
from espforensics.decode.ip import parse_ip
from espforensics.decode.link import ETH_IPV4, ETH_IPV6, parse_link
from espforensics.errors import MalformedPacket
from espforensics.esn import EsnTracker
from espforensics.model import Frame

FORWARD = "sender->receiver"
K = TypeVar("K", bytes, int)
Outer = tuple[str, str, int | None, int | None]  # src, dst, UDP ports
REVERSE = "receiver->sender"


class Fate(StrEnum):
    """What became of a packet; the value is written to reconcile.csv's ``fate``."""

    DELIVERED = "delivered"
    LOST = "lost"
    CHANGED = "changed"
    DUPLICATED = "duplicated"
    REORDERED = "reordered"
    OUTER_REWRITTEN = "outer_rewritten"
    UNEXPECTED = "unexpected"


@dataclass(frozen=True, slots=True)
class WirePacket:
    """One ESP datagram as a capture holds it."""

    frame: int
    ts_ns: int
    spi: int
    seq64: int
    digest: bytes  # of the ESP bytes, SPI to the end
    outer: Outer


@dataclass(frozen=True, slots=True)
class FateRow:
    """One row of reconcile.csv."""

    fate: Fate
    spi: int
    seq64: int
    sender_frame: int | None
    receiver_frame: int | None
    delay_ns: int | None  # arrival time - sending time, when both saw it
    detail: str = ""
    direction: str = FORWARD  # or receiver->sender: the SA's packets went that way


@dataclass(frozen=True, slots=True)
class Reconciled:
    """Every fate row, sender order first then the receiver's extras; counts per fate."""

    rows: tuple[FateRow, ...]
    counts: dict[str, int]
    sender_esp: int
    receiver_esp: int
    sender_other: int  # frames of each capture that are not whole ESP datagrams
    receiver_other: int
    clock: Clock


def read_esp(
    path: str | os.PathLike[str], natt_ports: frozenset[int]
) -> tuple[list[WirePacket], int]:
    """The ESP datagrams of a capture, in order, and how many frames are not one."""
    packets: list[WirePacket] = []
    tops: dict[int, int] = {}
    outers: dict[Outer, Outer] = {}  # one tuple per addressing, shared by its packets
    other = 0
    capture = open_capture(path)
    try:
        for item in capture:
            if not isinstance(item, Frame):
                continue
            packet = _esp(item, natt_ports, tops, outers)
            if packet is None:
                other += 1
            else:
                packets.append(packet)
    finally:
        capture.close()
    return packets, other


def _esp(
    frame: Frame, natt_ports: frozenset[int], tops: dict[int, int], outers: dict[Outer, Outer]
) -> WirePacket | None:
    try:
        link = parse_link(frame.linktype, frame.data)
        if link.ethertype not in (ETH_IPV4, ETH_IPV6):
            return None
        data = frame.data[link.offset :]
        ip = parse_ip(data)
        if ip.frag_id is not None:
            return None
        where = locate_esp(ip, data, natt_ports)
        if not isinstance(where, EspLocation):
            return None
        spi, seq = parse_esp_header(data, where.offset)
    except MalformedPacket:
        return None
    seq64 = _seq64(tops.get(spi), seq)
    tops[spi] = max(tops.get(spi, seq64), seq64)
    body = data[where.offset : ip.total_len]
    digest = hashlib.blake2b(body, digest_size=16).digest()
    outer = (ntop(ip.src), ntop(ip.dst), where.udp_sport, where.udp_dport)
    outer = outers.setdefault(outer, outer)
    return WirePacket(frame.number, frame.ts_ns, spi, seq64, digest, outer)


def _seq64(top: int | None, seq: int) -> int:
    """RFC 4303 A2.2: the high half that puts ``seq`` closest to the highest seen (the
    analysis's own rule, esn.py)."""
    return seq if top is None else EsnTracker.nearest(top, seq)


@dataclass(frozen=True, slots=True)
class Spread:
    """Receiver time minus sender time over one SA's joined packets, in ns."""

    low: int
    median: int
    high: int


@dataclass(frozen=True, slots=True)
class Clock:
    """What the joined packets say of the two captures' clocks (no clock is trusted).

    ``offset_ns`` (receiver clock minus sender clock) and ``delay_ns`` (the
    least one-way delay) are known only when SAs ran both ways: forward
    packets give ``offset + delay``, reverse ones ``offset - delay``. With one
    direction only ``spread`` (every SA that ran from SENDER to RECEIVER) is
    the one-way delay plus the clock offset, which cannot be told apart.
    """

    offset_ns: int | None
    delay_ns: int | None
    spread: Spread | None


def reconcile(
    sender: str | os.PathLike[str],
    receiver: str | os.PathLike[str],
    natt_ports: frozenset[int] = frozenset({4500}),
) -> Reconciled:
    """Join the two captures' ESP packets and give each its fate, SPI by SPI."""
    a, sender_other = read_esp(sender, natt_ports)
    b, receiver_other = read_esp(receiver, natt_ports)
    sent_by: dict[int, list[WirePacket]] = {}
    got_by: dict[int, list[WirePacket]] = {}
    for p in a:
        sent_by.setdefault(p.spi, []).append(p)
    for p in b:
        got_by.setdefault(p.spi, []).append(p)
    spis = sorted(sent_by.keys() | got_by.keys())
    spreads = {spi: _spread(sent_by.get(spi, []), got_by.get(spi, [])) for spi in spis}
    ways = {spi: sent[0].outer[:2] for spi, sent in sent_by.items()}
    reverse, clock = _directions(spreads, ways, {spi for spi in spis if spi not in sent_by})
    rows: list[FateRow] = []
    for spi in spis:
        sent, got = sent_by.get(spi, []), got_by.get(spi, [])
        if spi in reverse:
            rows += [_swapped(row) for row in _join(got, sent)]
        else:
            rows += _join(sent, got)
    counts = Counter(row.fate.value for row in rows)
    return Reconciled(
        tuple(rows),
        {f.value: counts[f.value] for f in Fate},
        len(a),
        len(b),
        sender_other,
        receiver_other,
        clock,
    )


def _spread(sent: list[WirePacket], got: list[WirePacket]) -> Spread | None:
    """Receiver time minus sender time of each ESP payload both hold, at its first copy in
    each (a later copy, resent or duplicated, says nothing of the clocks)."""
    first: dict[bytes, int] = {}
    for p in sent:
        first.setdefault(p.digest, p.ts_ns)
    gaps = []
    for r in got:
        sent_ns = first.pop(r.digest, None)
        if sent_ns is not None:
            gaps.append(r.ts_ns - sent_ns)
    if not gaps:
        return None
    gaps.sort()
    return Spread(gaps[0], gaps[len(gaps) // 2], gaps[-1])


def _directions(
    spreads: dict[int, Spread | None], ways: dict[int, tuple[str, str]], only_received: set[int]
) -> tuple[frozenset[int], Clock]:
    """The SAs whose packets went from RECEIVER to SENDER, and the clocks' estimate.

    No clock is trusted. SAs between the same two hosts that run the same
    way (``ways``: outer source and destination in the SENDER capture) run
    in the same direction. Receiver time minus sender time is the offset
    plus the one-way delay forward and the offset minus it backward, so of
    the two ways between two hosts the one whose SAs' median is higher ran
    SENDER to RECEIVER. Taking the least delay as the same both ways (as
    NTP does), the offset is the middle between the forward lowest and the
    backward highest value, the delay half their distance (the median over
    host pairs seen both ways). A way seen alone is forward when its median
    is above that offset, or, with no offset known, as the arguments say.
    An SA none of whose packets was joined runs from the capture that
    holds it.
    """
    by_way: dict[tuple[str, str], list[Spread]] = {}
    for spi, spread in spreads.items():
        if spread is not None:
            by_way.setdefault(ways[spi], []).append(spread)
    medians = {way: _median([s.median for s in held]) for way, held in by_way.items()}
    offsets: list[int] = []
    delays: list[int] = []
    forward: set[tuple[str, str]] = set()
    for (src, dst), median in medians.items():
        back = medians.get((dst, src))
        if back is not None and median > back:  # the least delay each way taken as equal
            least_ahead = min(s.low for s in by_way[(src, dst)])
            least_back = max(s.high for s in by_way[(dst, src)])
            offsets.append((least_ahead + least_back) // 2)
            delays.append((least_ahead - least_back) // 2)
            forward.add((src, dst))
    offset = _median(offsets) if offsets else None
    paired = forward | {(dst, src) for src, dst in forward}
    for way, median in medians.items():
        if way not in paired and (offset is None or median > offset):
            forward.add(way)  # seen alone (or both ways with equal medians)
    reverse = {spi for spi, s in spreads.items() if s is not None and ways[spi] not in forward}
    delay = _median(delays) if delays else None
    ahead = [s for spi, s in spreads.items() if s is not None and spi not in reverse]
    return frozenset(reverse | only_received), Clock(offset, delay, _merged(ahead))


def _merged(spreads: list[Spread]) -> Spread | None:
    """One spread over several SAs: the lowest low, the median of medians, the highest high."""
    if not spreads:
        return None
    median = _median([s.median for s in spreads])
    return Spread(min(s.low for s in spreads), median, max(s.high for s in spreads))


def _median(values: list[int]) -> int:
    """The middle value (the upper one of an even count)."""
    return sorted(values)[len(values) // 2]


def _swapped(row: FateRow) -> FateRow:
    """A row of an SA whose packets the RECEIVER capture saw first: the frames back in
    their files' columns."""
    return replace(
        row,
        sender_frame=row.receiver_frame,
        receiver_frame=row.sender_frame,
        direction=REVERSE,
    )


def _join(sent: list[WirePacket], got: list[WirePacket]) -> list[FateRow]:
    """One SA's packets: each sent one's fate, then the extras the other side got.

    Memory: one dict entry per sent packet for its bytes and one for its number; a
    list only for the few bytes or numbers sent more than once (``_Copies``)."""
    by_digest = _Copies[bytes]()
    by_number = _Copies[int]()
    for i, p in enumerate(sent):
        by_digest.add(p.digest, i)
        by_number.add(p.seq64, i)
    joined: dict[int, FateRow] = {}
    first_of: dict[bytes, int] = {}
    extras: list[FateRow] = []
    latest = -1  # the highest sender index the receiver has got so far
    for r in got:
        same = by_digest.pop(r.digest)
        if same is not None:
            joined[same] = _delivered(sent[same], r, same < latest)
            first_of.setdefault(r.digest, same)
            latest = max(latest, same)
        elif r.digest in first_of:
            s = sent[first_of[r.digest]]
            extras.append(_row(Fate.DUPLICATED, s, r, f"a copy of frame {s.frame}"))
        else:
            free = [i for i in by_number.every(r.seq64) if i not in joined]
            if free:
                i = free[0]
                joined[i] = _row(Fate.CHANGED, sent[i], r, "same SPI and number, other bytes")
                latest = max(latest, i)
            else:
                why = (
                    "its number was sent with other bytes, already got"
                    if by_number.every(r.seq64)
                    else ""
                )
                extras.append(FateRow(Fate.UNEXPECTED, r.spi, r.seq64, None, r.frame, None, why))
    return [joined.get(i) or _lost(p) for i, p in enumerate(sent)] + extras


class _Copies(Generic[K]):
    """Sender indices by key, in order: an int per key, a list only for a key held twice.

    ``pop`` takes the first index not popped yet (the bytes' join); ``every`` gives every
    index (the number's join, which pops none)."""

    __slots__ = ("_first", "_more", "_taken")

    def __init__(self) -> None:
        self._first: dict[K, int] = {}
        self._more: dict[K, list[int]] = {}
        self._taken: dict[K, int] = {}  # how many of a key held twice were popped

    def add(self, key: K, index: int) -> None:
        if key in self._first:
            self._more.setdefault(key, []).append(index)
        else:
            self._first[key] = index

    def every(self, key: K) -> list[int]:
        first = self._first.get(key)
        return [] if first is None else [first, *self._more.get(key, ())]

    def pop(self, key: K) -> int | None:
        if key not in self._more:
            return self._first.pop(key, None)
        taken = self._taken.get(key, 0)
        self._taken[key] = taken + 1
        held = self.every(key)
        return held[taken] if taken < len(held) else None


def _row(fate: Fate, s: WirePacket, r: WirePacket, detail: str = "") -> FateRow:
    return FateRow(fate, s.spi, s.seq64, s.frame, r.frame, r.ts_ns - s.ts_ns, detail)


def _lost(s: WirePacket) -> FateRow:
    return FateRow(Fate.LOST, s.spi, s.seq64, s.frame, None, None, "")


def _outer(outer: tuple[str, str, int | None, int | None]) -> str:
    """``192.0.2.1 -> 192.0.2.2``, or with UDP ``192.0.2.1:4500 -> 192.0.2.2:4500``."""
    src, dst, sport, dport = outer
    if sport is None:
        return f"{src} -> {dst}"
    return f"{src}:{sport} -> {dst}:{dport}"


def _delivered(s: WirePacket, r: WirePacket, late: bool) -> FateRow:
    if s.outer != r.outer:
        was, now = _outer(s.outer), _outer(r.outer)
        detail = f"outer {was} became {now}" + ("; reordered" if late else "")
        return _row(Fate.OUTER_REWRITTEN, s, r, detail)
    if late:
        return _row(Fate.REORDERED, s, r, "arrived after a packet sent later")
    return _row(Fate.DELIVERED, s, r)


COLUMNS = (
    *("fate", "direction", "spi", "seq64"),
    *("sender_frame", "receiver_frame", "delay_ns", "detail"),
)
