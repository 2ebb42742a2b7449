"""The records every stage hands on: a captured frame, a packet's row, a finding.

In: nothing. Out: ``Frame`` (one capture record), ``SaKey`` (an SA's
identity), ``PacketRecord``, the
one-row-per-frame interchange format whose field names are the ``packets.csv``
columns (``PACKET_COLUMNS``), ``Finding`` (a row of findings.csv, with its typed evidence),
``PlotOutcome``, ``UnusedSa``. Raises nothing.

A ``PacketRecord`` field with ``NOT_A_COLUMN`` metadata (``cut``) is typed state
the receiver's steps hand on to what counts the records, never a column:
``PACKET_COLUMNS`` leaves it out.

``Frame`` is a NamedTuple rather than a frozen dataclass because one is
built per captured frame and tuple construction is several times cheaper.
``PacketRecord`` is a mutable slotted dataclass: the pipeline fills it
stage by stage and each check fills its own columns (house style rule 8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple, NewType

from espforensics.model.enums import (
    Cut,
    FindingKind,
    Proto,
    SeqAnomaly,
    Severity,
    UnusedReason,
    Verdict,
)

if TYPE_CHECKING:
    from espforensics.model.evidence import Evidence


Spi = NewType("Spi", int)


# Building a NamedTuple through its class runs a Python-level __new__; the
# per-frame path builds them with tuple.__new__ directly, about three times cheaper.
new_tuple = tuple.__new__


class Frame(NamedTuple):
    """One captured frame as read from the file."""

    number: int  # 1-based position in the capture, counting packet records only
    ts_ns: int  # capture timestamp, integer nanoseconds since the epoch
    caplen: int  # bytes captured (== len(data))
    wirelen: int  # bytes on the wire
    linktype: int  # LINKTYPE_* of the interface the frame was captured on
    data: bytes


class SaKey(NamedTuple):
    """One SA as the packets name it: SPI, outer source and outer destination (address texts).

    A tuple, so it hashes, compares and sorts as ``(spi, src, dst)``: the order of
    the per-SA tables. Built once per flow (``checks.context.Flow.key``). As a
    tuple subclass it is allocated with one slot more than a plain tuple (8 bytes):
    a store of one entry per SA may key by the plain tuple and hand out SaKeys.
    """

    spi: int
    src: str
    dst: str


class DecryptionSecrets(NamedTuple):
    """A pcapng Decryption Secrets Block (type and raw body)."""

    secrets_type: int
    data: bytes


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
    # The facts the detail states, typed (model/evidence.py). Not compared: the detail says them
    # too, and a summary.json read back restores only what report/facts.py and report/lead.py read
    # (results/stored.py); None where nothing built it.
    evidence: Evidence | None = field(default=None, compare=False)


# The metadata of a PacketRecord field that is state the stages hand on, not a column.
NOT_A_COLUMN: Mapping[str, bool] = MappingProxyType({"column": False})


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
    seq_anomaly: SeqAnomaly = SeqAnomaly.NONE
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
    # Not a column (``NOT_A_COLUMN``): what the capture showed of an ESP packet it cut, as
    # the receiver's steps found it (model/enums.py ``Cut``); None for every other frame.
    cut: Cut | None = field(default=None, metadata=NOT_A_COLUMN)

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


PACKET_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(PacketRecord) if f.metadata.get("column", True)
)


@dataclass(frozen=True, slots=True)
class PlotOutcome:
    """What became of one plot: the files written, or why it was skipped."""

    name: str
    files: tuple[str, ...]  # paths relative to the output folder, e.g. "plots/verdicts.png"
    skipped: str = ""  # non-empty: the reason no plot was drawn


# The SPI of a key file's wildcard entry (any SPI): no SPI on the wire, which is
# 0..0xffffffff (RFC 4303 s2.1 reserves 0, yet a published test vector sends it).
ANY_SPI = -1


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
