"""EncAuthContext.open_many (the bulk path) against ``open`` (the reference rule), packet by packet.

``decrypt_many`` (open_many without the ICV check, for packets verified
before) gives ``open``'s plaintext wherever the ICV verifies, and decrypts
a packet whose ICV alone was flipped.

open_many lays a batch out in one buffer, computes every ICV in one loop,
compares them as arrays and decrypts the batch in one call; it must return
exactly ``[open(...) for each packet]``: the sealed plaintexts where the ICV
verifies, ``None`` where a byte of the ICV or of the ciphertext was flipped
or the packet is shorter than its ICV, with and without ESN (RFC 4303
s2.2.1: the high half after the packet, for the ICV only), for CBC (RFC
3602), CTR (RFC 3686), the NULL cipher (RFC 2410), an SA whose ICV is not
checked and one whose cipher is not opened. A CBC ciphertext that is not a
whole number of blocks keeps its last bytes as they are (``open``).
"""

from __future__ import annotations

import hashlib
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.crypto import encauth
from espforensics.crypto.encauth import EncAuthContext
from espforensics.crypto.macs import make_mac
from espforensics.keys.sa import (
    CBC_AES,
    CBC_DES3,
    CTR_AES,
    HMAC_DIGESTS,
    NULL_CIPHER,
    Secret,
    SecurityAssociation,
)

# cipher -> (key lengths, nonce bytes after the key)
_CIPHERS = {
    CBC_AES: ((16, 24, 32), 0),
    CBC_DES3: ((24,), 0),
    CTR_AES: ((16, 24, 32), 4),
    NULL_CIPHER: ((0,), 0),
    "cbc(twofish)": ((16,), 0),  # not opened: open_many gives None, as open does
}
# (integrity, key bytes, ICV bits): the HMACs with their RFC 2404/4868 truncations, one
# untruncated, one "truncated" to more than the MAC gives (no ICV can match it),
# AES-XCBC-MAC-96 (no bulk form of its own), an ICV skipped unchecked, no integrity
_AUTHS = (
    ("hmac(sha1)", 20, 96),
    ("hmac(sha256)", 32, 128),
    ("hmac(sha256)", 32, 256),
    ("hmac(sha384)", 48, 192),
    ("hmac(sha512)", 64, 256),
    ("hmac(md5)", 16, 96),
    ("hmac(md5)", 16, 192),
    ("xcbc(aes)", 16, 96),
    ("any", 0, 96),
    ("digest_null", 0, 0),
)
_DAMAGE = ("none", "icv", "ciphertext", "short")


@st.composite
def _sas(draw: st.DrawFn) -> SecurityAssociation:
    cipher = draw(st.sampled_from(sorted(_CIPHERS)))
    auth, auth_len, icv_bits = draw(st.sampled_from(_AUTHS))
    if cipher == "cbc(twofish)" and not auth_len:
        auth, auth_len, icv_bits = _AUTHS[1]  # neither decrypted nor verified: no context
    sizes, nonce = _CIPHERS[cipher]
    key_len = draw(st.sampled_from(sizes)) + nonce
    return SecurityAssociation(
        spi=draw(st.integers(256, 2**32 - 1)),
        algorithm=cipher,
        key=Secret(draw(st.binary(min_size=key_len, max_size=key_len))),
        icv_bits=icv_bits,
        esn=draw(st.booleans()),
        auth_algorithm=auth,
        auth_key=Secret(draw(st.binary(min_size=auth_len, max_size=auth_len)))
        if auth_len
        else None,
    )


