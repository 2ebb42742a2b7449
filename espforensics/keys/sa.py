"""Security associations and the table that finds one for a packet.

In: ``SecurityAssociation`` values built by the loaders of this package.
Out: ``SaTable.lookup(spi, src, dst)``, most specific match first.
Raises ``KeyFileError`` when two entries claim the same SPI and addresses.

Key material lives in ``Secret``, whose repr and str never show it; only
``espforensics.crypto`` calls ``Secret.reveal()``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from espforensics.errors import KeyFileError
from espforensics.model.records import ANY_SPI as MODEL_ANY_SPI

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Kernel names of the algorithms we know, with (key lengths without salt, salt
# length). The AEADs with an 8-byte explicit IV are opened (crypto/aead.py),
# GMAC among them; the ciphers and HMACs below are opened by crypto/encauth.py.
RFC4106 = "rfc4106(gcm(aes))"
RFC4309 = "rfc4309(ccm(aes))"
RFC7539ESP = "rfc7539esp(chacha20,poly1305)"
RFC4543 = "rfc4543(gcm(aes))"  # GMAC: integrity only, the payload in clear
AEAD_KEY_LAYOUT: dict[str, tuple[tuple[int, ...], int]] = {
    RFC4106: ((16, 24, 32), 4),  # RFC 4106 s8.1: AES key || 4-byte salt
    RFC4309: ((16, 24, 32), 3),  # RFC 4309 s7.1: 3-byte salt
    RFC7539ESP: ((32,), 4),  # RFC 7634 s2
    RFC4543: ((16, 24, 32), 4),  # RFC 4543 s3.2: GMAC, no encryption
}
SUPPORTED_ALGORITHMS = frozenset({RFC4106, RFC4309, RFC7539ESP, RFC4543})

# Ciphers of non-AEAD SAs that are opened -> (key lengths without nonce, nonce
# length, explicit IV length, block the ciphertext fills: RFC 4303 s2.4).
CBC_AES = "cbc(aes)"  # RFC 3602: 16-byte IV, 16-byte blocks
CBC_DES3 = "cbc(des3_ede)"  # RFC 2451: 8-byte IV, 8-byte blocks
CTR_AES = "rfc3686(ctr(aes))"  # RFC 3686: key || 4-byte nonce, 8-byte IV
NULL_CIPHER = "ecb(cipher_null)"  # RFC 2410: no IV, the payload in clear
CLEAR_BY_DESIGN = frozenset({RFC4543, NULL_CIPHER})  # no encryption: clear payload is no leak
CIPHER_LAYOUT: dict[str, tuple[tuple[int, ...], int, int, int]] = {
    CBC_AES: ((16, 24, 32), 0, 16, 16),
    CBC_DES3: ((24,), 0, 8, 8),
    CTR_AES: ((16, 24, 32), 4, 8, 4),
    NULL_CIPHER: ((0,), 0, 0, 4),
    "cbc(des)": ((8,), 0, 8, 8),  # RFC 2405: 8-byte IV
    "cbc(blowfish)": (tuple(range(5, 57)), 0, 8, 8),  # RFC 2451 s2.2: 40 to 448 bits
    "cbc(cast5)": (tuple(range(5, 17)), 0, 8, 8),  # RFC 2451 s2.2, RFC 2144: 40 to 128 bits
    "cbc(camellia)": ((16, 24, 32), 0, 16, 16),  # RFC 4312 s2: 16-byte IV
    "cbc(sm4)": ((16,), 0, 16, 16),  # Linux's cbc(sm4): a 128-bit block cipher, 16-byte IV
}
# Ciphers Linux offers whose names are read but that no maintained implementation
# in the package registries opens -> the reason (docs/checks.md "Per algorithm").
# Their packets are still proven authentic when their integrity algorithm is one of ours.
UNOPENED_CIPHERS: dict[str, tuple[int, str]] = {  # name -> (explicit IV bytes, why)
    "cbc(twofish)": (16, "no maintained Twofish implementation in the package registries"),
    "cbc(serpent)": (16, "no maintained Serpent implementation in the package registries"),
}
# HMACs that are verified -> (hashlib name, key bytes the RFC gives). RFC 2403,
# RFC 2404, RFC 4868 s2.1.1 (the key is as long as the hash's output).
HMAC_DIGESTS: dict[str, tuple[str, int]] = {
    "hmac(md5)": ("md5", 16),
    "hmac(sha1)": ("sha1", 20),
    "hmac(sha256)": ("sha256", 32),
    "hmac(sha384)": ("sha384", 48),
    "hmac(sha512)": ("sha512", 64),
    "hmac(rmd160)": ("ripemd160", 20),  # RFC 2857 s2 (when the runtime's hashlib has it)
}
# Integrity algorithms built on AES, not HMACs -> the key lengths they take.
AES_MACS: dict[str, tuple[int, ...]] = {
    "xcbc(aes)": (16,),  # RFC 3566 s2.1: a 128-bit key
    "cmac(aes)": (16, 24, 32),  # RFC 4494 s2 names AES-128; Linux takes any AES key
}
# The kernel's name for no integrity (RFC 4303 s3.2 allows ESP without it).
NO_INTEGRITY = frozenset({"digest_null"})
ICV_BITS = frozenset({64, 96, 128})
# The SPI of an SA that names none (tcpdump's ``algo:secret`` without ``spi@addr``,
# Wireshark's ``*``): it matches a packet of any SPI no SA of its own SPI claims.
# Not 0: RFC 4303 s2.1 reserves SPI 0, yet a published test vector sends it
# (model.ANY_SPI, -1, is no SPI of the wire).
ANY_SPI = MODEL_ANY_SPI
# RFC 4303 s2.1: SPI 0 is for local use and MUST NOT be sent; 1..255 are reserved
# by IANA for future use. Such an SA loads with a warning (keys.load_sas).
RESERVED_SPIS = 256
# The integrity algorithm of an SA whose source gives only the ICV's length: the ICV
# is skipped, not checked (Wireshark's "ANY n bit", tcpdump's ``-hmac96``).
ANY_AUTH = "any"
NON_AEAD_CIPHERS = frozenset(CIPHER_LAYOUT) | frozenset(UNOPENED_CIPHERS)


def _runs(name: str) -> bool:
    """Can this runtime's hashlib compute ``name``? (RIPEMD-160 needs OpenSSL's legacy
    provider, or a Python that carries its own.)"""
    try:
        hashlib.new(name)
    except ValueError:
        return False
    return True


_HASHES = frozenset(name for name, _ in HMAC_DIGESTS.values() if _runs(name))


def suite_checks_icv(suite: str) -> bool:
    """Does an SA of this suite (``SecurityAssociation.suite``) have ICVs this version
    verifies: an AEAD, or a cipher with an HMAC or AES MAC it computes? (Not
    ``decrypted_no_icv`` ones: no integrity, ``+ any``, ``digest_null``, an unknown MAC.)"""
    enc, _, auth = suite.partition(" + ")
    if not auth:
        return enc in AEAD_KEY_LAYOUT
    return auth in AES_MACS or HMAC_DIGESTS.get(auth, ("", 0))[0] in _HASHES


_CACHE_MAX = 65536  # lookups remembered; a capture of a scan meets millions of (SPI, addresses)


class Secret:
    """Key bytes that cannot be printed, logged or compared by accident."""

    __slots__ = ("_value",)

    def __init__(self, value: bytes) -> None:
        self._value = bytes(value)

    def __repr__(self) -> str:
        return f"<secret {len(self._value)} bytes>"

    __str__ = __repr__

    def __len__(self) -> int:
        return len(self._value)

    def reveal(self) -> bytes:
        """The key bytes. Only the crypto module may call this."""
        return self._value

    def same_as(self, other: Secret) -> bool:
        """Constant-time equality of two secrets."""
        return hmac.compare_digest(self._value, other._value)


@dataclass(frozen=True, slots=True)
class SecurityAssociation:
    """One ESP SA as a key source described it.

    ``src``/``dst`` of ``None`` match any address. ``origin`` names the file
    and entry the SA came from, for messages (never the key).
    """

    spi: int
    algorithm: str
    key: Secret = field(compare=False)
    src: IpAddress | None = None
    dst: IpAddress | None = None
    icv_bits: int = 128
    esn: bool = False
    esn_hi: int = 0
    mode: str | None = None  # "transport" / "tunnel" (or "beet", "iptfs") when the source says
    encap_port: int | None = None  # UDP port of ESP-in-UDP when the source says
    origin: str = ""
    # Non-AEAD SAs only (``enc`` + ``auth``): the integrity algorithm's kernel
    # name (or "any" when the source names only the ICV length) and its key.
    # ``algorithm``/``key`` then hold the encryption algorithm and its key.
    auth_algorithm: str | None = None
    auth_key: Secret | None = field(default=None, compare=False)
    # The receiver's anti-replay window as the key file states it (receiver/config.py):
    # its size (None: not stated), and whether the state has the ``replay_esn`` bitmap
    # (``anti-replay esn context``) rather than the legacy 32-bit one (None: not stated).
    replay_window: int | None = None
    replay_esn: bool | None = None

    @property
    def suite(self) -> str:
        """The algorithm as the tables name it: ``cbc(aes) + hmac(sha256)`` for enc + auth."""
        if self.auth_algorithm is None:
            return self.algorithm
        return f"{self.algorithm} + {self.auth_algorithm}"

    @property
    def supported(self) -> bool:
        """True when this version can decrypt the SA's packets or verify their ICVs."""
        if self.is_aead:
            return self.algorithm in SUPPORTED_ALGORITHMS
        return self.algorithm in CIPHER_LAYOUT or self.integrity_checked

    @property
    def is_aead(self) -> bool:
        """An AEAD SA (one algorithm, one key), not a cipher with or without integrity."""
        return self.auth_algorithm is None and self.algorithm not in NON_AEAD_CIPHERS

    @property
    def integrity_checked(self) -> bool:
        """Does a non-AEAD SA have an integrity algorithm this version verifies, and its key?"""
        return self.auth_key is not None and suite_checks_icv(self.suite)

    @property
    def key_usable(self) -> bool:
        """False when the key material has no length its algorithm takes (one byte short)."""
        if not self.is_aead:
            cipher = CIPHER_LAYOUT.get(self.algorithm)
            macs = AES_MACS.get(self.auth_algorithm or "")
            return (cipher is None or len(self.key) - cipher[1] in cipher[0]) and (
                macs is None or self.auth_key is None or len(self.auth_key) in macs
            )
        layout = AEAD_KEY_LAYOUT.get(self.algorithm)
        return layout is None or len(self.key) - layout[1] in layout[0]

    @property
    def icv_len(self) -> int:
        return self.icv_bits // 8

    @property
    def any_spi(self) -> bool:
        """Does this entry stand for every SPI no other entry claims (a wildcard)?"""
        return self.spi == ANY_SPI

    @property
    def spi_text(self) -> str:
        """The SPI for a message: ``0x00001001``, or ``any`` for a wildcard entry."""
        return "any" if self.any_spi else f"{self.spi:#010x}"

    @property
    def icv_unchecked(self) -> bool:
        """Is there an ICV on the wire that no key given can check?

        True for an SA whose source names the ICV's length only (Wireshark's
        ``ANY n bit authentication [no checking]``, tcpdump's ``-hmac96`` forms,
        which carry only the cipher's secret): its packets can be decrypted,
        their ICV bytes skipped, never verified.
        """
        return self.auth_algorithm == ANY_AUTH and self.icv_bits > 0

    @property
    def rfc_hmac_key_len(self) -> int | None:
        """The key length RFC 2403/2404/4868 s2.1.1 gives when the SA's HMAC key differs.

        RFC 2104 s3 takes any key length (Linux, Wireshark and scapy do too), so
        such a key is used as given; this only says it is not the RFC's length.
        """
        digest = HMAC_DIGESTS.get(self.auth_algorithm or "")
        if digest is None or self.auth_key is None or len(self.auth_key) == digest[1]:
            return None
        return digest[1]


