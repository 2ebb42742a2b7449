"""Typed evidence: the facts a finding's ``detail`` states in words, as values.

In: nothing. Out: one frozen dataclass per kind of evidence, and
``Evidence``, their closed union, which ``model.Finding.evidence`` holds.
Each check that makes a finding fills it next to the words (checks/*.py);
report/facts.py and report/lead.py read these fields, never the words, so rewording a
detail cannot silently change a likely cause. Raises nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from espforensics.model.enums import InnerChecksum, IvScheme, KeyFix


@dataclass(frozen=True, slots=True)
class Offsets:
    """Where an ESP header belongs and where it was found, from the outer IP header."""

    expected: int
    found: int


@dataclass(frozen=True, slots=True)
class Misplaced:
    """esp_misplaced: every (expected, found) offset pair, and how many decryption proved."""

    offsets: tuple[Offsets, ...]  # sorted
    proven: int


class LeakProof(StrEnum):
    """How a cleartext_leak is known."""

    DECRYPTED = "decrypted"  # the ICV verified: inner header bytes in clear (critical)
    LAYOUT = "layout"  # no ICV verified: a whole clear inner packet, then a trailer and ICV
    POSSIBLE = "possible"  # bytes that parse as an IP header, no trailer: not proven (info)


@dataclass(frozen=True, slots=True)
class Leak:
    """cleartext_leak: how it is known, and the distinct leaked fields."""

    proof: LeakProof
    fields: tuple[str, ...]  # sorted, as the detail lists them


@dataclass(frozen=True, slots=True)
class IvUse:
    """One use of a reused IV: the frame and its 64-bit sequence number."""

    frame: int
    seq64: int


@dataclass(frozen=True, slots=True)
class IvReuse:
    """iv_reuse of one IV: the uses the detail names (first six; ``count`` has all)."""

    iv: int
    iv_len: int
    uses: tuple[IvUse, ...]
    ciphertext_xor: bytes  # of the first two uses' leading bytes (b"": one use in the window)
    plaintext_xor: bytes | None  # the same of their plaintexts, None where not decrypted


@dataclass(frozen=True, slots=True)
class IvReuseUnproven:
    """iv_reuse, possible: IVs matching an older one in 64 of ``bits`` bits."""

    ivs: int
    bits: int
    window: int  # packets the evidence window holds


@dataclass(frozen=True, slots=True)
class IvReuseMore:
    """iv_reuse: reused IVs of a key group beyond those itemised."""

    ivs: int


@dataclass(frozen=True, slots=True)
class SharedKey:
    """shared_key: the SPIs of the SAs that share one key, in key-file order."""

    spis: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IvConstant:
    """iv_derivation: one IV on ``repeated`` of ``packets`` packets."""

    iv: int
    repeated: int
    packets: int


@dataclass(frozen=True, slots=True)
class IvPredictable:
    """iv_derivation: CBC IVs on the wire that follow a counter (seqiv or counter)."""

    scheme: IvScheme
    packets: int


@dataclass(frozen=True, slots=True)
class IvChained:
    """iv_derivation: ``chained`` of ``packets`` CBC IVs are the previous last block."""

    chained: int
    packets: int


@dataclass(frozen=True, slots=True)
class SeqDelta:
    """How many IVs were built from their sequence number plus ``delta``."""

    delta: int
    count: int


@dataclass(frozen=True, slots=True)
class IvDeviating:
    """iv_derivation: IVs not built from their own sequence number."""

    deviating: int
    packets: int
    deltas: tuple[SeqDelta, ...]  # the four most common, most common first
    unrelated: int  # IVs built from no nearby sequence number
    additive: bool  # the SA's counter is IV = seq64 + c


@dataclass(frozen=True, slots=True)
class SeqDuplicates:
    """seq_duplicate: repeated sequence numbers, and how many were byte-identical."""

    repeated: int
    identical: int
    # neither proven identical nor different: the capture cut one of the two (a snap
    # length) and the bytes it holds of both are equal, or were not compared
    unproven: int = 0

    @property
    def different(self) -> int:
        """Repeats carried by different packets (proven)."""
        return self.repeated - self.identical - self.unproven


@dataclass(frozen=True, slots=True)
class SeqRange:
    """Sequence numbers ``first`` to ``last``, both included."""

    first: int
    last: int


@dataclass(frozen=True, slots=True)
class SeqGaps:
    """seq_gap: numbers never seen, in how many gaps; the first five gaps."""

    missing: int
    gaps: int
    first: tuple[SeqRange, ...]


@dataclass(frozen=True, slots=True)
class SeqReorder:
    """seq_reorder: packets after a higher number, at most ``max_late`` below it."""

    reordered: int
    max_late: int


@dataclass(frozen=True, slots=True)
class EsnWrap:
    """esn_wrap: the frame whose sequence number crossed into high half ``high``."""

    frame: int
    high: int


@dataclass(frozen=True, slots=True)
class EsnEvent:
    """One packet whose ICV verified only with another high half than its place's."""

    frame: int
    placed: int  # the seq64 its place implies
    verified: int  # the seq64 whose high half the ICV verified with
    built_from: int | None  # the seq64 its IV encodes (None: no seqiv constant)


