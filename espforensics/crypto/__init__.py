"""ESP decryption and verification: one context per SA behind one interface.

In: a ``SecurityAssociation``. Out: ``context_for(sa)``, an ``AeadContext``
(aead.py: GCM, CCM, ChaCha20-Poly1305, GMAC) or an ``EncAuthContext``
(encauth.py: a cipher of ciphers.py or NULL, with an integrity algorithm
of macs.py, or either one alone). Both have
``open(seq64, iv, sealed, esn=None) -> plaintext | None`` and ``seal``,
and say what the checks need to know of the wire: ``iv_len`` (the
explicit IV), ``icv_len``, ``block`` (what the ciphertext fills),
``counter`` (the IV is a counter nonce) and ``clear`` (the payload travels
in clear by design: GMAC, NULL), and ``decrypts``/``verifies`` (False
for a cipher this version lacks, or an ICV it cannot check). Key bytes
are revealed in this package only; ``cryptography`` is imported here only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from espforensics.crypto.aead import (
    IV_LEN,
    AeadContext,
    build_aad,
    key_fingerprint,
    leading_zero,
    salt_first,
)
from espforensics.crypto.encauth import EncAuthContext
from espforensics.keys.sa import SecurityAssociation

CipherContext = AeadContext | EncAuthContext
Opener = Callable[[int, bytes, bytes | memoryview], bytes | None]


def context_for(sa: SecurityAssociation) -> CipherContext:
    """The SA's context; raises ``ValueError`` for an algorithm this version does not open."""
    if sa.is_aead:
        return AeadContext(sa)
    return EncAuthContext(sa)


def sa_identity(sa: SecurityAssociation) -> bytes:
    """A digest equal for two SAs whose contexts open every packet alike (algorithm, keys,
    ICV length, ESN, SPI), in this process or another; used to match them, never printed."""
    digest = hashlib.blake2b(digest_size=16, person=b"espforensics-sa")
    fields = (sa.spi, sa.algorithm, sa.icv_bits, sa.esn, sa.auth_algorithm)
    for part in (
        repr(fields).encode(),
        sa.key.reveal(),
        sa.auth_key.reveal() if sa.auth_key else b"",
    ):
        digest.update(len(part).to_bytes(4, "big") + part)
    return digest.digest()


def opener(ctx: CipherContext) -> Opener:
    """The context's ``open``; for one that verifies but does not decrypt, ``b""`` (no
    plaintext) when the ICV verifies and ``None`` when it fails (RFC 4303 s3.4.4)."""
    if not isinstance(ctx, EncAuthContext) or ctx.decrypts:
        return ctx.open
    mac_only = ctx

    def opened(seq64: int, iv: bytes, sealed: bytes | memoryview) -> bytes | None:
        return b"" if mac_only.authentic(seq64, iv, sealed) else None

    return opened


__all__ = [
    "IV_LEN",
    "AeadContext",
    "CipherContext",
    "EncAuthContext",
    "Opener",
    "build_aad",
    "context_for",
    "key_fingerprint",
    "leading_zero",
    "opener",
    "sa_identity",
    "salt_first",
]
