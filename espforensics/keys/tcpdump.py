"""Read SAs from tcpdump's ``-E`` secrets: ``spi@addr algo:secret`` or ``algo:secret``.

In: the text of a secrets file (or of one ``--sa`` argument) and the name to
use in messages. Out: one ``SecurityAssociation`` per item. A line that
cannot be read is skipped and logged in the ``LoadLog`` when one is given
(tcpdump too warns and goes on); without one it raises ``KeyFileError``.

The grammar is tcpdump's (print-esp.c, ``esp_print_decodesecret`` and
``esp_print_decode_onesecret``), read, not copied:

- items are separated by newlines and commas; ``#`` starts a comment line;
- an item of one word ``algo:secret`` is the default SA: any SPI, any
  address (here an entry of ``ANY_SPI``, used for a packet whose SPI no
  other entry names); ``spi@addr algo:secret`` names the SPI (``0x`` hex,
  decimal, or octal with a leading 0, as ``strtoul(..., 0)``) and the
  packet's **destination** address, IPv4 or IPv6;
- ``algo`` is an OpenSSL cipher name with an optional ``-cbc`` and an
  optional ``-hmac96`` at its end. ``-hmac96`` says only that a 12-byte ICV
  follows the ciphertext: its key is not given, so the ICV is skipped, never
  checked (``SecurityAssociation.icv_unchecked``); without it the SA has no
  integrity at all (RFC 4303 s3.2 allows confidentiality only);
- ``secret`` is ``0x`` and hex digits, or else the text itself as ASCII
  bytes (quotes around it, as a shell or a file may keep them, are dropped).

tcpdump's ``file NAME`` and ``ikev2 ...`` items are not followed: the first
names another file (give it with ``--sa``), the second holds IKEv2 keys.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from typing import NamedTuple

from espforensics.errors import KeyFileError
from espforensics.keys.sa import ANY_AUTH, SecurityAssociation
from espforensics.keys.validate import LoadLog, RawSa, Where, build_sa, decode_hex, shown


class _Cipher(NamedTuple):
    """A tcpdump (OpenSSL) cipher name: our algorithm and, if fixed, its key length."""

    algorithm: str
    key_len: int | None = None


# OpenSSL names (``EVP_get_cipherbyname``, after tcpdump drops "-hmac96" and "-cbc"),
# casefolded. tcpdump's man page lists des-cbc, 3des-cbc, blowfish-cbc, cast128-cbc, none.
CIPHERS: dict[str, _Cipher] = {
    "none": _Cipher("ecb(cipher_null)", 0),  # RFC 2410
    "des": _Cipher("cbc(des)", 8),  # RFC 2405
    "3des": _Cipher("cbc(des3_ede)", 24),  # RFC 2451; tcpdump's own alias of des-ede3-cbc
    "des-ede3": _Cipher("cbc(des3_ede)", 24),
    "des3": _Cipher("cbc(des3_ede)", 24),
    "aes128": _Cipher("cbc(aes)", 16),  # RFC 3602
    "aes-128": _Cipher("cbc(aes)", 16),
    "aes192": _Cipher("cbc(aes)", 24),
    "aes-192": _Cipher("cbc(aes)", 24),
    "aes256": _Cipher("cbc(aes)", 32),
    "aes-256": _Cipher("cbc(aes)", 32),
    "cast128": _Cipher("cbc(cast5)"),  # RFC 2144: 5 to 16 bytes
    "cast5": _Cipher("cbc(cast5)"),
    "cast": _Cipher("cbc(cast5)"),
    "blowfish": _Cipher("cbc(blowfish)"),  # 5 to 56 bytes
    "bf": _Cipher("cbc(blowfish)"),
    "camellia128": _Cipher("cbc(camellia)", 16),  # RFC 4312
    "camellia-128": _Cipher("cbc(camellia)", 16),
    "camellia192": _Cipher("cbc(camellia)", 24),
    "camellia-192": _Cipher("cbc(camellia)", 24),
    "camellia256": _Cipher("cbc(camellia)", 32),
    "camellia-256": _Cipher("cbc(camellia)", 32),
}
HMAC96_ICV_BITS = 96  # tcpdump's "-hmac96": authlen 12
_OTHER_FORMS = frozenset({"file", "ikev2"})  # tcpdump items that hold no ESP SA

# One item, loosely: what detection and the parser both start from.
_ITEM = re.compile(
    r"(?:(?P<spi>[^\s@]+)@(?P<addr>\S+)[ \t]+)?(?P<algo>[A-Za-z0-9][\w.-]*):(?P<secret>.*)"
)


def _items(text: str) -> list[tuple[int, str]]:
    """(line number, item) of every item: lines split at commas; comments, blanks skipped."""
    out: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("#"):
            continue
        out.extend((number, item.strip()) for item in line.split(",") if item.strip())
    return out


def _cipher_of(algo: str) -> tuple[_Cipher | None, bool]:
    """The cipher an algorithm name means, and whether it carries "-hmac96"."""
    name = algo.casefold()
    hmac96 = name.endswith("-hmac96") and len(name) > len("-hmac96")
    if hmac96:
        name = name[: -len("-hmac96")]
    if name.endswith("-cbc") and len(name) > len("-cbc"):
        name = name[: -len("-cbc")]
    return CIPHERS.get(name), hmac96


def looks_like_secrets(text: str) -> bool:
    """True when every item has the shape ``[spi@addr ]name:secret``, whatever the name,
    or is one of tcpdump's other forms (``ikev2 I ...`` holds keys too, never to be shown)."""
    items = _items(text)
    return bool(items) and all(_ITEM.fullmatch(x) or _other_form(x) for _, x in items)


