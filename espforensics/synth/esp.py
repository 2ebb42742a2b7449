"""Sealing ESP packets for rfc4106(gcm(aes)) SAs, with optional faults.

In: a ``SecurityAssociation``, the payload and its next header, a 64-bit
sequence number and the faults to inject. Out: the ESP packet as bytes
(SPI || seq_lo || IV || ciphertext || ICV), ready to follow an outer IP or
UDP header. Raises ``ValueError`` for impossible requests (a TFC or extra
padding length that breaks alignment, a pad length outside 0..255).

Encryption goes through ``espforensics.crypto.AeadContext.seal``; this
module never touches ``cryptography`` itself.

RFC 4303 s2.4: pad bytes are 1, 2, 3, ...; payload + padding + 2 is a
multiple of 4 (GCM has a block size of 1, so the 4-byte alignment rules).
RFC 4303 s2.7: TFC padding sits between the payload and the padding.
RFC 4303 s2.2.1: only the low 32 bits of the sequence number are sent.
Linux seqiv (primer s4): IV = seq64 (8 bytes, big endian) XOR a constant.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from espforensics.crypto import IV_LEN, AeadContext
from espforensics.keys.sa import SecurityAssociation

ESP_HEADER = struct.Struct(">II")
ALIGN = 4  # RFC 4303 s2.4: 32-bit alignment of pad length / next header
MAX_PAD = 255


@dataclass(frozen=True, slots=True)
class IvFromSeq:
    """Use the seqiv IV of another sequence number (e.g. seq - 1)."""

    seq64: int


@dataclass(frozen=True, slots=True)
class IvSeqOffset:
    """Use the seqiv IV of this packet's own sequence number plus ``delta``
    (``delta=-1``: the IV of the packet before, as the GSO bug does)."""

    delta: int


@dataclass(frozen=True, slots=True)
class IvFixed:
    """Use exactly these 8 bytes as the explicit IV."""

    iv: bytes


@dataclass(frozen=True, slots=True)
class IvRandom:
    """Use 8 bytes drawn from ``random.Random(seed)``."""

    seed: int


IvOverride = IvFromSeq | IvSeqOffset | IvFixed | IvRandom


@dataclass(frozen=True, slots=True)
class Trailer:
    """How to build the plaintext after the payload, faults included.

    ``tfc``: TFC padding bytes (zeros) after the payload, RFC 4303 s2.7.
    ``extra_pad``: more valid padding, a multiple of 4 (RFC 4303 s2.4
    allows up to 255 bytes). ``bad_pad``: pad bytes that are not 1, 2, 3,
    ... (needs at least one pad byte; one is forced by adding 4 when the
    natural padding is empty). ``pad_len_delta``: the pad length field
    lies by this much. ``next_header``: overrides the true next header.
    """

    tfc: int = 0
    extra_pad: int = 0
    bad_pad: bool = False
    pad_len_delta: int = 0
    next_header: int | None = None

    @property
    def faulty(self) -> bool:
        """True when a receiver checking the trailer must reject it."""
        return self.bad_pad or self.pad_len_delta != 0 or self.next_header is not None


CLEAN = Trailer()


def pad_length(data_len: int, extra_pad: int = 0) -> int:
    """RFC 4303 s2.4: pad so that data + pad + 2 is a multiple of 4."""
    if extra_pad % ALIGN:
        raise ValueError(f"extra padding {extra_pad} is not a multiple of {ALIGN}")
    return (-(data_len + 2)) % ALIGN + extra_pad


def build_plaintext(payload: bytes, next_header: int, trailer: Trailer = CLEAN) -> bytes:
    """payload || TFC || padding || pad length || next header."""
    body = payload + bytes(trailer.tfc)
    extra = trailer.extra_pad
    if trailer.bad_pad and pad_length(len(body), extra) == 0:
        extra += ALIGN
    n = pad_length(len(body), extra)
    padding = bytes(range(1, n + 1))
    if trailer.bad_pad:
        padding = bytes(n)  # zeros: every pad byte is wrong
    pad_len = n + trailer.pad_len_delta
    if not 0 <= pad_len <= MAX_PAD or n > MAX_PAD:
        raise ValueError(f"pad length {pad_len} does not fit one byte")
    nh = next_header if trailer.next_header is None else trailer.next_header
    return body + padding + bytes((pad_len, nh))


def seqiv(seq64: int, constant: bytes) -> bytes:
    """Linux seqiv: the 64-bit sequence number XOR the SA's constant."""
    return (seq64 ^ int.from_bytes(constant, "big")).to_bytes(IV_LEN, "big")


def flip_last_bit(packet: bytes) -> bytes:
    """The packet with the last bit of its ICV inverted."""
    return packet[:-1] + bytes((packet[-1] ^ 0x01,))


class EspSealer:
    """Builds the ESP packets of one SA.

    ``iv_constant`` is the seqiv secret of the SA's transform (8 bytes).
    """

    __slots__ = ("_ctx", "iv_constant", "sa")

    def __init__(self, sa: SecurityAssociation, iv_constant: bytes) -> None:
        if len(iv_constant) != IV_LEN:
            raise ValueError("the seqiv constant is 8 bytes")
        self.sa = sa
        self.iv_constant = iv_constant
        self._ctx = AeadContext(sa)

    @property
    def spi(self) -> int:
        return self.sa.spi

    def iv_for(self, seq64: int, override: IvOverride | None = None) -> bytes:
        """The explicit IV for ``seq64`` under seqiv, or as overridden."""
        if override is None:
            return seqiv(seq64, self.iv_constant)
        if isinstance(override, IvFromSeq):
            return seqiv(override.seq64, self.iv_constant)
        if isinstance(override, IvSeqOffset):
            return seqiv(seq64 + override.delta, self.iv_constant)
        if isinstance(override, IvFixed):
            return override.iv
        return random.Random(override.seed).randbytes(IV_LEN)

    def seal(
        self,
        payload: bytes,
        next_header: int,
        seq64: int,
        *,
        iv: IvOverride | None = None,
        trailer: Trailer = CLEAN,
        corrupt_icv: bool = False,
    ) -> bytes:
        """The ESP packet: header, IV, ciphertext of the plaintext, ICV."""
        explicit_iv = self.iv_for(seq64, iv)
        plaintext = build_plaintext(payload, next_header, trailer)
        sealed = self._ctx.seal(seq64, explicit_iv, plaintext)
        packet = ESP_HEADER.pack(self.sa.spi, seq64 & 0xFFFFFFFF) + explicit_iv + sealed
        return flip_last_bit(packet) if corrupt_icv else packet

    def seal_raw(self, plaintext: bytes, seq64: int, iv: bytes) -> bytes:
        """Header, IV and sealed ``plaintext`` as given (for fast paths)."""
        sealed = self._ctx.seal(seq64, iv, plaintext)
        return ESP_HEADER.pack(self.sa.spi, seq64 & 0xFFFFFFFF) + iv + sealed
