"""Sealing ESP packets for every algorithm the analyzer opens, with optional faults.

In: a ``SecurityAssociation`` (an AEAD, or a cipher with an HMAC), the
payload and its next header, a 64-bit sequence number and the faults to
inject. Out: the ESP packet as bytes (SPI || seq_lo || IV || ciphertext ||
ICV), ready to follow an outer IP or UDP header. Raises ``ValueError`` for
impossible requests (a TFC or extra padding length that breaks alignment,
a pad length outside 0..255, an IV of the wrong length).

Encryption goes through ``espforensics.crypto.context_for(sa).seal``; this
module never touches ``cryptography`` itself.

RFC 4303 s2.4: pad bytes are 1, 2, 3, ...; payload + padding + 2 is a
multiple of 4, and of the cipher's block for CBC (16 for AES, RFC 3602
s2.4; 8 for 3DES, RFC 2451). RFC 4303 s2.7: TFC padding sits between the
payload and the padding. RFC 4303 s2.2.1: only the low 32 bits of the
sequence number are sent.
IVs as Linux makes them: seqiv (primer s4) for the AEADs and
rfc3686(ctr(aes)): IV = seq64 (8 bytes, big endian) XOR a constant;
echainiv for CBC (crypto/echainiv.c): per 8-byte word i, ``(salt_i | 1) *
seq64 mod 2^64`` little endian, and the IV on the wire is that block
encrypted under the SA's key (the "encrypted chain" IV; checked against
the real linux-6.1 cbc(aes) capture); no IV for ecb(cipher_null).
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, replace

from espforensics.crypto import IV_LEN, context_for
from espforensics.keys.sa import NULL_CIPHER, Secret, SecurityAssociation

ESP_HEADER = struct.Struct(">II")
ALIGN = 4  # RFC 4303 s2.4: 32-bit alignment of pad length / next header
MAX_PAD = 255
_U64 = (1 << 64) - 1


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


@dataclass(frozen=True, slots=True)
class IvChained:
    """Use the last ciphertext block of the SA's previous packet (CBC only).

    The predictable IV of CVE-2022-46397 style CBC senders (and of SSL 3.0 /
    TLS 1.0, RFC 4346 s1.1): the chaining runs on across packets.
    """


IvOverride = IvFromSeq | IvSeqOffset | IvFixed | IvRandom | IvChained


@dataclass(frozen=True, slots=True)
class Trailer:
    """How to build the plaintext after the payload, faults included.

    ``tfc``: TFC padding bytes (zeros) after the payload, RFC 4303 s2.7.
    ``extra_pad``: more valid padding, a multiple of 4 (RFC 4303 s2.4
    allows up to 255 bytes). ``bad_pad``: pad bytes that are not 1, 2, 3,
    ... (needs at least one pad byte; one is forced by adding 4 when the
    natural padding is empty). ``pad_len_delta``: the pad length field
    lies by this much. ``next_header``: overrides the true next header.
    ``ragged``: bytes after the ciphertext's whole cipher blocks (a CBC
    ciphertext that is not a whole number of blocks), under a valid ICV.
    With a CBC cipher, "4" above reads as the cipher's block.
    """

    tfc: int = 0
    extra_pad: int = 0
    bad_pad: bool = False
    pad_len_delta: int = 0
    next_header: int | None = None
    ragged: int = 0

    @property
    def faulty(self) -> bool:
        """True when a receiver checking the trailer must reject it."""
        return bool(
            self.bad_pad or self.pad_len_delta or self.next_header is not None or self.ragged
        )


CLEAN = Trailer()


def pad_length(data_len: int, extra_pad: int = 0, block: int = ALIGN) -> int:
    """RFC 4303 s2.4: pad so that data + pad + 2 is a multiple of ``block`` (4, or CBC's)."""
    if extra_pad % block:
        raise ValueError(f"extra padding {extra_pad} is not a multiple of {block}")
    return (-(data_len + 2)) % block + extra_pad


def build_plaintext(
    payload: bytes, next_header: int, trailer: Trailer = CLEAN, block: int = ALIGN
) -> bytes:
    """payload || TFC || padding || pad length || next header, to a multiple of ``block``."""
    body = payload + bytes(trailer.tfc)
    extra = trailer.extra_pad
    if trailer.bad_pad and pad_length(len(body), extra, block) == 0:
        extra += block
    n = pad_length(len(body), extra, block)
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


def echainiv_block(seq64: int, salt: bytes) -> bytes:
    """Linux echainiv's IV block before encryption (crypto/echainiv.c).

    Per 8-byte word of the IV: the salt's word (host order, little endian
    on x86) with its low bit set, times seq64, modulo 2^64.
    """
    words = (int.from_bytes(salt[i : i + 8], "little") | 1 for i in range(0, len(salt), 8))
    return b"".join(((w * seq64) & _U64).to_bytes(8, "little") for w in words)


def flip_last_bit(packet: bytes) -> bytes:
    """The packet with the last bit of its ICV inverted."""
    return packet[:-1] + bytes((packet[-1] ^ 0x01,))


class EspSealer:
    """Builds the ESP packets of one SA.

    ``iv_constant`` is the IV generator's secret of the SA's transform: the
    seqiv constant (8 bytes) for the AEADs and CTR, echainiv's salt (as
    long as the IV: 16 for AES-CBC, 8 for 3DES) for CBC, empty for NULL.
    """

    __slots__ = ("_ctx", "_last_block", "_mac_only", "iv_constant", "sa")

    def __init__(self, sa: SecurityAssociation, iv_constant: bytes) -> None:
        self.sa = sa
        self._ctx = context_for(sa)
        want = IV_LEN if self._ctx.counter else self._ctx.iv_len
        if len(iv_constant) != want:
            raise ValueError(f"the IV generator's constant of {sa.algorithm} is {want} bytes")
        self.iv_constant = iv_constant
        self._last_block = b""
        # The SA's HMAC over a ciphertext given as is (the ``ragged`` fault): the same
        # integrity algorithm and key with the NULL cipher, RFC 2410.
        self._mac_only = None
        if sa.auth_algorithm is not None:
            self._mac_only = context_for(replace(sa, algorithm=NULL_CIPHER, key=Secret(b"")))

    @property
    def spi(self) -> int:
        return self.sa.spi

    @property
    def block(self) -> int:
        """What the plaintext is padded to: the cipher's block for CBC, else 4."""
        return self._ctx.block

    @property
    def iv_len(self) -> int:
        return self._ctx.iv_len

    def _generated(self, seq64: int) -> bytes:
        """The IV Linux's generator gives ``seq64``: seqiv, echainiv or none."""
        if self._ctx.counter:
            return seqiv(seq64, self.iv_constant)
        if not self._ctx.iv_len:
            return b""
        # CBC of one block under a zero IV is the block cipher itself: E_k(block).
        info = echainiv_block(seq64, self.iv_constant)
        return self._ctx.seal(seq64, bytes(len(info)), info)[: len(info)]

    def iv_for(self, seq64: int, override: IvOverride | None = None) -> bytes:
        """The explicit IV for ``seq64`` as the SA's IV generator makes it, or as overridden."""
        if override is None:
            iv = self._generated(seq64)
        elif isinstance(override, IvFromSeq):
            iv = self._generated(override.seq64)
        elif isinstance(override, IvSeqOffset):
            iv = self._generated(seq64 + override.delta)
        elif isinstance(override, IvFixed):
            iv = override.iv
        elif isinstance(override, IvChained):
            iv = self._last_block or self._generated(seq64)
        else:
            iv = random.Random(override.seed).randbytes(self._ctx.iv_len)
        if len(iv) != self._ctx.iv_len:
            raise ValueError(f"an IV of {len(iv)} bytes; {self.sa.algorithm} takes {self.iv_len}")
        return iv

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
        plaintext = build_plaintext(payload, next_header, trailer, self.block)
        sealed = self._ctx.seal(seq64, explicit_iv, plaintext)
        if not self._ctx.counter and self._ctx.iv_len:  # CBC: what IvChained takes next
            cut = len(sealed) - self._ctx.icv_len
            self._last_block = sealed[cut - self._ctx.iv_len : cut]
        if trailer.ragged:
            sealed = self._ragged(seq64, explicit_iv, sealed, trailer.ragged)
        packet = ESP_HEADER.pack(self.sa.spi, seq64 & 0xFFFFFFFF) + explicit_iv + sealed
        return flip_last_bit(packet) if corrupt_icv else packet

    def _ragged(self, seq64: int, iv: bytes, sealed: bytes, extra: int) -> bytes:
        """``sealed`` with ``extra`` bytes after its ciphertext and an ICV over them."""
        if self._mac_only is None:
            raise ValueError("a ragged ciphertext needs a cipher with a separate HMAC")
        ciphertext = sealed[: len(sealed) - self._ctx.icv_len] + bytes(range(1, extra + 1))
        return self._mac_only.seal(seq64, iv, ciphertext)

    def seal_raw(self, plaintext: bytes, seq64: int, iv: bytes) -> bytes:
        """Header, IV and sealed ``plaintext`` as given (for fast paths)."""
        sealed = self._ctx.seal(seq64, iv, plaintext)
        return ESP_HEADER.pack(self.sa.spi, seq64 & 0xFFFFFFFF) + iv + sealed
