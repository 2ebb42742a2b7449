"""IV schemes: which rule a sender follows for its explicit IVs, read from a window of packets.

In: (seq64, IV) samples of one SA (its first packets, the IV derivation
check's window) and the width compared (64 bits, or the low 32 without a
key). Out: a ``Reading``: the ``IvScheme`` the samples follow and, for the
two counter schemes, the constant(s) that rebuild each IV's number.
Raises nothing.

The schemes told apart here (docs/checks.md, "IV schemes"):
- ``seqiv``: ``IV = seq64 xor c`` (Linux, primer s4);
- ``counter``: ``IV = seq64 + c`` mod 2^64 (an additive counter, as other
  IKEv2 implementations send);
- ``constant``: one IV on most packets;
- ``random``: no structure at all over at least ``MIN_RANDOM`` distinct IVs;
- ``unknown``: fewer than ``MIN_SCHEME`` packets, or IVs that follow no one
  scheme.

For seqiv and counter every ``IV xor (seq64 + d)`` and ``IV - (seq64 + d)``
(``|d| <= SPAN``) is a candidate constant, and the candidates rank as the
seqiv constant always has (``ivmath.rank``: the most concentrated histogram
of deltas). When the constant's low bits are zero over the sequence numbers
seen, xor and add read every packet alike: both are kept (``alternates``)
and the first packet that only one of them reads at its own number decides.

How many packets make evidence. A scheme is named only from ``MIN_SCHEME``
(4) packets within ``SPAN`` of their own number under one constant, which
must also hold at least half the window. Four random 64-bit IVs fit one
constant by chance with a probability near 18 * (9 * 2^-64)^3 < 2^-170; with
the 32 bits compared without a key, below 2^-80. Fewer packets can be
chance and say nothing of the sender: ``unknown``. ``random`` is a positive
statement: at least ``MIN_RANDOM`` (16) distinct IVs of which no two share
any candidate constant of either scheme (random 32-bit halves share one by
chance with a probability near 120 * 162 / 2^32 < 2^-17 over 16 packets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from espforensics.checks.ivmath import AGREE, SPAN, rank
from espforensics.model.enums import IvScheme

MIN_SCHEME = 4  # packets that must fit one counter constant (or one constant IV)
MIN_RANDOM = 16  # distinct IVs without structure that make "random" a finding of fact
FEW = 1  # packets that may share a candidate constant in a random sequence: itself only
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Candidate:
    """A counter scheme's constant: ``IV = seq64 + const`` (additive) or ``seq64 xor const``."""

    additive: bool
    const: int

    def built_from(self, iv: int, mask: int = _MASK64) -> int:
        """The number (within ``mask``) the IV encodes under this constant."""
        return (iv - self.const) & mask if self.additive else iv ^ self.const

    @property
    def scheme(self) -> IvScheme:
        return IvScheme.COUNTER if self.additive else IvScheme.SEQIV


@dataclass(frozen=True, slots=True)
class Reading:
    """What a window of IVs follows: a scheme and, for seqiv/counter, its constants.

    ``candidates[0]`` is the constant the packets are judged by; any others
    read every window packet at its own number as well (they differ only on
    numbers not seen yet).
    """

    scheme: IvScheme
    candidates: tuple[Candidate, ...] = ()
    constant_iv: int | None = None  # the repeated IV of a ``constant`` window


# The readings without constants, made once: an SA keeps its reading to the end, and most
# SAs of a scan have too few packets for any other (a Reading is 72 bytes).
UNKNOWN: Final = Reading(IvScheme.UNKNOWN)
RANDOM: Final = Reading(IvScheme.RANDOM)
CHAINED: Final = Reading(IvScheme.CHAINED)


def followed(per_delta: dict[int, int], packets: int) -> bool:
    """Do the window's deltas under one constant make evidence of its scheme?"""
    within = sum(per_delta.values())
    return (
        within >= MIN_SCHEME
        and 2 * within >= packets
        and max(per_delta.values(), default=0) >= AGREE
    )