def _same_keying(a: SecurityAssociation, b: SecurityAssociation) -> bool:
    """Do two SAs decrypt alike (same algorithms, ICV, ESN and keys)?"""
    same = (a.algorithm, a.auth_algorithm, a.icv_bits, a.esn) == (
        b.algorithm,
        b.auth_algorithm,
        b.icv_bits,
        b.esn,
    ) and a.key.same_as(b.key)
    if a.auth_key is None or b.auth_key is None:
        return same and a.auth_key is b.auth_key
    return same and a.auth_key.same_as(b.auth_key)


def _packed(addr: IpAddress | None) -> bytes | None:
    return None if addr is None else addr.packed


class SaTable:
    """All known SAs, found by (SPI, source, destination).

    A lookup prefers an SA that names both addresses, then one naming the
    destination only, then the source only, then neither (RFC 4301 s4.1:
    an SA is identified by SPI and destination). An entry of any SPI
    (``ANY_SPI``: a wildcard) matches only when no entry of the packet's SPI
    does, with the same order of addresses; each SPI it matches gets an SA
    of its own (its own sequence numbers, ESN and IV state), made once.
    Results are cached per (spi, src, dst) because lookups run once per packet.

    ``notes`` are the warnings of loading (a line skipped, policy blocks
    ignored): ``FILE: what``, for the user to see.
    """

    def __init__(self, sas: tuple[SecurityAssociation, ...] = ()) -> None:
        self._by_key: dict[tuple[int, bytes | None, bytes | None], SecurityAssociation] = {}
        self._cache: dict[tuple[int, bytes, bytes], SecurityAssociation | None] = {}
        self._made: dict[tuple[int, int], SecurityAssociation] = {}  # (id(entry), spi) -> SA
        self._entry_of: dict[int, SecurityAssociation] = {}  # id(made SA) -> its wildcard entry
        self.notes: list[str] = []
        self._spis: frozenset[int] | None = None
        for sa in sas:
            self.add(sa)

    def add(self, sa: SecurityAssociation) -> None:
        """Add ``sa``; raise ``KeyFileError`` if its SPI and addresses are taken.

        The same SA given twice with the same key (a key file and the
        capture's own secrets block, say) is kept once, not refused.
        """
        key = (sa.spi, _packed(sa.src), _packed(sa.dst))
        other = self._by_key.get(key)
        if other is not None:
            if _same_keying(sa, other):
                return
            path, _, entry = sa.origin.rpartition(":")
            raise KeyFileError(
                path or "<keys>",
                f"{entry}: duplicate SA: SPI {sa.spi_text} "
                f"src {sa.src or 'any'} dst {sa.dst or 'any'} is also given by {other.origin}",
            )
        self._by_key[key] = sa
        self._cache.clear()
        self._spis = None

    def merge(self, other: SaTable) -> None:
        """Add every SA of ``other``, and its notes."""
        for sa in other:
            self.add(sa)
        self.notes.extend(n for n in other.notes if n not in self.notes)

    def lookup(self, spi: int, src: bytes, dst: bytes) -> SecurityAssociation | None:
        """The SA for a packet with this SPI and packed outer addresses, if any."""
        if not self._by_key:  # keyless: nothing to find, nothing to cache for a scan's SPIs
            return None
        ck = (spi, src, dst)
        try:
            return self._cache[ck]
        except KeyError:
            pass
        found = self._find(spi, src, dst)
        if found is None and spi != ANY_SPI:
            found = self._find(ANY_SPI, src, dst)
            if found is not None:
                found = self._made_for(found, spi)
        if len(self._cache) >= _CACHE_MAX:  # a scan's SPIs and addresses: stay bounded
            self._cache.clear()
        self._cache[ck] = found
        return found

    def _find(self, spi: int, src: bytes, dst: bytes) -> SecurityAssociation | None:
        for key in ((spi, src, dst), (spi, None, dst), (spi, src, None), (spi, None, None)):
            found = self._by_key.get(key)
            if found is not None:
                return found
        return None

    def _made_for(self, entry: SecurityAssociation, spi: int) -> SecurityAssociation:
        """The SA a wildcard entry stands for at ``spi``: the same one every time."""
        made = self._made.get((id(entry), spi))
        if made is None:
            if len(self._made) >= _CACHE_MAX:  # bounded; a packet's flow keeps its SA alive
                self._made.clear()
                self._entry_of.clear()
            made = self._made[(id(entry), spi)] = replace(entry, spi=spi)
            self._entry_of[id(made)] = entry
        return made

    @property
    def spis(self) -> frozenset[int]:
        """The SPIs the entries name (not the wildcards'): a set the per-frame path tests."""
        if self._spis is None:
            self._spis = frozenset(spi for spi, _, _ in self._by_key if spi != ANY_SPI)
        return self._spis

    def entry_of(self, sa: SecurityAssociation) -> SecurityAssociation:
        """The table's entry an SA of ``lookup`` came from (itself, or its wildcard entry)."""
        return self._entry_of.get(id(sa), sa)

    def has_usable_key(self) -> bool:
        """Is there an SA whose packets this version decrypts?"""
        return any(sa.supported and sa.key_usable for sa in self)

    def __iter__(self) -> Iterator[SecurityAssociation]:
        return iter(tuple(self._by_key.values()))

    def __len__(self) -> int:
        return len(self._by_key)
