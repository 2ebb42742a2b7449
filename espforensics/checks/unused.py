"""Key-file SAs that no packet used, and the likely reason for each.

In: the ``SaTable``, every ESP packet's flow (``observe``, from the key
check) and every UDP datagram on a port that is not an ESP-in-UDP one whose
first 4 payload bytes are a key-file SPI (``observe_udp``, from the
per-frame path: every such datagram passes there, keyed run or not). Out:
``unused()``, one ``UnusedSa`` per table entry no packet matched, and
``unused_note``, a sentence for the first screen. Raises nothing.

The reasons, tried in this order; each rests on packets of the capture:

1. ``other_direction``: the SA's SPI is seen only with its addresses swapped
   (or, without its SPI at all, ESP goes only from the SA's destination to
   its source): the key file holds the other direction's SA;
2. ``other_addresses``: the SA's SPI is seen between other addresses;
3. ``other_port``: UDP payloads on a port other than the ESP-in-UDP ones
   start with the SA's SPI: ESP-in-UDP (RFC 3948 s2) on a port not given,
   so ``--natt-port`` names it;
4. ``no_such_spi``: none of the above: the SPI is nowhere in the capture;
5. ``not_claimed``: a wildcard entry (any SPI) that every packet's own SPI
   entry took first.

State is bounded: at most ``MAX_FLOWS`` flows are noted, ``MAX_PER_KEY``
address pairs per SPI and per source.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

from espforensics.checks.context import Flow
from espforensics.checks.perflow import flow_bit
from espforensics.keys.sa import IpAddress, SaTable, SecurityAssociation
from espforensics.model.enums import UnusedReason
from espforensics.model.records import UnusedSa

MAX_FLOWS = 65536
MAX_PER_KEY = 16
MAX_UDP_KEYS = 4096
Pair = tuple[bytes, bytes]
K = TypeVar("K")


def _text(addr: bytes) -> str:
    return str(ipaddress.ip_address(addr))


class UnusedSaTracker:
    """Which table entries packets used, and what else the capture had for the others."""

    def __init__(self, table: SaTable) -> None:
        self._table = table
        self._used: set[int] = set()  # id() of the table's entries
        # The flows noted: a bit of each one's ``known_to`` and their number (a set of
        # them costs about 50 bytes per flow)
        self._bit, self._flows = flow_bit(), 0
        self._by_spi: dict[int, Counter[Pair]] = {}  # unkeyed packets of a key file's SPI
        self._from: dict[bytes, Counter[tuple[bytes, int]]] = {}  # ESP from an SA's end
        self._udp: Counter[tuple[int, int, int]] = Counter()  # (spi, sport, dport)
        self._watch: tuple[int, frozenset[bytes]] = (-1, frozenset())

    def observe(self, flow: Flow, src: bytes, dst: bytes) -> None:
        """Note one ESP packet of ``flow`` (outer addresses packed)."""
        if not flow.known_to & self._bit:
            if self._flows >= MAX_FLOWS:
                return
            self._flows += 1
            flow.known_to |= self._bit
            sa = flow.state.sa
            if sa is not None:
                self._used.add(id(self._table.entry_of(sa)))
            if src in self._watched():  # once per flow, its first packet (never the lane's)
                _count(self._from.setdefault(src, Counter()), (dst, flow.spi))
        if flow.state.sa is None and flow.spi in self._table.spis:  # never the steady lane's
            _count(self._by_spi.setdefault(flow.spi, Counter()), (src, dst))

    def knows(self, flow: Flow) -> bool:
        """Was a packet of ``flow`` noted (so that ``observe`` of another changes nothing
        while it names no SPI of the table)?"""
        return bool(flow.known_to & self._bit)

    def observe_udp(self, spi: int, sport: int | None, dport: int | None) -> None:
        """A UDP payload on a port that is not ESP-in-UDP's starts with SPI ``spi``."""
        key = (spi, sport or 0, dport or 0)
        if key in self._udp or len(self._udp) < MAX_UDP_KEYS:
            self._udp[key] += 1

    def _watched(self) -> frozenset[bytes]:
        """Sources whose ESP tells an SA's direction: every entry's addresses."""
        size, watched = self._watch
        if size != len(self._table):  # a secrets block in the capture added SAs
            ends = [end for sa in self._table for end in (sa.src, sa.dst) if end is not None]
            watched = frozenset(end.packed for end in ends)
            self._watch = (len(self._table), watched)
        return watched

    def unused(self) -> tuple[UnusedSa, ...]:
        """Every entry of the table no packet used, with its likely reason."""
        out = []
        for sa in self._table:
            if id(sa) not in self._used:
                reason, packets, detail, port = self._reason(sa)
                out.append(
                    UnusedSa(
                        sa.spi,
                        str(sa.src or ""),
                        str(sa.dst or ""),
                        sa.origin,
                        reason,
                        packets,
                        f"SPI {sa.spi_text} ({sa.origin}) saw no packet: {detail}",
                        port,
                    )
                )
        return tuple(out)

    def _reason(self, sa: SecurityAssociation) -> tuple[UnusedReason, int, str, int | None]:
        if sa.any_spi:
            return (
                UnusedReason.NOT_CLAIMED,
                0,
                "a wildcard entry, and every ESP packet had an SA of its own SPI (or none was "
                "between its addresses)",
                None,
            )
        seen = self._by_spi.get(sa.spi, Counter())
        swapped = [p for p in seen if _is_reverse(sa, p)]
        if swapped:
            n = sum(seen[p] for p in swapped)
            src, dst = swapped[0]
            return (
                UnusedReason.OTHER_DIRECTION,
                n,
                f"its SPI goes from {_text(src)} to {_text(dst)} ({n} packets), the other "
                "direction: swap src and dst, or give that direction's SA",
                None,
            )
        if seen:
            (src, dst), n = seen.most_common(1)[0]
            total = sum(seen.values())
            return (
                UnusedReason.OTHER_ADDRESSES,
                total,
                f"its SPI goes from {_text(src)} to {_text(dst)} ({total} packets in all), "
                "not between the key file's addresses: NAT, or another pair of hosts?",
                None,
            )
        return self._port_or_direction(sa)

    def _port_or_direction(
        self, sa: SecurityAssociation
    ) -> tuple[UnusedReason, int, str, int | None]:
        hits = Counter[int]()
        for (spi, _, dport), n in self._udp.items():
            if spi == sa.spi:
                hits[dport] += n  # RFC 3948 s2: the receiver knows ESP-in-UDP by the port
        if hits:
            port, _ = hits.most_common(1)[0]
            n = sum(n for (spi, _, _), n in self._udp.items() if spi == sa.spi)
            return (
                UnusedReason.OTHER_PORT,
                n,
                f"{n} UDP payloads on port {port} start with its SPI: ESP-in-UDP on a port "
                f"not given; run with --natt-port {port}",
                port,
            )
        nowhere = (
            "its SPI is nowhere in the capture (not as ESP, nor at the start of a UDP payload)"
        )
        ahead = self._esp_between(sa.src, sa.dst)
        if ahead is not None:  # its own direction has ESP, of another SPI: a later SA?
            (src, dst), spi = ahead
            return (
                UnusedReason.NO_SUCH_SPI,
                0,
                f"{nowhere}; ESP from {_text(src)} to {_text(dst)} has SPI {spi:#010x} "
                "(rekeyed, or a key file of another run?)",
                None,
            )
        back = self._esp_between(sa.dst, sa.src)
        if back is not None:
            (src, dst), spi = back
            return (
                UnusedReason.OTHER_DIRECTION,
                0,
                f"no packet has its SPI, and ESP goes only from {_text(src)} to {_text(dst)} "
                f"(SPI {spi:#010x}): the capture has the other direction only",
                None,
            )
        return (UnusedReason.NO_SUCH_SPI, 0, nowhere, None)

    def _esp_between(self, src: IpAddress | None, dst: IpAddress | None) -> tuple[Pair, int] | None:
        """An ESP flow (its addresses and SPI) from ``src`` to ``dst``, if one was seen."""
        if src is None:
            return None
        for (to, spi), _ in self._from.get(src.packed, Counter()).most_common():
            if dst is None or to == dst.packed:
                return (src.packed, to), spi
        return None


