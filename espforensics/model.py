"""Value types and records shared by every stage; no logic, no imports of ours.

In: nothing. Out: ``Frame`` (one capture record), ``Verdict`` and ``Proto``
(enums whose values are the strings written to the tables), and
``PacketRecord``, the one-row-per-frame interchange format whose field
names are the ``packets.csv`` columns. Raises nothing.

``Frame`` is a NamedTuple rather than a frozen dataclass because one is
built per captured frame and tuple construction is several times cheaper.
``PacketRecord`` is a mutable slotted dataclass: the pipeline fills it
stage by stage and each check fills its own columns (house style rule 8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple, NewType

if TYPE_CHECKING:  # evidence.py imports this module's enums
    from espforensics.evidence import Evidence

Spi = NewType("Spi", int)

# Building a NamedTuple through its class runs a Python-level __new__; the
# per-frame path builds them with tuple.__new__ directly (0.13 instead of 0.38 us).
new_tuple = tuple.__new__


class Frame(NamedTuple):
    """One captured frame as read from the file."""

    number: int  # 1-based position in the capture, counting packet records only
    ts_ns: int  # capture timestamp, integer nanoseconds since the epoch
    caplen: int  # bytes captured (== len(data))
    wirelen: int  # bytes on the wire
    linktype: int  # LINKTYPE_* of the interface the frame was captured on
    data: bytes


class DecryptionSecrets(NamedTuple):
    """A pcapng Decryption Secrets Block (type and raw body)."""

    secrets_type: int
    data: bytes


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


@dataclass(frozen=True, slots=True)
class Selection:
    """What a run analyzes (``--spi``, ``--frames``); every other frame is a row of its
    own with verdict ``not_selected``. Empty ``spis`` and no ``frames``: everything."""

    spis: frozenset[int] = frozenset()
    frames: tuple[int, int] | None = None  # first and last frame number, both included

    @property
    def everything(self) -> bool:
        return not self.spis and self.frames is None

    def frame(self, number: int) -> bool:
        """Is frame ``number`` selected (by ``frames``)?"""
        return self.frames is None or self.frames[0] <= number <= self.frames[1]

    def spi(self, spi: int) -> bool:
        """Is an ESP packet of ``spi`` selected (by ``spis``)?"""
        return not self.spis or spi in self.spis

    def words(self) -> str:
        """The selection as the command line said it: ``--spi 0x00001001 --frames 10-20``."""
        said = [f"--spi {spi:#010x}" for spi in sorted(self.spis)]
        if self.frames is not None:
            said.append(f"--frames {self.frames[0]}-{self.frames[1]}")
        return " ".join(said)


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


@dataclass(frozen=True, slots=True)
class Finding:
    """One row of ``findings.csv``."""

    kind: FindingKind
    severity: Severity
    spi: int | None
    frames: Sequence[int]  # every frame concerned, lowest first (frames.Frames: runs)
    count: int  # how many frames (or values) in all
    detail: str
    src: str = ""  # the SA's outer addresses, when the finding is about one SA
    dst: str = ""
    # The facts the detail states, typed (evidence.py). Not compared: the detail says them
    # too, and a summary.json read back restores only what report/facts.py and report/lead.py read
    # (results/stored.py); None where nothing built it.
    evidence: Evidence | None = field(default=None, compare=False)


class Proto(StrEnum):
    """How the frame carried ESP, if it did."""

    ESP = "esp"
    ESP_UDP = "esp-udp"
    OTHER = "other"


@dataclass(slots=True)
class PacketRecord:
    """One row of ``packets.csv``: everything known about one frame.

    ``None`` is an empty cell. Offsets count from the first byte of the
    outer IP header, the way tcpdump's ``ip[]``/``ip6[]`` count.
    """

    frame: int
    time: int  # capture timestamp, ns since the epoch (UTC), exactly as captured
    caplen: int
    len: int
    verdict: Verdict = Verdict.NOT_ESP
    proto: Proto = Proto.OTHER
    ip_version: int | None = None
    src: str = ""
    dst: str = ""
    udp_sport: int | None = None
    udp_dport: int | None = None
    spi: int | None = None
    algorithm: str = ""
    seq: int | None = None
    seq64: int | None = None
    seq_hi_verified: int | None = None  # ESN SAs: the high half the ICV verified with
    iv: str = ""
    esp_offset: int | None = None
    expected_offset: int | None = None
    esp_len: int | None = None
    fragments: int | None = None
    pad_len: int | None = None
    next_header: int | None = None
    payload_len: int | None = None
    inner_proto: str = ""
    inner_src: str = ""
    inner_dst: str = ""
    inner_sport: int | None = None
    inner_dport: int | None = None
    leaked: int | None = None
    leaked_hex: str = ""
    leaked_fields: str = ""
    iv_reused: bool | None = None
    iv_seq_delta: int | None = None
    seq_anomaly: str = ""
    detail: str = ""
    inner_checksum: str = ""  # an InnerChecksum value; empty: no verified plaintext
    tfc_len: int | None = None  # TFC padding after the inner IP packet (RFC 4303 s2.7)
    # Which ESP layer of the frame the row describes: 1 the outermost (and every frame
    # without ESP), 2 the ESP packet its plaintext carries (ESP inside ESP), and so on.
    layer: int = 1
    ipcomp_cpi: int | None = None  # the payload was IPComp (RFC 3173): its CPI
    ipcomp_len: int | None = None  # and the bytes its DEFLATE data inflated to (RFC 2394)
    # The encapsulations before the outer IP header, as libpcap's filter keywords (decode/
    # link.py): "vlan", "vlan vlan", "pppoes", "mpls", ...; empty when IP follows the link.
    carriers: str = ""
    # An ICMP or ICMPv6 error quoting an ESP packet (decode/icmp.py): the quoted packet's
    # SPI, sequence number (empty when the quote ends before it) and addresses. The frame
    # itself is no ESP packet (verdict not_esp, spi and seq empty): it names one.
    quoted_spi: int | None = None
    quoted_seq: int | None = None
    quoted_src: str = ""
    quoted_dst: str = ""
    # What a Linux receiver holding the key file's states does with this ESP packet
    # (receiver/verdict.py RxVerdict: accept, replay, too_old, icv_fail, no_state, ...);
    # empty for a frame without ESP, or when no key file was given.
    receiver: str = ""

    @property
    def misplaced(self) -> bool:
        """Was its ESP header found later than its outer headers put it (checks/placement.py)?

        ``esp_misplaced``, or a packet the capture cut whose header was found
        there by layout: its verdict stays ``truncated``, nothing verified it.
        """
        return self.verdict is Verdict.ESP_MISPLACED or (
            self.esp_offset is not None
            and self.expected_offset is not None
            and self.esp_offset > self.expected_offset
        )


PACKET_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(PacketRecord))
# packets.csv by default only up to this many frames: 2M frames made a 433 MB CSV beside
# a Parquet file that holds the same rows; past it the CSV is dropped (``--csv`` keeps it).
# Here, not in tables/packets.py, for ``analyze --help``, which names it without loading pyarrow.
CSV_ROWS = 1_000_000


@dataclass(frozen=True, slots=True)
class PlotOutcome:
    """What became of one plot: the files written, or why it was skipped."""

    name: str
    files: tuple[str, ...]  # paths relative to the output folder, e.g. "plots/verdicts.png"
    skipped: str = ""  # non-empty: the reason no plot was drawn


# The SPI of a key file's wildcard entry (any SPI): no SPI on the wire, which is
# 0..0xffffffff (RFC 4303 s2.1 reserves 0, yet a published test vector sends it).
ANY_SPI = -1


class UnusedReason(StrEnum):
    """Why a key file's SA likely saw no packet (checks/keys.py says how it is told)."""

    OTHER_DIRECTION = "other_direction"  # its SPI, or ESP, only from its dst to its src
    OTHER_PORT = "other_port"  # UDP payloads on another port start with its SPI
    OTHER_ADDRESSES = "other_addresses"  # its SPI between other addresses
    NO_SUCH_SPI = "no_such_spi"  # its SPI nowhere in the capture
    NOT_CLAIMED = "not_claimed"  # a wildcard entry: every packet had an SA of its own SPI


@dataclass(frozen=True, slots=True)
class UnusedSa:
    """A key file's SA that no packet of the capture used, and the likely reason.

    ``spi`` ``ANY_SPI`` (-1) is a wildcard entry (any SPI); ``src``/``dst`` "" mean any
    address; ``port`` is the UDP port to give ``--natt-port`` for
    ``other_port``; ``packets`` how many packets the reason rests on.
    """

    spi: int
    src: str
    dst: str
    origin: str
    reason: UnusedReason
    packets: int
    detail: str
    port: int | None = None