def _votes(samples: Sequence[tuple[int, int]], mask: int) -> dict[tuple[bool, int], dict[int, int]]:
    """Per candidate (additive, constant): the window's packets per delta within SPAN."""
    votes: dict[tuple[bool, int], dict[int, int]] = {}
    for seq64, iv in samples:
        for d in range(-SPAN, SPAN + 1):
            s = (seq64 + d) & mask
            for key in ((False, iv ^ s), (True, (iv - s) & mask)):
                per_delta = votes.setdefault(key, {})
                per_delta[d] = per_delta.get(d, 0) + 1
    return votes


def _constant(samples: Sequence[tuple[int, int]]) -> Reading | None:
    """One IV on at least half the window, over MIN_SCHEME distinct sequence numbers."""
    seqs: dict[int, set[int]] = {}
    for seq64, iv in samples:
        seqs.setdefault(iv, set()).add(seq64)
    iv, numbers = max(seqs.items(), key=lambda kv: (len(kv[1]), -kv[0]))
    if len(numbers) >= MIN_SCHEME and 2 * len(numbers) >= len(samples):
        return Reading(IvScheme.CONSTANT, constant_iv=iv)
    return None


def read_ivs(
    samples: Sequence[tuple[int, int]],
    mask: int = _MASK64,
    whole: Sequence[tuple[int, int]] | None = None,
) -> Reading:
    """The scheme a window of (seq64, IV) samples follows (the module docstring's rules).

    ``whole``: the same samples with their whole IVs, when ``samples`` carry only
    the ``mask`` bits of them (a constant IV is one IV, not one low half).
    """
    n = len(samples)
    if n < MIN_SCHEME:
        return UNKNOWN
    constant = _constant(samples if whole is None else whole)
    if constant is not None:
        return constant
    xors = {iv ^ (s & mask) for s, iv in samples}
    adds = {(iv - s) & mask for s, iv in samples}
    if len(xors) == 1 or len(adds) == 1:  # every packet at its own number: provably the best
        found = [Candidate(False, c) for c in xors if len(xors) == 1]
        found += [Candidate(True, c) for c in adds if len(adds) == 1]
        return Reading(found[0].scheme, tuple(found))
    votes = _votes(samples, mask)
    # Only a candidate under which AGREE packets share a delta can be followed, and any
    # such one outranks every other (n^n > 1): rank those alone (random IVs have none).
    shared = [k for k, per in votes.items() if max(per.values()) >= AGREE]
    best = max(shared, key=lambda k: (*rank(k[1], votes[k])[:-1], not k[0], -k[1]), default=None)
    if best is not None and followed(votes[best], n):
        chosen = Candidate(*best)
        return Reading(chosen.scheme, (chosen,))
    distinct = len({iv for _, iv in samples}) == n
    if n >= MIN_RANDOM and distinct and max(map(_packets, votes.values())) <= FEW:
        return RANDOM
    return UNKNOWN


def _packets(per_delta: dict[int, int]) -> int:
    return sum(per_delta.values())


def choose_constant(samples: Sequence[tuple[int, int]]) -> int | None:
    """The seqiv constant of (seq64, IV) samples, or None if they are not counter-derived.

    Candidates are ``IV xor (seq64 + d)`` for ``|d| <= SPAN``: every constant
    that puts some sample within SPAN of its own number. The best by
    ``_rank`` wins if under it at least two samples share a delta; a single
    sample gives its own constant (what the ranking gives it).
    """
    constants = {iv ^ seq64 for seq64, iv in samples}
    if len(constants) == 1:  # every packet at delta 0: provably the best, no ranking needed
        return constants.pop()
    votes: dict[int, dict[int, int]] = {}
    for seq64, iv in samples:
        for d in range(-SPAN, SPAN + 1):
            per_delta = votes.setdefault(iv ^ ((seq64 + d) & _MASK64), {})
            per_delta[d] = per_delta.get(d, 0) + 1
    best = max(votes, key=lambda c: rank(c, votes[c]), default=None)
    if best is None or max(votes[best].values()) < AGREE:
        return None
    return best
