"""Coverage: how many ESP packets each check examined, and why not the rest.

In: the per-SA verdict counts and algorithms of a run (``SaSummary`` rows,
or anything with ``algorithm``, ``packets``, ``verdicts`` and the counts of
packets the capture cut, ``cut``, ``cut_read``, ``cut_found``) and its ESP
packet count. Out: ``check_coverage(...)``, one ``CheckCoverage`` per check
of ``checks.COVERAGE``, in the order the checks run. Raises nothing; pure.

Each check declares what it can examine (its module's ``coverage``, over
the verdict table ``checks/coverage.py SEEN``); here the packets are only
counted, so summary.json, the reports and KTAP say the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from espforensics.checks import COVERAGE
from espforensics.checks.coverage import (
    CUT_FOUND,
    CUT_READ,
    CUT_UNREAD,
    ICV_FAILS,
    NO_SPI,
    SaFacts,
    Seen,
    proven,
    seen,
)
from espforensics.model.enums import IvScheme


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
    @property
    def iv_scheme(self) -> str: ...  # the IV derivation check's, "" if not asked
    @property
    def cut(self) -> int: ...  # of verdicts["truncated"]: cut by the capture
    @property
    def cut_read(self) -> int: ...  # of ``cut``: their header read where it is, or found later
    @property
    def cut_found(self) -> int: ...  # of ``cut_read``: their header found later by layout
    @property
    def no_iv(self) -> int: ...  # without a key: clear from the ESP header on, no IV read


@dataclass(frozen=True, slots=True)
class CheckCoverage:
    """How many ESP packets one check examined, and why it did not examine the rest."""

    name: str  # the check, as KTAP names it: "esp_placement"
    esp_packets: int
    examined: int
    keyless: int  # of ``examined``: by their clear bytes only, without a key or cut
    skipped: dict[str, int]  # why not -> packets, e.g. {"without a key": 325}
    # of ``keyless``: packets with a key that the capture cut before their ICV (their
    # key unused); summary.json has it only when not 0
    cut: int = 0


def check_coverage(sas: Iterable[SaCounts], esp_packets: int) -> tuple[CheckCoverage, ...]:
    """Every check's coverage, from the per-SA verdict counts and algorithms.

    Each check declares what it examines (its module's ``coverage``) over the
    verdict table of checks/coverage.py; here the packets are only counted.
    """
    examined = dict.fromkeys((name for name, _ in COVERAGE), 0)
    keyless = dict.fromkeys(examined, 0)
    cut = dict.fromkeys(examined, 0)
    skipped: dict[str, Counter[str]] = {name: Counter() for name in examined}
    groups, owned = _seen(sas)
    for group in groups:
        n, s = group.packets, group.seen
        for name, declared in COVERAGE:
            why = declared(s)
            if why is None:
                examined[name] += n
                keyless[name] += 0 if s.keyed and not s.cut else n
                cut[name] += n if s.keyed and s.cut else 0
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
            cut[name],
        )
        for name, _ in COVERAGE
    )


@dataclass(frozen=True, slots=True)
class Tally:
    """What decryption did with a run's ESP packets, over all its SAs."""

    esp_packets: int
    tried: int  # a key was tried at the expected offset and proved something
    proven: int  # of ``tried``: verified or decrypted (the run's exit code counts these)
    verified: int  # of ``proven``: their ICV verified (the rest had none to check)
    authentic: int  # of ``verified``: not decrypted (a cipher this version does not open)
    verdicts: dict[str, int]  # of ``tried``: verdict -> packets
    untried: dict[str, int]  # why not tried -> packets, most first
    untried_spis: dict[str, tuple[int, ...]]  # why not tried -> the SPIs concerned


def tally(sas: Iterable[SaCounts], esp_packets: int) -> Tally:
    """Count what decryption proved; what it did not try, and why."""
    proven_n = verified_n = authentic_n = 0
    tried: Counter[str] = Counter()
    untried: Counter[str] = Counter()
    spis: dict[str, set[int]] = {}
    groups, owned = _seen(sas)
    for group in groups:
        n, s = group.packets, group.seen
        if _tried(s):
            tried[group.verdict] += n
            proven_n += n if s.verified or s.decrypted else 0
            verified_n += n if s.verified else 0
            authentic_n += n if s.verified and not s.decrypted else 0
        else:
            untried[s.why] += n
            spis.setdefault(s.why, set()).update(group.spis)
    if esp_packets > owned:
        untried[NO_SPI] += esp_packets - owned
    return Tally(
        esp_packets,
        tried.total(),
        proven_n,
        verified_n,
        authentic_n,
        dict(tried),
        dict(untried.most_common()),
        {why: tuple(sorted(spis.get(why, ()))) for why in untried},
    )


def _tried(s: Seen) -> bool:
    """Was a key tried on such a packet at the expected offset, proving something?"""
    return s.verified or s.decrypted or s.why == ICV_FAILS


class _Group:
    """The packets of one verdict under SAs of the same facts, over every SA of a run."""

    __slots__ = ("packets", "seen", "spis", "tried", "verdict")

    def __init__(self, verdict: str, seen: Seen) -> None:
        self.verdict, self.seen, self.packets = verdict, seen, 0
        self.tried = _tried(seen)
        self.spis: list[int] = []  # the SAs' SPIs, for packets decryption did not try


@lru_cache(maxsize=4096)  # a few algorithms x sets of verdicts, not one per SA
def _facts(algorithm: str, verdicts: tuple[tuple[str, bool], ...], clear: bool) -> SaFacts:
    """The facts of an SA of ``algorithm`` whose verdicts had packets (True) or none, for
    its packets that, without a key, had no IV (``clear``) or the others."""
    return SaFacts(algorithm, proven({v: int(n) for v, n in verdicts}, algorithm), clear)


def _seen(sas: Iterable[SaCounts]) -> tuple[list[_Group], int]:
    """Per verdict and kind of SA, its packets and what was seen of them; and all SAs' packets.

    One pass over the SAs. Groups come in the order their first row came (one row
    per SA and verdict, as the SAs list them), so counters keyed by the groups'
    verdicts or reasons fill in the order a walk row by row fills them.
    """
    groups: dict[tuple[str, SaFacts], _Group] = {}
    owned = 0
    for sa in sas:
        owned += sa.packets
        verdicts = sa.verdicts
        had = tuple(zip(verdicts, map(bool, verdicts.values()), strict=True))
        every = not sa.algorithm and sa.iv_scheme == IvScheme.NONE and not sa.no_iv
        facts = _facts(sa.algorithm, had, every)  # every: a summary.json without ``no_iv``
        clear = _facts(sa.algorithm, had, True) if sa.no_iv else facts
        left = sa.no_iv  # of the packets the IV checks get, these have no IV
        for v, n in _split_cut(sa, verdicts) if sa.cut else verdicts.items():
            held = min(left, n) if seen(v, facts).evidence else 0
            left -= held
            parts = ((facts, n - held), (clear, held)) if held else ((facts, n),)
            for kind, count in parts:
                if held and not count:
                    continue  # every packet of the verdict had no IV: no group of the others
                group = groups.get((v, kind))
                if group is None:
                    group = groups[v, kind] = _Group(v, seen(v, kind))
                group.packets += count
                if not group.tried:
                    group.spis.append(sa.spi)
    return list(groups.values()), owned


def _split_cut(sa: SaCounts, verdicts: dict[str, int]) -> Iterator[tuple[str, int]]:
    """The SA's packets per verdict, its ``truncated`` ones that the capture cut apart:
    by what the capture showed of them (checks/coverage.py ``CUT_*``)."""
    cut = sa.cut
    for v, n in verdicts.items():
        if v != "truncated" or not cut:
            yield v, n
            continue
        parts = (
            (v, n - cut),  # not told apart: a header cut short, a fragment
            (CUT_UNREAD, cut - sa.cut_read),
            (CUT_READ, sa.cut_read - sa.cut_found),
            (CUT_FOUND, sa.cut_found),
        )
        yield from ((kind, m) for kind, m in parts if m)
