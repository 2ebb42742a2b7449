"""The enums every stage shares; their values are the strings written to the tables.

In: nothing. Out: ``Verdict`` (what became of a frame), ``Proto``, ``FindingKind``,
``Severity`` and its rank, ``InnerChecksum``, ``IvScheme``, ``Unchecked``,
``UnusedReason``, ``SeqAnomaly``, ``Cut``, ``KeyFix``. Raises nothing.
"""

from __future__ import annotations

from enum import Enum, StrEnum


class Verdict(StrEnum):
    """What became of one frame; the value is written to ``verdict``."""

    OK = "ok"
    AUTH_FAIL = "auth_fail"
    BAD_TRAILER = "bad_trailer"
    UNKNOWN_SA = "unknown_sa"
    TRUNCATED = "truncated"  # cut by the capture (caplen < len) before its end
    # Whole in the capture, but shorter than an ESP packet can be (RFC 4303 s2): header,
    # IV, pad length and next header, ICV; with 4 bytes or more its SPI is named.
    SHORT = "short"
    NOT_ESP = "not_esp"
    UNDECODABLE = "undecodable"
    FRAGMENT = "fragment"
    ESP_MISPLACED = "esp_misplaced"
    ESN_MISMATCH = "esn_mismatch"  # ICV verifies only with a high half its place rules out
    UNSUPPORTED = "unsupported"  # the SA's key was given, its algorithm is not decrypted yet
    # Decrypted with a sound trailer and inner header, but no ICV was checked: the SA has
    # none (RFC 4303 s3.2) or none this version can check (no integrity key given).
    DECRYPTED_NO_ICV = "decrypted_no_icv"
    # The ICV verified (RFC 4303 s3.4.4: checked before decryption); the cipher is not opened.
    AUTHENTIC_NOT_DECRYPTED = "authentic_not_decrypted"
    # Outside what --spi / --frames select: not analyzed, still a row (its SPI and sequence
    # number when the frame got that far).
    NOT_SELECTED = "not_selected"


class SeqAnomaly(StrEnum):
    """What the sequence check saw of a packet's number; the value is written to ``seq_anomaly``."""

    NONE = ""  # nothing: a number higher than every one before (or not examined)
    DUPLICATE = "duplicate"  # a number seen before, the bytes not shown to be the same
    DUPLICATE_IDENTICAL = "duplicate-identical"  # a number seen before, a byte-identical copy
    REORDERED = "reordered"  # a number lower than one seen before, not seen itself

    @property
    def duplicate(self) -> bool:
        """A number seen before (a copy or not)?"""
        return self in (SeqAnomaly.DUPLICATE, SeqAnomaly.DUPLICATE_IDENTICAL)


class Cut(Enum):
    """What the capture showed of an ESP packet it cut (a snap length): read by its bytes alone.

    Set by the receiver's steps that know it (analyzer/crypto.py ``cut_short``,
    analyzer/placement.py); checks/coverage.py ``cut_kind`` reads it. No column.
    """

    UNREAD = 1  # its header not shown to be where it is read (``Receiving.header_doubt``)
    READ = 2  # shown there: the placement search, sequence and IV checks read it
    FOUND = 3  # found later by layout (analyzer/placement.py): its clear bytes read too


class KeyFix(Enum):
    """The usual key-file mistake a key doctor's variant undoes (checks/keys.py ``variants``)."""

    LEADING_ZERO = 1  # a 00 byte dropped from the front of the key
    ICV_LENGTH = 2  # another ICV length
    ESN_OFF = 3  # ESN off, the key file says on
    ESN_START = 4  # ESN on with another high half at the start
    SALT_FIRST = 5  # the salt at the start of the key material, not its end
    OTHER_DIRECTION = 6  # the key given for another SA: the directions' keys swapped


