"""Clear bytes where ciphertext should be: tests on the bytes of an ESP datagram.

In: a datagram's bytes, an offset in it, the ICV lengths to try and (for
transport mode) the outer addresses. Out: ``clear_ip_header`` (the length
of a plausible clear IPv4/IPv6 header there), ``trailer_follows`` (is that
clear IP packet followed exactly by an ESP trailer and an ICV) and
``clear_transport`` (a clear TCP/UDP segment there, whose checksum over the
outer addresses verifies, with a trailer and ICV after it) and
``ip_start_fits`` (do clear bytes start an IP header whose length fits
the rest of the datagram: how a misplaced ESP header is recognised without
proof); ``clear_after_header`` and ``first_clear_header``, what the leak
check (``clear_words``) and ``PacketContext`` ask of a keyless packet with them;
and their bulk side for the steady lane's keyless packets: ``may_be_clear``
(a superset: the rows worth a closer look), then ``clear_rows`` (the same tests
over many rows at both places the leak check reads, each row's trailers and
words read once, tests/decode/test_clear_bulk.py). Raises nothing.

Used by the leak check (checks/leaks.py) and by ``PacketContext``, which
asks once per packet whether a keyless packet is in clear from its ESP
header on (``ecb(cipher_null)``, RFC 2410), so that the IV checks do not
take its payload for an IV.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from espforensics.decode.trailer import parse_trailer
from espforensics.model.arrays import I64, U8, Mask, be_at, read_be, rows_within, u8

# The ICV lengths an unknown SA may use: RFC 4106 s6 (8, 12, 16), HMAC-SHA-384-192 and
# HMAC-SHA-512-256 (RFC 4868: 24, 32).
KEYLESS_ICV_LENS = (32, 24, 16, 12, 8)
_KEYLESS_IV_LEN = 8  # what a packet without a key is read with: an AEAD's IV (RFC 4106 s3.1)
_TRANSPORT = (6, 17)  # TCP, UDP: their checksums cover a pseudo-header of the outer addresses
# the next headers ``clear_transport`` or ``clear_icmp`` accept (ICMP, TCP, UDP, ICMPv6),
# as a table over a byte's 256 values (one gather, where ``np.isin`` sorts)
_TRAILED = np.zeros(256, np.bool_)
_TRAILED[[1, *_TRANSPORT, 58]] = True
# ICMP (RFC 792) and ICMPv6 (RFC 4443) types a clear message is taken for: errors and echoes
_ICMP_TYPES = {1: frozenset({0, 3, 8, 11}), 58: frozenset({1, 2, 3, 4, 128, 129})}


def trailer_follows(data: bytes, start: int, icv_lens: tuple[int, ...]) -> bool:
    """Is the clear IP packet at ``start`` followed exactly by an ESP trailer and an ICV?

    RFC 4303 s2.4: pad bytes 1, 2, 3, ..., the pad length, and the next header
    that an IP packet takes (4 or 41, RFC 4303 s3.1), 4-byte aligned, then the
    ICV up to the end of the datagram. Together with the header test, random
    ciphertext passes this by chance with a probability below 2^-32.
    """
    version = data[start] >> 4
    if version == 4:
        total = int.from_bytes(data[start + 2 : start + 4], "big")
    else:
        total = 40 + int.from_bytes(data[start + 4 : start + 6], "big")
    proto = 4 if version == 4 else 41
    for icv in icv_lens:
        trailer = parse_trailer(data[start : len(data) - icv])
        if not trailer.problem and trailer.payload_len == total and trailer.next_header == proto:
            return True
    return False


def ip_start_fits(data: bytes, start: int, end: int, total_len: int) -> bool:
    """Do the clear bytes ``data[start:end]`` start an IP header that spans the datagram's rest?

    The version, and the length the header gives (IPv4 total length, IPv6 40 +
    payload length), ending at most an ESP trailer, padding and ICV before
    ``total_len``, the datagram's length as its own IP header gives it (more
    than ``len(data)`` when the capture cut it).
    """
    if end - start < 4 or len(data) < start + 4:
        return False
    first = data[start]
    if first >> 4 == 4 and first & 0x0F >= 5:
        total = int.from_bytes(data[start + 2 : start + 4], "big")
    elif first >> 4 == 6 and end - start >= 6 and len(data) >= start + 6:
        total = 40 + int.from_bytes(data[start + 4 : start + 6], "big")
    else:
        return False
    slack = total_len - start - total  # ICV, padding and trailer of the real ESP
    return 0 <= slack <= 16 + 255 + 2


def internet_checksum(data: bytes) -> int:
    """RFC 1071: the ones' complement of the ones' complement sum (0 over a sound header).

    The 16-bit words summed with end-around carry are the bytes read as one big-endian
    number modulo 0xFFFF (65536 = 1 mod 0xFFFF; RFC 1071 s2(B), byte-order independence),
    an odd last byte padded with a zero (s4.1); that sum is 0 only if every word is 0,
    else in 1..0xFFFF. Equal to ``dpkt.in_cksum`` (tests/decode/test_internet_checksum.py).
    """
    total = int.from_bytes(data, "big") << (8 * (len(data) & 1))
    folded = total % 0xFFFF
    if folded == 0 and total:
        folded = 0xFFFF
    return 0xFFFF ^ folded


def _pseudo(src: bytes, dst: bytes, proto: int, n: int) -> bytes:
    """The pseudo-header a TCP or UDP checksum covers (RFC 768, RFC 8200 s8.1)."""
    if len(src) == 4:
        return src + dst + bytes([0, proto]) + n.to_bytes(2)
    return src + dst + n.to_bytes(4) + bytes([0, 0, 0, proto])


def l4_checksum_ok(src: bytes, dst: bytes, proto: int, segment: bytes) -> bool:
    """Does a TCP or UDP segment's checksum verify over its pseudo-header (RFC 768, 8200 s8.1)?"""
    return internet_checksum(_pseudo(src, dst, proto, len(segment)) + segment) == 0


