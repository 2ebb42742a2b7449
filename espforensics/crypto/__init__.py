"""ESP decryption and verification: one context per SA behind one interface.

In: a ``SecurityAssociation``. Out: ``context_for(sa)``, an ``AeadContext``
(aead.py: GCM, CCM, ChaCha20-Poly1305, GMAC) or an ``EncAuthContext``
(encauth.py: AES-CBC, 3DES-CBC, AES-CTR or NULL with an HMAC). Both have
``open(seq64, iv, sealed, esn=None) -> plaintext | None`` and ``seal``,
and say what the checks need to know of the wire: ``iv_len`` (the
explicit IV), ``icv_len``, ``block`` (what the ciphertext fills),
``counter`` (the IV is a counter nonce) and ``clear`` (the payload travels
in clear by design: GMAC, NULL). Key bytes are revealed in this
package only; ``cryptography`` is imported here only.
"""

from __future__ import annotations

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


def context_for(sa: SecurityAssociation) -> CipherContext:
    """The SA's context; raises ``ValueError`` for an algorithm this version does not open."""
    if sa.auth_algorithm is None:
        return AeadContext(sa)
    return EncAuthContext(sa)


__all__ = [
    "IV_LEN",
    "AeadContext",
    "CipherContext",
    "EncAuthContext",
    "build_aad",
    "context_for",
    "key_fingerprint",
    "leading_zero",
    "salt_first",
]
