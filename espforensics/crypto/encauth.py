"""ESP with a cipher and a separate integrity algorithm, either of them possibly absent.

In: a non-AEAD SA (``algorithm``/``key`` the cipher, ``auth_algorithm``/
``auth_key`` the integrity algorithm) and, per packet, the ESP header fields
and the bytes after the IV. Out: the plaintext (payload, padding, pad
length, next header), or ``None`` when the ICV does not verify. ``seal`` is
the inverse, used by the fixture builder. Raises nothing of its own.
``open_many`` is ``open`` for a batch in bulk (one buffer, one MAC loop,
one CBC or CTR call a chunk); ``open`` stays beside it as the reference
rule, and one suite holds the two to the same answers.

RFC 4303 s3.3.2 / s3.4.4: the ICV is computed over the ESP packet without
the ICV (SPI, sequence number, IV, ciphertext), checked before decryption;
with ESN the high 32 bits of the sequence number are appended after the
packet for the ICV only (RFC 4303 s2.2.1), never sent. RFC 2404 / RFC 4868 /
RFC 2857 (HMACs), RFC 3566 (AES-XCBC-MAC-96), RFC 4494 (AES-CMAC-96), all
truncated to ``icv_bits``. Ciphers: crypto/ciphers.py (CBC with the
cipher's block as explicit IV, RFC 3602, 2405, 2451, 4312); RFC 3686 s4:
AES-CTR's counter block is nonce (4) || IV (8) || 32-bit block counter
from 1; RFC 2410: the NULL cipher, no IV.

Two partial SAs have a context too. Without integrity (RFC 4303 s3.2
allows confidentiality only) or with an ICV on the wire this version cannot
check (no key given, ``any``, an algorithm it lacks), ``verifies`` is False:
``open`` skips the ICV bytes and decrypts, and says nothing of authenticity
(``unchecked`` says why). With a cipher it does not open but an integrity
algorithm it verifies, ``decrypts`` is False: ``authentic`` checks the ICV
(before any decryption, as a receiver does) and ``open`` returns ``None``.
"""

from __future__ import annotations

import hmac
import struct
import threading
from typing import cast

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.ciphers import Cipher, modes

from espforensics.crypto.ciphers import OPENED, block_cipher
from espforensics.crypto.macs import Mac, make_mac
from espforensics.keys.sa import (
    CBC_AES,
    CBC_DES3,
    CIPHER_LAYOUT,
    CTR_AES,
    NO_INTEGRITY,
    NULL_CIPHER,
    UNOPENED_CIPHERS,
    SecurityAssociation,
)

# The suites the engine's steady lane may take (engine/steady.py): the rest (DES,
# Blowfish, CAST5, Camellia, SM4, Twofish ...) always take the per-frame path.
_LANE_CIPHERS = frozenset({CBC_AES, CBC_DES3, CTR_AES, NULL_CIPHER})
_LANE_MACS = frozenset({"hmac(md5)", "hmac(sha1)", "hmac(sha256)", "hmac(sha384)", "hmac(sha512)"})
_HEADER = struct.Struct(">II")
_HI = struct.Struct(">I")
_ONE = b"\x00\x00\x00\x01"  # RFC 3686 s4: the block counter starts at 1
_CHUNK = 512  # packets laid out at once by open_many (docs/performance.md, issue 35)
_ZEROS = tuple(bytes(n) for n in range(4 + 16))  # spare + fill after a packet (_open_chunk)