def _seal(
    ctx: EncAuthContext, sa: SecurityAssociation, seq64: int, iv: bytes, plain: bytes
) -> tuple[bytes, bytes]:
    """(ciphertext || ICV, the plaintext ``open`` gives back) for any plaintext length.

    ``seal`` takes whole blocks for CBC; the bytes past them are appended to
    the ciphertext as they are and the ICV computed again over the whole.
    """
    if ctx.decrypts:
        whole = len(plain) - (0 if ctx.counter or ctx.clear else len(plain) % ctx.block)
        sealed = ctx.seal(seq64, iv, plain[:whole])
        if whole == len(plain):
            return sealed, plain
        ciphertext = sealed[: len(sealed) - ctx.icv_len] + plain[whole:]
    else:
        ciphertext = plain  # a cipher not opened: any bytes, only the ICV is checked
    icv = bytes(ctx.icv_len)
    if ctx.verifies:
        assert sa.auth_algorithm is not None and sa.auth_key is not None
        parts = [(seq64 & 0xFFFFFFFF).to_bytes(4), iv, ciphertext]
        parts.insert(0, sa.spi.to_bytes(4))
        if sa.esn:
            parts.append((seq64 >> 32).to_bytes(4))
        icv = make_mac(sa.auth_algorithm, sa.auth_key.reveal()).tag(parts)[: ctx.icv_len]
    return ciphertext + icv, plain


@settings(max_examples=300)
@given(
    sa=_sas(),
    hi=st.integers(0, 2**32 - 1),
    packets=st.lists(
        st.tuples(st.integers(0, 2**32 - 1), st.binary(max_size=90), st.sampled_from(_DAMAGE)),
        max_size=12,
    ),
    chunk=st.sampled_from([1, 3, 1024]),
    data=st.data(),
)
def test_open_many_is_open_for_each_packet(
    sa: SecurityAssociation,
    hi: int,
    packets: list[tuple[int, bytes, str]],
    chunk: int,
    data: st.DataObject,
) -> None:
    ctx = EncAuthContext(sa)
    seq64 = np.array([(hi << 32) | low for low, _, _ in packets], np.uint64)
    iv_rows = [data.draw(st.binary(min_size=ctx.iv_len, max_size=ctx.iv_len)) for _ in packets]
    ivs = np.array([list(iv) for iv in iv_rows], np.uint8).reshape(len(packets), ctx.iv_len)
    sealed: list[bytes] = []
    opened: list[bytes | None] = []
    longer = sa.auth_algorithm == "hmac(md5)" and ctx.icv_len > 16  # than the MAC gives
    icv_only: list[bytes | None] = []  # the plaintext of a packet whose ICV alone was flipped
    for (_, plain, damage), q, iv in zip(packets, seq64.tolist(), iv_rows, strict=True):
        packet, plaintext = _seal(ctx, sa, q, iv, plain)
        flips = damage == "icv" and ctx.decrypts and not longer
        icv_only.append(plaintext if flips else None)
        flipped = bytearray(packet)
        cut = len(packet) - ctx.icv_len
        if damage == "icv" and ctx.icv_len:
            flipped[cut + data.draw(st.integers(0, ctx.icv_len - 1))] ^= 0x01
        elif damage == "ciphertext" and cut > 0:
            flipped[data.draw(st.integers(0, cut - 1))] ^= 0x80
        elif damage == "short" and ctx.icv_len:
            del flipped[data.draw(st.integers(0, ctx.icv_len - 1)) :]
        sealed.append(bytes(flipped))
        opened.append(plaintext if bytes(flipped) == packet and ctx.decrypts else None)
    with mock.patch.object(encauth, "_CHUNK", chunk):
        got = ctx.open_many(seq64, ivs, [memoryview(s) for s in sealed])
        unchecked = ctx.decrypt_many(seq64, ivs, [memoryview(s) for s in sealed])
    want = [ctx.open(q, iv, s) for q, iv, s in zip(seq64.tolist(), iv_rows, sealed, strict=True)]
    assert got == want
    # decrypt_many: open's plaintext wherever the ICV verifies, and the ICV not computed
    for i, (verified, icv_flipped) in enumerate(zip(want, icv_only, strict=True)):
        if verified is not None:
            assert unchecked[i] == verified
        elif icv_flipped is not None:
            assert unchecked[i] == icv_flipped
    assert [type(p) for p in got] == [type(p) for p in want]  # bytes, not bytearray
    for i, expected in enumerate(opened):
        if longer:  # no ICV can match: nothing verifies
            assert got[i] is None
        elif expected is not None:  # undamaged: the sealed plaintext itself
            assert got[i] == expected
        elif ctx.verifies or not ctx.decrypts:  # damaged and checked: no plaintext
            assert got[i] is None


