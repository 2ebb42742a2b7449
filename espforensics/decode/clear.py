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
(a superset: the rows worth a closer look), then ``clear_ips``,
``trailers_follow``, ``clear_transports`` and ``clear_icmps`` (the same tests
over many rows, tests/decode/test_clear_bulk.py). Raises nothing.

Used by the leak check (checks/leaks.py) and by ``PacketContext``, which
asks once per packet whether a keyless packet is in clear from its ESP
header on (``ecb(cipher_null)``, RFC 2410), so that the IV checks do not
take its payload for an IV.
"""

from __future__ import annotations

import numpy as np

from espforensics.decode.trailer import parse_trailer
from espforensics.model.arrays import I64, U8, Mask, read_be, u8

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
    """``clear_ip_header``'s tests but the IPv4 header checksum."""
    room = end - start
    ok = room >= 20
    first = u8(view, start, ok)
    v4 = ok & (first >> 4 == 4) & (first & 0x0F >= 5)
    total = read_be(view, start + 2, v4, 2)
    v4 &= ((first & 0x0F) * 4 <= total) & (total <= room)
    v6 = ok & (first >> 4 == 6) & (room >= 40)
    plen = read_be(view, start + 4, v6, 2)
    v6 &= (40 + plen <= room) & (room - 40 - plen <= 16 + 255 + 2)
    found: Mask = v4 | v6
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
        at = np.minimum(start[rows, None] + np.arange(60), len(view) - 1)  # the longest header
        head = view[at].astype(np.int64)
        words = (head[:, 0::2] << 8) | head[:, 1::2]
        ihl = (first[rows] & 0x0F) * 4
        used = np.arange(30) < (ihl // 2)[:, None]
        sound = (words * used).sum(axis=1) % 0xFFFF == 0  # never 0 in all: version 4
        out[rows] = np.where(sound, ihl, 0)
    return out


def trailers_follow(view: U8, start: I64, end: I64, ok: Mask) -> Mask:
    """``trailer_follows`` with ``KEYLESS_ICV_LENS`` over many datagrams ending at ``end``,
    for the rows ``ok`` (a clear IP header at ``start``): its packet followed exactly by
    a sound trailer that names its version, then an ICV of one of the lengths."""
    first = u8(view, start, ok)
    v4 = ok & (first >> 4 == 4)
    total = np.where(v4, read_be(view, start + 2, v4, 2), 40 + read_be(view, start + 4, ok, 2))
    proto = np.where(v4, 4, 41)
    out = np.zeros(len(start), np.bool_)
    for icv in KEYLESS_ICV_LENS:
        e = end - icv
        n = e - start
        mine = ok & ~out & (n >= 2)
        pad = u8(view, e - 2, mine)
        nh = u8(view, e - 1, mine)
        mine &= (n - 2 - pad == total) & (nh == proto) & (n % 4 == 0)
        out |= _padded(view, start + total, pad, mine)
    return out


def _may_be_trailed(view: U8, start: I64, end: I64) -> Mask:
    """A trailer ``clear_transport`` or ``clear_icmp`` could accept before an ICV of any
    length an unknown SA may use: room, 4-byte alignment, a TCP, UDP, ICMP or ICMPv6 next
    header, a payload of at least 8 bytes and padding that starts 1 (RFC 4303 s2.4)."""
    out = np.zeros(len(start), np.bool_)
    for icv in KEYLESS_ICV_LENS:
        n = end - icv - start
        ok = (n >= 10) & (n % 4 == 0)
        nh = u8(view, end - icv - 1, ok)
        pad = u8(view, end - icv - 2, ok)
        ok &= _TRAILED[nh] & (n - 2 - pad >= 8)
        first_pad = u8(view, end - icv - 2 - pad, ok & (pad > 0))
        out |= ok & ((pad == 0) | (first_pad == 1))
    return out


def address_sums(view: U8, ip_at: I64, v6: Mask) -> I64:
    """Per datagram (its IP header at ``ip_at``: IPv4, or IPv6 where ``v6``), the sum of the
    16-bit words of its source and destination addresses: their part of the pseudo-header
    a TCP or UDP checksum covers (``_pseudo``)."""
    out = np.zeros(len(ip_at), np.int64)
    for k in range(16):  # IPv4: 4 words from byte 12; IPv6: 16 words from byte 8
        at = np.where(v6, ip_at + 8, ip_at + 12) + 2 * k
        out += read_be(view, at, v6 | (k < 4), 2)
    return out


def _sums_ok(view: U8, start: I64, length: I64, pseudo: I64, ok: Mask) -> Mask:
    """Per row where ``ok``: does ``internet_checksum`` verify over a pseudo-header whose
    words sum to ``pseudo`` and the segment ``view[start:start + length]``? Its words'
    sum (``word_sums``) with the pseudo-header's added is 0 modulo 0xFFFF. A sum of 0 in
    all does not verify either (``internet_checksum``): with a pseudo-header, whose
    protocol word is never 0, it cannot be; without one (ICMP) the caller tells a
    segment of zeros apart."""
    verified: Mask = ok & ((word_sums(view, start, length, ok) + pseudo) % 0xFFFF == 0)
    return verified


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


def _padded(view: U8, at: I64, pad: I64, ok: Mask) -> Mask:
    """``ok``, less the rows whose ``pad`` bytes at ``at`` are not 1, 2, 3, ... (RFC 4303
    s2.4), read for the rows where ``ok`` only."""
    rows = np.flatnonzero(ok & (pad > 0))
    if not len(rows):
        return ok
    width = int(pad[rows].max())
    want = np.arange(1, width + 1)
    got = view[np.minimum(at[rows, None] + np.arange(width), len(view) - 1)]
    bad = ((got != want) & (want <= pad[rows, None])).any(axis=1)
    out = ok.copy()
    out[rows[bad]] = False
    return out


# per first byte of a message: a type ``clear_icmp`` accepts under next header 1 (ICMP), 58
_ICMP_KINDS = {nh: np.isin(np.arange(256), sorted(types)) for nh, types in _ICMP_TYPES.items()}


def clear_icmps(view: U8, start: I64, end: I64, addr_sum: I64, v6: Mask) -> I64:
    """``clear_icmp`` with ``KEYLESS_ICV_LENS`` over many datagrams: the bytes at ``start``
    of datagrams ending at ``end``, the outer addresses' ``address_sums`` and version
    beside them. Per row, whether a clear ICMP message (an IPv4 checksum over the
    message alone) or ICMPv6 one (over IPv6 addresses' pseudo-header) of a type it
    takes, with a sound trailer naming it before an ICV of one of the lengths, is there:
    the next header naming it (1 or 58), else 0; the same tests in the same order of
    ICV lengths (tests/decode/test_clear_bulk.py)."""
    out = np.zeros(len(start), np.int64)
    for icv in KEYLESS_ICV_LENS:
        rows, plen, nh = _trailed(view, start, end - icv, out == 0, _NAMES_ICMP)
        v4 = nh == 1
        mine = v4 | v6[rows]  # ICMPv6 over IPv6 only
        rows, plen, nh, v4 = rows[mine], plen[mine], nh[mine], v4[mine]
        at = start[rows]
        kind = view[at]
        ok = np.where(v4, _ICMP_KINDS[1][kind], _ICMP_KINDS[58][kind])
        # RFC 792: the message alone; RFC 4443 s2.3: the pseudo-header's words too
        pseudo = np.where(v4, 0, addr_sum[rows] + 58 + (plen >> 16) + (plen & 0xFFFF))
        ok = _sums_ok(view, at, plen, pseudo, ok)
        # no pseudo-header: a message of zeros sums to 0 and does not verify (_sums_ok)
        for i in np.flatnonzero(ok & v4 & (read_be(view, at, ok, 8) == 0)).tolist():
            ok[i] = any(view[int(at[i]) : int(at[i] + plen[i])])
        out[rows[ok]] = nh[ok]
    return out


def clear_transports(view: U8, start: I64, end: I64, addr_sum: I64, v6: Mask) -> tuple[I64, I64]:
    """``clear_transport`` with ``KEYLESS_ICV_LENS`` over many datagrams: the bytes at
    ``start`` of datagrams ending at ``end``, the outer addresses' ``address_sums`` and
    version beside them. Per row (next header, header length): 6 (TCP) or 17 (UDP) and
    the segment's header length where ``clear_transport`` finds one, else (0, 0); the same
    tests in the same order of ICV lengths (tests/decode/test_clear_bulk.py)."""
    proto = np.zeros(len(start), np.int64)
    header = np.zeros(len(start), np.int64)
    for icv in KEYLESS_ICV_LENS:
        rows, plen, nh = _trailed(view, start, end - icv, proto == 0, _NAMES_TRANSPORT)
        at = start[rows]
        udp, tcp = nh == 17, (nh == 6) & (plen >= 20)
        length = read_be(view, at + 4, udp, 2)
        size = np.where(udp, np.where(length == plen, 8, 0), (u8(view, at + 12, tcp) >> 4) * 4)
        ok = (size >= 8) & (size <= plen)
        # the pseudo-header's words (RFC 768, RFC 8200 s8.1): addresses, protocol, length
        pseudo = addr_sum[rows] + nh + np.where(v6[rows], (plen >> 16) + (plen & 0xFFFF), plen)
        ok = _sums_ok(view, at, plen, pseudo, ok)
        proto[rows[ok]], header[rows[ok]] = nh[ok], size[ok]
    return proto, header


# per next header: one ``clear_transport`` takes (TCP, UDP), one ``clear_icmp`` takes
_NAMES_TRANSPORT = np.isin(np.arange(256), _TRANSPORT)
_NAMES_ICMP = np.isin(np.arange(256), sorted(_ICMP_TYPES))


def _trailed(view: U8, start: I64, end: I64, live: Mask, names: Mask) -> tuple[I64, I64, I64]:
    """Of the rows ``live``, those whose bytes from ``start`` to ``end`` (a datagram less
    an ICV) end in a sound ESP trailer (RFC 4303 s2.4: padding 1, 2, 3, ..., 4-byte
    aligned, as ``parse_trailer`` reads one) after a payload of at least 8 bytes, with a
    next header among ``names`` (a mask by value): the rows, their payload lengths and
    next headers. Only the rows still in play are read, the next header first (in
    ciphertext, one row in a hundred or fewer has one of these). The padding is read in
    one gather (``_padded``), not ``parse_trailers``' pass a pad byte: a random pad
    length of a row in play goes up to 255 (15% of a keyless NULL run, measured)."""
    rows = np.flatnonzero(live & (end - start >= 10))
    nh = view[end[rows] - 1].astype(np.int64)
    rows, nh = rows[names[nh]], nh[names[nh]]
    at, e = start[rows], end[rows]
    pad = view[e - 2].astype(np.int64)
    plen = e - at - 2 - pad
    ok = _padded(view, at + plen, pad, (plen >= 8) & ((e - at) % 4 == 0))
    return rows[ok], plen[ok], nh[ok]