class EncAuthContext:
    """One non-AEAD SA's cipher and integrity algorithm, built once for every packet of the SA.

    ``iv_len`` is the explicit IV on the wire (the cipher's block for CBC, 8
    for AES-CTR, 0 for NULL), ``block`` the length the ciphertext must be a
    multiple of (RFC 4303 s2.4: the cipher's block, else 4), ``counter``
    whether the IV is a counter nonce (seqiv, CTR) rather than a CBC IV
    (echainiv), ``clear`` whether the payload travels in clear (NULL);
    ``decrypts``/``verifies`` whether the cipher is opened and the ICV
    checked, ``unchecked`` why not when either is False, and ``lane``
    whether the engine's steady lane may take the SA's packets.
    """

    __slots__ = (
        "_algorithm",
        "_align",
        "_key",
        "_local",
        "_mac",
        "_nonce",
        "block",
        "clear",
        "counter",
        "decrypts",
        "esn",
        "icv_len",
        "iv_len",
        "lane",
        "spi",
        "unchecked",
        "verifies",
    )

    def __init__(self, sa: SecurityAssociation) -> None:
        layout = CIPHER_LAYOUT.get(sa.algorithm)
        if layout is None and sa.algorithm not in UNOPENED_CIPHERS:
            raise ValueError(f"no context for {sa.algorithm}")
        self._mac = _mac_of(sa)
        if layout is None and self._mac is None:
            raise ValueError(f"no context for {sa.suite}: neither decrypted nor verified")
        material = sa.key.reveal()
        _, nonce_len, self.iv_len, self.block = layout or (
            (),
            0,
            UNOPENED_CIPHERS[sa.algorithm][0],
            UNOPENED_CIPHERS[sa.algorithm][0],
        )
        self._key = material[: len(material) - nonce_len]
        self._nonce = material[len(material) - nonce_len :]
        self._algorithm = sa.algorithm
        self._local = threading.local()  # a CBC decryptor per thread (--jobs), kept
        self.icv_len = sa.icv_len
        self.esn = sa.esn
        self.spi = sa.spi
        self.counter = sa.algorithm == CTR_AES
        self.clear = sa.algorithm == NULL_CIPHER
        self.decrypts = sa.algorithm in OPENED or self.clear
        self.verifies = self._mac is not None
        self.unchecked = _unchecked(sa, self.decrypts, self.verifies)
        self.lane = sa.algorithm in _LANE_CIPHERS and sa.auth_algorithm in _LANE_MACS
        # open_many's layout: each CBC IV, each CTR ciphertext starts a cipher block
        self._align = 16 if self.counter else 1 if self.clear else self.block

    def _icv(self, seq64: int, iv: bytes, ciphertext: bytes | memoryview, esn: bool) -> bytes:
        assert self._mac is not None
        parts = [_HEADER.pack(self.spi, seq64 & 0xFFFFFFFF), iv, ciphertext]
        if esn:
            parts.append(_HI.pack(seq64 >> 32))  # RFC 4303 s2.2.1: after the packet, not sent
        return self._mac.tag(parts)[: self.icv_len]

    def _cipher(self, iv: bytes) -> Cipher[modes.CBC] | Cipher[modes.CTR]:
        if self.counter:
            return Cipher(block_cipher(CTR_AES, self._key), modes.CTR(self._nonce + iv + _ONE))
        return Cipher(block_cipher(self._algorithm, self._key), modes.CBC(iv))

    def authentic(
        self, seq64: int, iv: bytes, sealed: bytes | memoryview, esn: bool | None = None
    ) -> bool:
        """Does the ICV verify over header, IV and ciphertext? (False when none is checked.)"""
        if self._mac is None or len(sealed) < self.icv_len or len(iv) != self.iv_len:
            return False
        cut = len(sealed) - self.icv_len
        icv = self._icv(seq64, iv, sealed[:cut], self.esn if esn is None else esn)
        return hmac.compare_digest(icv, bytes(sealed[cut:]))

    def open(
        self, seq64: int, iv: bytes, sealed: bytes | memoryview, esn: bool | None = None
    ) -> bytes | None:
        """Verify the ICV over header, IV and ciphertext, then decrypt; ``None`` if it fails.

        ``esn`` overrides the SA's flag, for callers that try both forms. A
        CBC ciphertext that is not a whole number of blocks decrypts its whole
        blocks and keeps its last bytes as they are, so the trailer check
        (RFC 4303 s2.4, ``block``) reports it rather than the packet failing.
        Without a checked ICV (``verifies`` False) its bytes are only cut off;
        without an opened cipher (``decrypts`` False) there is no plaintext.
        """
        if not self.decrypts or len(sealed) < self.icv_len or len(iv) != self.iv_len:
            return None
        if self.verifies and not self.authentic(seq64, iv, sealed, esn):
            return None
        cut = len(sealed) - self.icv_len
        ciphertext = sealed[:cut]
        if self.clear:
            return bytes(ciphertext)
        if self.counter:
            return self._cipher(iv).decryptor().update(ciphertext)
        whole = cut - cut % self.block
        plain = self._cbc_decrypt(iv, ciphertext[:whole])
        return plain if whole == cut else plain + bytes(ciphertext[whole:])

    def _cbc_decrypt(self, iv: bytes | memoryview, blocks: bytes | memoryview) -> bytes:
        """CBC decryption of whole blocks with one decryptor kept per thread.

        A CBC decryptor XORs each block's decryption with the ciphertext block
        before it, so the IV fed as a first block makes the next one decrypt as
        under that IV (RFC 3602 s2.3); its own output is dropped. Building a
        decryptor per packet costs several times the decryption itself
        (docs/performance.md).
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
        words back, one row per IV. Only for CBC SAs whose cipher is opened
        (``decrypts``, not ``counter``).
        """
        dec = getattr(self._local, "ecb", None)
        if dec is None:
            cipher = block_cipher(self._algorithm, self._key)
            dec = self._local.ecb = Cipher(cipher, modes.ECB()).decryptor()
        words = np.frombuffer(dec.update(ivs), "<u8").astype(np.uint64)
        return words.reshape(-1, self.iv_len // 8)

    def open_many(
        self, seq64: npt.NDArray[np.uint64], ivs: npt.NDArray[np.uint8], sealed: list[memoryview]
    ) -> list[bytes | None]:
        """``open`` for many packets of the SA (seq64s, rows of IVs), in order, in bulk.

        ``open`` is the reference rule and this returns exactly its list:
        ``None`` for every packet when the cipher is not opened or the IVs
        are not ``iv_len`` bytes, for a packet shorter than its ICV, and for
        one whose ICV fails. The packets go through in chunks of ``_CHUNK``
        (``_open_chunk``), which keeps the chunk's copies in the CPU's cache.
        """
        return self._many(seq64, ivs, sealed, self.verifies)

    def decrypt_many(
        self, seq64: npt.NDArray[np.uint64], ivs: npt.NDArray[np.uint8], sealed: list[memoryview]
    ) -> list[bytes | None]:
        """``open_many`` without checking the ICVs: for packets whose ICV verified before.

        The decrypted copy (rewrite/bulk.py) opens again the packets the
        analysis verified, in the same run, with the same SA; their ICVs are
        not computed twice. For a packet whose ICV verifies this is exactly
        ``open_many``'s plaintext; for one whose ICV would fail it is the
        ciphertext decrypted anyway, so a caller must know the ICV verified.
        """
        return self._many(seq64, ivs, sealed, False)

    def _many(
        self,
        seq64: npt.NDArray[np.uint64],
        ivs: npt.NDArray[np.uint8],
        sealed: list[memoryview],
        verify: bool,
    ) -> list[bytes | None]:
        """``open_many`` (``verify``: the SA's ICVs checked) or ``decrypt_many``."""
        k = len(sealed)
        if not k:
            return []
        if not self.decrypts or ivs.ndim != 2 or ivs.shape[1] != self.iv_len:
            return [None] * k
        lens = np.fromiter(map(len, sealed), np.int64, k)
        keep = np.flatnonzero(lens >= self.icv_len)
        if len(keep) < k:  # too short to hold an ICV: None, as ``open`` says
            plains: list[bytes | None] = [None] * k
            kept = [sealed[i] for i in keep.tolist()]
            got = self._many(seq64[keep], ivs[keep], kept, verify)
            for i, plain in zip(keep.tolist(), got, strict=True):
                plains[i] = plain
            return plains
        plains = []
        for lo in range(0, k, _CHUNK):
            hi = lo + _CHUNK
            plains += self._open_chunk(seq64[lo:hi], ivs[lo:hi], sealed[lo:hi], lens[lo:hi], verify)
        return plains

    def _open_chunk(
        self,
        seq64: npt.NDArray[np.uint64],
        ivs: npt.NDArray[np.uint8],
        sealed: list[memoryview],
        lens: npt.NDArray[np.int64],
        verify: bool,
    ) -> list[bytes | None]:
        """``open_many`` of packets that all hold an ICV: one buffer, one MAC loop, one decryption
        (no MAC loop unless ``verify``).

        Each packet is laid out in one buffer as SPI || seq (low 32) || IV ||
        ciphertext || ICV, then zeros: 4 for the ESN high half, and as many as
        make the packet's share a whole number of ``_align`` bytes, so that
        every IV (CBC) or ciphertext (CTR) starts on a block of the buffer.
        The ICVs are read out, the ESN high half written where the ICV began
        (RFC 4303 s2.2.1: after the packet, for the ICV only), and each
        packet's authenticated bytes are then one slice for ``Mac.tags``.
        """
        k, head = len(sealed), _HEADER.size + self.iv_len
        spare = 4 if self.esn and verify else 0
        tail = spare + (-(head + lens + spare)) % self._align
        base = np.cumsum(head + lens + tail) - (head + lens + tail)  # each packet's place
        prefix = np.empty((k, head), np.uint8)
        prefix[:, :4] = np.frombuffer(_HI.pack(self.spi), np.uint8)
        prefix[:, 4:8] = _be32(seq64 & np.uint64(0xFFFFFFFF))
        prefix[:, 8:] = ivs
        parts: list[bytes | memoryview] = [b""] * (3 * k)
        parts[0::3] = cast("list[bytes]", prefix.view(np.dtype((np.void, head))).ravel().tolist())
        parts[1::3] = sealed
        parts[2::3] = [_ZEROS[t] for t in tail.tolist()]
        buf = bytearray().join(parts)
        flat = np.frombuffer(buf, np.uint8)
        start = base + head  # ciphertext
        end = start + lens - self.icv_len  # ciphertext's end, the ICV's start
        ok = self._verify_chunk(buf, flat, seq64, base, end, spare) if verify else np.ones(k, bool)
        plain, shift, whole = self._decrypt_chunk(buf, flat, ivs, start, end)
        starts, ends = (start - shift).tolist(), (start - shift + whole).tolist()
        plains = [
            plain[a:b] if good else None
            for good, a, b in zip(ok.tolist(), starts, ends, strict=True)
        ]
        rest, stop = (start + whole).tolist(), end.tolist()
        for i in np.flatnonzero(ok & (start + whole < end)).tolist():
            # RFC 4303 s2.4: a CBC ciphertext of no whole number of blocks keeps its
            # last bytes as they are, so that the trailer check reports it (``open``)
            plains[i] = plain[starts[i] : ends[i]] + bytes(buf[rest[i] : stop[i]])
        return plains

    def _verify_chunk(
        self,
        buf: bytearray,
        flat: npt.NDArray[np.uint8],
        seq64: npt.NDArray[np.uint64],
        base: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
        spare: int,
    ) -> npt.NDArray[np.bool_]:
        """Does each packet's ICV verify? (All True when none is checked, as ``open`` skips it.)

        The ICVs are read out of the buffer first; with ESN the high half then
        takes their place (``spare`` bytes kept for it), after the ciphertext.
        """
        k, icv_len = len(base), self.icv_len
        if self._mac is None or not icv_len:  # nothing to compare: ``open``'s compare passes
            return np.ones(k, np.bool_)
        icvs = _fields(flat, icv_len, 1)[end]  # a copy, before the ESN high half lands there
        if spare:
            flat[end[:, None] + np.arange(4)] = _be32(seq64 >> np.uint64(32))
        tags = self._mac.tags(memoryview(buf), base.tolist(), (end + spare).tolist())
        size = len(tags) // k
        if icv_len > size:  # a truncation longer than the MAC: ``open``'s compare fails
            return np.zeros(k, np.bool_)
        # The ICVs and the tags computed here are compared as arrays, not with
        # hmac.compare_digest: an offline analyzer holds both, and no timing of
        # this comparison reveals a secret to anyone (a receiver's constant time
        # guards against forgers probing it; here there is none).
        # each ICV and each tag's first icv_len bytes as one field, compared at once
        same: npt.NDArray[np.bool_] = _fields(tags, icv_len, size) == icvs
        return same

    def _decrypt_chunk(
        self,
        buf: bytearray,
        flat: npt.NDArray[np.uint8],
        ivs: npt.NDArray[np.uint8],
        start: npt.NDArray[np.int64],
        end: npt.NDArray[np.int64],
    ) -> tuple[bytes, int, npt.NDArray[np.int64]]:
        """The chunk's plaintexts in one buffer: (buffer, offset of ``buf`` at its 0, bytes each).

        CBC (RFC 3602 s2.3, P_i = D_K(C_i) xor C_i-1 with the IV as C_0): one
        decryption from the first IV to the end, with ``_cbc_decrypt``'s kept
        decryptor; each packet's IV starts a block, so its first block chains
        from its own IV, and what the bytes between packets decrypt to is
        dropped. This is ECB decryption of every block XORed with the block
        before it, done in C, in half the time of ECB and a numpy XOR
        (docs/performance.md). CTR: ``_ctr_stream``. NULL: the ciphertext.
        """
        cut = end - start
        if self.clear:
            return bytes(buf), 0, cut
        first = int(start[0])
        if self.counter:
            return self._ctr_stream(flat[first:], ivs, start - first, cut), first, cut
        at = first - self.iv_len
        stream = memoryview(buf)[at : len(buf) - (len(buf) - at) % self.block]
        plain = self._cbc_decrypt(stream[: self.iv_len], stream[self.iv_len :])
        return plain, first, cut - cut % self.block

    def _ctr_stream(
        self,
        flat: npt.NDArray[np.uint8],
        ivs: npt.NDArray[np.uint8],
        start: npt.NDArray[np.int64],
        cut: npt.NDArray[np.int64],
    ) -> bytes:
        """``flat`` from the first ciphertext on, XORed with the chunk's AES-CTR keystream.

        RFC 3686 s4: packet i's j-th block (j from 0) is XORed with AES_K(nonce
        || IV_i || j + 1). Every ciphertext starts a 16-byte block of the
        buffer (``start``, from the first), so one ECB encryption of a counter
        block per block of the buffer gives the keystream of the whole chunk;
        the blocks between packets get the nonce and zeros, whose output is
        dropped with the bytes it lands on.
        """
        k = len(start)
        counters = np.zeros((-(-len(flat) // 16), 16), np.uint8)
        counters[:, :4] = np.frombuffer(self._nonce, np.uint8)
        blocks = (cut + 15) // 16
        packet = np.repeat(np.arange(k), blocks)
        j = np.arange(len(packet)) - np.repeat(np.cumsum(blocks) - blocks, blocks)
        row = start[packet] // 16 + j
        counters[row, 4:12] = ivs[packet]
        counters[row, 12:] = _be32((j + 1).astype(np.uint64))
        enc = getattr(self._local, "ctr", None)
        if enc is None:
            cipher = block_cipher(self._algorithm, self._key)
            enc = self._local.ctr = Cipher(cipher, modes.ECB()).encryptor()
        stream = np.frombuffer(enc.update(counters.tobytes()), np.uint8)[: len(flat)]
        return (flat ^ stream).tobytes()

    def seal(self, seq64: int, iv: bytes, plaintext: bytes) -> bytes:
        """Encrypt ``plaintext`` (whole blocks for CBC); returns ciphertext || ICV.

        Without a checked integrity algorithm the ICV bytes are zeros (the
        fixture builder's stand-in for an ICV nobody can check).
        """
        if self.clear:
            ciphertext = plaintext
        else:
            enc = self._cipher(iv).encryptor()
            ciphertext = enc.update(plaintext) + enc.finalize()
        if self._mac is None:
            return ciphertext + bytes(self.icv_len)
        return ciphertext + self._icv(seq64, iv, ciphertext, self.esn)


def _fields(data: npt.NDArray[np.uint8] | bytes, width: int, stride: int) -> npt.NDArray[np.void]:
    """``data`` seen as fields of ``width`` bytes, one starting every ``stride`` bytes (a
    view): indexing it picks whole fields, where gathering each byte of 512 ICVs of 16
    bytes and comparing them byte by byte costs 5 times as much."""
    count = (len(data) - width) // stride + 1
    fields: npt.NDArray[np.void] = np.ndarray(
        (count,), np.dtype((np.void, width)), data, 0, (stride,)
    )
    return fields


def _be32(words: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint8]:
    """The low 32 bits of each word, big endian: one row of 4 bytes a word."""
    return words.astype(">u4").view(np.uint8).reshape(-1, 4)


def _mac_of(sa: SecurityAssociation) -> Mac | None:
    """The SA's integrity algorithm keyed, or None when its ICV is not checked."""
    if not sa.integrity_checked or sa.auth_algorithm is None or sa.auth_key is None:
        return None
    return make_mac(sa.auth_algorithm, sa.auth_key.reveal())


def _unchecked(sa: SecurityAssociation, decrypts: bool, verifies: bool) -> str:
    """Why the SA's packets are not both decrypted and verified ("" when they are)."""
    if not decrypts:
        reason = UNOPENED_CIPHERS.get(sa.algorithm, (0, "not opened by this version"))[1]
        return f"{sa.algorithm} not decrypted: {reason}"
    if verifies:
        return ""
    if sa.auth_algorithm is None or sa.auth_algorithm in NO_INTEGRITY or not sa.icv_len:
        return "no integrity: the SA has no ICV (RFC 4303 s3.2)"
    if sa.auth_key is None:
        return "ICV not checked: no integrity key"
    if sa.auth_algorithm == "any":
        return "ICV not checked: the key source does not name the integrity algorithm"
    return f"ICV not checked: {sa.auth_algorithm} is not verified by this version"
