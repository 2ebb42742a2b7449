"""Build a ``SecurityAssociation`` from the raw fields of a key source.

In: a ``RawSa`` (fields as a loader read them: text, ints, the key as hex
text or bytes) and a ``Where`` (the file, the entry, and optionally the
line of each field). Out: a checked ``SecurityAssociation``. Raises
``KeyFileError(path, "<entry>: <problem>")``. Every loader ends here, so
every format is checked by the same rules with the same words.

No message, repr or exception chain built here contains key material:
a bad key is described by its length or the position of a bad digit, and
as a key pasted into another field is just as secret, a value read from a
file is quoted only through ``shown`` and a number only through
``_number`` (the rule, docs/keys.md "Error messages": text of at most
``SHOWN_CHARS`` characters without a run of ``HEX_RUN`` hex digits; a number
that fits in 32 bits). Anything else is described by its size.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from espforensics.errors import KeyFileError
from espforensics.keys.sa import (
    AEAD_KEY_LAYOUT,
    AES_MACS,
    ANY_AUTH,
    ANY_SPI,
    HMAC_DIGESTS,
    NO_INTEGRITY,
    RESERVED_SPIS,
    RFC4106,
    IpAddress,
    Secret,
    SecurityAssociation,
)

MAX_SPI = 0xFFFFFFFF
MAX_U32 = 0xFFFFFFFF
MODES = ("transport", "tunnel", "beet", "iptfs")  # iproute2 names for ESP modes

# AEADs (kernel names, net/xfrm/xfrm_algo.c) -> (key lengths without salt,
# salt length, ICV bits allowed, what the key is). The rfc8750 names stand for
# Wireshark's implicit-IV variants (RFC 8750), which Linux does not have.
AEADS: dict[str, tuple[tuple[int, ...], int, tuple[int, ...], str]] = {
    RFC4106: (*AEAD_KEY_LAYOUT[RFC4106], (64, 96, 128), "AES key"),  # RFC 4106 s8.1
    "rfc4309(ccm(aes))": (*AEAD_KEY_LAYOUT["rfc4309(ccm(aes))"], (64, 96, 128), "AES key"),
    "rfc4543(gcm(aes))": (*AEAD_KEY_LAYOUT["rfc4543(gcm(aes))"], (128,), "AES key"),
    "rfc7539esp(chacha20,poly1305)": (
        *AEAD_KEY_LAYOUT["rfc7539esp(chacha20,poly1305)"],
        (128,),  # RFC 7634 s2: the Poly1305 tag is 16 bytes
        "ChaCha20 key",
    ),
    "rfc8750(gcm(aes))": ((16, 24, 32), 4, (128,), "AES key"),
    "rfc8750(chacha20,poly1305)": ((32,), 4, (128,), "ChaCha20 key"),
}

# Encryption algorithms of non-AEAD SAs (kernel names) -> key lengths in bytes.
CIPHERS: dict[str, tuple[int, ...]] = {
    "ecb(cipher_null)": (0,),  # RFC 2410
    "cbc(des)": (8,),
    "cbc(des3_ede)": (24,),  # RFC 2451
    "cbc(cast5)": tuple(range(5, 17)),  # RFC 2144: 40 to 128 bits
    "cbc(blowfish)": tuple(range(5, 57)),  # 40 to 448 bits
    "cbc(aes)": (16, 24, 32),  # RFC 3602
    "cbc(serpent)": (16, 24, 32),
    "cbc(camellia)": (16, 24, 32),
    "cbc(twofish)": (16, 24, 32),
    "cbc(sm4)": (16,),
    "rfc3686(ctr(aes))": (20, 28, 36),  # RFC 3686 s5.1: AES key || 4-byte nonce
}

# Integrity algorithms (kernel names) -> ICV bits when the source gives none
# (the kernel's default truncation). "any" is an algorithm the source does not
# name (Wireshark's "ANY n bit authentication"); its ICV length is required.
INTEGRITY: dict[str, int | None] = {
    "digest_null": 0,
    "hmac(md5)": 96,  # RFC 2403
    "hmac(sha1)": 96,  # RFC 2404
    "hmac(sha256)": 96,  # Linux default; RFC 4868 says 128 (auth-trunc gives it)
    "hmac(sha384)": 192,  # RFC 4868
    "hmac(sha512)": 256,  # RFC 4868
    "hmac(rmd160)": 96,  # RFC 2857
    "xcbc(aes)": 96,  # RFC 3566
    "cmac(aes)": 96,  # RFC 4494
    "hmac(sm3)": 256,
    "any": None,
}

_HEX_DIGITS = re.compile(r"[0-9a-fA-F]*")
SHOWN_CHARS = 12  # the longest value a message quotes: "10.0.0.0/24", "transprt"
HEX_RUN = 8  # a value with this many hex digits in a row could be key bytes: never quoted
_HEX_RUN = re.compile(rf"[0-9a-fA-F]{{{HEX_RUN},}}")
MAX_DIGITS = 20  # a decimal number this long fits no field (int() stops at 4,300)
# Field names as users write them, where they differ from RawSa's.
_LABELS = {"icv_bits": "icv", "encap_port": "encap", "auth_key": "auth key"}


@dataclass(frozen=True, slots=True)
class Where:
    """Where an SA came from, for messages: file, entry, and per-field lines."""

    path: str
    entry: str  # "entry 3 (spi 0x00001001)" or "line 7"
    fields: Mapping[str, str] = field(default_factory=dict)  # field -> "line 9"

    def error(self, name: str, problem: str) -> KeyFileError:
        """A ``KeyFileError`` about field ``name``, placed at its own line if known."""
        return KeyFileError(self.path, f"{self.fields.get(name, self.entry)}: {problem}")


@dataclass(slots=True)
class LoadLog:
    """What a loader skipped and still went on: lines it could not read, and notes.

    A loader given one collects a bad line's ``KeyFileError`` here instead of
    raising it (esp_sa, tcpdump: one line per SA), and says what it ignored on
    purpose in ``notes`` ("FILE: what"); ``keys.read_sas`` decides what stops a run.
    """

    errors: list[KeyFileError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RawSa:
    """One SA as a loader read it, before any check. Keys never show in repr."""

    spi: object
    algorithm: str
    key: object = field(repr=False)  # hex text ("0x..." or bare) or raw bytes
    aead: bool = True  # False: ``algorithm`` is a cipher and ``auth_*`` apply
    src: object = None
    dst: object = None
    icv_bits: object = None  # None: the algorithm's default
    esn: object = False
    esn_hi: object = 0
    mode: object = None
    encap_port: object = None
    auth_algorithm: str | None = None
    auth_key: object = field(default=None, repr=False)
    origin: str = ""
    any_spi: bool = False  # a wildcard: the SA of every SPI no other entry names


def has_hex_run(text: str) -> bool:
    """True when ``text`` holds ``HEX_RUN`` hex digits in a row: it could hold key bytes."""
    return bool(_HEX_RUN.search(text))


def shown(value: object) -> str:
    """A value read from a key file, for a message: quoted only when it cannot be
    a key (short, and no run of hex digits), else described by its length."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return _number(value)
    if not isinstance(value, str):
        return f"(a YAML {_KINDS.get(type(value), 'value')})"
    if len(value) <= SHOWN_CHARS and not has_hex_run(value) and value.isprintable():
        return repr(value)
    return f"({len(value)} characters)"


