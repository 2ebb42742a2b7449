"""The block ciphers of non-AEAD SAs: kernel name -> ``cryptography`` algorithm.

In: a kernel cipher name (keys/sa.py ``CIPHER_LAYOUT``) and its key. Out:
``block_cipher(name, key)``, the ``cryptography`` algorithm object that CBC,
CTR and ECB modes take. Raises ``ValueError`` for a name it does not open.

RFC 3602 (AES-CBC), RFC 2451 (3DES-CBC, and Blowfish-CBC and CAST5-CBC with
variable key lengths, s2.2), RFC 2405 (DES-CBC), RFC 4312 (Camellia-CBC),
RFC 3686 (AES-CTR). SM4 is Linux's ``cbc(sm4)`` (a 128-bit block cipher).

``cryptography`` keeps the old ciphers in its ``decrepit`` module; importing
them warns nothing, and no call here makes one warn: single DES is built as
3DES with K1 = K2 = K3 (EDE with one key is one DES encryption, the form
RFC 2405 s5 itself notes), because the 8-byte form of ``TripleDES`` warns
that it is deprecated.
"""

from __future__ import annotations

from collections.abc import Callable

from cryptography.hazmat.decrepit.ciphers.algorithms import (
    CAST5,
    Blowfish,
    Camellia,
    TripleDES,
)
from cryptography.hazmat.primitives.ciphers import BlockCipherAlgorithm, algorithms

from espforensics.keys.sa import CBC_AES, CBC_DES3, CTR_AES


def _des(key: bytes) -> BlockCipherAlgorithm:
    """Single DES (RFC 2405) as EDE with one key: E_K(D_K(E_K(x))) = E_K(x)."""
    return TripleDES(key * 3)


_FACTORIES: dict[str, Callable[[bytes], BlockCipherAlgorithm]] = {
    CBC_AES: algorithms.AES,
    CTR_AES: algorithms.AES,
    CBC_DES3: TripleDES,
    "cbc(des)": _des,
    "cbc(blowfish)": Blowfish,
    "cbc(cast5)": CAST5,
    "cbc(camellia)": Camellia,
    "cbc(sm4)": algorithms.SM4,
}
OPENED = frozenset(_FACTORIES)


def block_cipher(name: str, key: bytes) -> BlockCipherAlgorithm:
    """The cipher ``name`` keyed with ``key``; ``ValueError`` if it is not one of ours."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"no block cipher for {name}")
    return factory(key)