def _cbc_sha256(esn: bool) -> EncAuthContext:
    sa = SecurityAssociation(
        spi=0x1001,
        algorithm=CBC_AES,
        key=Secret(bytes(range(16))),
        icv_bits=128,
        esn=esn,
        auth_algorithm="hmac(sha256)",
        auth_key=Secret(bytes(range(100, 132))),
    )
    return EncAuthContext(sa)


def test_an_empty_batch_and_ivs_of_the_wrong_length() -> None:
    ctx = _cbc_sha256(esn=False)
    assert ctx.open_many(np.zeros(0, np.uint64), np.zeros((0, 16), np.uint8), []) == []
    iv = bytes(range(16))
    sealed = ctx.seal(7, iv, bytes(32))
    assert ctx.open(7, iv, sealed) == bytes(32)
    seq64 = np.array([7], np.uint64)
    assert ctx.open_many(seq64, np.array([list(iv)], np.uint8), [memoryview(sealed)]) == [bytes(32)]
    for width in (8, 17):
        wrong = np.zeros((1, width), np.uint8)
        assert ctx.open(7, bytes(width), sealed) is None
        assert ctx.open_many(seq64, wrong, [memoryview(sealed)]) == [None]


def test_esn_high_half_enters_the_icv_in_bulk() -> None:
    """RFC 4303 s2.2.1: the same packet verifies under its own high half only."""
    ctx = _cbc_sha256(esn=True)
    iv, plain = bytes(range(16)), bytes(range(64))
    seq = (5 << 32) | 0xFFFFFFFF
    sealed = memoryview(ctx.seal(seq, iv, plain))
    ivs = np.array([list(iv)] * 3, np.uint8)
    seq64 = np.array([seq, seq + (1 << 32), seq - (1 << 32)], np.uint64)
    assert ctx.open_many(seq64, ivs, [sealed] * 3) == [plain, None, None]


def _runs(digest: str) -> bool:
    try:
        hashlib.new(digest)
    except ValueError:
        return False
    return True


# RIPEMD-160's HMAC (hashlib's copies in ``tags`` too) where this runtime's hashlib has it.
_HMACS = [name for name, (digest, _) in HMAC_DIGESTS.items() if _runs(digest)]


@given(
    auth=st.sampled_from([*_HMACS, "xcbc(aes)", "cmac(aes)"]),
    messages=st.lists(st.binary(max_size=300), max_size=6),
    long_key=st.booleans(),
)
def test_mac_tags_is_tag_of_each_slice(auth: str, messages: list[bytes], long_key: bool) -> None:
    """Mac.tags (the bulk form) is the concatenation of ``tag`` (the reference rule); an
    HMAC's key longer than its hash's block is hashed first by both (RFC 2104 s2)."""
    size = 16 if "aes" in auth else 200 if long_key else 40
    mac = make_mac(auth, bytes(i % 256 for i in range(size)))
    buffer = b"".join(messages)
    ends = np.cumsum([len(m) for m in messages], dtype=np.int64).tolist()
    starts = [e - len(m) for e, m in zip(ends, messages, strict=True)]
    assert mac.tags(buffer, starts, ends) == b"".join(mac.tag((m,)) for m in messages)


def test_open_many_opens_in_bulk_not_packet_by_packet() -> None:
    """The batch never goes through ``open``, one packet at a time (issue 35)."""
    ctx = _cbc_sha256(esn=True)
    ivs = np.array([[i] * 16 for i in range(5)], np.uint8)
    seq64 = np.arange(5, dtype=np.uint64) + np.uint64(3 << 32)
    plains = [bytes([i]) * (16 * i) for i in range(5)]
    sealed = [
        memoryview(ctx.seal(q, iv.tobytes(), p))
        for q, iv, p in zip(seq64.tolist(), ivs, plains, strict=True)
    ]
    with mock.patch.object(EncAuthContext, "open", side_effect=AssertionError("per packet")):
        assert ctx.open_many(seq64, ivs, sealed) == plains