def _other_form(item: str) -> bool:
    """``ikev2 ...`` or ``file NAME``: tcpdump items that hold no ESP SA."""
    words = item.split()
    return len(words) >= 2 and words[0].casefold() in _OTHER_FORMS


def is_tcpdump_secrets(text: str) -> bool:
    """True when every item looks like ``[spi@addr ]algo:secret`` and one names a known
    cipher, or when every item is one of tcpdump's own other forms (``ikev2 I ...``,
    ``file NAME``): such a file is tcpdump's, and the parser says why it gives no ESP SA."""
    every = _items(text)
    items = [item for _, item in every if item.split()[0].casefold() not in _OTHER_FORMS]
    if every and not items:
        return all(_other_form(item) for _, item in every)
    matches = [_ITEM.fullmatch(item) for item in items]
    if not items or not all(matches):
        return False
    return any(m is not None and _cipher_of(m["algo"])[0] is not None for m in matches)


def parse_tcpdump_secrets(
    text: str, origin: str, log: LoadLog | None = None
) -> list[SecurityAssociation]:
    """Every SA of tcpdump ``-E`` text; ``origin`` names the file (or argument)."""
    sas = []
    items = _items(text)
    per_line = Counter(number for number, _ in items)
    position: dict[int, int] = {}
    for number, item in items:
        position[number] = position.get(number, 0) + 1
        item_at = f" item {position[number]}" if per_line[number] > 1 else ""
        where = f"line {number}{item_at}"
        try:
            sas.append(_parse_item(item, origin, where))
        except KeyFileError as exc:
            if log is None:
                raise
            log.errors.append(exc)
    return sas


def _parse_item(item: str, origin: str, at: str) -> SecurityAssociation:
    where = Where(origin, at)
    match = _ITEM.fullmatch(item)
    if match is None:  # never quote the item: it holds a secret
        first = item.split(maxsplit=1)[0].casefold() if item.split() else ""
        if first in ("file", "ikev2"):
            why = {
                "file": "a `file NAME` item: give that file with --sa itself",
                "ikev2": "an `ikev2` item holds IKEv2 keys, not ESP keys",
            }[first]
            raise where.error("spi", why)
        raise where.error("spi", "not `spi@address algo:secret` or `algo:secret`")
    cipher, hmac96 = _cipher_of(match["algo"])
    if cipher is None:
        known = ", ".join(sorted({*CIPHERS} - {"des3", "cast", "bf"}))
        raise where.error(
            "algorithm", f"unknown tcpdump algorithm {shown(match['algo'])}; known: {known}"
        )
    key = _secret(match["secret"], where)
    if cipher.key_len is not None and len(key) != cipher.key_len:
        raise where.error(
            "key",
            f"{match['algo'].casefold()} takes a {cipher.key_len}-byte secret; "
            f"this one is {len(key)} bytes",
        )
    spi, dst = match["spi"], match["addr"]
    return build_sa(
        RawSa(
            spi=None if spi is None else _strtoul(spi, where),
            any_spi=spi is None,
            algorithm=cipher.algorithm,
            key=key,
            aead=False,
            dst=None if dst is None else _address(dst, where),
            auth_algorithm=ANY_AUTH if hmac96 else None,
            icv_bits=HMAC96_ICV_BITS if hmac96 else None,
            origin=f"{origin}:{at}",
        ),
        where,
    )


def _secret(text: str, where: Where) -> bytes:
    """tcpdump's secret: ``0x`` + hex digits, else the text's own bytes."""
    value = text.strip()
    if value[:2] in ("0x", "0X"):
        return decode_hex(value, where, "key")
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value.encode("utf-8")


def _strtoul(text: str, where: Where) -> int:
    """An SPI as ``strtoul(text, NULL, 0)`` reads it: 0x hex, 0 octal, else decimal."""
    forms = ((r"0[xX][0-9a-fA-F]+", 16), (r"0[0-7]*", 8), (r"[1-9][0-9]{0,19}", 10))
    for pattern, base in forms:
        if re.fullmatch(pattern, text):
            return int(text, base)
    raise where.error("spi", f"spi {shown(text)} is not a number")


def _address(text: str, where: Where) -> str:
    """The destination address of ``spi@addr``: one IPv4 or IPv6 address."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass  # raised below, outside the handler: the chained error quotes the text
    raise where.error("dst", f"address {shown(text)} after @ is not an IP address")
