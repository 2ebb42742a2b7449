"""A tcpdump filter that selects the misplaced ESP packets, without keys.

In: the ``MisplacedLayout`` rows of a ``Summary``. Out: a BPF expression
for tcpdump/libpcap, or ``None`` when nothing was misplaced. Raises
nothing.

Each layout becomes ``ip6 proto 50 and ip6[CLEAR:2] = 0xPREFIX and
ip6[ESP:4] = 0xSPI`` (``ip``/``ip[]`` for IPv4, ``proto 17`` for ESP in
UDP): the bytes tcpdump's ``ip[]``/``ip6[]`` index are counted from the
outer IP header, as the analyzer counts ``esp_offset``. With IPv6
extension headers, ``ip6 protochain`` replaces ``ip6 proto``.
"""

from __future__ import annotations

from espforensics.summary import MisplacedLayout

MAX_LAYOUTS = 8  # beyond this a filter is no help to a human


def _clause(x: MisplacedLayout) -> str:
    ip = "ip6" if x.ip_version == 6 else "ip"
    number = 50 if x.proto == "esp" else 17
    if x.ip_version == 6 and x.expected_offset - (8 if x.proto == "esp-udp" else 0) > 40:
        head = f"ip6 protochain {number}"
    else:
        head = f"{ip} proto {number}"
    parts = [head]
    if len(x.clear_prefix) == 4:
        parts.append(f"{ip}[{x.clear_offset}:2] = 0x{x.clear_prefix}")
    parts.append(f"{ip}[{x.esp_offset}:4] = {x.spi:#x}")
    return " and ".join(parts)


def misplaced_filter(layouts: tuple[MisplacedLayout, ...]) -> str | None:
    """The filter matching every layout (joined with ``or``), or None."""
    if not layouts or len(layouts) > MAX_LAYOUTS:
        return None
    clauses = sorted({_clause(x) for x in layouts})
    if len(clauses) == 1:
        return clauses[0]
    return " or ".join(f"({c})" for c in clauses)