class FindingKind(StrEnum):
    """What a finding is about; the value is written to ``findings.csv``."""

    ESP_MISPLACED = "esp_misplaced"
    CLEARTEXT_LEAK = "cleartext_leak"
    IV_REUSE = "iv_reuse"
    IV_DERIVATION = "iv_derivation"
    SHARED_KEY = "shared_key"
    SEQ_DUPLICATE = "seq_duplicate"
    SEQ_GAP = "seq_gap"
    SEQ_REORDER = "seq_reorder"
    ESN_WRAP = "esn_wrap"
    ESN_MISMATCH = "esn_mismatch"
    KEY_MISMATCH = "key_mismatch"
    UNSUPPORTED = "unsupported"
    HMAC_KEY_SIZE = "hmac_key_size"  # an HMAC key not of the length its RFC gives
    NO_INTEGRITY = "no_integrity"  # an SA whose ICVs are absent or not checked
    INNER_CHECKSUM = "inner_checksum"  # a decrypted packet's own checksum does not verify
    # A decrypted payload that is provably not what its next header names
    NEXT_HEADER_MISMATCH = "next_header_mismatch"
    RESERVED_SPI = "reserved_spi"  # ESP on the wire with an SPI RFC 4303 s2.1 reserves


class InnerChecksum(StrEnum):
    """The inner packet's checksums, as verified; the value is written to ``inner_checksum``."""

    OK = "ok"  # every checksum of the inner packet verifies
    BAD = "bad"  # one does not verify: damaged before encryption
    PARTIAL = "partial"  # the pseudo-header sum alone (CHECKSUM_PARTIAL, left for offload)
    NONE = "none"  # nothing to verify: UDP checksum 0 (RFC 768), a dummy packet
    NOT_CHECKED = "not_checked"  # could not be verified; ``detail`` says why


class IvScheme(StrEnum):
    """How an SA's sender builds its explicit IVs; the value is written to ``iv_scheme``.

    docs/checks.md ("IV schemes") says how each is recognised and from how many packets.
    """

    SEQIV = "seqiv"  # IV = seq64 xor c (Linux's seqiv)
    COUNTER = "counter"  # IV = seq64 + c mod 2^64 (an additive counter)
    ECHAINIV = "echainiv"  # CBC: Linux's echainiv, read back with the SA's key
    CHAINED = "chained"  # CBC: IV = the previous packet's last ciphertext block
    RANDOM = "random"  # no structure over at least 16 distinct IVs
    CONSTANT = "constant"  # one IV on most packets
    UNKNOWN = "unknown"  # too few packets, or IVs that follow no one scheme
    NONE = "none"  # the algorithm has no IV (NULL encryption)


class Severity(StrEnum):
    """How bad a finding is (documented in docs/checks.md)."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"


SEVERITY_RANK = {
    Severity.INFO: 0,
    Severity.LOW: 1,
    Severity.MEDIUM: 2,
    Severity.HIGH: 3,
    Severity.CRITICAL: 4,
}


class Unchecked(StrEnum):
    """``--unchecked``: what ESP packets no key verified do to the exit code (results/gate.py).

    Here, not in results/gate.py, so that the command line declares the option without
    loading what results/gate.py counts with (start-up, docs/performance.md)."""

    SKIP = "skip"  # exit 4 when no ESP packet was verified
    FAIL = "fail"  # exit 4 also when any ESP packet went unverified (a strict gate)
    IGNORE = "ignore"  # exit as the findings say


class Proto(StrEnum):
    """How the frame carried ESP, if it did."""

    ESP = "esp"
    ESP_UDP = "esp-udp"
    OTHER = "other"


class UnusedReason(StrEnum):
    """Why a key file's SA likely saw no packet (checks/keys.py says how it is told)."""

    OTHER_DIRECTION = "other_direction"  # its SPI, or ESP, only from its dst to its src
    OTHER_PORT = "other_port"  # UDP payloads on another port start with its SPI
    OTHER_ADDRESSES = "other_addresses"  # its SPI between other addresses
    NO_SUCH_SPI = "no_such_spi"  # its SPI nowhere in the capture
    NOT_CLAIMED = "not_claimed"  # a wildcard entry: every packet had an SA of its own SPI
