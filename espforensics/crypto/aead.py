"""AEADs for ESP: nonce and AAD construction, open and seal.

In: an SA's key material (revealed here and nowhere else), the ESP header
fields and the bytes after the IV. Out: the plaintext (payload, padding,
pad length, next header), or ``None`` when the ICV does not verify.
``seal`` is the inverse, used by the fixture builder. Raises nothing of
its own.

RFC 4106 s4: nonce = salt (4) || explicit IV (8); RFC 4309 s4 (CCM): salt
(3) || IV (8); RFC 7634 s2 (ChaCha20-Poly1305): salt (4) || IV (8).
RFC 4106 s5 / RFC 4309 s5 / RFC 7634 s2.1 / RFC 4303 s2.2.1: AAD = SPI ||
seq (8 bytes), or with ESN SPI || seq_hi || seq_lo (12 bytes).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import replace
from typing import cast

import numpy as np
import numpy.typing as npt
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305

from espforensics.keys.sa import (
    AEAD_KEY_LAYOUT,
    RFC4106,
    RFC4309,
    RFC4543,
    RFC7539ESP,
    SUPPORTED_ALGORITHMS,
    Secret,
    SecurityAssociation,
)

IV_LEN = 8  # RFC 4106 s3.1: explicit IV of GCM ESP
_AAD = struct.Struct(">II")
_AAD_ESN = struct.Struct(">III")


def build_aad(spi: int, seq64: int, esn: bool) -> bytes:
    """The additional authenticated data of an ESP packet (RFC 4106 s5)."""
    if esn:
        return _AAD_ESN.pack(spi, seq64 >> 32, seq64 & 0xFFFFFFFF)
    return _AAD.pack(spi, seq64 & 0xFFFFFFFF)


Aead = AESGCM | AESCCM | ChaCha20Poly1305


def _aead(algorithm: str, key: bytes, icv_len: int) -> Aead | None:
    """The library's AEAD for an SA, or None for GCM with a short ICV (Cipher/GCM then).

    RFC 4106: AES-GCM (AESGCM takes 16-byte tags only). RFC 4309: AES-CCM,
    ICV 8, 12 or 16 bytes. RFC 7634: ChaCha20-Poly1305, ICV 16 bytes.
    """
    if algorithm == RFC4106:
        return AESGCM(key) if icv_len == 16 else None
    if algorithm == RFC4309:
        return AESCCM(key, tag_length=icv_len)
    if algorithm == RFC7539ESP:
        return ChaCha20Poly1305(key)
    if algorithm == RFC4543:
        return AESGCM(key)  # GMAC: GCM's tag over an empty plaintext
    raise ValueError(f"no AEAD context for {algorithm}")


class AeadContext:
    """One SA's cipher, built once and used for every packet of the SA.

    Every AEAD here has an 8-byte explicit IV after the ESP header and a
    nonce of salt || IV: RFC 4106 s4 (4-byte salt), RFC 4309 s4 (3-byte
    salt, an 11-byte nonce), RFC 7634 s2 (4-byte salt); and one AAD, SPI ||
    seq (|| with ESN the high half first): RFC 4106 s5, RFC 4309 s5, RFC 7634 s2.1.
    """

    __slots__ = ("_aead", "_key", "_salt", "clear", "esn", "icv_len", "spi")

    counter = True  # the IV is a nonce a counter fills (seqiv): a repeat reuses keystream
    decrypts = verifies = lane = True  # every AEAD here is opened and checked, in the lane too
    unchecked = ""
    iv_len = IV_LEN
    block = 4  # RFC 4303 s2.4: stream-like, the trailer ends on a 4-byte boundary

    def __init__(self, sa: SecurityAssociation) -> None:
        salt_len = AEAD_KEY_LAYOUT.get(sa.algorithm, ((), 0))[1]
        if sa.algorithm not in SUPPORTED_ALGORITHMS or not salt_len:
            raise ValueError(f"no AEAD context for {sa.algorithm}")
        material = sa.key.reveal()
        self._key = material[:-salt_len]
        self._salt = material[-salt_len:]
        self.icv_len = sa.icv_len
        self.esn = sa.esn
        self.spi = sa.spi
        self._aead = _aead(sa.algorithm, self._key, self.icv_len)
        # RFC 4543 s3.2: integrity only; the AAD is the ESP header's, then the IV and the
        # payload with its trailer, which travel in clear; the ICV is GMAC's 16-byte tag.
        self.clear = sa.algorithm == RFC4543  # GMAC

    def open(
        self, seq64: int, iv: bytes, sealed: bytes | memoryview, esn: bool | None = None
    ) -> bytes | None:
        """Decrypt ``sealed`` (ciphertext || ICV); ``None`` if the ICV fails.

        ``esn`` overrides the SA's flag, for callers that try both AAD forms.
        """
        aad = build_aad(self.spi, seq64, self.esn if esn is None else esn)
        nonce = self._salt + iv
        if len(sealed) < self.icv_len:
            return None
        if self.clear and self._aead is not None:
            clear = bytes(sealed[: -self.icv_len])
            try:
                self._aead.decrypt(nonce, sealed[-self.icv_len :], aad + iv + clear)
            except InvalidTag:
                return None
            return clear
        if self._aead is not None:
            try:
                return self._aead.decrypt(nonce, sealed, aad)
            except InvalidTag:
                return None
        tag = bytes(sealed[-self.icv_len :])
        dec = Cipher(algorithms.AES(self._key), modes.GCM(nonce, tag, min_tag_length=len(tag)))
        ctx = dec.decryptor()
        ctx.authenticate_additional_data(aad)
        body = ctx.update(sealed[: -self.icv_len])
        try:
            return body + ctx.finalize()
        except InvalidTag:
            return None

    def open_many(
        self, seq64: npt.NDArray[np.uint64], ivs: npt.NDArray[np.uint8], sealed: list[memoryview]
    ) -> list[bytes | None]:
        """``open`` for many packets of the SA (seq64s, rows of IVs): nonces and AADs at once."""
        if self._aead is None or self.clear:
            rows = zip(seq64.tolist(), ivs, sealed, strict=True)
            return [self.open(q, iv.tobytes(), s) for q, iv, s in rows]
        k = len(sealed)
        salt_len = len(self._salt)
        nonces = np.empty((k, salt_len + IV_LEN), np.uint8)
        nonces[:, :salt_len] = np.frombuffer(self._salt, np.uint8)
        nonces[:, salt_len:] = ivs
        words = [np.full(k, self.spi, np.uint32)]
        if self.esn:
            words.append((seq64 >> np.uint64(32)).astype(np.uint32))
        words.append((seq64 & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        aads = np.stack(words, axis=1).astype(">u4").view(np.uint8)
        nonce_list, aad_list = _row_bytes(nonces), _row_bytes(aads)
        # One call per packet from C (map); a packet whose ICV fails stops ``extend`` and
        # is None, then the same map goes on from the next packet.
        opened = map(self._aead.decrypt, nonce_list, sealed, aad_list)
        out: list[bytes | None] = []
        while True:
            try:
                out.extend(opened)
            except InvalidTag:
                out.append(None)
                continue
            return out

    def decrypt_many(
        self, seq64: npt.NDArray[np.uint64], ivs: npt.NDArray[np.uint8], sealed: list[memoryview]
    ) -> list[bytes | None]:
        """``open_many``, for packets whose ICV verified before (``EncAuthContext``'s
        skips the ICV). An AEAD checks its tag in the call that decrypts; decrypting
        AES-GCM without it, as a keystream from one ECB call a chunk (AES-CTR's way in
        encauth.py), measured 5 times slower than a ``decrypt`` call a packet."""
        return self.open_many(seq64, ivs, sealed)

    def seal(self, seq64: int, iv: bytes, plaintext: bytes) -> bytes:
        """Encrypt ``plaintext``; returns ciphertext || ICV (truncated per SA)."""
        aad = build_aad(self.spi, seq64, self.esn)
        nonce = self._salt + iv
        if self.clear and self._aead is not None:
            return plaintext + self._aead.encrypt(nonce, b"", aad + iv + plaintext)
        if self._aead is not None:
            return self._aead.encrypt(nonce, plaintext, aad)
        enc = Cipher(algorithms.AES(self._key), modes.GCM(nonce)).encryptor()
        enc.authenticate_additional_data(aad)
        body = enc.update(plaintext) + enc.finalize()
        return body + enc.tag[: self.icv_len]


def _row_bytes(rows: npt.NDArray[np.uint8]) -> list[bytes]:
    """Each row of a C-contiguous 2-D byte array as ``bytes`` (every byte, trailing zeros
    too: a void scalar keeps them), in C rather than one slice per row."""
    return cast(list[bytes], rows.view(np.dtype((np.void, rows.shape[1]))).ravel().tolist())


def key_fingerprint(sa: SecurityAssociation) -> bytes:
    """A digest that is equal for equal key material; used to group SAs, never printed."""
    return hashlib.blake2b(sa.key.reveal(), digest_size=16, person=b"espforensics-key").digest()


def salt_first(sa: SecurityAssociation) -> SecurityAssociation:
    """The SA with its key material read as salt || key, the salt given at the wrong end.

    RFC 4106 s8.1 (and ``ip xfrm state``) put the 4-byte salt last; a key
    file that puts it first decrypts nothing. Used by the key doctor.
    """
    material = sa.key.reveal()
    salt_len = AEAD_KEY_LAYOUT.get(sa.algorithm, ((), 4))[1]
    return replace(sa, key=Secret(material[salt_len:] + material[:salt_len]))


def leading_zero(sa: SecurityAssociation) -> SecurityAssociation:
    """The SA with a 00 byte put back in front of its key material (lost in a copy-paste)."""
    return replace(sa, key=Secret(b"\x00" + sa.key.reveal()))
