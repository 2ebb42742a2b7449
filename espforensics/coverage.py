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
from typing import Protocol

from espforensics.checks import COVERAGE
from espforensics.checks.coverage import ICV_FAILS, NO_SPI, SaFacts, Seen, proven, seen


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
    rows, owned = _seen(sas)
    for _, _, n, s in rows:
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
    rows, owned = _seen(sas)
    for sa, verdict, n, s in rows:
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


def _seen(sas: Iterable[SaCounts]) -> tuple[list[tuple[SaCounts, str, int, Seen]], int]:
    """Per SA and verdict: its packets and what was seen of them; and the packets of all SAs."""
    rows, owned = [], 0
    for sa in sas:
        owned += sa.packets
        facts = SaFacts(sa.algorithm, proven(sa.verdicts, sa.algorithm))
        rows += [(sa, v, n, seen(v, facts)) for v, n in sa.verdicts.items()]
    return rows, owned
