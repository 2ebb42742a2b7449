"""ESP with a cipher and a separate integrity algorithm: CBC, CTR or NULL with an HMAC.

In: a non-AEAD SA (``algorithm``/``key`` the cipher, ``auth_algorithm``/
``auth_key`` the HMAC) and, per packet, the ESP header fields and the
bytes after the IV. Out: the plaintext (payload, padding, pad length,
next header), or ``None`` when the ICV does not verify. ``seal`` is the
inverse, used by the fixture builder. Raises nothing of its own.

RFC 4303 s3.3.2 / s3.4.4: the ICV is computed over the ESP packet without
the ICV (SPI, sequence number, IV, ciphertext), checked before decryption;
with ESN the high 32 bits of the sequence number are appended after the
packet for the ICV only (RFC 4303 s2.2.1), never sent. RFC 2404 / RFC
4868: HMAC-SHA-1-96, HMAC-SHA-256-128, -384-192, -512-256 (truncated to
``icv_bits``). RFC 3602: AES-CBC with a 16-byte IV; RFC 2451: 3DES-CBC
with an 8-byte IV; RFC 3686 s4: AES-CTR's counter block is nonce (4) ||
IV (8) || 32-bit block counter from 1; RFC 2410: the NULL cipher, no IV.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import threading

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from espforensics.keys.sa import (
    CBC_AES,
    CBC_DES3,
    CIPHER_LAYOUT,
    CTR_AES,
    HMAC_DIGESTS,
    NULL_CIPHER,
    SecurityAssociation,
)

_HEADER = struct.Struct(">II")
_HI = struct.Struct(">I")
_COUNTER_ONE = b"\x00\x00\x00\x01"  # RFC 3686 s4: the block counter starts at 1


def _keyed(name: str, key: bytes) -> tuple[hashlib._Hash, hashlib._Hash]:
    """HMAC's inner and outer hashes with the key absorbed (RFC 2104 s2)."""
    block = hashlib.new(name).block_size
    if len(key) > block:
        key = hashlib.new(name, key).digest()
    key = key.ljust(block, b"\0")
    inner = hashlib.new(name, bytes(b ^ 0x36 for b in key))
    outer = hashlib.new(name, bytes(b ^ 0x5C for b in key))
    return inner, outer


