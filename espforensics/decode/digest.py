"""The fingerprint of a packet's ESP bytes: tells a byte-identical copy from another packet.

In: an ESP packet's bytes on the wire, from its SPI to its end (``esp_digest``), or a
view of a buffer and each packet's span in it (``esp_digests``, the same rule over a batch).
Out: ``DIGEST_LEN`` bytes, the first 16 of the bytes' SHA-256 (FIPS 180-4); the batch
form as rows of a uint8 array. Raises nothing.

Without a key there is no ICV to stand for a packet (RFC 4303 s3.4.4): the sequence
and IV reuse checks compare these digests to tell a retransmission from another
packet with the same number or IV, and reconcile joins a sender's and a receiver's
copies of a packet by them. Two packets with equal digests are reported as proven
byte-identical copies, so the hash must be a cryptographic one: a collision of
SHA-256 truncated to 128 bits takes about 2**64 work. SHA-256 is also faster than
BLAKE2b where the CPU has SHA instructions: 1,300 bytes in 1.9 us against 3.6 us
(docs/performance.md, "The keyless digest").

The digests are compared only with each other within one run, never written to an
output nor compared with stored ones: the hash may change between versions.
"""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import sha256

import numpy as np
import numpy.typing as npt

DIGEST_LEN = 16
_FULL = 32  # SHA-256's length


def esp_digest(esp: bytes | memoryview) -> bytes:
    """The fingerprint of one packet's ESP bytes (the per-frame path's, reconcile's)."""
    return sha256(esp).digest()[:DIGEST_LEN]


def esp_digests(view: memoryview, spans: Iterable[tuple[int, int]]) -> npt.NDArray[np.uint8]:
    """``esp_digest`` of ``view[a:b]`` for each span ``(a, b)``, as rows of ``DIGEST_LEN`` bytes.

    The steady lane's form: the whole digests joined once and cut in one copy, rather
    than a slice of bytes per packet.
    """
    joined = b"".join([sha256(view[a:b]).digest() for a, b in spans])
    full = np.frombuffer(joined, np.uint8).reshape(-1, _FULL)
    return full[:, :DIGEST_LEN]
