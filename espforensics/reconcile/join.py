"""One SA's packets in both captures, joined as they are read: each packet's fate.

In: the SA's packets as the two captures are read side by side
(reconcile/run.py merges them in time): ``sent`` for a packet of the capture
on the sending side of the SA, ``got`` for one of the receiving side, and
``expire`` with how far each capture has been read. Out: ``FateRow``s
through the ``emit`` callback, each once it is decided. Raises nothing.

The receiving side's packets are taken in arrival order:

- the same ESP bytes as a sent packet not joined yet: that packet's fate
  is ``delivered``, or ``reordered`` (it arrived after a packet the
  sender sent later), or ``outer_rewritten`` (its outer header was
  rewritten beyond the path's usual TTL decrement, reconcile/outer.py;
  reordered too is said in ``detail``);
- the same ESP bytes as a sent packet already joined: ``duplicated``;
- another packet's (SPI, number) with other bytes: ``changed`` (a byte
  flipped in flight; the sent packet is joined to it);
- neither: ``unexpected`` (the receiver got what the sending capture never
  showed);

and a sent packet the receiver never got is ``lost``. What is in flight
is bounded by the horizon: a sent packet not joined yet is ``lost`` once
the receiving capture has read more than ``HORIZON_PACKETS`` packets of
the SA after it, or its clock (the estimate of reconcile/run.py) is more than
``HORIZON_NS`` past the packet's time; a received packet that matches
nothing is ``unexpected`` by the same rule the other way. A packet late
by less than the horizon is still ``reordered``; a duplicate copy later
than it is ``unexpected``. A received packet read before its sent copy
(the clocks' estimate off by more than the delay) waits for it, and the
rows of the packets that arrived after it wait behind it, so that
``reordered`` means the same as when every sent packet was known first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from enum import StrEnum
from typing import Generic, NamedTuple, TypeVar

from espforensics.reconcile.outer import Change, changes, rewrites, text
from espforensics.reconcile.wire import Outer, WirePacket

FORWARD = "sender->receiver"
REVERSE = "receiver->sender"
# A packet later than this is not waited for: beyond 8 times the largest replay
# window a Linux receiver keeps (4096 packets), and a generous 10 s of clocks.
HORIZON_PACKETS = 32_768
HORIZON_NS = 10_000_000_000
_SEEN = 1024  # pairs of outer headers whose changes an SA keeps

K = TypeVar("K", bytes, int)
E = TypeVar("E")


class Fate(StrEnum):
    """What became of a packet; the value is written to reconcile.csv's ``fate``."""

    DELIVERED = "delivered"
    LOST = "lost"
    CHANGED = "changed"
    DUPLICATED = "duplicated"
    REORDERED = "reordered"
    OUTER_REWRITTEN = "outer_rewritten"
    UNEXPECTED = "unexpected"


class FateRow(NamedTuple):
    """One row of reconcile.csv (a tuple: one is made per packet)."""

    fate: Fate
    spi: int
    seq64: int
    sender_frame: int | None  # the frame in the SENDER capture, whichever way the SA ran
    receiver_frame: int | None
    delay_ns: int | None  # receiver capture's time - sender capture's, when both saw it
    detail: str = ""
    direction: str = FORWARD  # or receiver->sender: the SA's packets went that way
    receiver_verdict: str | None = None  # the receiver model's, of the RECEIVER's copy
    outer_changes: str = ""  # every outer field changed on the way (reconcile/outer.py)


Emit = Callable[[FateRow], None]


class _Sent:
    """A sent packet within the horizon; ``mark``: the receiving side's count then."""

    __slots__ = ("index", "joined", "key", "mark", "packet")

    def __init__(self, packet: WirePacket, key: int, index: int, mark: int) -> None:
        self.packet, self.key, self.index, self.mark = packet, key, index, mark
        self.joined = False


class _Arrival:
    """A received packet whose row is not written yet (``fate`` None: not decided)."""

    __slots__ = ("detail", "fate", "key", "mark", "match", "packet")

    def __init__(self, packet: WirePacket, key: int, mark: int) -> None:
        self.packet, self.key, self.mark = packet, key, mark
        self.fate: Fate | None = None
        self.match: _Sent | None = None
        self.detail = ""