_KINDS = {dict: "mapping", list: "list", float: "number", bytes: "byte string"}


def _number(number: int, hex_form: bool = False) -> str:
    """A number for a message when it fits in 32 bits, else only its size."""
    if -MAX_U32 <= number <= MAX_U32:
        return f"{number:#x}" if hex_form and number >= 0 else str(number)
    return f"(a {number.bit_length()}-bit number)"


def _bits(icv: int) -> str:
    """An ICV length for a message: "100 bits", or "a 160-bit number" when long."""
    return f"{icv} bits" if -MAX_U32 <= icv <= MAX_U32 else f"a {icv.bit_length()}-bit number"


def build_sa(raw: RawSa, where: Where) -> SecurityAssociation:
    """Check every field of ``raw`` and return the SA it describes."""
    spi = ANY_SPI if raw.any_spi else check_spi(raw.spi, where)
    src = check_address(raw.src, where, "src")
    dst = check_address(raw.dst, where, "dst")
    if src is not None and dst is not None and src.version != dst.version:
        raise where.error("dst", f"src is IPv{src.version} but dst is IPv{dst.version}")
    esn = _check_bool(raw.esn, where, "esn")
    esn_hi = _check_uint(raw.esn_hi, where, "esn_hi", MAX_U32)
    if esn_hi and not esn:
        raise where.error("esn_hi", "esn_hi is set but esn is false")
    keyed = _with_spi(where, spi)
    if raw.aead:
        key, icv_bits = _check_aead(raw, keyed)
        auth_algorithm, auth_key = None, None
    else:
        key = _check_cipher(raw, keyed)
        auth_algorithm, auth_key, icv_bits = _check_integrity(raw, keyed)
    return SecurityAssociation(
        spi=spi,
        algorithm=raw.algorithm,
        key=Secret(key),
        src=src,
        dst=dst,
        icv_bits=icv_bits,
        esn=esn,
        esn_hi=esn_hi,
        mode=_check_mode(raw.mode, where),
        encap_port=_check_port(raw.encap_port, where),
        origin=raw.origin,
        auth_algorithm=auth_algorithm,
        auth_key=auth_key,
    )