def udp_checksum(src: bytes, dst: bytes, segment: bytes) -> int:
    """The checksum field of a UDP datagram (its own field zero in ``segment``); a sum of 0
    is sent as 0xFFFF, since 0 says "no checksum" (RFC 768)."""
    return internet_checksum(_pseudo(src, dst, 17, len(segment)) + segment) or 0xFFFF


def clear_ip_header(data: bytes, start: int, end: int) -> int:
    """Length of a plausible clear IP header at ``start`` (0 if none)."""
    if end - start < 20:
        return 0
    first = data[start]
    if first >> 4 == 4 and first & 0x0F >= 5:
        ihl = (first & 0x0F) * 4
        total = int.from_bytes(data[start + 2 : start + 4], "big")
        hdr = data[start : start + ihl]
        if len(hdr) == ihl and ihl <= total <= end - start and internet_checksum(hdr) == 0:
            return ihl
    elif first >> 4 == 6 and end - start >= 40:
        plen = int.from_bytes(data[start + 4 : start + 6], "big")
        if 0 < 40 + plen <= end - start and end - start - 40 - plen <= 16 + 255 + 2:
            return 40
    return 0


def clear_transport(
    data: bytes, start: int, src: bytes, dst: bytes, icv_lens: tuple[int, ...]
) -> tuple[str, int]:
    """A clear TCP or UDP segment at ``start``, a trailer and an ICV after it: (name, header).

    In transport mode the segment's checksum covers the outer addresses (RFC
    793 s3.1, RFC 768, RFC 8200 s8.1); with a sound trailer after it, random
    ciphertext passes by chance with a probability near 2^-31. ("", 0) if not.
    """
    for icv in icv_lens:
        if len(data) - icv - start < 10 or data[len(data) - icv - 1] not in _TRANSPORT:
            continue  # no room, or no TCP/UDP next header: decided without a copy
        trailer = parse_trailer(data[start : len(data) - icv])
        nh = trailer.next_header
        if trailer.problem or trailer.payload_len < 8:
            continue
        segment = data[start : start + trailer.payload_len]
        if nh == 17:
            header = 8 if int.from_bytes(segment[4:6]) == len(segment) else 0
        else:  # the TCP data offset, once the segment holds a whole basic header
            header = (segment[12] >> 4) * 4 if len(segment) >= 20 else 0
        if 8 <= header <= len(segment) and l4_checksum_ok(src, dst, nh, segment):
            return ("UDP" if nh == 17 else "TCP"), header
    return "", 0


