"""AeadContext.open_many: each packet as ``open`` gives it, ICV failures anywhere in the batch.

open_many decrypts a batch through one ``map`` and goes on past a packet
whose ICV fails (``None`` for it); the plaintexts must be the sealed ones,
in order, with ``None`` exactly where a packet was damaged, with and
without ESN (RFC 4303 s2.2.1: the high 32 bits in the AAD, RFC 4106 s5).
"""

from __future__ import annotations

import numpy as np
import pytest

from espforensics.crypto import AeadContext, context_for
from espforensics.keys.sa import RFC4106, RFC4309, RFC7539ESP, Secret, SecurityAssociation

_ALGORITHMS = (RFC4106, RFC4309, RFC7539ESP)


def _context(algorithm: str, esn: bool) -> AeadContext:
    salt = 3 if algorithm == RFC4309 else 4
    size = 32 if algorithm == RFC7539ESP else 16
    sa = SecurityAssociation(
        spi=0x0A0B0C0D, algorithm=algorithm, key=Secret(bytes(range(size + salt))), esn=esn
    )
    ctx = context_for(sa)
    assert isinstance(ctx, AeadContext)
    return ctx


@pytest.mark.parametrize("algorithm", _ALGORITHMS)
@pytest.mark.parametrize("esn", [False, True])
@pytest.mark.parametrize("damaged", [(), (0,), (3,), (6,), (0, 1, 2, 3, 4, 5, 6), (1, 4)])
def test_open_many_is_open_per_packet(algorithm: str, esn: bool, damaged: tuple[int, ...]) -> None:
    ctx = _context(algorithm, esn)
    seq64 = np.array([(5 << 32) + i if esn else i + 1 for i in range(7)], np.uint64)
    ivs = np.array([list((1000 + i).to_bytes(8)) for i in range(7)], np.uint8)
    plains = [bytes([i]) * (20 + i) for i in range(7)]
    sealed = [
        bytearray(ctx.seal(int(q), iv.tobytes(), p))
        for q, iv, p in zip(seq64, ivs, plains, strict=True)
    ]
    for i in damaged:
        sealed[i][-1] ^= 1  # the ICV's last byte
    got = ctx.open_many(seq64, ivs, [memoryview(s) for s in sealed])
    want = [None if i in damaged else plains[i] for i in range(7)]
    assert got == want
    assert got == [
        ctx.open(int(q), iv.tobytes(), bytes(s))
        for q, iv, s in zip(seq64, ivs, sealed, strict=True)
    ]


@pytest.mark.parametrize("algorithm", _ALGORITHMS)
@pytest.mark.parametrize("esn", [False, True])
def test_nonces_and_aads_ending_in_zero_bytes_keep_them(algorithm: str, esn: bool) -> None:
    """IVs and sequence numbers whose last bytes are 00 (an all-zero IV, seq 256): the
    nonce and the AAD keep every byte (a C-string cut would drop them and fail every ICV)."""
    ctx = _context(algorithm, esn)
    low = [256, 512, 0x01000000, 1 << 16]
    seq64 = np.array([((7 << 32) if esn else 0) + q for q in low], np.uint64)
    iv_rows = [bytes(8), b"\x01" + bytes(7), b"\xff" * 4 + bytes(4), bytes(7) + b"\x01"]
    ivs = np.array([list(iv) for iv in iv_rows], np.uint8)
    plains = [bytes([0x40 + i]) * (17 + i) for i in range(4)]
    sealed = [
        memoryview(ctx.seal(int(q), iv.tobytes(), p))
        for q, iv, p in zip(seq64, ivs, plains, strict=True)
    ]
    assert ctx.open_many(seq64, ivs, sealed) == plains
