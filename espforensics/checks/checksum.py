"""Inner checksums: what a decrypted packet's own checksums say, and its TFC padding.

In: ``PacketContext`` of every ESP packet. Out: the ``inner_checksum`` and
``tfc_len`` columns of each packet whose plaintext verified (empty for the
others), and per SA one ``inner_checksum`` finding (high) for packets
whose inner checksum does not verify, one (medium) for packets that
carry a partial checksum, and one ``next_header_mismatch`` (medium) for
packets whose payload the bytes prove is not what their next header names
(a whole IP packet under next header 1, say). Raises nothing.

The ICV proves that the plaintext is what the sender sealed, so an inner
TCP/UDP/ICMP or inner IPv4 header checksum that does not verify under a
verified ICV proves the packet was damaged before encryption (in the
sender's stack, a qdisc, a driver), not on the wire. A stored checksum
equal to the folded pseudo-header sum is what checksum offload leaves
(Linux CHECKSUM_PARTIAL) for the NIC to complete; sealed under a verified
ICV nothing completes it later (a NIC that encrypts in hardware leaves
no ICV that verifies in a capture), so it reaches the receiver as it is.
What cannot be verified is ``not_checked``, and ``detail`` says why:
NAT-T transport mode (RFC 3948 s3.1.2), inner fragments, protocols
without a checksum verified here, misplaced headers, unsound trailers.
The steady lane fills the same columns for the packets it takes with
``plaintexts`` below, the bulk form of the same rule (``check_inners`` over
the rows the bulk parser decoded, ``check_inner`` one by one over the
others), and takes no packet this check makes a finding of.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from espforensics.bounded.frames import frozen, with_frame
from espforensics.bounded.intervals import IntervalSet
from espforensics.checks.bulk import InnerChecks, Outer, Payloads, PlainRule, Plaintexts
from espforensics.checks.context import PacketContext
from espforensics.checks.coverage import NOT_DECRYPTED, Seen
from espforensics.checks.perflow import PerFlow
from espforensics.decode.inner import (
    CHECKSUM_AT,
    INNER_FRAGMENT,
    NATT_TRANSPORT,
    NOT_CHECKED,
    OUTER_EXTENSIONS,
    Checked,
    InnerColumns,
    check_inner,
    unchecked_protocol,
    whole_packet,
)
from espforensics.model.arrays import I64, U8, Mask, Strs, distinct, read_be, rows_at, u8
from espforensics.model.enums import FindingKind, InnerChecksum, Proto, Severity, Verdict
from espforensics.model.evidence import BadChecksums, NextHeaderMismatch
from espforensics.model.records import Finding, PacketRecord, SaKey

_REASONS = {
    Verdict.ESP_MISPLACED: NOT_CHECKED + "the ESP header is misplaced (the plaintext may not "
    "start where its next header says)",
    Verdict.BAD_TRAILER: NOT_CHECKED + "the trailer is unsound, so where the payload ends is "
    "unknown",
}


@dataclass(slots=True)
class _Kind:
    count: int = 0
    frames: IntervalSet | None = None  # every frame, as runs
    first: str = ""  # the first packet's detail, as evidence

    def add(self, rec: PacketRecord, detail: str) -> None:
        self.count += 1
        self.frames = with_frame(self.frames, rec.frame)
        if not self.first:
            self.first = f"frame {rec.frame} (seq {rec.seq}): {detail}"


@dataclass(slots=True)
class _Sa:
    bad: _Kind = field(default_factory=_Kind)
    partial: _Kind = field(default_factory=_Kind)
    mismatch: _Kind = field(default_factory=_Kind)


def checked(pkt: PacketContext) -> Checked | None:
    """The inner checksums of a packet, or None when no plaintext of it verified."""
    rec = pkt.rec
    if pkt.plain_head is None:
        return None
    reason = _REASONS.get(rec.verdict)
    payload, nh = pkt.payload, pkt.inner_next  # after IPComp, the inflated packet's
    if payload is None or nh is None:
        reason = _REASONS[Verdict.BAD_TRAILER]
    if reason is not None or payload is None or nh is None:
        return Checked(InnerChecksum.NOT_CHECKED, reason or "", None)
    why_not = ""
    if rec.proto is Proto.ESP_UDP:
        why_not = NATT_TRANSPORT
    elif pkt.ip.routed:
        why_not = OUTER_EXTENSIONS
    return check_inner(nh, payload, pkt.ip.src, pkt.ip.dst, why_not)


class InnerChecksumCheck:
    """Fills ``inner_checksum`` and ``tfc_len``; collects bad and partial checksums per SA."""

    name = "inner_checksum"

    def __init__(self) -> None:
        self._sas: PerFlow[_Sa] = PerFlow(_Sa)

    def observe(self, pkt: PacketContext) -> None:
        found = checked(pkt)
        if found is None:
            return
        rec = pkt.rec
        rec.inner_checksum, rec.tfc_len = found.status, found.tfc_len
        if found.detail:
            rec.detail = f"{rec.detail}; {found.detail}" if rec.detail else found.detail
        if found.status is InnerChecksum.BAD:
            self._sas.get(pkt.flow).bad.add(rec, found.detail)
        elif found.status is InnerChecksum.PARTIAL:
            self._sas.get(pkt.flow).partial.add(rec, found.detail)
        elif found.mismatch:
            self._sas.get(pkt.flow).mismatch.add(rec, found.detail.removeprefix(NOT_CHECKED))

    def finish(self) -> Iterator[Finding]:
        for key, sa in self._sas.items():
            if sa.bad.count:
                yield _finding(
                    InnerChecksum.BAD,
                    Severity.HIGH,
                    key,
                    sa.bad,
                    ("carries", "carry"),
                    "an inner packet whose checksum does not verify: it was damaged before "
                    "encryption, which the ICV cannot show, and a receiver drops it after "
                    "decrypting it",
                )
            if sa.partial.count:
                yield _finding(
                    InnerChecksum.PARTIAL,
                    Severity.MEDIUM,
                    key,
                    sa.partial,
                    ("carries", "carry"),
                    "a partial inner checksum, the pseudo-header sum alone that checksum "
                    "offload leaves (CHECKSUM_PARTIAL): not damage, a checksum never "
                    "completed and sealed as it was, so no NIC completed it later; a "
                    "receiver that verifies it drops the packet",
                )
            if sa.mismatch.count:
                yield _mismatch(key, sa.mismatch)


def _mismatch(key: SaKey, kind: _Kind) -> Finding:
    spi, src, dst = key
    n = kind.count
    subject = "1 packet whose ICV verifies" if n == 1 else f"{n} packets whose ICV verifies"
    return Finding(
        FindingKind.NEXT_HEADER_MISMATCH,
        Severity.MEDIUM,
        spi,
        frozen(kind.frames),
        n,
        f"{src} -> {dst}: {subject} {'carry' if n > 1 else 'carries'} a payload that is not "
        "what the next header names: a receiver hands it to the protocol named, which "
        f"cannot take it. First: {kind.first}",
        src,
        dst,
        NextHeaderMismatch(kind.first),
    )


def _finding(
    status: InnerChecksum,
    severity: Severity,
    key: SaKey,
    kind: _Kind,
    verb: tuple[str, str],
    what: str,
) -> Finding:
    spi, src, dst = key
    n = kind.count
    subject = "1 packet whose ICV verifies" if n == 1 else f"{n} packets whose ICV verifies"
    return Finding(
        FindingKind.INNER_CHECKSUM,
        severity,
        spi,
        frozen(kind.frames),
        n,
        f"{src} -> {dst}: {subject} {verb[n > 1]} {what}. First: {kind.first}",
        src,
        dst,
        BadChecksums(status, kind.first),
    )


def coverage(seen: Seen) -> str | None:
    """Examined: packets whose plaintext the checks saw (``inner_checksum`` says per packet
    when their checksums could not be verified, e.g. NAT-T transport mode)."""
    return None if seen.decrypted else (seen.why or NOT_DECRYPTED)


# -- the bulk rule: check_inner of many plaintexts at once (the steady lane's) ----------


def plaintexts(p: Plaintexts) -> PlainRule:
    """``observe``'s columns for the plain rows of a batch (``check_inners`` over the rows the
    bulk parser decoded, ``check_inner`` one by one over the others); refused: the rows with
    a bad or partial checksum (this check's findings) or a case not computed in bulk."""
    fast = p.plain & p.inner.decoded
    status, detail, tfc = check_inners(p.payloads, p.inner, fast, p.outer)
    refused = fast & (status == "")
    for row in np.flatnonzero(p.plain & ~p.inner.decoded).tolist():
        refused[row] = not _one_by_one(row, p.payloads, (status, detail, tfc))
    return PlainRule(refused, InnerChecks(status, detail, tfc))


def _one_by_one(row: int, p: Payloads, out: tuple[Strs, Strs, I64]) -> bool:
    """``check_inner`` of a row the bulk parser left (inner IPv6 with extension headers, say).

    Tunnel mode only (a transport row here is a cut header: the per-frame
    path's); a bad or partial checksum is the per-frame path's too.
    """
    nh = int(p.nh[row])
    if nh not in (4, 41):
        return False
    found = check_inner(nh, p.body(row), b"", b"", "")
    if found.status in (InnerChecksum.BAD, InnerChecksum.PARTIAL) or found.mismatch:
        return False
    if not whole_packet(p.body(row), 4 if nh == 4 else 6):
        return False  # with the outer addresses it may prove a transport segment
    status, detail, tfc = out
    status[row], detail[row] = found.status.value, found.detail
    tfc[row] = -1 if found.tfc_len is None else found.tfc_len
    return True


_LITTLE = sys.byteorder == "little"
_SUM_ROWS = 256  # rows summed per reduceat call (_spans)
U64 = npt.NDArray[np.uint64]


def _fold(total: U64) -> U64:
    """RFC 1071: a sum of 16-bit words folded to 16 bits (0xffff when the checksum verifies)."""
    for _ in range(3):
        total = (total & np.uint64(0xFFFF)) + (total >> np.uint64(16))
    return total


def _words(view: U8, at: I64, rows: Mask, width: int) -> U64:
    """The sum of the 16-bit words of the ``width`` (even) bytes at ``at`` of each row."""
    out = np.zeros(len(at), np.uint64)
    pick = np.flatnonzero(rows)
    if len(pick):
        out[pick] = rows_at(view, at[pick], width).view(">u2").sum(axis=1, dtype=np.uint64)
    return out


def _spans(view: U8, at: I64, end: I64, rows: Mask) -> U64:
    """The folded sum of the 16-bit words of bytes ``at:end`` of each row (``at`` even).

    RFC 1071 s2(B): the ones' complement sum is independent of byte order, so
    the words are summed in the machine's order (a byte-swapping view costs
    twice as much) and the folded sum is swapped back once per row. A row is
    at most 65,535 bytes: its sum fits 32 bits.
    """
    out = np.zeros(len(at), np.uint64)
    pick = np.flatnonzero(rows)
    if not len(pick):
        return out
    a, e = at[pick], end[pick]
    words = view[: len(view) // 2 * 2].view(np.uint16)  # native order
    bounds = np.empty(2 * len(pick), np.int64)
    bounds[0::2], bounds[1::2] = a // 2, e // 2
    sums = np.empty(len(pick), np.uint64)
    # reduceat casts what it sums to the wider type first: a slice of rows at a time
    # keeps that copy small (the whole batch would add twice its plaintexts to the peak).
    for i in range(0, len(pick), _SUM_ROWS):
        part = bounds[2 * i : 2 * (i + _SUM_ROWS)]
        low = int(part[0])
        span = words[low : int(part[-1]) + 1]
        sums[i : i + _SUM_ROWS] = np.add.reduceat(span, part - low, dtype=np.uint32)[0::2]
    # An odd length's last byte is a word's high half (RFC 1071), padded with zero.
    tail = np.where((e - a) % 2 == 1, view[e - 1].astype(np.uint64), np.uint64(0))
    if _LITTLE:
        folded = _fold(sums + tail)
        out[pick] = (folded & np.uint64(0xFF)) << np.uint64(8) | folded >> np.uint64(8)
    else:
        out[pick] = _fold(sums + (tail << np.uint64(8)))
    return out


def check_inners(p: Payloads, x: InnerColumns, rows: Mask, outer: Outer) -> tuple[Strs, Strs, I64]:
    """``check_inner`` of each row of ``rows`` (decoded in ``x``): status, detail, tfc_len.

    A row left "" is not checked here: a bad or partial checksum (the
    per-packet rule's finding), or a case whose detail carries numbers (cut
    headers, lengths that do not fit, IPv4 options). Every other row has
    exactly ``check_inner``'s status, detail and tfc_len (-1: None).
    """
    m = len(rows)
    status = np.full(m, "", dtype=object)
    detail = np.full(m, "", dtype=object)
    view, start = p.view, p.start
    rows = rows & (start % 2 == 0)  # an odd start: its words straddle the buffer's
    ip = rows & (x.v4 | x.v6)
    transport = rows & ~ip & (p.nh != 4) & (p.nh != 41)
    transport &= ~_maybe_ip(view, start, p.payload, transport & (p.nh != 59))
    total = np.where(
        x.v4, read_be(view, start + 2, x.v4, 2), 40 + read_be(view, start + 4, x.v6, 2)
    )
    tfc = np.where(ip, p.payload - total, -1)
    version = np.where(x.v4, 4, 6)
    fits = (total <= p.payload) & (version == np.where(p.nh == 4, 4, 6))
    ihl20 = x.v4 & (view[np.where(x.v4, start, 0)] == 0x45)
    header_ok = _fold(_words(view, start, ihl20 & rows, 20)) == np.uint64(0xFFFF)
    ip &= fits & (x.v6 | (ihl20 & header_ok))
    frag = ip & x.v4 & (read_be(view, start + 6, ip & x.v4, 2) & 0x3FFF != 0)
    # -- the cases with nothing to compute
    status[transport & (p.nh == 59)] = InnerChecksum.NONE.value
    natt = transport & outer.natt & (p.nh != 59)
    status[natt], detail[natt] = InnerChecksum.NOT_CHECKED.value, NATT_TRANSPORT
    status[frag], detail[frag] = InnerChecksum.NOT_CHECKED.value, INNER_FRAGMENT
    v4_addrs = np.where(ip, x.v4, outer.v4)
    known = np.isin(x.proto, list(CHECKSUM_AT)) & ((x.proto != 1) | v4_addrs)
    todo = ((transport & ~natt) | (ip & ~frag)) & (p.nh != 59)
    for proto in distinct(x.proto[todo & ~known]).tolist():
        other = todo & ~known & (x.proto == proto)
        status[other], detail[other] = InnerChecksum.NOT_CHECKED.value, unchecked_protocol(proto)
    todo &= known
    _l4_sums(p, x, todo, outer, status)
    return status, detail, np.where(status != "", tfc, -1)


def _maybe_ip(view: U8, start: I64, payload: I64, rows: Mask) -> Mask:
    """The rows that may be a whole IP packet under a transport next header (a superset of
    ``check_inner``'s mismatches, left to it): a 20-byte IPv4 header whose checksum
    verifies, a longer one, or anything that starts like IPv6."""
    first = u8(view, start, rows & (payload > 0))
    v4: Mask = rows & (payload >= 20) & (first >> 4 == 4)
    ihl5: Mask = v4 & (first == 0x45)
    header_ok: Mask = _fold(_words(view, start, ihl5, 20)) == np.uint64(0xFFFF)
    v6: Mask = rows & (payload >= 40) & (first >> 4 == 6)
    return (v4 & (~ihl5 | header_ok)) | v6


def _l4_sums(p: Payloads, x: InnerColumns, todo: Mask, outer: Outer, status: Strs) -> None:
    """Mark ``ok`` (or ``none``: UDP checksum 0) the rows of ``todo`` whose checksum verifies."""
    view, proto = p.view, x.proto
    seg_len = x.l4_end - x.l4_at
    udp = todo & (proto == 17)
    ulen = read_be(view, x.l4_at + 4, udp & (seg_len >= 8), 2)
    todo &= np.where(udp, (ulen >= 8) & (ulen <= seg_len), True)
    seg_len = np.where(udp, ulen, seg_len)
    todo &= seg_len >= np.where(proto == 6, 20, np.where(udp, 8, 4))
    at = np.zeros(len(proto), np.int64)
    for number, offset in CHECKSUM_AT.items():
        at[proto == number] = offset
    stored = read_be(view, x.l4_at + at, todo, 2)
    zero = udp & todo & (stored == 0)  # no checksum sent (RFC 768)
    status[zero] = InnerChecksum.NONE.value
    todo &= ~zero
    inner = (x.v4 | x.v6) & todo
    addrs = np.where(
        x.v4,
        _words(view, p.start + 12, inner & x.v4, 8),
        _words(view, p.start + 8, inner & x.v6, 32),
    )
    addrs = np.where(inner, addrs, outer.words.astype(np.uint64))
    pseudo = np.where(
        proto == 1, np.uint64(0), addrs + proto.astype(np.uint64) + seg_len.astype(np.uint64)
    )
    total = pseudo + _spans(view, x.l4_at, x.l4_at + seg_len, todo)
    good = todo & (_fold(total) == np.uint64(0xFFFF))
    status[good] = InnerChecksum.OK.value