@dataclass(frozen=True, slots=True)
class EsnMismatch:
    """esn_mismatch: the packets the detail names (the first five; ``count`` has all)."""

    events: tuple[EsnEvent, ...]


@dataclass(frozen=True, slots=True)
class EsnBelow:
    """esn_mismatch: packets verified only with high halves below the key file's esn_hi."""

    highs: tuple[int, ...]  # sorted
    esn_hi: int


@dataclass(frozen=True, slots=True)
class KeyMismatch:
    """key_mismatch: ICVs failing with the key file; the variant that fixes them, if any."""

    verified: int
    packets: int
    failed: int
    cure: str  # the variant's words, e.g. "a 128-bit ICV (the key file says 96)"; "": none
    cured: int  # of the failed, how many verify with ``cure``
    key_unusable: bool  # the key's length fits no key of its algorithm
    fix: KeyFix | None = None  # the mistake ``cure`` undoes; None: no cure


@dataclass(frozen=True, slots=True)
class CipherMismatch:
    """key_mismatch: packets whose ICV verifies (or has none) and whose trailer is unsound."""

    verified: int
    packets: int
    garbled: int
    integrity_checked: bool


@dataclass(frozen=True, slots=True)
class Unsupported:
    """unsupported: an SA's packets not checked, and whether its ICV had no key."""

    packets: int
    suite: str
    icv_unkeyed: bool


@dataclass(frozen=True, slots=True)
class HmacKeySize:
    """hmac_key_size: the key's length and the one its RFC gives."""

    algorithm: str
    length: int
    wanted: int


@dataclass(frozen=True, slots=True)
class NoIntegrity:
    """no_integrity: packets of the SA, and how many decrypted to a sound trailer."""

    packets: int
    sound: int


@dataclass(frozen=True, slots=True)
class ReservedSpi:
    """reserved_spi: the SPI (0, or 1..255: RFC 4303 s2.1) and the packets carrying it."""

    spi: int
    packets: int


@dataclass(frozen=True, slots=True)
class BadChecksums:
    """inner_checksum: packets whose inner checksum is bad (or partial), the first's words."""

    status: InnerChecksum
    first: str


@dataclass(frozen=True, slots=True)
class NextHeaderMismatch:
    """next_header_mismatch: the first packet's words (next header, what the payload is)."""

    first: str


Evidence = (
    Misplaced
    | Leak
    | IvReuse
    | IvReuseUnproven
    | IvReuseMore
    | SharedKey
    | IvConstant
    | IvPredictable
    | IvChained
    | IvDeviating
    | SeqDuplicates
    | SeqGaps
    | SeqReorder
    | EsnWrap
    | EsnMismatch
    | EsnBelow
    | KeyMismatch
    | CipherMismatch
    | Unsupported
    | HmacKeySize
    | NoIntegrity
    | BadChecksums
    | NextHeaderMismatch
    | ReservedSpi
)
