"""The fingerprint of a packet's ESP bytes: tells a byte-identical copy from another packet.

In: an ESP packet's bytes on the wire, from its SPI to its end (``esp_digest``), or a
view of a buffer and each packet's span in it (``esp_digests``, the same rule over a batch),
or a batch's rows as the steady lane hands them to the checks (``RowDigests``).
Out: ``DIGEST_LEN`` bytes, the first 16 of the bytes' SHA-256 (FIPS 180-4); the batch
form as rows of a uint8 array; ``RowDigests`` one row's at a time, made when asked.
Raises nothing.

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

The checks keep the digests of an SA's last few thousand packets and read one only
when a later packet repeats its sequence number or IV: the steady lane's rows of a
capture file read where it is mapped are hashed then, from the file's pages
(``RowDigests``, ``kept_source``), not each as it is taken (0.35 s of a 2.8 s keyless
run of 200,000 frames, docs/performance.md, "The keyless lane, third step"); a
batch in a buffer of its own (a compressed stream's, a file's last bytes) is hashed
as the lane takes it (``esp_digests``), so that no window keeps its buffer.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable
from dataclasses import dataclass
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


def kept_source(buf: bytes | mmap.mmap) -> mmap.mmap | None:
    """The buffer a digest may be made from later, or None (hash now): only the capture
    file mapped, whose pages are the file's, so that keeping it keeps no memory."""
    return buf if isinstance(buf, mmap.mmap) else None


@dataclass(frozen=True, slots=True)
class RowDigests:
    """Each row's digest (``PacketContext.digest``), ``self(i)`` for row ``i``: the
    first ``made_len[i]`` bytes of ``made[i]`` (its ICV, or a digest ``esp_digests``
    made), or where that is 0 or there is none made, ``esp_digest`` of its ESP bytes
    ``source[a:b]``, ``(a, b)`` its row of ``spans``, made then.

    The checks' windows of evidence keep it and call it only for a row they read.
    ``source`` is None when every row is made (``kept_source``); a run without keys
    keeps no ``made`` rows, and a keyed one no ``spans``: 16 bytes a row either way.
    """

    made: npt.NDArray[np.uint8] | None
    made_len: npt.NDArray[np.int64] | None
    source: mmap.mmap | None
    spans: npt.NDArray[np.int64] | None  # rows of (start, end)

    def __call__(self, i: int) -> bytes:
        if self.made is not None and self.made_len is not None:
            n = int(self.made_len[i])
            if n:
                return self.made[i, :n].tobytes()
        # the lane hashed every row of a buffer not kept
        assert self.source is not None and self.spans is not None
        start, end = self.spans[i].tolist()
        return esp_digest(self.source[start:end])
