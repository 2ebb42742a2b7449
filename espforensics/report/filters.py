"""A tcpdump filter that selects the misplaced ESP packets, without keys.

In: the ``MisplacedLayout`` rows of a ``Summary``. Out: a BPF expression
for tcpdump/libpcap, or ``None`` when nothing was misplaced. Raises
nothing.

Each layout becomes ``ip6 proto 50 and ip6[CLEAR:2] = 0xPREFIX and
ip6[ESP:4] = 0xSPI`` (``ip``/``ip[]`` for IPv4, ``proto 17`` for ESP in
UDP): the bytes tcpdump's ``ip[]``/``ip6[]`` index are counted from the
outer IP header, as the analyzer counts ``esp_offset``. With IPv6
extension headers, ``ip6 protochain`` replaces ``ip6 proto``; IPv4 with
more than its 20-byte header before ESP (options, or an AH: RFC 4302)
says ``(ip proto 50 or ip proto 51)``. Behind VLAN tags, a PPPoE session
or MPLS labels (the layout's ``carriers``), the clause starts with the
keywords that cross them, ``vlan and ...`` (pcap-filter(7)): libpcap then
counts ``ip[]`` from the IP header behind them. Such a keyword moves every
offset after it in the whole expression, ``or`` or not: the clauses go
from the fewest carriers to the most, each naming only the keywords the
ones before it did not, which works when each layout's carriers extend
the previous one's (none, ``vlan``, ``vlan vlan``); the layouts behind
the same carriers share one prefix, ``vlan and ((...) or (...))``.
Layouts behind encapsulations that do not (``vlan`` and ``mpls``) get no
filter: no one expression of libpcap's reaches both. Of the tunnels
(decode/tunnel.py) libpcap 1.10 crosses Geneve (``geneve``) only: behind
VXLAN, GRE, ERSPAN or IP in IP no filter is printed either.

A datagram reassembled from outer fragments is matched on its first
fragment, which holds the ESP header (IPv6: behind a Fragment header, so
``ip6 protochain`` and offsets 8 bytes further); ``filter_note`` says so
under the filter. When misplaced headers get no filter, ``filter_note``
says why in its place.
"""

from __future__ import annotations

from itertools import groupby

from espforensics.results.summary import MisplacedLayout

MAX_LAYOUTS = 8  # beyond this a filter is no help to a human
CROSSED = frozenset({"vlan", "pppoes", "mpls", "geneve"})  # the carriers libpcap 1.10 crosses
HEADING = "tcpdump filter selecting the misplaced ESP packets (no keys needed):"  # every format
FRAGMENT_HEADER = 8
FIRST_FRAGMENT_NOTE = (
    "Of a datagram reassembled from fragments it selects the first fragment, which "
    "carries the ESP header; the packets table has the datagram on its last."
)


def _uncrossed(layouts: tuple[MisplacedLayout, ...]) -> list[str]:
    """The carriers of the layouts that no keyword of libpcap 1.10 crosses."""
    return sorted({w for x in layouts for w in x.carriers.split()} - CROSSED)


def filter_note(layouts: tuple[MisplacedLayout, ...]) -> str:
    """What the report says under the filter (where it finds reassembled datagrams), or
    in its place when misplaced ESP headers get none (why not); "" when nothing to say."""
    if not layouts:
        return ""
    if misplaced_filter(layouts) is not None:
        return FIRST_FRAGMENT_NOTE if any(x.reassembled for x in layouts) else ""
    if len(layouts) > MAX_LAYOUTS:
        return f"No tcpdump filter: {len(layouts)} layouts, more than the {MAX_LAYOUTS} it takes."
    uncrossed = _uncrossed(layouts)
    if uncrossed:
        return (
            f"No tcpdump filter: libpcap has no keyword that crosses {' or '.join(uncrossed)}, "
            "so no filter reaches the ESP header inside."
        )
    behind = " and ".join(sorted({x.carriers for x in layouts if x.carriers}))
    return f"No tcpdump filter: no one libpcap expression crosses both {behind}."


def _clause(x: MisplacedLayout) -> str:
    ip = "ip6" if x.ip_version == 6 else "ip"
    number = 50 if x.proto == "esp" else 17
    headers = x.expected_offset - (8 if x.proto == "esp-udp" else 0)  # before ESP or UDP
    # A reassembled datagram's ESP header is in its first fragment: in IPv6 behind the
    # 8-byte Fragment header (RFC 8200 s4.5), which the reassembled datagram has not.
    shift = FRAGMENT_HEADER if x.reassembled and x.ip_version == 6 else 0
    if x.ip_version == 6 and (headers > 40 or shift):
        head = f"ip6 protochain {number}"
    elif x.ip_version == 4 and headers > 20:
        head = f"(ip proto {number} or ip proto 51)"
    else:
        head = f"{ip} proto {number}"
    parts = [head]
    if len(x.clear_prefix) == 4:
        parts.append(f"{ip}[{x.clear_offset + shift}:2] = 0x{x.clear_prefix}")
    parts.append(f"{ip}[{x.esp_offset + shift}:4] = {x.spi:#x}")
    return " and ".join(parts)


def misplaced_filter(layouts: tuple[MisplacedLayout, ...]) -> str | None:
    """The filter matching every layout (joined with ``or``), or None."""
    if not layouts or len(layouts) > MAX_LAYOUTS:
        return None
    if _uncrossed(layouts):
        return None  # a tunnel no keyword of libpcap's crosses
    groups: list[str] = []
    crossed: list[str] = []
    ordered = sorted(layouts, key=lambda x: (len(x.carriers.split()), x.carriers))
    for carried, group in groupby(ordered, key=lambda x: x.carriers):
        carriers = carried.split()
        if carriers[: len(crossed)] != crossed:
            return None  # not a chain: see the module's docstring
        clauses = sorted({_clause(x) for x in group})
        body = clauses[0] if len(clauses) == 1 else " or ".join(f"({c})" for c in clauses)
        fresh = carriers[len(crossed) :]  # each keyword once: it shifts all that follows
        groups.append(" and ".join([*fresh, body if len(clauses) == 1 else f"({body})"]))
        crossed = carriers
    return groups[0] if len(groups) == 1 else " or ".join(f"({g})" for g in groups)
