"""The facts of each SA that the likely-cause table (report/causes.py) matches on.

In: a ``Summary``. Out: ``sa_facts(summary)``, one flat, frozen
``SaFacts`` per SA that has findings, misplaced layouts or a first
sequence number 0: its addresses and mode, its main misplaced layout, its
IV reuse and derivation, its repeated sequence numbers and ESN
mismatches. Raises nothing; reads no clock and no environment.

It reads the findings' typed evidence (model/evidence.py), never their words:
the checks (checks/iv_sa.py, checks/iv_reuse.py, checks/sequence.py,
checks/esn_mismatch.py) fill it next to the detail, so rewording a detail
changes no fact; each cause has a fixture test (tests/report/test_causes.py). The
SA's mode is the summary's ``SaMode``, the clear bytes its layout's, the
frames numbers (``Shown``): the words are made when a cause's template is
filled (report/causes.py), and nothing is read back from them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from espforensics.model.enums import FindingKind
from espforensics.model.evidence import EsnMismatch, IvChained, IvDeviating, IvReuse, SeqDuplicates
from espforensics.model.records import Finding, SaKey
from espforensics.report.narrative import clear_bytes
from espforensics.results.summary import MisplacedLayout, SaMode, SaSummary, Summary

FRAMES_SHOWN = 10  # frames an evidence sentence names


@dataclass(frozen=True, slots=True)
class Shown:
    """The frames an evidence sentence names: the first ``FRAMES_SHOWN``, and whether
    there are more. Its text is "20 21 22 ..." (a cause's template formats it)."""

    frames: tuple[int, ...] = ()
    more: bool = False

    @classmethod
    def of(cls, numbers: Iterable[int]) -> Shown:
        every = sorted(set(numbers))
        return cls(tuple(every[:FRAMES_SHOWN]), len(every) > FRAMES_SHOWN)

    def __str__(self) -> str:
        return " ".join(map(str, self.frames)) + (" ..." if self.more else "")


NONE_SHOWN = Shown()


class ModeFact(StrEnum):
    """The SA's mode as the table's conditions read it: a guess that names both modes,
    or a mode that is neither (beet, iptfs), does not decide."""

    TRANSPORT = "transport"
    TUNNEL = "tunnel"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class SaFacts:
    """What the summary says about one SA, flat, for the table's conditions."""

    spi: int
    spi_hex: str
    src: str
    dst: str
    ip_version: int
    mode: ModeFact
    mode_text: str  # as the summary has it, e.g. "transport" or "transport (guess)"
    packets: int
    first_seq64: int  # -1: none seen
    # The SA's most common misplaced layout (summary.layouts)
    misplaced: int = 0
    shift: int = 0  # ESP header found this many bytes after where it belongs
    expected_offset: int = 0
    esp_offset: int = 0
    clear_offset: int = 0
    clear_len: int = 0  # bytes in clear right in front of the real header
    clear_version: int = 0  # the IP version nibble of the first clear byte
    clear_hex: str = ""
    misplaced_frames: Shown = NONE_SHOWN
    # IVs (iv_reuse and iv_derivation findings, the SA's counters)
    iv_reused: int = 0  # packets whose IV was used before under the key
    reused_ivs: int = 0  # distinct IVs used more than once
    reuse_span: int = 0  # the most sequence numbers between two uses of one IV
    reuse_frames: Shown = NONE_SHOWN
    iv_deviating: int = 0
    deltas: str = ""  # e.g. "seq+1 x26", as the iv_derivation finding counts them
    iv_counter: str = "IVs not compared with a counter (not counter-derived, e.g. echainiv)"
    delta_min: int = 0
    delta_max: int = 0
    chained: int = 0  # CBC IVs equal to the previous packet's last ciphertext block
    chained_frames: Shown = NONE_SHOWN
    # Sequence numbers (seq_duplicate, esn_mismatch findings)
    dup_frames: Shown = NONE_SHOWN  # repeated sequence numbers carried by different packets
    # Of those, the repeats whose IV is their original's (iv_reuse findings whose uses
    # all carry one sequence number): the same transform sealed that number twice
    dup_same_iv: int = 0
    dup_new_iv: int = 0  # repeats by different packets, less dup_same_iv: under another IV
    dup_lag: int = 0  # the most frames between a packet and its same-IV repeat
    dup_iv_frames: Shown = NONE_SHOWN
    esn_early: int = 0  # seq low 0xffffffff verified only with the next high half
    esn_frames: Shown = NONE_SHOWN


FACT_NAMES = frozenset(f.name for f in fields(SaFacts))


def as_dict(facts: SaFacts) -> dict[str, Any]:
    """The facts by field name (a cause's template is filled from them)."""
    return {name: getattr(facts, name) for name in FACT_NAMES}


def shown_frames(facts: SaFacts, name: str) -> tuple[int, ...]:
    """The frames of the fact ``name`` (one of the ``Shown`` fields)."""
    value = getattr(facts, name)
    if not isinstance(value, Shown):
        raise TypeError(f"{name} is not a fact of frames")  # a bug of the CAUSES table
    return value.frames


# The finding kinds whose counts, frames or evidence the facts are made of.
READ = frozenset(
    {
        FindingKind.ESP_MISPLACED,
        FindingKind.IV_REUSE,
        FindingKind.IV_DERIVATION,
        FindingKind.SEQ_DUPLICATE,
        FindingKind.ESN_MISMATCH,
    }
)
_FAR = 1 << 62  # a delta no pattern accepts
_LOW = 0xFFFFFFFF  # the low half of the last number of a high half (RFC 4303 A2.2)


def _mode(mode: SaMode) -> ModeFact:
    """Transport or tunnel, stated or (transport) guessed; else unknown."""
    if mode.transport:
        return ModeFact.TRANSPORT
    return ModeFact.TUNNEL if mode is SaMode.TUNNEL else ModeFact.UNKNOWN


def sa_facts(summary: Summary) -> tuple[SaFacts, ...]:
    """The facts of every SA that has anything a cause could match.

    A finding names its SA by SPI and addresses; one about a key group
    (IV reuse) or a layout (placement) names only the SPI, and counts for
    every SA of that SPI.
    """
    by_sa: dict[SaKey, list[Finding]] = {}
    by_spi: dict[int, list[Finding]] = {}
    for f in summary.finding_list:
        if f.kind not in READ:
            continue  # a scan's tens of thousands of seq_gap findings: no fact
        if f.spi is not None and f.src:
            by_sa.setdefault(SaKey(f.spi, f.src, f.dst), []).append(f)
        elif f.spi is not None:
            by_spi.setdefault(f.spi, []).append(f)
    layouts: dict[tuple[int, int], list[MisplacedLayout]] = {}
    for x in summary.layouts:
        layouts.setdefault((x.spi, x.ip_version), []).append(x)
    out = []
    for sa in summary.sas:
        found = by_sa.get(sa.key, []) + by_spi.get(sa.spi, [])
        mine = layouts.get((sa.spi, sa.ip_version), [])
        if found or mine or sa.first_seq64 == 0:
            out.append(_facts(sa, found, mine))
    return tuple(out)


def _facts(sa: SaSummary, found: list[Finding], layouts: list[MisplacedLayout]) -> SaFacts:
    facts = SaFacts(
        sa.spi,
        f"{sa.spi:#010x}",
        sa.src,
        sa.dst,
        sa.ip_version,
        _mode(sa.mode),
        sa.mode.value or "mode unknown",
        sa.packets,
        -1 if sa.first_seq64 is None else sa.first_seq64,
        iv_reused=sa.iv_reused,
        iv_deviating=sa.iv_deviating,
    )
    facts = _layout_facts(facts, layouts, found)
    facts = _iv_facts(facts, found)
    facts = _sequence_facts(facts, found)
    return _repeat_facts(facts, found)


def _of(found: list[Finding], kind: FindingKind) -> list[Finding]:
    return [f for f in found if f.kind is kind]


def _layout_facts(facts: SaFacts, layouts: list[MisplacedLayout], found: list[Finding]) -> SaFacts:
    if not layouts:
        return facts
    x = max(layouts, key=lambda x: (x.packets, -x.esp_offset))
    first = x.first_clear
    return replace(
        facts,
        misplaced=x.packets,
        shift=x.esp_offset - x.expected_offset,
        expected_offset=x.expected_offset,
        esp_offset=x.esp_offset,
        clear_offset=x.clear_offset,
        clear_len=x.esp_offset - x.clear_offset,
        clear_version=0 if first is None else first >> 4,
        clear_hex=clear_bytes(x) or "none",
        misplaced_frames=Shown.of(
            n for f in _of(found, FindingKind.ESP_MISPLACED) for n in f.frames
        ),
    )


def _iv_facts(facts: SaFacts, found: list[Finding]) -> SaFacts:
    reuse = _of(found, FindingKind.IV_REUSE)
    spans = [
        max(u.seq64 for u in ev.uses) - min(u.seq64 for u in ev.uses)
        for f in reuse
        if isinstance(ev := f.evidence, IvReuse) and ev.uses
    ]
    facts = replace(
        facts,
        reused_ivs=sum(1 if f.frames else f.count for f in reuse),
        reuse_span=max(spans, default=0),
        reuse_frames=Shown.of(n for f in reuse for n in f.frames),
    )
    for f in _of(found, FindingKind.IV_DERIVATION):
        ev = f.evidence
        if isinstance(ev, IvChained):
            facts = replace(facts, chained=ev.chained, chained_frames=Shown.of(f.frames))
        if not isinstance(ev, IvDeviating):
            continue
        if ev.unrelated:
            facts = replace(facts, delta_min=-_FAR, delta_max=_FAR)  # fits no counter near
        elif ev.deltas:
            shown = ", ".join(f"seq{d.delta:+d} x{d.count}" for d in ev.deltas)
            facts = replace(
                facts,
                deltas=shown,
                iv_counter=f"IVs not built from their own sequence number: {shown}",
                delta_min=min(d.delta for d in ev.deltas),
                delta_max=max(d.delta for d in ev.deltas),
            )
    return facts


def _different(found: list[Finding]) -> list[tuple[Finding, int]]:
    """The seq_duplicate findings and their repeats carried by different packets."""
    return [
        (f, ev.different)
        for f in _of(found, FindingKind.SEQ_DUPLICATE)
        if isinstance(ev := f.evidence, SeqDuplicates)
    ]


def _sequence_facts(facts: SaFacts, found: list[Finding]) -> SaFacts:
    for f, different in _different(found):
        if different:
            facts = replace(facts, dup_frames=Shown.of(f.frames))
    early = [
        e.frame
        for f in _of(found, FindingKind.ESN_MISMATCH)
        if isinstance(ev := f.evidence, EsnMismatch)
        for e in ev.events
        if e.placed & _LOW == _LOW and e.verified >> 32 == (e.placed >> 32) + 1
    ]
    if early:
        facts = replace(facts, esn_early=len(early), esn_frames=Shown.of(early))
    return facts


def _repeat_facts(facts: SaFacts, found: list[Finding]) -> SaFacts:
    """Repeated sequence numbers split by IV: the same IV as the original, or another.

    An iv_reuse finding whose uses all carry one sequence number is a number
    sealed twice under one IV (its evidence names up to 6 uses; ``count`` is
    every use). A byte-identical repeat is no
    reuse there, as it is no "different packet" in the seq_duplicate finding;
    only as many repeats as that finding counts are this SA's own.
    """
    same, lag, frames = 0, 0, []
    for f in _of(found, FindingKind.IV_REUSE):
        if not isinstance(ev := f.evidence, IvReuse):
            continue
        uses = [(u.frame, u.seq64) for u in ev.uses]
        if len(uses) >= 2 and len({seq for _, seq in uses}) == 1:
            same += f.count - 1
            lag = max(lag, max(n for n, _ in uses) - min(n for n, _ in uses))
            frames += [n for n, _ in uses]
    different = sum(n for _, n in _different(found))
    if not different:
        return facts  # a reuse across SAs of one key (shared_key) repeats no number of this SA
    same = min(same, different)
    return replace(
        facts,
        dup_same_iv=same,
        dup_new_iv=different - same,
        dup_lag=lag,
        dup_iv_frames=Shown.of(frames),
    )
