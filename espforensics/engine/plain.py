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

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from espforensics.checks.context import HEAD_LEN
from espforensics.checks.leaks import MIN_RUN
from espforensics.decode.inner import (
    fragment_name,
    has_ports,
    l4_name,
    ntop,
    parse_inner,
)
from espforensics.engine.wire import I64, Mask, read_be
from espforensics.errors import MalformedPacket
from espforensics.trailer import valid_next_header

_MAX_PAD = 255
_VALID_NH = np.array([valid_next_header(nh) for nh in range(256)])
_PORTS = np.array([has_ports(p) for p in range(256)])
Strs = npt.NDArray[np.object_]


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
    return PlainColumns(ok, payload, pad, nh, name, src, dst, sport, dport, heads)
