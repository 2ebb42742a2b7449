"""The steady lane's plaintexts, as columns: the ESP trailer and the inner 5-tuple.

In: the plaintexts of a batch's packets that verified (bytes, in row
order), the outer addresses of each as text, the ciphertext's first
``HEAD_LEN`` bytes of each, and which are clear by design (GMAC). Out:
``PlainColumns``: ``plain`` marks the rows that are the plain case (sound
trailer, inner headers that decode, at least ``HEAD_LEN`` bytes, no ESP or
IPComp inside, and no check's rule over plaintexts refuses them), and their
trailer, inner and inner checksum columns, exactly as decode/trailer.py,
decode/inner.py and the checks give them. Raises nothing: any other row is
simply not marked.

Only the glue lives here: the decoding's bulk forms sit beside their
per-packet forms, trailer.parse_trailers (RFC 4303 s2.4, s2.6) and
decode.inner.parse_inners (RFC 791 s3.1, RFC 8200 s3 for an inner IP
header), and so do the checks' rules over plaintexts, by the registry
``checks.PLAIN`` (the leak check's ciphertext equal to plaintext, the
inner checksums); tests/checks/test_bulk_rules.py holds them equal row by row.
Rows of a layout not vectorised (inner IPv6 with extension headers, say)
are decoded by decode/inner.py one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from espforensics.checks import PLAIN
from espforensics.checks.bulk import InnerChecks, Outer, Payloads, Plaintexts
from espforensics.checks.context import HEAD_LEN
from espforensics.decode.inner import l4_name, parse_inner, parse_inners
from espforensics.decode.ip import PROTO_ESP
from espforensics.decode.ipcomp import PROTO_IPCOMP
from espforensics.decode.trailer import parse_trailers
from espforensics.errors import MalformedPacket
from espforensics.model.arrays import I64, Mask, Strs, rows_at

__all__ = ["Decoded", "PlainColumns", "decode_plaintexts"]


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
    cipher_heads: npt.NDArray[np.uint8]  # rows of each ciphertext's first HEAD_LEN bytes
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
    heads = rows_at(view, np.where(ok, start, 0), HEAD_LEN)
    inner = parse_inners(view, start, payload, nh, ok, outer_src, outer_dst)
    name, src, dst, sport, dport = inner.proto_name, inner.src, inner.dst, inner.sport, inner.dport
    for row in np.flatnonzero(ok & ~inner.decoded).tolist():  # the layouts decoded one by one
        body = plains[row][: int(payload[row])]
        try:
            found = parse_inner(int(nh[row]), body, str(outer_src[row]), str(outer_dst[row]))
        except MalformedPacket:
            ok[row] = False
            continue
        name[row], src[row], dst[row] = found.proto, found.src, found.dst
        sport[row] = -1 if found.sport is None else found.sport
        dport[row] = -1 if found.dport is None else found.dport
    p = Plaintexts(Payloads(view, start, payload, nh), inner, heads, cipher_heads, clear, outer, ok)
    refused = np.zeros(m, np.bool_)
    checks = InnerChecks(np.full(m, "", dtype=object), np.full(m, "", dtype=object), np.full(m, -1))
    for rule in PLAIN:
        said = rule(p)
        if said.refused is not None:
            refused |= said.refused
        checks = checks if said.inner_checks is None else said.inner_checks
    inner_cols = (name, src, dst, sport, dport)
    columns = (checks.status, checks.detail, checks.tfc_len)
    plain = ok & ~refused & ~_carries(nh, name)
    return PlainColumns(plain, payload, pad, nh, *inner_cols, heads, cipher_heads, *columns)


_CARRIED = (PROTO_ESP, PROTO_IPCOMP)
_CARRIED_NAMES = tuple(l4_name(proto) for proto in _CARRIED)


def _carries(nh: I64, inner_proto: Strs) -> Mask:
    """Rows whose plaintext carries ESP or IPComp, in transport or tunnel mode: the
    per-frame path's (it analyzes the inner ESP layer, inflates IPComp)."""
    out = np.isin(nh, _CARRIED)
    for name in _CARRIED_NAMES:
        out |= inner_proto == name
    return out
