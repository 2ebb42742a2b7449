"""The steady lane's plaintexts, as columns: the ESP trailer and the inner 5-tuple.

In: the plaintexts of a batch's packets that verified (bytes, in row
order), the outer addresses of each as text, the ciphertext's first
``MIN_RUN`` bytes of each, and which are clear by design (GMAC). Out:
``PlainColumns``: ``plain`` marks the rows that are the plain case (sound
trailer, inner headers that decode, the ciphertext not equal to the
plaintext unless clear by design, at least ``HEAD_LEN`` bytes), and
their trailer and inner columns, exactly as trailer.py and decode/inner.py
give them. Raises nothing: any other row is simply not marked.

RFC 4303 s2.4 (padding 1, 2, 3, ...; 4-byte alignment), s2.6 (next header
59); RFC 791 s3.1 and RFC 8200 s3 for the inner IP header when the next
header is 4 or 41. Rows of a layout not vectorised here (inner IPv6 with
extension headers, say) go through decode/inner.py one by one.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from espforensics.checks.context import HEAD_LEN
from espforensics.checks.leaks import MIN_RUN
from espforensics.decode.inner import (
    CHECKSUM_AT,
    INNER_FRAGMENT,
    NATT_TRANSPORT,
    check_inner,
    fragment_name,
    has_ports,
    l4_name,
    ntop,
    parse_inner,
    unchecked_protocol,
)
from espforensics.engine.wire import I64, U8, Mask, read_be
from espforensics.errors import MalformedPacket
from espforensics.model import InnerChecksum
from espforensics.trailer import valid_next_header

_MAX_PAD = 255
_VALID_NH = np.array([valid_next_header(nh) for nh in range(256)])
_PORTS = np.array([has_ports(p) for p in range(256)])
Strs = npt.NDArray[np.object_]
_LITTLE = sys.byteorder == "little"
_SUM_ROWS = 256  # rows summed per reduceat call (_spans)


@dataclass(frozen=True, slots=True)
class PlainColumns:
    """Trailer and inner columns of verified plaintexts; rows not ``plain`` are unset."""

    plain: Mask
    payload_len: I64
    pad_len: I64
    next_header: I64
    inner_proto: Strs
    inner_src: Strs
    inner_dst: Strs
    inner_sport: I64  # -1: empty
    inner_dport: I64
    heads: npt.NDArray[np.uint8]  # rows of each plaintext's first HEAD_LEN bytes
    checksum: Strs  # inner_checksum: ok, none or not_checked (the lane takes no other)
    checksum_detail: Strs  # the detail of a not_checked row, else ""
    tfc_len: I64  # -1: empty


@dataclass(frozen=True, slots=True)
class Outer:
    """Per row, what a transport-mode checksum takes from the outer header."""

    words: I64  # the sum of the outer addresses' 16-bit words (RFC 1071)
    v4: Mask  # the outer header is IPv4
    natt: Mask  # ESP in UDP: NAT-T transport checksums are not checked (RFC 3948 s3.1.2)


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where the inner packet of each row sits in the joined plaintexts."""

    view: U8
    start: I64
    payload: I64
    nh: I64
    v4: Mask
    v6: Mask
    proto: I64
    l4_at: I64
    l4_end: I64


def _names(values: I64, ok: Mask, name: object) -> Strs:
    out = np.full(len(values), "", dtype=object)
    for v in np.unique(values[ok]).tolist():
        out[ok & (values == v)] = name(v)  # type: ignore[operator]
    return out


def _addresses(view: npt.NDArray[np.uint8], at: I64, ok: Mask, width: int) -> Strs:
    """Text of the ``width``-byte addresses at ``at`` (one ntop per distinct address)."""
    out = np.full(len(at), "", dtype=object)
    rows = np.flatnonzero(ok)
    if not len(rows):
        return out
    raw = view[at[rows, None] + np.arange(width)]
    packed = raw.view(np.dtype((np.void, width))).ravel()
    uniq, inverse = np.unique(packed, return_inverse=True)
    text = np.array([ntop(u.tobytes()) for u in uniq], dtype=object)
    out[rows] = text[inverse.ravel()]
    return out


