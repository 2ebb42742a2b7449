"""The ESP trailer of a decrypted payload: padding, pad length, next header.

In: the plaintext an AEAD returned (payload | padding | pad length | next
header). Out: ``Trailer`` with the payload length, pad length, next header
and a ``problem`` string ("" when sound). Raises nothing: a bad trailer is
a verdict, not an error.

RFC 4303 s2.4: padding bytes are 1, 2, 3, ... unless the algorithm says
otherwise, and pad length and next header end on a 4-byte boundary; with a
block cipher (CBC: RFC 3602 s3, RFC 2451) the ciphertext, as long as the
plaintext, is a whole number of the cipher's blocks.
RFC 4303 s2.6: next header 59 marks a dummy (TFC) packet. IANA: protocol
numbers 146-252 are unassigned and 255 is reserved.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from espforensics.model.arrays import I64, Mask
from espforensics.model.records import new_tuple

NO_NEXT_HEADER = 59
_PAD_PATTERN = bytes(range(1, 256))


class Trailer(NamedTuple):
    """What the ESP trailer says, and what is wrong with it."""

    payload_len: int
    pad_len: int
    next_header: int
    problem: str


def valid_next_header(nh: int) -> bool:
    """Is ``nh`` an assigned protocol number, or one reserved for experiments (RFC 3692)?"""
    return nh <= 145 or nh in (253, 254)


def parse_trailer(plaintext: bytes, block: int = 4) -> Trailer:
    """Split the plaintext and check its padding (RFC 4303 s2.4).

    ``block``: what the plaintext must be a whole number of (the cipher's
    block for CBC; 4 otherwise), checked first when it is more than 4.
    """
    n = len(plaintext)
    if block > 4 and n % block:
        why = f"ciphertext of {n} bytes is not a whole number of {block}-byte cipher blocks"
        return Trailer(0, 0, 0, why)
    if n < 2:
        return Trailer(0, 0, 0, f"plaintext of {n} bytes has no room for a trailer")
    pad_len, nh = plaintext[-2], plaintext[-1]
    payload_len = n - 2 - pad_len
    if payload_len < 0:
        return Trailer(0, pad_len, nh, f"pad length {pad_len} exceeds the {n - 2} bytes before it")
    pad = plaintext[payload_len : n - 2]
    if pad != _PAD_PATTERN[:pad_len]:
        i = next(i for i in range(pad_len) if pad[i] != i + 1)
        problem = f"pad byte {i + 1} is {pad[i]:#04x}, expected {i + 1:#04x}"
    elif n % 4:
        problem = f"trailer not 4-byte aligned: plaintext is {n} bytes"
    elif not valid_next_header(nh):
        problem = f"next header {nh} is not an assigned protocol"
    else:
        problem = ""
    return new_tuple(Trailer, (payload_len, pad_len, nh, problem))


_VALID_NH = np.array([valid_next_header(nh) for nh in range(256)])


class Trailers(NamedTuple):
    """``parse_trailer`` of many plaintexts at once (block 4): one row each."""

    sound: Mask  # the trailer's ``problem`` is ""; the other columns are set where it is
    payload_len: I64
    pad_len: I64
    next_header: I64


def parse_trailers(view: npt.NDArray[np.uint8], start: I64, n: I64) -> Trailers:
    """``parse_trailer(p)`` of each plaintext ``p = view[start:start + n]``, as columns.

    A row is ``sound`` exactly when ``parse_trailer(p).problem`` is empty
    (RFC 4303 s2.4: padding 1, 2, 3, ..., 4-byte alignment; an assigned next
    header). ``view`` must hold at least one byte past the last row's end.
    """
    end = start + n
    ok = n >= 2
    pad = np.where(ok, view[np.where(ok, end - 2, 0)], 0).astype(np.int64)
    nh = np.where(ok, view[np.where(ok, end - 1, 0)], 0).astype(np.int64)
    payload = n - 2 - pad
    ok &= (payload >= 0) & (n % 4 == 0) & _VALID_NH[nh]
    for k in range(int(pad[ok].max(initial=0))):  # RFC 4303 s2.4: pad bytes 1, 2, 3, ...
        has = ok & (pad > k)
        ok &= ~has | (view[np.where(has, start + payload + k, 0)] == k + 1)
    return Trailers(ok, payload, pad, nh)
