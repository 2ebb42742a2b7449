"""What a run saw of each ESP packet, for the checks to declare what they examined.

In: a verdict (the ``verdict`` column) and what the run knows of its SA
(``SaFacts``: was a key given, did one of its packets verify, which
algorithm). Out: ``seen(verdict, facts) -> Seen``, the facts a check's
``coverage(seen)`` needs to say whether it examined such a packet, and if
not, why. Raises nothing; pure.

``SEEN`` is the one table from verdict to what was seen: adding a verdict
is one line here, and every check's coverage follows. It is keyed by the
verdict's string so that verdicts other stages add (``decrypted_no_icv``,
``authentic_not_decrypted``) have their line before the enum has them.

A ``truncated`` packet the capture cut (a snap length) was read by its
captured bytes alone, as much as they showed: ``cut_kind(rec)`` tells from
its record's ``cut`` (set by the receiver's steps) which of ``CUT_UNREAD``,
``CUT_READ`` or ``CUT_FOUND`` it is
(the per-SA counts of summary.json ``cut``, ``cut_read``, ``cut_found``),
and ``SEEN`` has a line for each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from espforensics.keys.sa import NULL_CIPHER, suite_checks_icv
from espforensics.model.enums import Cut, Verdict
from espforensics.model.records import PacketRecord

# Why a check did not examine a packet: each reads after a count,
# "325 without a key", in the reports, summary.json and KTAP.
NO_KEY = "without a key"
UNSUPPORTED = "of an algorithm this version does not decrypt"
TRUNCATED = "cut short by the capture"
SHORT = "too short to be ESP, though whole in the capture"
ICV_FAILS = "whose ICV fails under a key that verifies others"
NOT_DECRYPTED = "not decrypted"
NOT_VERIFIED = "under a key that verifies none of them"
NO_IV = "of an algorithm without IV (ecb(cipher_null))"
# without a key, an SA whose every packet the IV checks got was clear from its ESP header on
CLEAR_NO_IV = "clear from the ESP header on, no IV to read (NULL encryption, or a leak)"
CLEAR_BY_DESIGN = "of an algorithm that does not encrypt (GMAC, NULL)"
NO_SPI = "with fewer than 4 bytes of ESP (no SPI)"  # cut there, or whole and that short
NO_ICV_UNSOUND = "decrypted to no sound trailer, with no ICV to check"
NO_ICV = "decrypted with no ICV to check"  # for a check that needs the ICV verified
UNKNOWN_VERDICT = "of a verdict this version does not know"

# How the ``detail`` of a packet the capture cut begins (analyzer/crypto.py cut_short:
# "captured 42 of 8960 ESP bytes"), and what it says when its header did not count
# (checks/context.py header_doubt). Words only: ``rec.cut`` holds the fact.
CUT_DETAIL = "captured {} of {} ESP bytes"
NOT_COUNTED = "its header not counted"

# What a packet the capture cut showed, as keys of SEEN: its header not shown to be
# where it is read (nothing examined it), shown there (the placement search, sequence
# and IV checks read it), or found later by layout (its clear bytes read as a leak too).
CUT_UNREAD = "truncated: cut, its header not counted"
CUT_READ = "truncated: cut, its header read"
CUT_FOUND = "truncated: cut, its header found later"


@dataclass(frozen=True, slots=True)
class Seen:
    """What the run had of a packet of one verdict."""

    keyed: bool  # a key for its SA was given (and tried on it)
    whole: bool  # a whole ESP packet was captured (not cut, nor too short to be one)
    decrypted: bool  # the checks saw its plaintext
    verified: bool  # its ICV verified (RFC 4303 s3.4.4)
    evidence: bool  # its clear SPI, sequence number and IV count (not a failed ICV)
    why: str  # why it was not decrypted or verified ("" when it was)
    algorithm: str = ""  # the SA's, "" without a key
    cut: bool = False  # the capture cut it (a snap length): read by its captured bytes alone
    found: bool = False  # cut, its ESP header found later by layout (checks/placement.py)
    clear: bool = False  # keyless, of an SA whose packets were clear from the header on: no IV


# verdict -> what was seen, for a packet of an SA whose key verified others.
# keyed whole  decrypted verified evidence why
SEEN: dict[str, Seen] = {
    "ok": Seen(True, True, True, True, True, ""),
    "bad_trailer": Seen(True, True, True, True, True, ""),
    "esn_mismatch": Seen(True, True, True, True, True, ""),
    "esp_misplaced": Seen(True, True, True, True, True, ""),
    "auth_fail": Seen(True, True, False, False, False, ICV_FAILS),
    "unknown_sa": Seen(False, True, False, False, True, NO_KEY),
    "unsupported": Seen(True, True, False, False, True, UNSUPPORTED),
    "truncated": Seen(True, False, False, False, True, TRUNCATED),
    # whole, yet no whole ESP packet: at most its SPI and sequence number, which the
    # sequence check counts (no false gap), but no check is said to have examined it
    "short": Seen(True, False, False, False, False, SHORT),
    "decrypted_no_icv": Seen(True, True, True, False, True, ""),
    "authentic_not_decrypted": Seen(True, True, False, True, True, UNSUPPORTED),
    # "truncated" above: what cut_kind does not tell apart (a summary.json without the counts)
    CUT_UNREAD: Seen(True, False, False, False, False, TRUNCATED, cut=True),
    CUT_READ: Seen(True, False, False, False, True, TRUNCATED, cut=True),
    CUT_FOUND: Seen(True, False, False, False, True, TRUNCATED, cut=True, found=True),
}
_UNKNOWN = Seen(False, False, False, False, False, UNKNOWN_VERDICT)


@dataclass(frozen=True, slots=True)
class SaFacts:
    """What the run knows of one SA, from its row in the summary."""

    algorithm: str  # "" without a key
    proven: bool  # a packet of the SA verified or decrypted: its key is the right one
    # without a key, every packet of the SA that the IV checks got was clear from its ESP
    # header on, so none had an IV to read (its ``iv_scheme`` is ``none``)
    clear: bool = False


def proven(verdicts: dict[str, int], algorithm: str) -> bool:
    """Did a packet of these verdicts verify or decrypt at the expected offset?

    ``esp_misplaced`` does not count: without a proven key its header was
    found by layout only (checks/placement.py); nor does ``bad_trailer``
    under an SA with no ICV to check (what proves its key then?).
    """
    return any(
        n and v != "esp_misplaced" and (s.decrypted or s.verified)
        for v, n in verdicts.items()
        if (s := seen(v, SaFacts(algorithm, True))) is not None
    )


@lru_cache(maxsize=4096)  # a few verdicts x algorithms, asked per SA and verdict (6 us uncached)
def seen(verdict: str, facts: SaFacts) -> Seen:
    """What was seen of a packet of ``verdict`` in an SA of ``facts``."""
    s = SEEN.get(verdict)
    if s is None:
        return replace(_UNKNOWN, algorithm=facts.algorithm)
    if not facts.algorithm:  # keyless: esp_misplaced found by layout, unproven
        # Too short, or cut by the capture: no key would have opened it either.
        why = s.why if s.cut or s.why == SHORT else NO_KEY
        s = replace(s, keyed=False, decrypted=False, verified=False, why=why, clear=facts.clear)
    elif verdict == "bad_trailer" and not suite_checks_icv(facts.algorithm):
        # bad_trailer is "the ICV verifies, the trailer does not" (docs/outputs.md):
        # with no ICV checked, an unsound trailer proves neither key nor packet.
        s = replace(s, decrypted=False, verified=False, evidence=True, why=NO_ICV_UNSOUND)
    elif not facts.proven and s.why in ("", ICV_FAILS):
        # A key that verified nothing proves nothing (checks/context.py
        # header_is_evidence): its failures are headers as good as keyless ones.
        s = replace(s, decrypted=False, verified=False, evidence=True, why=NOT_VERIFIED)
    return replace(s, algorithm=facts.algorithm)


def cut_kind(rec: PacketRecord) -> str | None:
    """What the capture showed of a packet it cut: a key of SEEN; None when it did not cut it.

    The receiver's steps set ``rec.cut`` (model/enums.py ``Cut``): ``CUT_FOUND``,
    its ESP header found later by layout; ``CUT_UNREAD``, the capture did not
    show its header to be where it is read (checks/context.py ``header_doubt``);
    else ``CUT_READ``. The steady lane takes no packet the capture cut: its
    rows are never cut.
    """
    if rec.verdict is not Verdict.TRUNCATED or rec.cut is None:
        return None  # not an ESP packet read after its cut (a header cut short, a fragment)
    return _CUT_KINDS[rec.cut]


_CUT_KINDS = {Cut.UNREAD: CUT_UNREAD, Cut.READ: CUT_READ, Cut.FOUND: CUT_FOUND}


def of_ivs(seen: Seen) -> str | None:
    """The IV checks' coverage (iv_reuse, iv_derivation): they examine packets whose clear
    IV is evidence (keyless ones too, taken as AEAD-shaped), but an SA's without IV:
    NULL's, and without a key those of an SA whose packets were all clear from the ESP
    header on (``PacketContext.clear_from_header``)."""
    if seen.algorithm.split(" + ")[0] == NULL_CIPHER:
        return NO_IV
    if not seen.evidence:
        return seen.why
    return CLEAR_NO_IV if seen.clear else None