def decode_plaintexts(
    plains: list[bytes],
    outer_src: Strs,
    outer_dst: Strs,
    cipher_heads: npt.NDArray[np.uint8],
    clear: Mask,
    outer: Outer,
) -> PlainColumns:
    """The trailer and inner columns of each plaintext, and which rows are the plain case."""
    m = len(plains)
    n = np.fromiter(map(len, plains), np.int64, m)
    start = np.zeros(m, np.int64)
    np.cumsum(n[:-1], out=start[1:])
    view = np.frombuffer(b"".join([*plains, bytes(64)]), np.uint8)
    end = start + n
    ok = n >= max(HEAD_LEN, 2)
    pad = np.where(ok, view[np.where(ok, end - 2, 0)], 0).astype(np.int64)
    nh = np.where(ok, view[np.where(ok, end - 1, 0)], 0).astype(np.int64)
    payload = n - 2 - pad
    ok &= (payload >= 0) & (n % 4 == 0) & _VALID_NH[nh]
    for k in range(int(pad[ok].max(initial=0))):  # RFC 4303 s2.4: pad bytes 1, 2, 3, ...
        has = ok & (pad > k)
        ok &= ~has | (view[np.where(has, start + payload + k, 0)] == k + 1)
    # The leak check's case: ciphertext equal to plaintext over MIN_RUN bytes (unless
    # ``clear``: GMAC's payload is in clear by design, RFC 4543 s3.2).
    heads = view[np.where(ok, start, 0)[:, None] + np.arange(HEAD_LEN)]
    ok &= clear | ~(heads[:, :MIN_RUN] == cipher_heads[:, :MIN_RUN]).all(axis=1)

    # -- inner headers: transport (ports lead), or an inner IPv4 / IPv6 packet
    ip = ok & ((nh == 4) | (nh == 41))
    first = np.where(ip & (payload > 0), view[np.where(ip, start, 0)] >> 4, 0)
    v4 = ip & (first == 4) & (payload >= 20)
    ihl = (np.where(v4, view[np.where(v4, start, 0)], 0).astype(np.int64) & 0x0F) * 4
    total4 = read_be(view, start + 2, v4, 2)
    v4 &= (ihl >= 20) & (total4 >= ihl) & (payload >= ihl)
    frag = read_be(view, start + 6, v4, 2)
    later = v4 & (frag & 0x1FFF != 0)  # a fragment past the first: no upper-layer header
    v6 = ip & (first == 6) & (payload >= 40)
    nxt6 = np.where(v6, view[np.where(v6, start + 6, 0)], 0).astype(np.int64)
    v6 &= ~np.isin(nxt6, (0, 43, 44, 60))
    total6 = 40 + read_be(view, start + 4, v6, 2)
    proto = np.where(v4, np.where(v4, view[np.where(v4, start + 9, 0)], 0), nxt6).astype(np.int64)
    proto = np.where(ip, proto, nh)
    l4_at = np.where(v4, start + ihl, np.where(v6, start + 40, start))
    l4_end = np.where(v4, start + np.minimum(total4, payload), start + payload)
    l4_end = np.where(v6, start + np.minimum(total6, payload), l4_end)
    ported = ok & ~later & _PORTS[proto] & ((v4 | v6) | ~ip)
    fast = ok & (~ip | v4 | v6) & ~(ported & (l4_end - l4_at < 4))
    sport = np.where(ported & fast, read_be(view, l4_at, ported & fast, 2), -1)
    dport = np.where(ported & fast, read_be(view, l4_at + 2, ported & fast, 2), -1)
    name = np.where(later, _names(proto, fast & later, fragment_name), "")
    name = np.where(fast & ~later, _names(proto, fast & ~later, l4_name), name)
    src = np.where(ip, "", outer_src).astype(object)
    dst = np.where(ip, "", outer_dst).astype(object)
    for version, mask, width, at in ((4, v4 & fast, 4, 12), (6, v6 & fast, 16, 8)):
        src = np.where(mask, _addresses(view, start + at, mask, width), src)
        dst = np.where(mask, _addresses(view, start + at + width, mask, width), dst)
        del version
    src, dst, name = src.astype(object), dst.astype(object), name.astype(object)
    layout = _Layout(view, start, payload, nh, v4 & fast, v6 & fast, proto, l4_at, l4_end)
    status, detail, tfc = _checksums(layout, ok & fast, outer)
    ok &= (status != "") | ~fast
    for row in np.flatnonzero(ok & ~fast).tolist():  # the layouts decoded one by one
        body = plains[row][: int(payload[row])]
        try:
            inner = parse_inner(int(nh[row]), body, str(outer_src[row]), str(outer_dst[row]))
        except MalformedPacket:
            ok[row] = False
            continue
        name[row], src[row], dst[row] = inner.proto, inner.src, inner.dst
        sport[row] = -1 if inner.sport is None else inner.sport
        dport[row] = -1 if inner.dport is None else inner.dport
        ok[row] = _one_by_one(row, body, int(nh[row]), (status, detail, tfc))
    checks = (status, detail, tfc)
    return PlainColumns(ok, payload, pad, nh, name, src, dst, sport, dport, heads, *checks)


def _one_by_one(row: int, body: bytes, nh: int, out: tuple[Strs, Strs, I64]) -> bool:
    """A row of a layout not vectorised: its inner packet checked by decode/inner.py.

    Tunnel mode only (a transport row here is a cut header: the per-frame
    path's); a bad or partial checksum is the per-frame path's too.
    """
    if nh not in (4, 41):
        return False
    found = check_inner(nh, body, b"", b"", "")
    if found.status in (InnerChecksum.BAD, InnerChecksum.PARTIAL):
        return False
    status, detail, tfc = out
    status[row], detail[row] = found.status.value, found.detail
    tfc[row] = -1 if found.tfc_len is None else found.tfc_len
    return True