class _Index(Generic[K, E]):
    """Entries by key, in order: one entry per key, a list only for a key held twice."""

    __slots__ = ("_more", "_one")

    def __init__(self) -> None:
        self._one: dict[K, E] = {}
        self._more: dict[K, list[E]] = {}

    def add(self, key: K, entry: E) -> None:
        if key in self._one:
            self._more.setdefault(key, []).append(entry)
        else:
            self._one[key] = entry

    def __bool__(self) -> bool:
        return bool(self._one)

    def first(self, key: K) -> E | None:
        return self._one.get(key)

    def get(self, key: K) -> list[E]:
        one = self._one.get(key)
        if one is None:
            return []
        if not self._more:
            return [one]
        extra: list[E] = self._more.get(key, [])
        return [one, *extra]

    def remove(self, key: K, entry: E) -> None:
        if key not in self._more:  # held once: ``entry`` itself
            del self._one[key]
            return
        held = self.get(key)
        held.remove(entry)
        self._more.pop(key, None)
        if not held:
            del self._one[key]
            return
        self._one[key] = held[0]
        if len(held) > 1:
            self._more[key] = held[1:]


class SaJoin:
    """One SA, its direction known: the sent packets within the horizon, the received
    ones whose rows wait, and the highest sent index joined in arrival order."""

    def __init__(self, spi: int, direction: str, emit: Emit, usual: int | None = None) -> None:
        """``usual``: the SA's TTL / hop limit decrement on the way, when known already
        (else that of its first packet joined on its bytes)."""
        self.spi, self.direction, self._emit = spi, direction, emit
        self.usual = usual
        self._seen: dict[tuple[Outer, Outer], tuple[Change, ...]] = {}
        self.forward = direction == FORWARD
        self._recent: deque[_Sent] = deque()  # in sent order
        self._by_digest: _Index[bytes, _Sent] = _Index()
        self._by_number: _Index[int, _Sent] = _Index()
        self._arrivals: deque[_Arrival] = deque()  # in arrival order
        self._early: _Index[bytes, _Arrival] = _Index()  # undecided arrivals by bytes
        self._early_number: _Index[int, _Arrival] = _Index()
        self._sent = self._got = 0  # packets read on each side
        self._latest = -1
        # receiver capture's time - sender capture's over the packets joined on their bytes
        self.low: int | None = None
        self.high: int | None = None

    def sent(self, packet: WirePacket, key: int) -> None:
        entry = _Sent(packet, key, self._sent, self._got)
        self._sent += 1
        self._recent.append(entry)
        self._by_digest.add(packet.digest, entry)
        self._by_number.add(packet.seq64, entry)
        if self._early:  # packets received before their sent copy was read here
            early = self._early.get(packet.digest)
            numbered = self._early_number.get(packet.seq64)
            if early or numbered:
                arrival = early[0] if early else numbered[0]
                self._unwait(arrival)
                self._match(arrival, entry, None if early else Fate.CHANGED)
                self._flush()
        arrivals = self._arrivals
        while arrivals and self._sent - arrivals[0].mark > HORIZON_PACKETS:
            self._give_up_arrival()
            self._flush()

    def got(self, packet: WirePacket, key: int) -> None:
        self._got += 1
        entry = self._by_digest.first(packet.digest)
        if entry is not None and not entry.joined and not self._arrivals:
            # the usual case, first: its bytes sent, nothing received before it waits
            entry.joined = True
            self._gap(entry.packet, packet)
            late = entry.index < self._latest
            self._latest = max(self._latest, entry.index)
            self._joined(entry.packet, packet, late)
        else:
            self._got_waiting(packet, key)
        while self._recent and self._got - self._recent[0].mark > HORIZON_PACKETS:
            self._give_up_sent()

    def _got_waiting(self, packet: WirePacket, key: int) -> None:
        """A received packet whose row may wait: for its sent copy, or behind another."""
        arrival = _Arrival(packet, key, self._sent)
        same = self._by_digest.get(packet.digest)
        free = [e for e in same if not e.joined]
        if free:
            self._match(arrival, free[0], None)
        elif same:
            arrival.fate, arrival.match = Fate.DUPLICATED, same[0]
        else:
            numbered = [e for e in self._by_number.get(packet.seq64) if not e.joined]
            if numbered:
                self._match(arrival, numbered[0], Fate.CHANGED)
            else:
                if self._by_number.get(packet.seq64):
                    arrival.detail = "its number was sent with other bytes, already got"
                self._early.add(packet.digest, arrival)
                self._early_number.add(packet.seq64, arrival)
        if self._arrivals or arrival.fate is None:
            self._arrivals.append(arrival)  # its row waits for its fate, or for the others'
            self._flush()
        else:
            self._row(arrival)

    def expire(self, sending_at: int, receiving_at: int) -> None:
        """Give up what the other side's clock has passed by more than the horizon."""
        self._flush()
        while self._arrivals and self._arrivals[0].key + HORIZON_NS < sending_at:
            self._give_up_arrival()
            self._flush()
        while self._recent and self._recent[0].key + HORIZON_NS < receiving_at:
            self._give_up_sent()

    def finish(self) -> None:
        """Both captures read: every received packet left is unexpected, every sent one
        not joined lost."""
        while self._arrivals:
            self._give_up_arrival()
            self._flush()
        while self._recent:
            self._give_up_sent()

    def _match(self, arrival: _Arrival, entry: _Sent, fate: Fate | None) -> None:
        """Join ``arrival`` to ``entry``: by its bytes (``fate`` None: which of delivered,
        reordered, outer_rewritten is decided when its row is written) or by its number
        (``changed``)."""
        entry.joined = True
        arrival.match = entry
        arrival.fate = fate or Fate.DELIVERED
        if fate is None:
            self._gap(entry.packet, arrival.packet)

    def _gap(self, sent: WirePacket, got: WirePacket) -> None:
        """A packet joined on its bytes: receiver capture's time minus sender capture's."""
        gap = got.ts_ns - sent.ts_ns if self.forward else sent.ts_ns - got.ts_ns
        if self.usual is None:
            self.usual = sent.outer.hops - got.outer.hops
        self.low = gap if self.low is None else min(self.low, gap)
        self.high = gap if self.high is None else max(self.high, gap)

    def _unwait(self, arrival: _Arrival) -> None:
        """``arrival`` is decided: no later sent packet is matched to it."""
        self._early.remove(arrival.packet.digest, arrival)
        self._early_number.remove(arrival.packet.seq64, arrival)

    def _give_up_arrival(self) -> None:
        """The oldest received packet whose row waits, undecided (``_flush`` wrote every
        decided one before it): unexpected."""
        head = self._arrivals[0]
        if head.fate is None:
            self._unwait(head)
            head.fate = Fate.UNEXPECTED

    def _give_up_sent(self) -> None:
        entry = self._recent.popleft()
        self._by_digest.remove(entry.packet.digest, entry)
        self._by_number.remove(entry.packet.seq64, entry)
        if not entry.joined:
            self._write(Fate.LOST, entry.packet, None, "")

    def _flush(self) -> None:
        """Write the rows of the received packets decided, in arrival order."""
        while self._arrivals and self._arrivals[0].fate is not None:
            self._row(self._arrivals.popleft())

    def _row(self, arrival: _Arrival) -> None:
        """The row of a received packet decided, every one received before it written."""
        got, entry = arrival.packet, arrival.match
        if arrival.fate is Fate.UNEXPECTED or entry is None:
            self._write(Fate.UNEXPECTED, None, got, arrival.detail)
        elif arrival.fate is Fate.DUPLICATED:
            self._write(Fate.DUPLICATED, entry.packet, got, f"a copy of frame {entry.packet.frame}")
        elif arrival.fate is Fate.CHANGED:
            self._latest = max(self._latest, entry.index)
            self._write(Fate.CHANGED, entry.packet, got, "same SPI and number, other bytes")
        else:
            late = entry.index < self._latest
            self._latest = max(self._latest, entry.index)
            self._joined(entry.packet, got, late)

    def _changes(self, sent: WirePacket, got: WirePacket) -> tuple[Change, ...]:
        """``changes`` of the two outer headers, once per pair of them (a capture's
        headers are shared objects: an SA's packets have a few)."""
        pair = (sent.outer, got.outer)
        found = self._seen.get(pair)
        if found is None:
            if len(self._seen) >= _SEEN:
                self._seen.clear()  # headers that vary packet by packet: bounded
            found = self._seen[pair] = changes(*pair)
        return found

    def _joined(self, sent: WirePacket, got: WirePacket, late: bool) -> None:
        """A packet received with the bytes sent: delivered, reordered, or its outer header
        rewritten (reconcile/outer.py says which changes are rewrites)."""
        found = self._changes(sent, got)
        odd = rewrites(found, sent.outer, got.outer, self.usual) if found else ""
        if odd:
            detail = f"outer rewritten: {odd}" + ("; reordered" if late else "")
            self._write(Fate.OUTER_REWRITTEN, sent, got, detail, found)
        elif late:
            self._write(Fate.REORDERED, sent, got, "arrived after a packet sent later", found)
        else:
            self._write(Fate.DELIVERED, sent, got, "", found)

    def _write(
        self,
        fate: Fate,
        sent: WirePacket | None,
        got: WirePacket | None,
        detail: str,
        found: tuple[Change, ...] | None = None,
    ) -> None:
        one = sent or got
        assert one is not None
        forward = self.forward
        at_sender, at_receiver = (sent, got) if forward else (got, sent)
        delay = None
        if sent is not None and got is not None:
            delay = got.ts_ns - sent.ts_ns if forward else sent.ts_ns - got.ts_ns
            if found is None:
                found = self._changes(sent, got)
        self._emit(
            FateRow(
                fate,
                self.spi,
                one.seq64,
                None if at_sender is None else at_sender.frame,
                None if at_receiver is None else at_receiver.frame,
                delay,
                detail,
                self.direction,
                got.verdict if forward and got is not None else None,
                text(found) if found else "",
            )
        )
