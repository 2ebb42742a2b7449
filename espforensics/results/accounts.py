"""What the summary counts per SA and per misplaced layout, as records stream past.

In: ``PacketRecord`` values and the steady lane's counts, fed by
``SummaryBuilder`` (results/builder.py). Out: ``SaAcc.summary`` gives an
SA's frozen ``SaSummary``, ``misplaced_layout`` a layout's
``MisplacedLayout`` (results/summary.py). Raises nothing.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field
from sys import intern
from typing import Any, NamedTuple

from espforensics.bounded.rare import Rare
from espforensics.checks.coverage import CUT_FOUND, CUT_READ, cut_kind
from espforensics.model.enums import InnerChecksum, SeqAnomaly, Verdict
from espforensics.model.records import PacketRecord, SaKey
from espforensics.results.summary import MisplacedLayout, SaMode, SaSummary

_VERDICT_ORDER: dict[str, int] = {v.value: i for i, v in enumerate(Verdict)}


_NO_COUNTS: Counter[Any] = Counter()  # read only: an SA's counts never made
# Read only: the empty maps of every SaSummary that counted none (an empty dict each was
# 64 bytes an SA at the end of a run of 200,000 SAs, docs/performance.md, "Many SAs at the
# end of the run"). A SaSummary is a value: nothing writes into its maps.
_NO_ROWS: dict[str, int] = {}


def _in_verdict_order(item: tuple[str, int]) -> int:
    return _VERDICT_ORDER[item[0]]  # a Verdict is the str of its value (StrEnum)


@dataclass(slots=True)
class SaAcc:
    """One SA's counts. What most SAs of a capture never count (other verdicts, anomalies,
    TFC padding, inner checksums, cut packets) are ``Rare`` fields (bounded/rare.py): a capture
    of many short-lived SAs keeps one of these per SA (128 bytes, 240 with plain fields).
    Its addresses are kept here, its SPI being the key it is found by (``SummaryBuilder``)."""

    src: str
    dst: str
    algorithm: str
    first_ns: int  # capture time, ns since the epoch
    last_ns: int
    first_seq64: int | None = None
    last_seq64: int | None = None
    packets: int = 0
    wire_bytes: int = 0
    # The first verdict seen; a Counter for any other verdict (most SAs of a scan have one
    # verdict, and a Counter of one entry is 160 bytes). Each packet counts one verdict, so
    # the first one's packets are the rest (``verdict_packets``).
    verdict: str = ""
    rare_fields: dict[str, Any] | None = None

    other_verdicts = Rare[Counter[str] | None](None)
    leaked = Rare(0)
    iv_reused = Rare(0)
    iv_deviating = Rare(0)
    duplicates = Rare(0)
    reordered = Rare(0)
    ip_payloads = Rare(0)  # verified packets whose next header is 4 or 41 (an inner IP packet)
    l4_payloads = Rare(0)  # verified packets with any other next header
    tfc_packets = Rare(0)
    tfc_bytes = Rare(0)
    # payload_len of padded packets, and inner_checksum values: made at their first count
    # (most SAs of a scan have neither; an empty Counter is 100 bytes)
    tfc_to = Rare[Counter[int] | None](None)
    checksums = Rare[Counter[str] | None](None)
    # truncated packets the capture cut; of them, whose header it showed where it is
    # read or found later; of those, found later (checks/coverage.py cut_kind)
    cut = Rare(0)
    cut_read = Rare(0)
    cut_found = Rare(0)

    def observe(self, rec: PacketRecord) -> None:
        self.packets += 1
        self.wire_bytes += rec.len
        self.last_ns = rec.time
        self.count_verdict(rec.verdict, 1)
        if rec.verdict is Verdict.TRUNCATED:
            self.count_cut(rec)
        if rec.seq64 is not None:
            if self.first_seq64 is None:
                self.first_seq64 = rec.seq64
            self.last_seq64 = rec.seq64
        if rec.leaked:  # each a Rare field: read and written only when it counts
            self.leaked += 1
        if rec.iv_reused:
            self.iv_reused += 1
        if rec.iv_seq_delta:
            self.iv_deviating += 1
        if rec.seq_anomaly:
            self.duplicates += rec.seq_anomaly.duplicate
            self.reordered += rec.seq_anomaly is SeqAnomaly.REORDERED
        if rec.next_header in (4, 41):
            self.ip_payloads += 1
        elif rec.next_header is not None and rec.next_header != 59:
            self.l4_payloads += 1
        if rec.tfc_len:
            self.tfc_packets += 1
            self.tfc_bytes += rec.tfc_len
            self.padded_to()[rec.payload_len or 0] += 1
        if rec.inner_checksum:
            self.checksum_counts()[rec.inner_checksum] += 1

    def count_cut(self, rec: PacketRecord) -> None:
        """Count a truncated packet by what the capture showed of it, if it cut it."""
        kind = cut_kind(rec)
        if kind is not None:
            self.cut += 1
            self.cut_read += kind in (CUT_READ, CUT_FOUND)
            self.cut_found += kind == CUT_FOUND

    @property
    def verdict_packets(self) -> int:
        """The packets of ``verdict``: every packet counted but those of another verdict."""
        others = self.other_verdicts
        return self.packets - (others.total() if others is not None else 0)

    def count_verdict(self, verdict: str, n: int) -> None:
        """``n`` more packets of ``verdict``, ``packets`` counting them already."""
        if verdict == self.verdict or not self.verdict:
            self.verdict = verdict
            return
        if self.other_verdicts is None:
            self.other_verdicts = Counter()
        self.other_verdicts[verdict] += n

    def verdicts(self) -> dict[str, int]:
        """Packets per verdict, in ``Verdict`` order, none of 0."""
        if self.other_verdicts is None:  # one verdict: most SAs of a scan
            # the verdict's text shared by every SA (sys.intern): a copy each was 60 bytes an SA
            return {intern(str(self.verdict)): self.verdict_packets} if self.verdict_packets else {}
        counts = Counter(self.other_verdicts)
        if self.verdict_packets:
            counts[self.verdict] += self.verdict_packets
        return {str(v): n for v, n in sorted(counts.items(), key=_in_verdict_order) if n}

    def padded_to(self) -> Counter[int]:
        """``tfc_to``, made on first use."""
        if self.tfc_to is None:
            self.tfc_to = Counter()
        return self.tfc_to

    def checksum_counts(self) -> Counter[str]:
        """``checksums``, made on first use."""
        if self.checksums is None:
            self.checksums = Counter()
        return self.checksums

    def mode_guess(self) -> SaMode:
        """RFC 4303 s3.1: tunnel mode carries IP packets (as do ipip/ip6tnl over transport)."""
        if self.ip_payloads and not self.l4_payloads:
            return SaMode.TUNNEL_GUESS
        if self.l4_payloads and not self.ip_payloads:
            return SaMode.TRANSPORT_GUESS
        return SaMode.MIXED_GUESS if self.ip_payloads else SaMode.UNKNOWN

    def summary(
        self,
        key: SaKey,
        missing: int,
        mode: SaMode,
        iv_scheme: str = "",
        icmp_quoted: int = 0,
        no_iv: int = 0,
    ) -> SaSummary:
        spi, src, dst = key
        # Most SAs count nothing rare (rare_fields None): every rare field reads its
        # default, and the padded-to and checksum maps are empty.
        tfc_to, checksums = self.tfc_to or _NO_COUNTS, self.checksums or _NO_COUNTS
        return SaSummary(
            spi,
            src,
            dst,
            self.algorithm,
            self.packets,
            self.verdicts(),
            self.first_seq64,
            self.last_seq64,
            self.first_ns,
            self.last_ns,
            self.wire_bytes,
            self.leaked,
            self.iv_reused,
            self.iv_deviating,
            self.duplicates,
            self.reordered,
            missing,
            mode or self.mode_guess(),
            self.tfc_packets,
            self.tfc_bytes,
            {str(k): n for k, n in sorted(tfc_to.items(), key=_most)[:PADDED_TO_KEPT]}
            if tfc_to
            else _NO_ROWS,
            {c.value: checksums[c.value] for c in InnerChecksum if checksums[c.value]}
            if checksums
            else _NO_ROWS,
            iv_scheme,
            icmp_quoted,
            cut=self.cut,
            cut_read=self.cut_read,
            cut_found=self.cut_found,
            no_iv=0 if self.algorithm else no_iv,  # a key's algorithm says whether it has IVs
        )


PADDED_TO_KEPT = 8  # padded-to lengths listed per SA, the most common first


def _most(item: tuple[int, int]) -> tuple[int, int]:
    return (-item[1], item[0])


_I64 = 2**63  # what an int64 column holds: 0 to _I64 - 1 here (-1 marks "none")


class FirstPackets:
    """The accumulators of SAs seen once, kept as columns (``SummaryBuilder``).

    A capture of many short-lived SAs (a scan, an archive of rekeyed SAs) has most
    SAs of one packet; their ``SaAcc`` after that packet holds only plain fields
    (``rare_fields`` None), its first and last time and seq64 equal. Kept here they
    are 40 bytes of columns a row, where the object, its time and its byte count as
    Python ints were 196 (200,000 SAs: docs/performance.md, "Many SAs, fifth step").
    ``add`` takes such an accumulator (None: it is not one, keep the object);
    ``acc`` gives back an equal one, for its SA's next packet or the summary's row.
    """

    __slots__ = ("_bytes", "_codes", "_ns", "_seq", "_values", "_where")

    def __init__(self) -> None:
        self._values: list[str] = []  # the texts (addresses, algorithms, verdicts) by code
        self._where: dict[object, int] = {}  # each text's code (see ``_code``)
        self._codes = array("I")  # per row: src, dst, algorithm and verdict's codes
        self._ns = array("q")  # the packet's time
        self._seq = array("q")  # its seq64, -1 for none
        self._bytes = array("q")  # its wire bytes

    def add(self, acc: SaAcc) -> int | None:
        """Keep ``acc`` as a row, if it is one packet's and nothing rare: its row, or None."""
        seq = acc.first_seq64
        if not (
            acc.packets == 1
            and acc.rare_fields is None
            and acc.first_ns == acc.last_ns
            and 0 <= acc.first_ns < _I64
            and seq == acc.last_seq64
            and (seq is None or 0 <= seq < _I64)
            and 0 <= acc.wire_bytes < _I64
        ):
            return None
        row = len(self._ns)
        self._codes.extend(map(self._code, (acc.src, acc.dst, acc.algorithm, acc.verdict)))
        self._ns.append(acc.first_ns)
        self._seq.append(-1 if seq is None else seq)
        self._bytes.append(acc.wire_bytes)
        return row

    def _code(self, text: str) -> int:
        """The code of ``text``: a plain str by itself (an address: one entry each, no
        tuple), any other by its type too (a ``Verdict`` equals the str of its value)."""
        key: object = text if type(text) is str else (type(text), text)
        code = self._where.get(key)
        if code is None:
            code = self._where[key] = len(self._values)
            self._values.append(text)
        return code

    def names(self, row: int) -> tuple[str, str]:
        """The row's SA's source and destination."""
        codes = self._codes
        return self._values[codes[4 * row]], self._values[codes[4 * row + 1]]

    def acc(self, row: int) -> SaAcc:
        """The accumulator ``add`` was given for ``row``: every field equal."""
        src, dst, algorithm, verdict = (self._values[c] for c in self._codes[4 * row : 4 * row + 4])
        seq, ns = self._seq[row], self._ns[row]  # each one int, as the packet's were
        made = SaAcc(src, dst, algorithm, ns, ns)
        made.first_seq64 = made.last_seq64 = None if seq < 0 else seq
        made.packets, made.wire_bytes = 1, self._bytes[row]
        made.verdict = verdict  # the very object: a Verdict, or ""
        return made


