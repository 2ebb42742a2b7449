"""Clear-text leaks: inner header bytes on the wire where only ciphertext may be.

In: ``PacketContext`` of ESP packets. Out: ``leaked``/``leaked_hex``/
``leaked_fields`` columns and one ``cleartext_leak`` finding per SPI.
Raises nothing.

Two places are looked at. (1) In front of a misplaced ESP header (the
placement check measured the bytes): their fields are named. (2) Between
the ESP header and the ICV: the bytes after the IV (and, for a header
without IV, right after the ESP header) are tested as a clear IPv4
header (valid header checksum, RFC 791 s3.1, and a total length that
fits) or IPv6 header (payload length that fits), a clear TCP, UDP or
ICMP header (its checksum, a trailer after it); and for packets that
decrypted, a ciphertext that equals its plaintext over the first
``MIN_RUN`` bytes. RFC 4543 (GMAC) SAs are clear by design and skipped.

The steady lane takes a packet only when its ciphertext and plaintext
differ over those ``MIN_RUN`` bytes (``plaintexts``, the same rule over a
batch's columns); a packet without a key with the columns the tests of (2)
give it, a proven leak or a possible one (``refuses_bytes``: ``clear_words``
over a batch's rows, ``commit``: the counts).

A finding is a proof. A decrypted packet proves its leak (ciphertext equal
to plaintext); so do the bytes in front of a misplaced header. A packet
that did not verify (no key, or a failed ICV) proves a clear inner packet
only when an exact ESP trailer and ICV follow it (``trailer_follows``);
a header that parses without that is reported as ``possible`` (``info``,
``leaked`` left empty), since random ciphertext sometimes parses as one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from espforensics.bounded.frames import frozen, with_frame, with_frames
from espforensics.bounded.intervals import IntervalSet
from espforensics.checks import coverage as coverage_reasons
from espforensics.checks.bulk import (
    BulkRules,
    BytesRule,
    FlowRows,
    Leaks,
    LeakWords,
    PlainRule,
    Plaintexts,
)
from espforensics.checks.context import PacketContext
from espforensics.checks.coverage import Seen
from espforensics.crypto import IV_LEN
from espforensics.decode.clear import (
    KEYLESS_ICV_LENS,
    clear_icmp,
    clear_rows,
    clear_transport,
    first_clear_header,
    may_be_clear,
    trailer_follows,
)
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.keys.sa import CLEAR_BY_DESIGN
from espforensics.model.arrays import I64, Mask, distinct_inverse, spaced_hex, strs, u8
from espforensics.model.enums import FindingKind, Severity
from espforensics.model.evidence import Leak, LeakProof
from espforensics.model.records import Finding

MIN_RUN = 8  # equal ciphertext/plaintext bytes that count as "not encrypted" (2^-64 by chance)
IPV4_FIELDS = (
    (1, "version+IHL"),
    (1, "TOS"),
    (2, "total length"),
    (2, "identification"),
    (2, "flags+fragment offset"),
    (1, "TTL"),
    (1, "protocol"),
    (2, "header checksum"),
    (4, "source address"),
    (4, "destination address"),
)
IPV6_FIELDS = (
    (4, "version+traffic class+flow label"),
    (2, "payload length"),
    (1, "next header"),
    (1, "hop limit"),
    (16, "source address"),
    (16, "destination address"),
)


def name_fields(leaked: bytes) -> str:
    """Names of the IP header fields that ``leaked`` (from the header's start) covers."""
    if not leaked:
        return ""
    layout = IPV4_FIELDS if leaked[0] >> 4 == 4 else IPV6_FIELDS if leaked[0] >> 4 == 6 else ()
    if not layout:
        return f"{len(leaked)} unidentified bytes"
    names, pos = [], 0
    for size, name in layout:
        if pos >= len(leaked):
            break
        names.append(name if pos + size <= len(leaked) else f"part of {name}")
        pos += size
    return ("IPv4 " if leaked[0] >> 4 == 4 else "IPv6 ") + ", ".join(names)


@dataclass(slots=True)
class _PerSpi:
    frames: IntervalSet | None = None  # every one
    count: int = 0
    fields: set[str] = field(default_factory=set)


class LeakCheck(BulkRules):
    """Names clear-text inner header bytes and counts them per SPI."""

    name = "cleartext_leak"

    def __init__(self) -> None:
        self._per_spi: dict[int, _PerSpi] = {}
        self._possible_per_spi: dict[int, _PerSpi] = {}
        self._keyless_per_spi: dict[int, _PerSpi] = {}  # proven clear, algorithm unknown
        self._unsealed_per_spi: dict[int, _PerSpi] = {}  # proven clear, the ICV failing

    def observe(self, pkt: PacketContext) -> None:
        rec, sa = pkt.rec, pkt.flow.state.sa
        if (sa is not None and sa.algorithm in CLEAR_BY_DESIGN) or rec.esp_offset is None:
            return  # GMAC, NULL: clear by design
        if pkt.misplaced:  # found later, with a key or by layout (checks/placement.py)
            if rec.leaked:
                self._report(pkt, bytes.fromhex(rec.leaked_hex))
            return
        self._between_header_and_icv(pkt)

    def _between_header_and_icv(self, pkt: PacketContext) -> None:
        rec, data = pkt.rec, pkt.data
        if rec.esp_offset is None:
            return
        body = rec.esp_offset + ESP_HEADER_LEN
        ctx = pkt.flow.state.ctx
        iv_len = IV_LEN if ctx is None else ctx.iv_len
        if pkt.plain_head is not None:
            sealed = data[body + iv_len : body + iv_len + MIN_RUN]
            if not_encrypted(sealed, pkt.plain_head):
                rec.leaked, rec.leaked_hex = MIN_RUN, sealed.hex(" ")
                rec.leaked_fields = "payload not encrypted: ciphertext equals plaintext"
                self._count(rec.spi, rec.frame, rec.leaked_fields)
            return
        if pkt.cut:  # no trailer nor ICV captured to prove a clear packet by
            return
        icv_lens = (ctx.icv_len,) if ctx is not None else KEYLESS_ICV_LENS
        found = clear_words(data, body, iv_len, icv_lens, pkt.ip.src, pkt.ip.dst)
        if found is None:
            return
        rec.leaked_hex, rec.leaked_fields = found.hex, found.fields
        if not found.leaked:  # a header that nothing else proves
            self._count(rec.spi, rec.frame, found.fields, self._possible_per_spi)
            return
        rec.leaked = found.leaked
        keyed = pkt.flow.state.sa is not None
        into = self._unsealed_per_spi if keyed else self._keyless_per_spi
        self._count(rec.spi, rec.frame, found.fields, into)

    # -- the steady lane's rules (checks/bulk.py) ------------------------------
    def refuses_bytes(self, rows: FlowRows) -> BytesRule:
        """Rows without a key whose bytes after the header ``_between_header_and_icv`` finds
        clear (``clear_words``), read in bulk (``_in_bulk``) of the rows ``may_be_clear``
        lets through. Each is kept with the columns ``_between_header_and_icv`` gives it,
        a proven leak (a clear inner packet, a trailer and an ICV after it) or a possible
        one, and ``commit`` counts it. ``clear``: the rows clear from right after their ESP
        header on (``clear_after_header``, ``PacketContext.clear_from_header``'s test: NULL
        encryption), whose 8 bytes after the header the IV checks read as no IV. The
        lane's keyed rows are decrypted: their rule is ``plaintexts``."""
        none = BytesRule(np.zeros(len(rows), np.bool_))  # it refuses no row by its bytes
        if rows.flow.state.ctx is not None:
            return none
        body = rows.esp_at + ESP_HEADER_LEN
        maybe = may_be_clear(rows.buf, body, rows.ct_end)
        if not maybe.any():
            return none
        clear, leaks = _in_bulk(rows, body, maybe)
        return replace(
            none, leaks=leaks if len(leaks.at) else None, clear=clear if clear.any() else None
        )

    def commit(self, rows: FlowRows) -> None:
        """``observe`` for the lane's rows: their leaks (keyless: proven or possible)
        counted."""
        leaks = rows.leaks
        if leaks is None:
            return
        frames = rows.frames[leaks.at]
        proven = leaks.leaked > 0
        for into, mine in ((self._keyless_per_spi, proven), (self._possible_per_spi, ~proven)):
            if mine.any():
                acc = into.setdefault(rows.flow.spi, _PerSpi())
                acc.count += int(mine.sum())
                acc.fields.update(leaks.fields[mine].tolist())
                acc.frames = with_frames(acc.frames, frames[mine])

    def _report(self, pkt: PacketContext, leaked: bytes) -> None:
        rec = pkt.rec
        rec.leaked, rec.leaked_hex = len(leaked), leaked.hex(" ")
        rec.leaked_fields = name_fields(leaked)
        self._count(rec.spi, rec.frame, rec.leaked_fields)

    def _count(
        self, spi: int | None, frame: int, fields: str, into: dict[int, _PerSpi] | None = None
    ) -> None:
        per_spi = self._per_spi if into is None else into
        acc = per_spi.setdefault(spi if spi is not None else -1, _PerSpi())
        acc.count += 1
        acc.fields.add(fields)
        acc.frames = with_frame(acc.frames, frame)

    def finish(self) -> Iterator[Finding]:
        proven = (
            self._per_spi,
            Severity.CRITICAL,
            LeakProof.DECRYPTED,
            "{n} packets carry inner header bytes in clear: {fields}",
        )
        unsealed = (
            self._unsealed_per_spi,
            Severity.CRITICAL,
            LeakProof.LAYOUT,
            "{n} packets whose ICV does not verify carry a whole clear inner packet after the "
            "ESP header, then an ESP trailer ({fields}): sent unencrypted, or captured on a "
            "host whose NIC does ESP crypto offload (ip xfrm state ... offload), before it "
            "encrypted them or after it decrypted them; a capture on the wire tells which",
        )
        keyless = (
            self._keyless_per_spi,
            Severity.HIGH,
            LeakProof.LAYOUT,
            "{n} packets carry a whole clear inner packet after the ESP header, then an ESP "
            "trailer and ICV ({fields}): a leak, unless the SA uses NULL encryption or GMAC "
            "(clear by design, RFC 2410 / RFC 4543), which only its key file can say",
        )
        possible = (
            self._possible_per_spi,
            Severity.INFO,
            LeakProof.POSSIBLE,
            "possible, not proven: {n} packets that did not verify hold, after the ESP header, "
            "bytes that parse as a clear IP header but are not followed by an ESP trailer and "
            "ICV; random ciphertext looks like this now and then",
        )
        for per_spi, severity, proof, words in (proven, unsealed, keyless, possible):
            for spi, acc in sorted(per_spi.items()):
                yield Finding(
                    FindingKind.CLEARTEXT_LEAK,
                    severity,
                    spi if spi >= 0 else None,
                    frozen(acc.frames),
                    acc.count,
                    words.format(n=acc.count, fields="; ".join(sorted(acc.fields))),
                    evidence=Leak(proof, tuple(sorted(acc.fields))),
                )


def _in_bulk(rows: FlowRows, body: I64, bulk: Mask) -> tuple[Mask, Leaks]:
    """``clear_after_header`` and ``clear_words`` of the rows ``bulk``, in numpy: what
    ``clear_rows`` finds after the 8-byte IV and at ``body`` (clear IP headers, the
    trailers after them, clear TCP and UDP segments and ICMP messages), taken in
    ``clear_words``'s order; the leaks' columns made for all at once (``spaced_hex``, a
    name per kind of row). Only the rows ``bulk`` are read (of ciphertext, a few in a
    thousand)."""
    rows_of = np.flatnonzero(bulk)
    view = rows.buf
    end, body = rows.ct_end[rows_of], body[rows_of]
    found = clear_rows(view, body, end, rows.ip_at[rows_of])
    iv, here = found.after_iv, found.at_body
    shifted_ip = iv.ip > 0  # clear_words tries after the IV first
    start = np.where(shifted_ip, body + IV_LEN, body)
    n = np.where(shifted_ip, iv.ip, here.ip)
    proven = np.where(shifted_ip, iv.packet, here.packet)
    clear = np.zeros(len(bulk), np.bool_)
    clear[rows_of] = np.where(here.ip > 0, here.packet, (here.proto > 0) | (here.icmp > 0))
    # clear_words's order: a proven IP packet, a TCP or UDP segment, an ICMP message (each
    # after the IV first), else a possible IP header
    segment = ~proven & ((iv.proto > 0) | (here.proto > 0))
    message = ~proven & ~segment & ((iv.icmp > 0) | (here.icmp > 0))
    ip = ~segment & ~message & (n > 0)
    found_at = np.flatnonzero(ip | segment | message)
    ip, segment, proven = ip[found_at], segment[found_at], proven[found_at]
    # a transport header's next header, after the IV and in its place
    nh8 = np.where(segment, iv.proto[found_at], iv.icmp[found_at])
    nh0 = np.where(segment, here.proto[found_at], here.icmp[found_at])
    shifted = nh8 > 0  # found after the IV
    at = np.where(ip, start[found_at], body[found_at] + np.where(shifted, IV_LEN, 0))
    sizes = np.where(shifted, iv.size[found_at], here.size[found_at])
    size = np.where(ip, n[found_at], np.where(segment, sizes, 8))  # ICMP: 8
    proto = np.where(shifted, nh8, nh0)
    sure = ~ip | proven
    version = u8(view, at, ip) >> 4
    # each row's fields by its kind alone: a transport header's protocol, or an IP
    # header's version and length (all name_fields reads), proven or possible
    kind = np.where(ip, (version << 8 | size) << 1 | sure, -proto)
    kinds, which = distinct_inverse(kind)
    names = strs([_fields_of(k) for k in kinds.tolist()])
    leaks = Leaks(
        rows_of[found_at], spaced_hex(view, at, size), names[which], np.where(sure, size, 0)
    )
    return clear, leaks


# the clear transport headers ``clear_words`` proves, by next header (IANA protocol number)
_HEADERS = {6: "TCP header", 17: "UDP header", 1: "ICMP header", 58: "ICMPv6 header"}


def _fields_of(kind: int) -> str:
    """``leaked_fields`` of a row of ``kind`` (``_in_bulk``)."""
    if kind < 0:
        return _HEADERS[-kind]
    name = name_fields(bytes([kind >> 9 << 4]) + bytes((kind >> 1 & 0xFF) - 1))
    return name if kind & 1 else f"possible: {name}"


def clear_words(
    data: bytes,
    body: int,
    iv_len: int,
    icv_lens: tuple[int, ...],
    src: bytes,
    dst: bytes,
) -> LeakWords | None:
    """The leak columns of a packet that did not verify, read from its bytes after the ESP
    header (at ``body``), the first that holds of: the first plausible clear IP header
    (after an ``iv_len``-byte IV, else in its place) when an ESP trailer and an ICV of
    one of ``icv_lens`` follow its packet exactly (proven: ``leaked`` its length); a
    clear TCP or UDP header whose segment's checksum verifies over the outer addresses
    ``src``, ``dst``, with its trailer and ICV (proven); a clear ICMP or ICMPv6 message
    (``clear_icmp``: a ping in transport mode; proven, its 8-byte header); that IP
    header without them (possible: ``leaked`` 0). Each after the IV first, then in its
    place. So a proven transport header is not hidden by random IV bytes that happen to
    parse as an IP header. None: nothing clear found."""
    start, n = first_clear_header(data, body, iv_len)
    header = data[start : start + n]
    if n and trailer_follows(data, start, icv_lens):
        return LeakWords(header.hex(" "), name_fields(header), n)
    for at in (body + iv_len, body):
        proto, size = clear_transport(data, at, src, dst, icv_lens)
        if size:
            return LeakWords(data[at : at + size].hex(" "), f"{proto} header", size)
    for at in (body + iv_len, body):
        nh = clear_icmp(data, at, src, dst, icv_lens)
        if nh:
            return LeakWords(data[at : at + 8].hex(" "), _HEADERS[nh], 8)
    if n:
        return LeakWords(header.hex(" "), f"possible: {name_fields(header)}", 0)
    return None


def not_encrypted(sealed: bytes, plain: bytes) -> bool:
    """A decrypted packet's proven leak: its ciphertext's first ``MIN_RUN`` bytes (``sealed``)
    equal its plaintext's."""
    return len(sealed) == MIN_RUN and sealed == plain[:MIN_RUN]


def plaintexts(p: Plaintexts) -> PlainRule:
    """``not_encrypted`` over the lane's rows: refused, the rows whose ciphertext equals
    their plaintext over ``MIN_RUN`` bytes, unless clear by design (the per-packet rule
    skips those SAs)."""
    equal = (p.heads[:, :MIN_RUN] == p.cipher_heads[:, :MIN_RUN]).all(axis=1)
    return PlainRule(equal & ~p.clear)


def coverage(seen: Seen) -> str | None:
    """Examined: every whole ESP packet of an SA that encrypts, and every one the capture
    cut whose header was found later by layout (the clear bytes in front of it are read);
    else why not (a cut packet holds no trailer to prove a clear packet by)."""
    if seen.algorithm.split(" + ")[0] in CLEAR_BY_DESIGN:
        return coverage_reasons.CLEAR_BY_DESIGN
    return None if seen.whole or seen.found else seen.why