def _with_spi(where: Where, spi: int) -> Where:
    """``where`` with the SPI named on the key fields' lines (a text format's "line 4")."""
    named = {}
    for name in ("key", "auth_key"):
        at = where.fields.get(name, where.entry)
        named[name] = at if "spi" in at or spi == ANY_SPI else f"{at} (spi {spi:#010x})"
    return Where(where.path, where.entry, {**where.fields, **named})


def check_spi(value: object, where: Where) -> int:
    """The SPI as an int in 0..0xffffffff.

    RFC 4303 s2.1 reserves 0 (and 1..255), but a published test vector
    sends SPI 0 and tshark verifies it: such an SA loads, with a warning
    (``reserved_notes``), and its packets get a ``reserved_spi`` finding.
    """
    if value is None:
        raise where.error("spi", "spi is missing")
    spi = _as_int(value, where, "spi")
    if not 0 <= spi <= MAX_SPI:
        raise where.error("spi", f"spi {_number(spi, hex_form=True)} is not in 0..0xffffffff")
    return spi


def reserved_notes(sas: list[SecurityAssociation]) -> list[str]:
    """A warning per SA of a reserved SPI (RFC 4303 s2.1): its origin and SPI, no key."""
    return [
        f"{sa.origin}: SPI {sa.spi:#010x} is reserved (RFC 4303 s2.1: "
        + ("0 must not be sent on the wire" if sa.spi == 0 else "1..255 are IANA's")
        + "); loaded, and its packets are reported as reserved_spi"
        for sa in sas
        if not sa.any_spi and sa.spi < RESERVED_SPIS
    ]


