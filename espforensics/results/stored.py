"""The evidence of a finding read back from a stored ``summary.json``.

In: a finding's kind and ``detail`` as ``summary.json`` stores them. Out:
``stored_evidence(kind, detail, count)``, the typed evidence (model/evidence.py) of the
kinds report/facts.py, report/lead.py and rewrite/comments.py read (iv_reuse,
iv_derivation, seq_duplicate, esn_wrap, esn_mismatch, key_mismatch), or
None for the others; ``stored_clear``, a misplaced layout's clear bytes from
their hex text. Raises nothing (``stored_clear``: ``ValueError`` for a
cell that is not hex).

``summary.json`` is a public format that holds a finding's words, not its
evidence, and must not change by a byte; ``report`` on an
output folder and ``batch`` reread it. This is the one place that reads
words back, and only there: a run's own findings carry the evidence their
check built. tests/results/test_evidence.py checks that what this module reads
from every finding's words equals the evidence its check built.
"""

from __future__ import annotations

import re

from espforensics.checks.keys import fix_named
from espforensics.model.enums import FindingKind
from espforensics.model.evidence import (
    EsnEvent,
    EsnMismatch,
    EsnWrap,
    Evidence,
    IvChained,
    IvDeviating,
    IvReuse,
    IvUse,
    KeyMismatch,
    SeqDelta,
    SeqDuplicates,
)

# checks/iv_reuse.py IvReuseCheck._finding
_IV = re.compile(r"^IV ([0-9a-f]+) used \d+ times: ")
_USE = re.compile(r"frame (\d+) seq (\d+)")
_CT = re.compile(r"; ciphertext XOR ([0-9a-f]*)")
_PT = re.compile(r"; plaintext XOR ([0-9a-f]*)")
# checks/iv_sa.py chained_finding and deviating_finding
_CHAINED = re.compile(r": (\d+) of (\d+) CBC IVs are chained")
_DEVIATING = re.compile(r": (\d+) of (\d+) IVs not built from their own sequence number")
_DELTA = re.compile(r"seq([+-]\d+) x(\d+)")
_UNRELATED = re.compile(r"no nearby seq x(\d+)")
_ADDITIVE = "; the SA's IVs are an additive counter"
# checks/sequence.py
_REPEATED = re.compile(r": (\d+) repeated sequence numbers \((\d+) byte-identical")
_UNPROVEN = re.compile(r", (\d+) (?:identical in the [\d to]+ bytes captured|not compared):")
_WRAP = re.compile(r"crossed into high half 0x([0-9a-f]+) at frame (\d+)$")
# checks/esn_mismatch.py
_HL = r"0x([0-9a-f]+):([0-9a-f]{8})"
_EVENT = re.compile(
    rf"frame (\d+) \(seq {_HL}\) verifies only with ESN high half 0x([0-9a-f]+), "
    rf"where its place in the sequence implies 0x[0-9a-f]+: "
    rf"(?:its IV encodes seq {_HL}|its SA's IVs follow no seqiv constant)"
)
# checks/keys.py _mismatch
_VERIFY = re.compile(r": (\d+) of (\d+) packets verify with the given key")
_CURE = re.compile(r"; (?:all|(\d+) of the) (\d+) that fail verify with (.+)$")
_UNUSABLE = "; the key is "


def stored_clear(clear_hex: str) -> tuple[int | None, ...]:
    """A misplaced layout's clear bytes from summary.json's ``clear_hex``: "45 00 .. .."
    (a byte that varies is ".."); ``ValueError`` for a cell that is neither."""
    return tuple(None if cell == ".." else int(cell, 16) for cell in clear_hex.split())


def stored_evidence(kind: FindingKind, detail: str, count: int) -> Evidence | None:
    """The evidence ``detail`` states, for the kinds the likely causes and the lead read."""
    if kind is FindingKind.IV_REUSE:
        return _iv_reuse(detail)
    if kind is FindingKind.IV_DERIVATION:
        return _iv_derivation(detail)
    if kind is FindingKind.SEQ_DUPLICATE:
        m = _REPEATED.search(detail)
        unproven = sum(int(n) for n in _UNPROVEN.findall(detail))
        return None if m is None else SeqDuplicates(int(m[1]), int(m[2]), unproven)
    if kind is FindingKind.ESN_WRAP:
        m = _WRAP.search(detail)
        return None if m is None else EsnWrap(int(m[2]), int(m[1], 16))
    if kind is FindingKind.ESN_MISMATCH:
        return _esn(detail)
    if kind is FindingKind.KEY_MISMATCH:
        return _key(detail, count)
    return None


def _iv_reuse(detail: str) -> IvReuse | None:
    head = _IV.search(detail)
    if head is None:
        return None
    uses = tuple(IvUse(int(f), int(s)) for f, s in _USE.findall(detail))
    ct, pt = _CT.search(detail), _PT.search(detail)
    return IvReuse(
        int(head[1], 16),
        len(head[1]) // 2,
        uses,
        b"" if ct is None else bytes.fromhex(ct[1]),
        None if pt is None else bytes.fromhex(pt[1]),
    )


def _iv_derivation(detail: str) -> IvChained | IvDeviating | None:
    chained = _CHAINED.search(detail)
    if chained is not None:
        return IvChained(int(chained[1]), int(chained[2]))
    m = _DEVIATING.search(detail)
    if m is None:
        return None
    unrelated = _UNRELATED.search(detail)
    return IvDeviating(
        int(m[1]),
        int(m[2]),
        tuple(SeqDelta(int(d), int(n)) for d, n in _DELTA.findall(detail)),
        0 if unrelated is None else int(unrelated[1]),
        _ADDITIVE in detail,
    )


def _esn(detail: str) -> EsnMismatch | None:
    events = []
    for frame, hi, lo, used, b_hi, b_lo in _EVENT.findall(detail):
        low = int(lo, 16)
        built = None if not b_hi else int(b_hi, 16) << 32 | int(b_lo, 16)
        events.append(
            EsnEvent(int(frame), int(hi, 16) << 32 | low, int(used, 16) << 32 | low, built)
        )
    return EsnMismatch(tuple(events)) if events else None


def _key(detail: str, failed: int) -> KeyMismatch | None:
    m = _VERIFY.search(detail)
    if m is None:
        return None  # a cipher mismatch: nothing read back
    cure = _CURE.search(detail)
    if cure is None:
        return KeyMismatch(int(m[1]), int(m[2]), failed, "", 0, _UNUSABLE in detail)
    what = cure[3]
    return KeyMismatch(
        int(m[1]), int(m[2]), failed, what, int(cure[1] or failed), False, fix_named(what)
    )