def clear_icmp(data: bytes, start: int, src: bytes, dst: bytes, icv_lens: tuple[int, ...]) -> int:
    """A clear ICMP or ICMPv6 message at ``start``, a trailer and an ICV after it: the next
    header naming it (1 or 58), else 0.

    How NULL encryption (RFC 2410) carries a ping in transport mode. The
    message's checksum must verify (RFC 792: over the message; RFC 4443 s2.3:
    with the outer addresses' pseudo-header), its type be an echo or an
    error, and a sound trailer name it: random ciphertext passes by chance
    with a probability near 2^-27.
    """
    n = len(data)
    for icv in icv_lens:
        end = n - icv
        nh = data[end - 1] if end - start >= 10 else -1
        if nh not in _ICMP_TYPES:  # the next header an ICMP message takes (most fail here)
            continue
        trailer = parse_trailer(data[start:end])
        if trailer.problem or trailer.payload_len < 8:
            continue
        message = data[start : start + trailer.payload_len]
        if message[0] not in _ICMP_TYPES[nh]:
            continue
        if nh == 1 and internet_checksum(message) == 0:
            return nh
        if nh == 58 and len(src) == 16 and l4_checksum_ok(src, dst, 58, message):
            return nh
    return 0


def may_start_ip(view: U8, start: I64, end: I64) -> Mask:
    """``ip_start_fits``'s tests on the bytes at ``start`` alone, of many datagrams ending
    at ``end``: a superset (where the clear bytes end is not asked)."""
    room = end - start
    ok = room >= 4
    first = u8(view, start, ok)
    v4 = ok & (first >> 4 == 4) & (first & 0x0F >= 5)
    v6 = ok & (first >> 4 == 6) & (room >= 6)
    total = np.where(v4, read_be(view, start + 2, v4, 2), 40 + read_be(view, start + 4, v6, 2))
    slack = room - total
    fits: Mask = (v4 | v6) & (slack >= 0) & (slack <= 16 + 255 + 2)
    return fits


def clear_after_header(data: bytes, body: int, src: bytes, dst: bytes) -> bool:
    """Is a whole keyless datagram ``data`` clear from right after its ESP header (at
    ``body``) on, as ``ecb(cipher_null)`` (RFC 2410) sends: a clear IP header followed
    exactly by a trailer and an ICV, else a clear TCP, UDP or ICMP message with its
    trailer (``PacketContext.clear_from_header``'s test of a packet the capture holds
    whole; the leak check's bulk rule asks it of the packets it keeps)."""
    if clear_ip_header(data, body, len(data)):
        return trailer_follows(data, body, KEYLESS_ICV_LENS)
    found = clear_transport(data, body, src, dst, KEYLESS_ICV_LENS)
    return bool(found[1]) or bool(clear_icmp(data, body, src, dst, KEYLESS_ICV_LENS))


def first_clear_header(data: bytes, body: int, iv_len: int) -> tuple[int, int]:
    """Where the first plausible clear IP header is (after an ``iv_len``-byte IV, else at
    ``body``, right after the ESP header) and its length, as the leak check looks for
    one; (0, 0) if there is none."""
    for start in (body + iv_len, body):
        n = clear_ip_header(data, start, len(data))
        if n:
            return start, n
    return 0, 0


def may_be_clear(view: U8, body: I64, end: I64) -> Mask:
    """The rows of many keyless ESP datagrams that this module's tests might find clear.

    ``view``: the datagrams' bytes joined; ``body``: where each one's bytes after its
    ESP header start; ``end``: where it ends. A row is here when its bytes could pass
    ``clear_ip_header`` at ``body`` or after an 8-byte IV, or ``clear_transport`` or
    ``clear_icmp`` at either: the same tests on the cheap fields (version, lengths,
    the trailer's next header, pad length and first pad byte), without the header and
    segment checksums. So every row those functions pass is here (a superset:
    tests/decode/test_clear_bulk.py), and a row not here is no clear packet, which is what
    the steady lane needs to take it (checks/leaks.py, checks/context.py).
    """
    out = np.zeros(len(body), np.bool_)
    for start in (body, body + _KEYLESS_IV_LEN):
        out |= _may_be_ip(view, start, end)
    return out | _may_be_trailed(view, body, end)