def check_address(value: object, where: Where, name: str) -> IpAddress | None:
    """One IPv4/IPv6 address, or ``None`` (any) when the source gives none."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise where.error(name, f"{name} must be an IP address")
    try:
        return ipaddress.ip_address(value.strip())
    except ValueError:
        pass  # raised below, outside the handler: the chained ValueError quotes the value
    raise where.error(name, f"{name} {shown(value)} is not an IP address")


def decode_hex(value: object, where: Where, name: str) -> bytes:
    """Key bytes from ``0x``-prefixed (or bare) hex text; raw bytes pass through."""
    label = _LABELS.get(name, name)
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise where.error(name, f"{label} must be a hex string")
    text = value.strip()
    digits = text[2:] if text[:2] in ("0x", "0X") else text
    good = _HEX_DIGITS.match(digits)
    end = good.end() if good else 0
    if end < len(digits):
        pos = len(text) - len(digits) + end + 1
        raise where.error(name, f"{label} is not hex: character {pos} is not a hex digit")
    if len(digits) % 2:
        raise where.error(name, f"{label} is not hex: odd number of digits ({len(digits)})")
    return bytes.fromhex(digits)


def _check_aead(raw: RawSa, where: Where) -> tuple[bytes, int]:
    layout = AEADS.get(raw.algorithm)
    if layout is None and raw.algorithm in CIPHERS:  # a known name: no key, safe to quote
        why = f"{raw.algorithm} is a cipher, not an AEAD: give it as enc, with auth"
        raise where.error("algorithm", why)
    if layout is None:
        known = ", ".join(AEADS)
        why = f"unknown AEAD {shown(raw.algorithm)}; known: {known}"
        raise where.error("algorithm", why)
    if raw.auth_algorithm is not None:
        raise where.error("auth_algorithm", "an AEAD takes no separate integrity algorithm")
    sizes, salt, icvs, what = layout
    key = decode_hex(raw.key, where, "key")
    lengths = tuple(n + salt for n in sizes)
    # One byte short is loaded as given: a leading zero lost in a copy-paste is a mistake
    # the key doctor (checks/keys.py) proves with the packets, so it is not refused here.
    if len(key) not in lengths and len(key) + 1 not in lengths:
        raise where.error(
            "key",
            f"key is {len(key)} bytes; {raw.algorithm} takes {_choices(lengths)} "
            f"({what} + {salt}-byte salt)",
        )
    icv = 128 if raw.icv_bits is None else _as_int(raw.icv_bits, where, "icv_bits")
    if icv not in icvs:
        why = f"ICV is {_bits(icv)}; {raw.algorithm} takes {_choices(icvs)}"
        raise where.error("icv_bits", why)
    return key, icv


def _check_cipher(raw: RawSa, where: Where) -> bytes:
    lengths = CIPHERS.get(raw.algorithm)
    if lengths is None and raw.algorithm in AEADS:  # ip xfrm's "aead" line, not its "enc"
        why = f"{raw.algorithm} is an AEAD, not a cipher: give it as aead (no auth)"
        raise where.error("algorithm", why)
    if lengths is None:
        known = ", ".join(CIPHERS)
        raise where.error(
            "algorithm",
            f"unknown encryption algorithm {shown(raw.algorithm)}; known: {known}",
        )
    key = decode_hex(raw.key, where, "key")
    if len(key) not in lengths:
        raise where.error(
            "key", f"key is {len(key)} bytes; {raw.algorithm} takes {_choices(lengths)}"
        )
    return key


def _check_integrity(raw: RawSa, where: Where) -> tuple[str | None, Secret | None, int]:
    name = raw.auth_algorithm
    if name is None:  # ESP without integrity (RFC 4303 s3.2.2 allows it)
        return None, None, 0
    if name not in INTEGRITY:
        known = ", ".join(INTEGRITY)
        why = f"unknown integrity algorithm {shown(name)}; known: {known}"
        raise where.error("auth_algorithm", why)
    default = INTEGRITY[name]
    if raw.icv_bits is not None:
        icv = _as_int(raw.icv_bits, where, "icv_bits")
    elif default is not None:
        icv = default
    else:
        raise where.error("icv_bits", f"integrity algorithm {name} needs an ICV length")
    digest = HMAC_DIGESTS.get(name)
    most = 512 if digest is None else 8 * digest[1]  # an HMAC's ICV is its hash, truncated
    if name in AES_MACS:
        most = 128  # RFC 3566 s2.2, RFC 4494 s2.1: one AES block, truncated
    if icv % 8 or not 0 <= icv <= most or (icv == 0) != (name == "digest_null"):
        why = f"ICV is {_bits(icv)}; {name} takes a multiple of 8 up to {most}"
        raise where.error("icv_bits", why)
    if raw.auth_key is None and name in NO_INTEGRITY:  # digest_null: nothing to key
        return name, None, 0
    if raw.auth_key is None:
        if name == ANY_AUTH:  # only the ICV's length is known (tcpdump's -hmac96): skipped
            return name, None, icv
        raise where.error("auth_key", "auth key is missing")
    auth_key = decode_hex(raw.auth_key, where, "auth_key")
    if digest is not None and not auth_key:
        raise where.error("auth_key", f"auth key is empty; {name} takes {digest[1]} bytes")
    # RFC 2104 s3 takes a key of any length; RFC 2403, 2404 and 4868 s2.1.1 ask for the
    # hash's length. Linux, Wireshark and scapy use other lengths as given, and so do we
    # (SecurityAssociation.rfc_hmac_key_len; the key doctor notes it).
    macs = AES_MACS.get(name)
    if macs is not None and len(auth_key) not in macs:  # RFC 3566 s2.1, RFC 4494 s2
        why = f"auth key is {len(auth_key)} bytes; {name} takes {_choices(macs)}"
        raise where.error("auth_key", why)
    return name, Secret(auth_key), icv


def _as_int(value: object, where: Where, name: str) -> int:
    """An int from an int, decimal text or 0x-hex text."""
    label = _LABELS.get(name, name)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise where.error(name, f"{label} must be a number")
    if isinstance(value, int):
        return value
    text = value.strip()
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", text):
        return int(text[2:], 16)
    if re.fullmatch(r"[0-9]+", text):
        if len(text) > MAX_DIGITS:  # also beyond int()'s 4,300 digits
            raise where.error(name, f"{label} is a number of {len(text)} digits, too long")
        return int(text)
    raise where.error(name, f"{label} {shown(value)} is not a number")


def _check_uint(value: object, where: Where, name: str, maximum: int) -> int:
    number = _as_int(value, where, name)
    if not 0 <= number <= maximum:
        label = _LABELS.get(name, name)
        raise where.error(
            name, f"{label} {_number(number, hex_form=True)} is not in 0..{maximum:#x}"
        )
    return number


def _check_bool(value: object, where: Where, name: str) -> bool:
    if not isinstance(value, bool):
        raise where.error(name, f"{name} must be true or false")
    return value


def _check_mode(value: object, where: Where) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in MODES:
        raise where.error("mode", f"mode {shown(value)} is not one of {', '.join(MODES)}")
    return value


def _check_port(value: object, where: Where) -> int | None:
    if value is None:
        return None
    port = _as_int(value, where, "encap_port")
    if not 0 < port <= 0xFFFF:
        raise where.error("encap_port", f"encap port {_number(port)} is not in 1..65535")
    return port


def _choices(values: tuple[int, ...]) -> str:
    """``(20, 28, 36)`` -> "20, 28 or 36"; a run of 3 or more -> "5 to 16"."""
    if len(values) >= 3 and values == tuple(range(values[0], values[-1] + 1)):
        return f"{values[0]} to {values[-1]}"
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