def _fold(total: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """RFC 1071: a sum of 16-bit words folded to 16 bits (0xffff when the checksum verifies)."""
    for _ in range(3):
        total = (total & np.uint64(0xFFFF)) + (total >> np.uint64(16))
    return total


def _words(view: U8, at: I64, rows: Mask, width: int) -> npt.NDArray[np.uint64]:
    """The sum of the 16-bit words of the ``width`` (even) bytes at ``at`` of each row."""
    out = np.zeros(len(at), np.uint64)
    pick = np.flatnonzero(rows)
    if len(pick):
        idx = at[pick, None] + np.arange(0, width, 2)
        out[pick] = (view[idx].astype(np.uint64) << np.uint64(8) | view[idx + 1]).sum(axis=1)
    return out


def _spans(view: U8, at: I64, end: I64, rows: Mask) -> npt.NDArray[np.uint64]:
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


def _checksums(x: _Layout, rows: Mask, outer: Outer) -> tuple[Strs, Strs, I64]:
    """inner_checksum, its detail and tfc_len of the vectorised rows, as check_inner gives them.

    A row left "" is not the lane's: a bad or partial checksum (the checks'
    finding), or a case whose detail carries numbers (cut headers, lengths that
    do not fit, IPv4 options), left to the per-frame path.
    """
    m = len(rows)
    status = np.full(m, "", dtype=object)
    detail = np.full(m, "", dtype=object)
    view, start = x.view, x.start
    rows = rows & (start % 2 == 0)  # an odd start: its words straddle the buffer's
    ip = rows & (x.v4 | x.v6)
    transport = rows & ~ip & (x.nh != 4) & (x.nh != 41)
    total = np.where(
        x.v4, read_be(view, start + 2, x.v4, 2), 40 + read_be(view, start + 4, x.v6, 2)
    )
    tfc = np.where(ip, x.payload - total, -1)
    version = np.where(x.v4, 4, 6)
    fits = (total <= x.payload) & (version == np.where(x.nh == 4, 4, 6))
    ihl20 = x.v4 & (view[np.where(x.v4, start, 0)] == 0x45)
    header_ok = _fold(_words(view, start, ihl20 & rows, 20)) == np.uint64(0xFFFF)
    ip &= fits & (x.v6 | (ihl20 & header_ok))
    frag = ip & x.v4 & (read_be(view, start + 6, ip & x.v4, 2) & 0x3FFF != 0)
    # -- the cases with nothing to compute
    status[transport & (x.nh == 59)] = InnerChecksum.NONE.value
    natt = transport & outer.natt & (x.nh != 59)
    status[natt], detail[natt] = InnerChecksum.NOT_CHECKED.value, NATT_TRANSPORT
    status[frag], detail[frag] = InnerChecksum.NOT_CHECKED.value, INNER_FRAGMENT
    v4_addrs = np.where(ip, x.v4, outer.v4)
    known = np.isin(x.proto, list(CHECKSUM_AT)) & ((x.proto != 1) | v4_addrs)
    todo = ((transport & ~natt) | (ip & ~frag)) & (x.nh != 59)
    for p in np.unique(x.proto[todo & ~known]).tolist():
        other = todo & ~known & (x.proto == p)
        status[other], detail[other] = InnerChecksum.NOT_CHECKED.value, unchecked_protocol(p)
    todo &= known
    _l4_sums(x, todo, outer, status)
    return status, detail, np.where(status != "", tfc, -1)


def _l4_sums(x: _Layout, todo: Mask, outer: Outer, status: Strs) -> None:
    """Mark ``ok`` (or ``none``: UDP checksum 0) the rows of ``todo`` whose checksum verifies."""
    view, proto = x.view, x.proto
    seg_len = x.l4_end - x.l4_at
    udp = todo & (proto == 17)
    ulen = read_be(view, x.l4_at + 4, udp & (seg_len >= 8), 2)
    todo &= np.where(udp, (ulen >= 8) & (ulen <= seg_len), True)
    seg_len = np.where(udp, ulen, seg_len)
    todo &= seg_len >= np.where(proto == 6, 20, np.where(udp, 8, 4))
    at = np.zeros(len(proto), np.int64)
    for p, offset in CHECKSUM_AT.items():
        at[proto == p] = offset
    stored = read_be(view, x.l4_at + at, todo, 2)
    zero = udp & todo & (stored == 0)  # no checksum sent (RFC 768)
    status[zero] = InnerChecksum.NONE.value
    todo &= ~zero
    inner = (x.v4 | x.v6) & todo
    addrs = np.where(
        x.v4,
        _words(view, x.start + 12, inner & x.v4, 8),
        _words(view, x.start + 8, inner & x.v6, 32),
    )
    addrs = np.where(inner, addrs, outer.words.astype(np.uint64))
    pseudo = np.where(
        proto == 1, np.uint64(0), addrs + proto.astype(np.uint64) + seg_len.astype(np.uint64)
    )
    total = pseudo + _spans(view, x.l4_at, x.l4_at + seg_len, todo)
    good = todo & (_fold(total) == np.uint64(0xFFFF))
    status[good] = InnerChecksum.OK.value