def _may_be_ip(view: U8, start: I64, end: I64) -> Mask:
    """``clear_ip_header``'s tests but the IPv4 header checksum. The lengths are read only
    of the rows whose first byte names IPv4 or IPv6 (of ciphertext, one in eight)."""
    room = end - start
    found = np.zeros(len(start), np.bool_)
    rows = np.flatnonzero(room >= 20)
    first = view[start[rows]].astype(np.int64)
    v4 = (first >> 4 == 4) & (first & 0x0F >= 5)
    v6 = (first >> 4 == 6) & (room[rows] >= 40)
    total, limit = be_at(view, start[rows[v4]] + 2, 2), room[rows[v4]]
    found[rows[v4]] = ((first[v4] & 0x0F) * 4 <= total) & (total <= limit)
    plen, limit = be_at(view, start[rows[v6]] + 4, 2), room[rows[v6]]
    found[rows[v6]] = (40 + plen <= limit) & (limit - 40 - plen <= 16 + 255 + 2)
    return found


def clear_ips(view: U8, start: I64, end: I64) -> I64:
    """``clear_ip_header`` over many datagrams ending at ``end``: per row the length of the
    plausible clear IP header at ``start`` (0 if none), the IPv4 header checksum summed
    over its words in numpy (tests/decode/test_clear_bulk.py)."""
    out = np.where(_may_be_ip(view, start, end), 40, 0)
    first = u8(view, start, out > 0)
    v4 = (out > 0) & (first >> 4 == 4)
    rows = np.flatnonzero(v4)
    if len(rows):
        head = rows_within(view, start[rows], 60).astype(np.int64)  # the longest header
        words = (head[:, 0::2] << 8) | head[:, 1::2]
        ihl = (first[rows] & 0x0F) * 4
        used = np.arange(30) < (ihl // 2)[:, None]
        sound = (words * used).sum(axis=1) % 0xFFFF == 0  # never 0 in all: version 4
        out[rows] = np.where(sound, ihl, 0)
    return out


def _may_be_trailed(view: U8, start: I64, end: I64) -> Mask:
    """A trailer ``clear_transport`` or ``clear_icmp`` could accept before an ICV of any
    length an unknown SA may use: room, 4-byte alignment, a TCP, UDP, ICMP or ICMPv6 next
    header, a payload of at least 8 bytes and padding that starts 1 (RFC 4303 s2.4). The
    pad length and first pad byte are read only of the rows whose next header passes (of
    ciphertext, one in sixty-four)."""
    out = np.zeros(len(start), np.bool_)
    for icv in KEYLESS_ICV_LENS:
        n = end - icv - start
        rows = np.flatnonzero((n >= 10) & (n % 4 == 0))
        rows = rows[_TRAILED[view[end[rows] - icv - 1]]]
        last = end[rows] - icv - 2  # the pad length's byte
        pad = view[last].astype(np.int64)
        ok = n[rows] - 2 - pad >= 8
        first_pad = view[np.where(ok & (pad > 0), last - pad, last)]
        out[rows[ok & ((pad == 0) | (first_pad == 1))]] = True
    return out


def address_sums(view: U8, ip_at: I64, v6: Mask) -> I64:
    """Per datagram (its IP header at ``ip_at``: IPv4, or IPv6 where ``v6``), the sum of the
    16-bit words of its source and destination addresses: their part of the pseudo-header
    a TCP or UDP checksum covers (``_pseudo``). IPv4: 4 words from byte 12; IPv6: 16
    words from byte 8."""
    at = np.where(v6, ip_at + 8, ip_at + 12)
    sums: I64 = _be_words(view, at, 8)  # IPv4's addresses, IPv6's first 8 bytes
    six = np.flatnonzero(v6)
    if len(six):
        sums[six] += _be_words(view, at[six] + 8, 24)
    return sums


def _be_words(view: U8, at: I64, width: int) -> I64:
    """Per row, the sum of the ``width // 2`` big-endian words at ``at`` (``rows_within``:
    a datagram too short to hold them has no address summed right)."""
    sums: I64 = rows_within(view, at, width).view(">u2").sum(axis=1, dtype=np.int64)
    return sums


def word_sums(view: U8, start: I64, length: I64, ok: Mask) -> I64:
    """Per row where ``ok`` (else 0): the 16-bit big-endian words of ``view[start:start +
    length]`` summed modulo 0xFFFF, an odd last byte the high byte of a word: the sum
    ``internet_checksum`` folds. In one numpy pass (``_sums_by_words``) when the rows
    cover at least a quarter of the bytes that pass reads, else each row read as one
    big-endian number (``_sums_by_rows``, the way ``internet_checksum`` reads one): of
    ciphertext, only a few rows in a thousand are asked for."""
    rows = np.flatnonzero(ok)
    out = np.zeros(len(start), np.int64)
    if not len(rows):
        return out
    at, n = start[rows], length[rows]
    span = int((at + n).max() - at.min())
    sums = _sums_by_words if 4 * int(n.sum()) >= span else _sums_by_rows
    out[rows] = sums(view, at, n)
    return out


def _sums_by_rows(view: U8, start: I64, length: I64) -> I64:
    """``word_sums`` of every row, each read as one big-endian number modulo 0xFFFF
    (65536 = 1 modulo 0xFFFF: RFC 1071 s2(B))."""
    data = view.data
    return np.array(
        [
            (int.from_bytes(data[at : at + n]) << (8 * (n & 1))) % 0xFFFF
            for at, n in zip(start.tolist(), length.tolist(), strict=True)
        ],
        np.int64,
    )


def _sums_by_words(view: U8, start: I64, length: I64) -> I64:
    """``word_sums`` of every row from one ``np.add.reduceat`` over ``view`` read as
    native little-endian words from its even offsets, where a byte at an even offset
    weighs 1 and one at an odd offset 256. A word sum is byte-order independent up to a
    swap (RFC 1071 s2(B)), and a swap is a product by 256 modulo 0xFFFF (256 * 256 = 1):
    a segment from an odd offset weighs its bytes as its own big-endian words do, one
    from an even offset 256 times that. A row whose whole words would end at the last
    word of ``view`` (no word after it for ``reduceat`` to stop at) is read as one
    number; rows are sorted by offset, so ``reduceat`` reads the bytes between them once.
    Exact: a row's words sum below 2^32 (at most 32,768 words of a 65,535-byte segment)."""
    words = np.frombuffer(view.data, np.uint16, len(view) // 2)
    first = (start + 1) >> 1  # the whole words of each row: [first, last)
    last = (start + length) >> 1
    fits = last < len(words)
    order = np.argsort(start, kind="stable")
    order = order[(fits & (first < last))[order]]  # the rows with whole words
    total = np.zeros(len(start), np.int64)
    if len(order):
        low = int(first[order].min())  # only the words the rows span are read (and cast)
        span = words[low : int(last[order].max()) + 1]
        bounds = np.empty(2 * len(order), np.int64)
        bounds[0::2], bounds[1::2] = first[order] - low, last[order] - low
        total[order] = np.add.reduceat(span, bounds, dtype=np.uint32)[0::2]
    odd, end = (start & 1) == 1, start + length
    total += u8(view, start, odd & (length > 0)) << 8  # a first byte outside the words
    total += u8(view, end - 1, (end & 1 == 1) & (length > 0))  # a last byte outside them
    total = np.where(odd, total, total * 256) % 0xFFFF
    if not fits.all():
        late = np.flatnonzero(~fits)
        total[late] = _sums_by_rows(view, start[late], length[late])
    return total


def _padded(view: U8, at: I64, pad: I64) -> Mask:
    """Per row, are its ``pad`` bytes at ``at`` 1, 2, 3, ... (RFC 4303 s2.4)? Their first
    and last pad bytes are read first, every pad byte only of the rows those pass (a
    random pad length goes to 255)."""
    out = np.ones(len(at), np.bool_)
    rows = np.flatnonzero(pad > 0)
    ends = (view[at[rows]] == 1) & (view[at[rows] + pad[rows] - 1] == pad[rows])
    out[rows[~ends]] = False
    rows = rows[ends & (pad[rows] > 2)]
    if len(rows):
        width = int(pad[rows].max())
        want = np.arange(1, width + 1)
        got = rows_within(view, at[rows], width)
        out[rows[((got != want) & (want <= pad[rows, None])).any(axis=1)]] = False
    return out


@dataclass(frozen=True, slots=True)
class ClearAt:
    """What the per-packet tests say at one place of many keyless datagrams, per row
    (``clear_rows``): ``ip``, the length of the plausible clear IP header
    ``clear_ip_header`` finds (else 0); ``packet``, whether ``trailer_follows`` after it;
    ``proto`` and ``size``, the next header (6, 17) and header length of the TCP or UDP
    segment ``clear_transport`` finds (else 0, 0); ``icmp``, the next header (1, 58)
    ``clear_icmp`` gives (else 0); each with ``KEYLESS_ICV_LENS``."""

    ip: I64
    packet: Mask
    proto: I64
    size: I64
    icmp: I64


@dataclass(frozen=True, slots=True)
class ClearRows:
    """``ClearAt`` after an 8-byte IV (``after_iv``) and right after the ESP header
    (``at_body``): the two places ``clear_words`` reads."""

    after_iv: ClearAt
    at_body: ClearAt


@dataclass(frozen=True, slots=True)
class _Trailers:
    """Every (row, ICV length) whose bytes from ``body`` to the ICV end in a sound ESP
    trailer after at least 8 bytes (``_trailers``), rows in order and each row's ICV
    lengths in ``KEYLESS_ICV_LENS``' order: its row, next header and payload length
    from ``body``."""

    row: I64
    nh: I64
    plen: I64


# the ICV lengths as a row of columns, and the next headers a clear packet's trailer may
# name: ICMP, IPv4, TCP, UDP, IPv6, ICMPv6 (one gather over a byte's 256 values)
_ICVS = np.array(KEYLESS_ICV_LENS, np.int64)
_NAMED = np.zeros(256, np.bool_)
_NAMED[[1, 4, *_TRANSPORT, 41, 58]] = True
# per first byte of a message: a type ``clear_icmp`` accepts under next header 1 (ICMP), 58
_ICMP_KINDS = {nh: np.isin(np.arange(256), sorted(types)) for nh, types in _ICMP_TYPES.items()}


def clear_rows(view: U8, body: I64, end: I64, ip_at: I64) -> ClearRows:
    """``clear_ip_header`` and ``trailer_follows``, ``clear_transport`` and ``clear_icmp``
    (each with ``KEYLESS_ICV_LENS``, in their order) after an 8-byte IV and right after
    the ESP header (at ``body``) of many datagrams ending at ``end``, whose outer IP
    header is at ``ip_at`` (its addresses: the pseudo-header's); the same answers
    (tests/decode/test_clear_bulk.py).

    Both places end at the same trailer, so each row's trailers are read once
    (``_trailers``), and each segment's words are summed once: the sum after the IV is
    the sum from ``body`` less its first 8 bytes' (RFC 1071 s2: a sum of 16-bit words,
    and 8 is even)."""
    v6 = view[ip_at] >> 4 == 6
    addrs = address_sums(view, ip_at, v6)
    t = _trailers(view, body, end)
    after, here = (_Place.of(view, t, body, shift, v6, addrs) for shift in (_KEYLESS_IV_LEN, 0))
    base = body[t.row]
    whole = word_sums(view, base, t.plen, after.summed | here.summed)
    head = _be_words(view, base, _KEYLESS_IV_LEN)  # the IV's words, not after it
    return ClearRows(
        after.found(view, t, body + _KEYLESS_IV_LEN, end, (whole - head) % 0xFFFF),
        here.found(view, t, body, end, whole),
    )


def _trailers(view: U8, body: I64, end: I64) -> _Trailers:
    """``_Trailers`` of the datagrams at ``body`` ending at ``end``: for each ICV length,
    room for a trailer after 8 bytes, 4-byte alignment (RFC 4303 s2.4), a next header
    in ``_NAMED`` and padding 1, 2, 3, ... (``_padded``), as ``parse_trailer`` reads one.
    Both places ``clear_rows`` reads end here."""
    e = end[:, None] - _ICVS  # where the ICV of each length would start
    room = e - body[:, None]
    ok = (room >= 10) & (room % 4 == 0)
    nh = view[np.where(ok, e - 1, 0)].astype(np.int64)
    ok &= _NAMED[nh]
    pad = view[np.where(ok, e - 2, 0)].astype(np.int64)
    ok &= room - 2 - pad >= 8
    pairs = np.flatnonzero(ok)  # row by row, the ICV lengths in their order
    row = pairs // len(_ICVS)
    pad, last = pad.ravel()[pairs], e.ravel()[pairs] - 2
    sound = _padded(view, last - pad, pad)
    return _Trailers(row[sound], nh.ravel()[pairs][sound], (last - pad - body[row])[sound])


@dataclass(frozen=True, slots=True)
class _Place:
    """Per pair of ``_Trailers``, what one place's bytes (``shift`` bytes after ``body``,
    ``plen`` of them to the trailer) hold before any checksum: a TCP or UDP header of
    ``size`` bytes (``segment``), an ICMP or ICMPv6 type ``clear_icmp`` takes
    (``message``), and the words of the pseudo-header its checksum covers (RFC 768,
    RFC 8200 s8.1, RFC 4443 s2.3; none for ICMP, RFC 792)."""

    at: I64
    plen: I64
    size: I64
    segment: Mask
    message: Mask
    pseudo: I64

    @classmethod
    def of(cls, view: U8, t: _Trailers, body: I64, shift: int, v6: Mask, addrs: I64) -> _Place:
        """The pairs' headers ``shift`` bytes after ``body`` (``clear_transport``'s and
        ``clear_icmp``'s tests before the checksum)."""
        at, plen, nh, ipv6 = body[t.row] + shift, t.plen - shift, t.nh, v6[t.row]
        live = plen >= 8
        udp, tcp = live & (nh == 17), live & (nh == 6) & (plen >= 20)
        length = read_be(view, at + 4, udp, 2)
        size = np.where(udp, np.where(length == plen, 8, 0), (u8(view, at + 12, tcp) >> 4) * 4)
        kind = u8(view, at, live)
        v4 = nh == 1
        message = live & np.where(v4, _ICMP_KINDS[1][kind], ipv6 & _ICMP_KINDS[58][kind])
        message &= v4 | (nh == 58)  # ICMPv6 over IPv6 only
        words = np.where(ipv6, (plen >> 16) + (plen & 0xFFFF), plen)
        pseudo = np.where(v4, 0, addrs[t.row] + nh + words)
        return cls(at, plen, size, (udp | tcp) & (size >= 8) & (size <= plen), message, pseudo)

    @property
    def summed(self) -> Mask:
        """The pairs whose words are summed: a segment or message by its header."""
        checked: Mask = self.segment | self.message
        return checked

    def found(self, view: U8, t: _Trailers, start: I64, end: I64, total: I64) -> ClearAt:
        """The ``ClearAt`` of this place (``start``, per row), the pairs' words summing to
        ``total`` from it (modulo 0xFFFF): a row's first pair that verifies names its
        segment or message."""
        verified = (total + self.pseudo) % 0xFFFF == 0
        segment, message = self.segment & verified, self.message & verified
        # no pseudo-header: a message of zeros sums to 0 and does not verify (clear_icmp)
        icmp = np.flatnonzero(message & (t.nh == 1))  # few: pings
        for i in icmp[be_at(view, self.at[icmp], 8) == 0]:
            message[i] = any(view[int(self.at[i]) : int(self.at[i] + self.plen[i])])
        ip = clear_ips(view, start, end)
        n = len(start)
        return ClearAt(
            ip,
            _ip_packets(view, start, ip, t, self.plen),
            _first(n, t.row, segment, t.nh),
            _first(n, t.row, segment, self.size),
            _first(n, t.row, message, t.nh),
        )


def _ip_packets(view: U8, start: I64, ip: I64, t: _Trailers, plen: I64) -> Mask:
    """``trailer_follows`` of each row's clear IP header (at ``start``, ``ip`` bytes long,
    else 0): a pair of its trailers whose payload is the header's whole packet (IPv4:
    its total length; IPv6: 40 and its payload length) and names its version (4, 41)."""
    out = np.zeros(len(start), np.bool_)
    pairs = np.flatnonzero(ip[t.row] > 0)  # of the rows with a header only
    at = start[t.row[pairs]]
    v4 = view[at] >> 4 == 4
    total = np.where(v4, 0, 40) + be_at(view, np.where(v4, at + 2, at + 4), 2)
    mine = (plen[pairs] == total) & (t.nh[pairs] == np.where(v4, 4, 41))
    out[t.row[pairs[mine]]] = True
    return out


def _first(n: int, row: I64, ok: Mask, value: I64) -> I64:
    """Per row of ``n``, the ``value`` of its first pair ``ok`` (pairs in row order), else 0."""
    picked = np.flatnonzero(ok)
    rows = row[picked]
    first = np.ones(len(picked), np.bool_)
    first[1:] = rows[1:] != rows[:-1]
    out = np.zeros(n, np.int64)
    out[rows[first]] = value[picked[first]]
    return out
