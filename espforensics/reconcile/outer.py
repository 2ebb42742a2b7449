"""What changed in a packet's outer header between the two captures, and which of it is
a rewrite rather than the path's usual TTL decrement.

In: the sent and the received copy's ``Outer`` (reconcile/wire.py) and the
SA's usual TTL / hop limit decrement. Out: the changes as reconcile.csv's
``outer_changes`` text (``outer_changes``: ``ttl 64->63; ecn ect0->ce;
dst 10.0.0.2->192.0.2.7``) and the part of them that makes the packet
``outer_rewritten`` (``rewrites``). Raises nothing.

Every router on the way decrements the TTL (IPv4, RFC 791) or the hop
limit (IPv6, RFC 8200) by one, so a decrement common to an SA's packets
is the path, not a rewrite: it is named in ``outer_changes`` and counted
against the SA's usual decrement (the most common one, reconcile/run.py). A
rewrite is any other change: the addresses or UDP ports (a NAT), the DSCP
(RFC 2474: a router re-marking the class of service), the ECN field (RFC
3168: a congested router marks ECN-capable packets CE, a real and
legitimate change, not an attack; a tunnel end copies it, RFC 6040), or a
TTL / hop limit change other than the path's usual one (a packet that
took another route, or a middlebox that sets the TTL).
"""

from __future__ import annotations

from dataclasses import dataclass

from espforensics.reconcile.wire import Outer

ECN = ("not-ect", "ect1", "ect0", "ce")  # RFC 3168 s5: the two low bits, 00 01 10 11
_HOPS = frozenset({"ttl", "hop_limit"})


@dataclass(frozen=True, slots=True)
class Change:
    """One outer header field that differs: its name, and its value before and after."""

    field: str
    before: str
    after: str

    def __str__(self) -> str:
        return f"{self.field} {self.before}->{self.after}"


def changes(sent: Outer, got: Outer) -> tuple[Change, ...]:
    """Every outer field that differs, in the header's order of interest: the TTL / hop
    limit, DSCP, ECN, then the addresses and UDP ports."""
    if sent is got:
        return ()
    found: list[Change] = []
    if sent.hops != got.hops:
        found.append(
            Change("ttl" if sent.version == 4 else "hop_limit", *_pair(sent.hops, got.hops))
        )
    if sent.traffic_class >> 2 != got.traffic_class >> 2:
        found.append(Change("dscp", *_pair(sent.traffic_class >> 2, got.traffic_class >> 2)))
    if sent.traffic_class & 3 != got.traffic_class & 3:
        found.append(Change("ecn", ECN[sent.traffic_class & 3], ECN[got.traffic_class & 3]))
    for name in ("src", "dst", "sport", "dport"):
        was, now = getattr(sent, name), getattr(got, name)
        if was != now:
            found.append(Change(name, str(was), str(now)))
    return tuple(found)


def _pair(before: int, after: int) -> tuple[str, str]:
    return str(before), str(after)


def rewrites(found: tuple[Change, ...], sent: Outer, got: Outer, usual: int | None) -> str:
    """The changes that make a packet ``outer_rewritten``, as text ("" for none): all but a
    TTL / hop limit decrement equal to the SA's usual one."""
    decrement = sent.hops - got.hops
    odd = [c for c in found if c.field not in _HOPS or decrement != usual]
    return text(tuple(odd))


def text(found: tuple[Change, ...]) -> str:
    """``ttl 64->63; ecn ect0->ce``: reconcile.csv's ``outer_changes``."""
    return "; ".join(str(c) for c in found)
