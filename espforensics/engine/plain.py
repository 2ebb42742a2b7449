"""The steady lane's plaintexts, as columns: the ESP trailer and the inner 5-tuple.

In: the plaintexts of a batch's packets that verified (bytes, in row
order), the outer addresses of each as text, the ciphertext's first
``MIN_RUN`` bytes of each, and which are clear by design (GMAC). Out:
``PlainColumns``: ``plain`` marks the rows that are the plain case (sound
trailer, inner headers that decode, the ciphertext not equal to the
plaintext unless clear by design, at least ``HEAD_LEN`` bytes), and
their trailer and inner columns, exactly as trailer.py and decode/inner.py
give them. Raises nothing: any other row is simply not marked.

Only the glue lives here: each rule's bulk form sits beside its per-packet
form, and tests/test_bulk_rules.py holds them equal row by row:
trailer.parse_trailers (RFC 4303 s2.4, s2.6), decode.inner.parse_inners
(RFC 791 s3.1, RFC 8200 s3 for an inner IP header) and
checks.checksum.check_inners (the inner checksums, RFC 1071). Rows of a
layout not vectorised (inner IPv6 with extension headers, say) go through
decode/inner.py one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from espforensics.checks.checksum import Outer, Payloads, check_inners
from espforensics.checks.context import HEAD_LEN
from espforensics.checks.leaks import MIN_RUN
from espforensics.columns import I64, Mask, Strs
from espforensics.decode.inner import check_inner, parse_inner, parse_inners
from espforensics.errors import MalformedPacket
from espforensics.model import InnerChecksum
from espforensics.trailer import parse_trailers

__all__ = ["Decoded", "Outer", "PlainColumns", "Strs", "decode_plaintexts"]


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

    def take(self, rows: npt.NDArray[np.intp]) -> PlainColumns:
        """These rows, in this order."""
        return PlainColumns(*(getattr(self, f)[rows] for f in self.__slots__))


@dataclass(frozen=True, slots=True)
class Decoded:
    """Packets of a batch opened and decoded: those that verified (candidate positions of
    the plan, in the order its jobs opened them) and their columns, row for row."""

    good: npt.NDArray[np.intp]
    columns: PlainColumns


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
    long = n >= HEAD_LEN
    trailers = parse_trailers(view, start, n)
    ok = long & trailers.sound
    pad = np.where(long, trailers.pad_len, 0)
    nh = np.where(long, trailers.next_header, 0)
    payload = n - 2 - pad
    # The leak check's case: ciphertext equal to plaintext over MIN_RUN bytes (unless
    # ``clear``: GMAC's payload is in clear by design, RFC 4543 s3.2).
    heads = view[np.where(ok, start, 0)[:, None] + np.arange(HEAD_LEN)]
    ok &= clear | ~(heads[:, :MIN_RUN] == cipher_heads[:, :MIN_RUN]).all(axis=1)
    inner = parse_inners(view, start, payload, nh, ok, outer_src, outer_dst)
    fast = inner.decoded
    name, src, dst, sport, dport = inner.proto_name, inner.src, inner.dst, inner.sport, inner.dport
    status, detail, tfc = check_inners(Payloads(view, start, payload, nh), inner, ok & fast, outer)
    ok &= (status != "") | ~fast
    for row in np.flatnonzero(ok & ~fast).tolist():  # the layouts decoded one by one
        body = plains[row][: int(payload[row])]
        try:
            found = parse_inner(int(nh[row]), body, str(outer_src[row]), str(outer_dst[row]))
        except MalformedPacket:
            ok[row] = False
            continue
        name[row], src[row], dst[row] = found.proto, found.src, found.dst
        sport[row] = -1 if found.sport is None else found.sport
        dport[row] = -1 if found.dport is None else found.dport
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
