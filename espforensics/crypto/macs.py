"""Integrity algorithms of non-AEAD SAs: HMACs, AES-XCBC-MAC and AES-CMAC.

In: a kernel integrity name (keys/sa.py ``HMAC_DIGESTS``, ``AES_MACS``) and
its key. Out: ``make_mac(name, key)``, a ``Mac`` whose ``tag(parts)`` is the
full, untruncated MAC of the concatenated parts (the caller truncates to the
SA's ICV length), and whose ``tags(message, starts, ends)`` is the same for
many messages laid out in one buffer, concatenated. Raises ``ValueError``
for a name it does not verify.

RFC 2104 (HMAC, keyed once and copied per packet), RFC 2403/2404/2857/4868
(the HMACs ESP uses); RFC 3566 (AES-XCBC-MAC-96, built here from AES-ECB
and AES-CBC as s4 describes it); RFC 4493/4494 (AES-CMAC-96, ``cryptography``'s
CMAC).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from cryptography.hazmat.primitives import cmac, hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from espforensics.keys.sa import AES_MACS, HMAC_DIGESTS

Part = bytes | memoryview
_BLOCK = 16  # AES's block: XCBC and CMAC tags are one block


class Mac(Protocol):
    """A keyed MAC: the full tag over the concatenation of ``parts``; ``tags`` for many.

    ``tags(message, starts, ends)`` is ``tag((message[a:b],))`` of each
    ``(a, b)``, the full tags concatenated (every tag of one MAC is as long):
    the bulk form of ``tag``, which stays the reference rule beside it.
    """

    def tag(self, parts: Iterable[Part]) -> bytes: ...

    def tags(self, message: Part, starts: Sequence[int], ends: Sequence[int]) -> bytes: ...


def _tags_of(mac: Mac, message: Part, starts: Sequence[int], ends: Sequence[int]) -> bytes:
    """``tags`` as one ``tag`` per message: the MACs with no bulk form of their own."""
    view = memoryview(message)
    return b"".join([mac.tag((view[a:b],)) for a, b in zip(starts, ends, strict=True)])


class Hmac:
    """RFC 2104 by hand: the inner and outer hashes keyed once, copied per packet.

    Cheaper than ``hmac.HMAC.copy`` (docs/performance.md): the standard
    library's HMAC object adds Python calls around the same C. ``tags`` copies
    ``cryptography``'s keyed HMAC instead where it has the hash: one copy, one
    update and one finalize a packet, 0.1 us less than the two copies, two
    updates and two digests here (docs/performance.md, "The keyed lane, third step").
    """

    __slots__ = ("_bulk", "_inner", "_outer")

    def __init__(self, digest: str, key: bytes) -> None:
        algorithm = _BULK_HASHES.get(digest)
        self._bulk = None if algorithm is None else hmac.HMAC(key, algorithm())
        block = hashlib.new(digest).block_size
        if len(key) > block:  # RFC 2104 s2: a key longer than a block is hashed first
            key = hashlib.new(digest, key).digest()
        key = key.ljust(block, b"\0")
        self._inner = hashlib.new(digest, bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.new(digest, bytes(b ^ 0x5C for b in key))

    def tag(self, parts: Iterable[Part]) -> bytes:
        inner = self._inner.copy()
        for part in parts:
            inner.update(part)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def tags(self, message: Part, starts: Sequence[int], ends: Sequence[int]) -> bytes:
        """``tag`` of each ``message[a:b]``, concatenated: one tight loop, one update a packet.

        The same RFC 2104 steps as ``tag``; what it saves is Python around
        them (the hashing itself is all C): a caller that lays many packets'
        authenticated bytes out in one buffer pays per packet only a copy of
        the keyed state, one update and the digests.
        """
        view = memoryview(message)
        out: list[bytes] = []
        append = out.append
        if self._bulk is not None:
            copy = self._bulk.copy
            for a, b in zip(starts, ends, strict=True):
                mac = copy()
                mac.update(view[a:b])
                append(mac.finalize())
            return b"".join(out)
        inner_keyed, outer_keyed = self._inner, self._outer
        for a, b in zip(starts, ends, strict=True):
            inner = inner_keyed.copy()
            inner.update(view[a:b])
            outer = outer_keyed.copy()
            outer.update(inner.digest())
            append(outer.digest())
        return b"".join(out)


# The hashes ``tags`` takes from ``cryptography`` (RIPEMD-160 stays hashlib's).
_BULK_HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {
    "md5": hashes.MD5,
    "sha1": hashes.SHA1,
    "sha256": hashes.SHA256,
    "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}


class AesXcbc:
    """AES-XCBC-MAC (RFC 3566 s4): CBC-MAC under K1 with K2 or K3 folded into the last block.

    K1, K2, K3 are AES_K(0x01..01), AES_K(0x02..02), AES_K(0x03..03). A
    message of whole blocks (and not empty) XORs K2 into its last block;
    any other is padded with 0x80 then zeros to a block and XORs K3.
    """

    __slots__ = ("_k1", "_k2", "_k3")

    def __init__(self, key: bytes) -> None:
        ecb = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
        derived = ecb.update(bytes([1] * _BLOCK + [2] * _BLOCK + [3] * _BLOCK))
        self._k1 = derived[:_BLOCK]
        self._k2 = int.from_bytes(derived[_BLOCK : 2 * _BLOCK])
        self._k3 = int.from_bytes(derived[2 * _BLOCK :])

    def tag(self, parts: Iterable[Part]) -> bytes:
        message = b"".join(parts)
        cut = len(message) - (len(message) % _BLOCK or _BLOCK)
        last = message[cut:]
        if len(last) == _BLOCK:
            fold = self._k2
        else:
            last, fold = (last + b"\x80").ljust(_BLOCK, b"\0"), self._k3
        last = (int.from_bytes(last) ^ fold).to_bytes(_BLOCK)
        enc = Cipher(algorithms.AES(self._k1), modes.CBC(bytes(_BLOCK))).encryptor()
        return (enc.update(message[:cut] + last) + enc.finalize())[-_BLOCK:]

    def tags(self, message: Part, starts: Sequence[int], ends: Sequence[int]) -> bytes:
        return _tags_of(self, message, starts, ends)


class AesCmac:
    """AES-CMAC (RFC 4493), keyed once and copied per packet."""

    __slots__ = ("_keyed",)

    def __init__(self, key: bytes) -> None:
        self._keyed = cmac.CMAC(algorithms.AES(key))

    def tag(self, parts: Iterable[Part]) -> bytes:
        mac = self._keyed.copy()
        for part in parts:
            mac.update(bytes(part))
        return mac.finalize()

    def tags(self, message: Part, starts: Sequence[int], ends: Sequence[int]) -> bytes:
        return _tags_of(self, message, starts, ends)


def make_mac(name: str, key: bytes) -> Mac:
    """The MAC ``name`` keyed with ``key``; ``ValueError`` if this version does not verify it."""
    if name in HMAC_DIGESTS:
        return Hmac(HMAC_DIGESTS[name][0], key)
    if name == "xcbc(aes)" and len(key) in AES_MACS[name]:
        return AesXcbc(key)
    if name == "cmac(aes)" and len(key) in AES_MACS[name]:
        return AesCmac(key)
    raise ValueError(f"no MAC for {name} with a {len(key)}-byte key")
