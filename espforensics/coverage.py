"""Coverage: how many ESP packets each check examined, and why not the rest.

In: the per-SA verdict counts and algorithms of a run (``SaSummary`` rows,
or anything with ``algorithm``, ``packets`` and ``verdicts``) and its ESP
packet count. Out: ``check_coverage(...)``, one ``CheckCoverage`` per check
of ``checks.COVERAGE``, in the order the checks run. Raises nothing; pure.

Each check declares what it can examine (its module's ``coverage``, over
the verdict table ``checks/coverage.py SEEN``); here the packets are only
counted, so summary.json, the reports and KTAP say the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Protocol

from espforensics.checks import COVERAGE
from espforensics.checks.coverage import ICV_FAILS, NO_SPI, SaFacts, proven, seen
from espforensics.keys.sa import SecurityAssociation

Address = IPv4Address | IPv6Address


class SaCounts(Protocol):
    """What coverage reads of an SA (summary.SaSummary has it)."""

    @property
    def spi(self) -> int: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def packets(self) -> int: ...
    @property
    def verdicts(self) -> dict[str, int]: ...


@dataclass(frozen=True, slots=True)
class CheckCoverage:
    """How many ESP packets one check examined, and why it did not examine the rest."""

    name: str  # the check, as KTAP names it: "esp_placement"
    esp_packets: int
    examined: int
    keyless: int  # of ``examined``: without a key, by their clear bytes only
    skipped: dict[str, int]  # why not -> packets, e.g. {"without a key": 325}


def check_coverage(sas: Iterable[SaCounts], esp_packets: int) -> tuple[CheckCoverage, ...]:
    """Every check's coverage, from the per-SA verdict counts and algorithms.

    Each check declares what it examines (its module's ``coverage``) over the
    verdict table of checks/coverage.py; here the packets are only counted.
    """
    examined = dict.fromkeys((name for name, _ in COVERAGE), 0)
    keyless = dict.fromkeys(examined, 0)
    skipped: dict[str, Counter[str]] = {name: Counter() for name in examined}
    owned = 0
    for sa in sas:
        owned += sa.packets
        facts = SaFacts(sa.algorithm, proven(sa.verdicts))
        for verdict, n in sa.verdicts.items():
            s = seen(verdict, facts)
            for name, declared in COVERAGE:
                why = declared(s)
                if why is None:
                    examined[name] += n
                    keyless[name] += 0 if s.keyed else n
                else:
                    skipped[name][why] += n
    unowned = esp_packets - owned  # ESP packets cut before their SPI
    return tuple(
        CheckCoverage(
            name,
            esp_packets,
            examined[name],
            keyless[name],
            {**dict(skipped[name].most_common()), **({NO_SPI: unowned} if unowned > 0 else {})},
        )
        for name, _ in COVERAGE
    )


@dataclass(frozen=True, slots=True)
class Tally:
    """What decryption did with a run's ESP packets, over all its SAs."""

    esp_packets: int
    tried: int  # a key was tried at the expected offset and proved something
    proven: int  # of ``tried``: verified or decrypted (the run's exit code counts these)
    verdicts: dict[str, int]  # of ``tried``: verdict -> packets
    untried: dict[str, int]  # why not tried -> packets, most first
    untried_spis: dict[str, tuple[int, ...]]  # why not tried -> the SPIs concerned


def tally(sas: Iterable[SaCounts], esp_packets: int) -> Tally:
    """Count what decryption proved; what it did not try, and why."""
    proven_n = 0
    tried: Counter[str] = Counter()
    untried: Counter[str] = Counter()
    spis: dict[str, set[int]] = {}
    owned = 0
    for sa in sas:
        owned += sa.packets
        facts = SaFacts(sa.algorithm, proven(sa.verdicts))
        for verdict, n in sa.verdicts.items():
            s = seen(verdict, facts)
            if s.verified or s.decrypted or s.why == ICV_FAILS:
                tried[verdict] += n
                proven_n += n if s.verified or s.decrypted else 0
            else:
                untried[s.why] += n
                spis.setdefault(s.why, set()).add(sa.spi)
    if esp_packets > owned:
        untried[NO_SPI] += esp_packets - owned
    return Tally(
        esp_packets,
        tried.total(),
        proven_n,
        dict(tried),
        dict(untried.most_common()),
        {why: tuple(sorted(spis.get(why, ()))) for why in untried},
    )


@dataclass(frozen=True, slots=True)
class UnusedSa:
    """An SA of the key files that no ESP packet of the capture matched, and the likely why."""

    spi: int
    src: str  # "" when the key file gives none (any)
    dst: str
    why: str


def unused_sas(
    table: Iterable[SecurityAssociation], seen: Iterable[tuple[int, str, str]]
) -> tuple[UnusedSa, ...]:
    """The key files' SAs that matched no packet (``seen``: every (spi, src, dst) of the run)."""
    flows = [(spi, ip_address(src), ip_address(dst)) for spi, src, dst in seen]
    by_spi: dict[int, list[tuple[Address, Address]]] = {}
    for spi, src, dst in flows:
        by_spi.setdefault(spi, []).append((src, dst))
    out = []
    for sa in table:
        pairs = by_spi.get(sa.spi, [])
        if any(sa.src in (None, s) and sa.dst in (None, d) for s, d in pairs):
            continue
        why = _unused_why(sa, pairs, flows)
        out.append(UnusedSa(sa.spi, str(sa.src or ""), str(sa.dst or ""), why))
    return tuple(sorted(out, key=lambda u: (u.spi, u.src, u.dst)))


def _unused_why(
    sa: SecurityAssociation,
    pairs: list[tuple[Address, Address]],
    flows: list[tuple[int, Address, Address]],
) -> str:
    """The likely reason, from what the capture does hold: other addresses, direction, port."""
    if any((s, d) == (sa.dst, sa.src) for s, d in pairs):
        return f"its SPI was seen from {sa.dst} to {sa.src}: the other direction's addresses?"
    if pairs:
        s, d = pairs[0]
        return f"its SPI was seen between other addresses ({s} -> {d})"
    if sa.src is not None and any((s, d) == (sa.dst, sa.src) for _, s, d in flows):
        return "no packet of its SPI; only the other direction was captured?"
    if sa.encap_port is not None:
        return f"no packet of its SPI, in ESP-in-UDP on port {sa.encap_port} as the key file says"
    return (
        "no packet of its SPI: ESP-in-UDP on a port other than 4500 (try --natt-port), "
        "or the key file of another capture?"
    )