class EncAuthContext:
    """One non-AEAD SA's cipher and HMAC, built once and used for every packet of the SA.

    ``iv_len`` is the explicit IV on the wire (16 for AES-CBC, 8 for 3DES-CBC
    and AES-CTR, 0 for NULL), ``block`` the length the ciphertext must be a
    multiple of (RFC 4303 s2.4: the cipher's block, else 4), ``counter``
    whether the IV is a counter nonce (seqiv, CTR) rather than a CBC IV
    (echainiv), and ``clear`` whether the payload travels in clear (NULL).
    """

    __slots__ = (
        "_algorithm",
        "_inner",
        "_key",
        "_local",
        "_nonce",
        "_outer",
        "block",
        "clear",
        "counter",
        "esn",
        "icv_len",
        "iv_len",
        "spi",
    )

    def __init__(self, sa: SecurityAssociation) -> None:
        if sa.algorithm not in CIPHER_LAYOUT or sa.auth_algorithm not in HMAC_DIGESTS:
            raise ValueError(f"no context for {sa.algorithm} with {sa.auth_algorithm}")
        if sa.auth_key is None:
            raise ValueError("an integrity key is needed")
        material = sa.key.reveal()
        _, nonce_len, self.iv_len, self.block = CIPHER_LAYOUT[sa.algorithm]
        self._key = material[: len(material) - nonce_len]
        self._nonce = material[len(material) - nonce_len :]
        self._algorithm = sa.algorithm
        # RFC 2104 by hand: the inner and outer hashes keyed once and copied per packet,
        # 2.3 us for a 1,464-byte ICV with SHA-256 where hmac.HMAC.copy took 2.8: the
        # standard library's HMAC object adds Python calls around the same C.
        digest = HMAC_DIGESTS[sa.auth_algorithm][0]
        self._inner, self._outer = _keyed(digest, sa.auth_key.reveal())
        self._local = threading.local()  # a CBC decryptor per thread (--jobs), kept
        self.icv_len = sa.icv_len
        self.esn = sa.esn
        self.spi = sa.spi
        self.counter = sa.algorithm == CTR_AES
        self.clear = sa.algorithm == NULL_CIPHER

    def _icv(self, seq64: int, iv: bytes, ciphertext: bytes | memoryview, esn: bool) -> bytes:
        inner = self._inner.copy()
        inner.update(_HEADER.pack(self.spi, seq64 & 0xFFFFFFFF))
        inner.update(iv)
        inner.update(ciphertext)
        if esn:
            inner.update(_HI.pack(seq64 >> 32))  # RFC 4303 s2.2.1: after the packet, not sent
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[: self.icv_len]

    def _cipher(self, iv: bytes) -> Cipher[modes.CBC] | Cipher[modes.CTR]:
        if self._algorithm == CBC_AES:
            return Cipher(algorithms.AES(self._key), modes.CBC(iv))
        if self._algorithm == CBC_DES3:
            return Cipher(TripleDES(self._key), modes.CBC(iv))
        return Cipher(algorithms.AES(self._key), modes.CTR(self._nonce + iv + _COUNTER_ONE))

    def open(
        self, seq64: int, iv: bytes, sealed: bytes | memoryview, esn: bool | None = None
    ) -> bytes | None:
        """Verify the ICV over header, IV and ciphertext, then decrypt; ``None`` if it fails.

        ``esn`` overrides the SA's flag, for callers that try both forms. A
        CBC ciphertext that is not a whole number of blocks decrypts its whole
        blocks and keeps its last bytes as they are, so the trailer check
        (RFC 4303 s2.4, ``block``) reports it rather than the packet failing.
        """
        if len(sealed) < self.icv_len or len(iv) != self.iv_len:
            return None
        cut = len(sealed) - self.icv_len
        ciphertext = sealed[:cut]
        icv = self._icv(seq64, iv, ciphertext, self.esn if esn is None else esn)
        if not hmac.compare_digest(icv, bytes(sealed[cut:])):
            return None
        if self.clear:
            return bytes(ciphertext)
        if self.counter:
            return self._cipher(iv).decryptor().update(ciphertext)
        whole = cut - cut % self.block
        plain = self._cbc_decrypt(iv, ciphertext[:whole])
        return plain if whole == cut else plain + bytes(ciphertext[whole:])

    def _cbc_decrypt(self, iv: bytes, blocks: bytes | memoryview) -> bytes:
        """CBC decryption of whole blocks with one decryptor kept per thread.

        A CBC decryptor XORs each block's decryption with the ciphertext block
        before it, so the IV fed as a first block makes the next one decrypt as
        under that IV (RFC 3602 s2.3); its own output is dropped. Building a
        decryptor per packet cost 5.4 us, more than the decryption (0.8 us for
        1,440 bytes, measured here with cryptography 48).
        """
        dec = getattr(self._local, "dec", None)
        if dec is None:
            dec = self._local.dec = self._cipher(bytes(self.iv_len)).decryptor()
        dec.update(iv)  # the chain now holds the IV; this block's output is no plaintext
        return dec.update(blocks)

    def iv_words(self, ivs: bytes) -> npt.NDArray[np.uint64]:
        """CBC IVs (``iv_len`` bytes each, concatenated) decrypted as blocks: their 64-bit words.

        Linux's echainiv (crypto/echainiv.c) makes a CBC IV by writing, into
        each 8-byte word, ``(salt_i | 1) * seq64`` (little endian, x86) and
        encrypting that block with the SA's key; decrypting the IV gives the
        words back, one row per IV. Only for CBC SAs (not ``counter``, an IV).
        """
        dec = getattr(self._local, "ecb", None)
        if dec is None:
            cipher = (
                TripleDES(self._key) if self._algorithm == CBC_DES3 else algorithms.AES(self._key)
            )
            dec = self._local.ecb = Cipher(cipher, modes.ECB()).decryptor()
        words = np.frombuffer(dec.update(ivs), "<u8").astype(np.uint64)
        return words.reshape(-1, self.iv_len // 8)

    def open_many(
        self, seq64: npt.NDArray[np.uint64], ivs: npt.NDArray[np.uint8], sealed: list[memoryview]
    ) -> list[bytes | None]:
        """``open`` for many packets of the SA (seq64s, rows of IVs), in order."""
        rows = zip(seq64.tolist(), ivs, sealed, strict=True)
        return [self.open(q, iv.tobytes(), s) for q, iv, s in rows]

    def seal(self, seq64: int, iv: bytes, plaintext: bytes) -> bytes:
        """Encrypt ``plaintext`` (whole blocks for CBC); returns ciphertext || ICV."""
        if self.clear:
            ciphertext = plaintext
        else:
            enc = self._cipher(iv).encryptor()
            ciphertext = enc.update(plaintext) + enc.finalize()
        return ciphertext + self._icv(seq64, iv, ciphertext, self.esn)