class LayoutKey(NamedTuple):
    """What makes two misplaced packets one layout (``MisplacedLayout``'s fields but its
    counts); sorted as a tuple, in this field order, for the summary's ``layouts``."""

    ip_version: int
    proto: str
    expected_offset: int
    clear_offset: int
    clear_prefix: str
    esp_offset: int
    spi: int
    carriers: str
    reassembled: bool


@dataclass(slots=True)
class LayoutAcc:
    """The clear bytes of one misplaced layout: the first packet's, and
    which positions another packet had different (or lacked)."""

    first: bytes
    packets: int = 1
    varies: set[int] = field(default_factory=set)

    def observe(self, clear: bytes) -> None:
        self.packets += 1
        for i in range(max(len(clear), len(self.first))):
            if clear[i : i + 1] != self.first[i : i + 1]:
                self.varies.add(i)

    def clear(self) -> tuple[int | None, ...]:
        """The first packet's clear bytes, None where another packet's differ."""
        return tuple(None if i in self.varies else b for i, b in enumerate(self.first))


def misplaced_layout(key: LayoutKey, acc: LayoutAcc) -> MisplacedLayout:
    return MisplacedLayout(
        ip_version=key.ip_version,
        proto=key.proto,
        expected_offset=key.expected_offset,
        clear_offset=key.clear_offset,
        clear_prefix=key.clear_prefix,
        esp_offset=key.esp_offset,
        spi=key.spi,
        packets=acc.packets,
        clear=acc.clear(),
        carriers=key.carriers,
        reassembled=key.reassembled,
    )
