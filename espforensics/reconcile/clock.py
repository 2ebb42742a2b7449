"""What the packets of two captures say of their clocks, and which way each SA ran.

In: packets both captures hold (``WirePacket``s of reconcile/wire.py),
joined on their ESP bytes at their first copies. Out: ``Spread`` (receiver
time minus sender time over an SA's packets), ``Clock`` (the offset and
one-way delay, when SAs ran both ways) and the SAs that ran from the
RECEIVER capture's host (``find_directions``); ``usual_decrement``: an
SA's usual TTL / hop limit decrement on the way. reconcile/run.py makes them
from the first packets of each capture. Raises nothing.

No clock is trusted: forward packets give the offset plus the one-way
delay, backward ones the offset minus it (``find_directions`` says how).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from espforensics.reconcile.wire import WirePacket

Way = tuple[str, str]  # outer source and destination


@dataclass(frozen=True, slots=True)
class Spread:
    """Receiver time minus sender time over one SA's joined packets, in ns."""

    low: int
    median: int | None  # None: no packet was joined in the prefixes (only later)
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


def usual_decrement(sent: list[WirePacket], got: list[WirePacket], sign: int) -> int:
    """The most common TTL / hop limit decrement (the smaller of equals) over the ESP
    payloads both hold, at their first copies: the path's. ``sign`` -1: the SA ran from
    the RECEIVER capture's host."""
    first: dict[bytes, int] = {}
    for p in sent:
        first.setdefault(p.digest, p.outer.hops)
    seen: Counter[int] = Counter()
    for r in got:
        hops = first.pop(r.digest, None)
        if hops is not None:
            seen[sign * (hops - r.outer.hops)] += 1
    return min(seen, key=lambda d: (-seen[d], d))


def spread_of(sent: list[WirePacket], got: list[WirePacket]) -> Spread | None:
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


def find_directions(
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
    medians = {way: _median(_medians(held)) for way, held in by_way.items()}
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
    median = _median(_medians(spreads))
    return Spread(min(s.low for s in spreads), median, max(s.high for s in spreads))


def _medians(spreads: list[Spread]) -> list[int]:
    return [s.median for s in spreads if s.median is not None]


def _median(values: list[int]) -> int:
    """The middle value (the upper one of an even count)."""
    return sorted(values)[len(values) // 2]
