"""Linux's echainiv, the CBC IV generator, read back with the SA's key.

In: a CBC SA's IVs decrypted as blocks (``EncAuthContext.iv_words``), with
their sequence numbers. Out: ``pack`` (a row of 64-bit words as one int),
``choose_multipliers`` (the SA's echainiv multipliers, as the packed
inverses the check decodes with, or None) and ``built_from`` (the sequence
number a decrypted IV encodes). Raises nothing.

crypto/echainiv.c writes ``(salt_i | 1) * seq64`` (mod 2^64, little
endian) into each 8-byte word of the IV block and encrypts the block with
the SA's key: so each word, times the inverse of its odd multiplier, gives
back the sequence number the IV was built from, exactly as ``IV xor c``
does for seqiv. Measured on the real linux-6.1 ``cbc(aes)`` capture: one
multiplier pair per SA explains all 525 IVs. The salt is secret, so the
multipliers are found from the packets: every odd ``seq64 + d``
(``|d| <= SPAN``) of a sample proposes one, and the one under which the
samples' deltas are most concentrated wins (``_rank``, as for seqiv).
"""

from __future__ import annotations

from collections.abc import Sequence

from espforensics.checks.ivmath import AGREE, SPAN, rank, signed_delta

_M = 1 << 64
_MASK = _M - 1
_TOP = 8  # candidates proposed by the most samples, each then scored on every sample


def pack(words: Sequence[int]) -> int:
    """A row of 64-bit words as one int, the first word lowest."""
    return sum(w << (64 * i) for i, w in enumerate(words))


def _words(value: int, n: int) -> list[int]:
    return [(value >> (64 * i)) & _MASK for i in range(n)]


def built_from(iv: int, inverses: int, n: int) -> int | None:
    """The sequence number (mod 2^64) a decrypted IV encodes; None if its words disagree."""
    numbers = {w * m & _MASK for w, m in zip(_words(iv, n), _words(inverses, n), strict=True)}
    return numbers.pop() if len(numbers) == 1 else None


def _proposal(iv: int, seq: int, n: int) -> int | None:
    """The packed inverse multipliers under which ``iv`` was built from ``seq`` (odd)."""
    inv_seq = pow(seq, -1, _M)
    inverses = []
    for w in _words(iv, n):
        multiplier = w * inv_seq & _MASK
        if not multiplier & 1:  # echainiv's multipliers are odd (salt | 1)
            return None
        inverses.append(pow(multiplier, -1, _M))
    return pack(inverses)


def score(inverses: int, samples: Sequence[tuple[int, int]], n: int) -> dict[int, int]:
    """Samples per delta within SPAN under ``inverses``."""
    per_delta: dict[int, int] = {}
    for seq64, iv in samples:
        number = built_from(iv, inverses, n)
        if number is not None:
            d = signed_delta(number, seq64)
            if abs(d) <= SPAN:
                per_delta[d] = per_delta.get(d, 0) + 1
    return per_delta


def choose_multipliers(samples: Sequence[tuple[int, int]], n: int) -> int | None:
    """The packed inverse multipliers of (seq64, packed IV words) samples, or None.

    None when no candidate puts ``AGREE`` samples at one delta: the IVs are
    not echainiv's (or no sample has an odd number near it to propose one).
    """
    proposed: dict[int, int] = {}
    for seq64, iv in samples:
        for d in range(-SPAN, SPAN + 1):
            seq = (seq64 + d) & _MASK
            if seq & 1:
                c = _proposal(iv, seq, n)
                if c is not None:
                    proposed[c] = proposed.get(c, 0) + 1
    top = sorted(proposed, key=lambda c: (-proposed[c], c))[:_TOP]
    scored = {c: found for c in top if (found := score(c, samples, n))}
    best = max(scored, key=lambda c: rank(c, scored[c]), default=None)
    if best is None:
        return None
    if len(samples) > 1 and max(scored[best].values(), default=0) < AGREE:
        return None
    return best