def _is_reverse(sa: SecurityAssociation, pair: Pair) -> bool:
    """Is ``pair`` (src, dst) the SA's addresses swapped (those the SA names)?"""
    src, dst = pair
    if sa.src is None and sa.dst is None:
        return False
    return (sa.dst is None or src == sa.dst.packed) and (sa.src is None or dst == sa.src.packed)


def _count(counter: Counter[K], key: K) -> None:
    if key in counter or len(counter) < MAX_PER_KEY:
        counter[key] += 1


def unused_note(unused: Sequence[UnusedSa], total: int) -> str | None:
    """One sentence for the first screen: how many key-file SAs saw no packet, and why."""
    if not unused:
        return None
    head = (
        f"none of the {total} SAs of the key files matched a packet"
        if len(unused) == total
        else f"{len(unused)} of the {total} SAs of the key files saw no packet"
    )
    ports = sorted({u.port for u in unused if u.port is not None})
    if ports:
        return f"{head}: ESP-in-UDP on another port; run with --natt-port {ports[0]}"
    reasons = Counter(u.reason for u in unused)
    words = {
        UnusedReason.OTHER_DIRECTION: "the other direction's",
        UnusedReason.OTHER_ADDRESSES: "their SPIs between other addresses",
        UnusedReason.NO_SUCH_SPI: "their SPIs nowhere in the capture",
        UnusedReason.NOT_CLAIMED: "wildcards no packet was left for",
    }
    return (
        f"{head} ({', '.join(f'{n} {words[r]}' for r, n in reasons.most_common() if r in words)})"
    )
