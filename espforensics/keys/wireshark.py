"""Read SAs from Wireshark's ESP SA table, the ``esp_sa`` file of a profile.

In: the text of an ``esp_sa`` file, or the body of a pcapng Decryption
Secrets Block of type 0x45535053 ("ESPS"), which holds the same lines; and
the name to use in messages. Out: one ``SecurityAssociation`` per record.
Raises ``KeyFileError`` naming the line.

The file is a Wireshark UAT table: ``#`` comments, then one record per
line of double-quoted fields separated by commas, with ``\\xNN`` escapes.
The columns are those of ``esp_uat_flds`` in epan/dissectors/packet-ipsec.c:
Protocol, Src IP, Dest IP, SPI, Encryption, Encryption Key, Authentication,
Authentication Key, and in newer versions SN ("32-bit" or "64-bit", i.e.
ESN) and ESN High Bits (hex). strongSwan's save-keys plugin
(src/libcharon/plugins/save_keys/save_keys_listener.c) writes the 8-column
form and labels every AES-GCM row "AES-GCM [RFC4106]", giving the ICV
length in the Authentication column ("ANY 128 bit authentication [no
checking]").
"""

from __future__ import annotations

import ipaddress
import re

from espforensics.errors import KeyFileError
from espforensics.keys.sa import RFC4106, SecurityAssociation
from espforensics.keys.validate import LoadLog, RawSa, Where, build_sa, shown

# Encryption column -> (our algorithm name, AEAD?, ICV bits; None: from the
# Authentication column). Looked up case-insensitively: strongSwan writes
# "TripleDes-CBC [RFC2451]" where Wireshark writes "TripleDES-CBC [RFC2451]".
_ENCRYPTION: dict[str, tuple[str, bool, int | None]] = {
    "NULL": ("ecb(cipher_null)", False, None),
    "TripleDES-CBC [RFC2451]": ("cbc(des3_ede)", False, None),
    "AES-CBC [RFC3602]": ("cbc(aes)", False, None),
    "AES-CTR [RFC3686]": ("rfc3686(ctr(aes))", False, None),
    "DES-CBC [RFC2405]": ("cbc(des)", False, None),
    "CAST5-CBC [RFC2144]": ("cbc(cast5)", False, None),
    "BLOWFISH-CBC [RFC2451]": ("cbc(blowfish)", False, None),
    "TWOFISH-CBC": ("cbc(twofish)", False, None),
    "AES-GCM [RFC4106]": (RFC4106, True, None),
    "AES-GCM with 8 octet ICV [RFC4106]": (RFC4106, True, 64),
    "AES-GCM with 12 octet ICV [RFC4106]": (RFC4106, True, 96),
    "AES-GCM with 16 octet ICV [RFC4106]": (RFC4106, True, 128),
    "AES-GCM with IIV and 16 octet ICV [RFC4106 & RFC8750]": ("rfc8750(gcm(aes))", True, 128),
    "ChaCha20 with Poly1305 [RFC7634]": ("rfc7539esp(chacha20,poly1305)", True, 128),
    "ChaCha20 with Poly1305 and IIV [RFC7634 & RFC8750]": (
        "rfc8750(chacha20,poly1305)",
        True,
        128,
    ),
}
# Authentication column -> (integrity algorithm, ICV bits). "any": Wireshark
# does not check the ICV and only needs its length.
_AUTHENTICATION: dict[str, tuple[str | None, int]] = {
    "NULL": (None, 0),
    "HMAC-SHA-1-96 [RFC2404]": ("hmac(sha1)", 96),
    "HMAC-SHA-256-96 [draft-ietf-ipsec-ciph-sha-256-00]": ("hmac(sha256)", 96),
    "HMAC-SHA-256-128 [RFC4868]": ("hmac(sha256)", 128),
    "HMAC-SHA-384-192 [RFC4868]": ("hmac(sha384)", 192),
    "HMAC-SHA-512-256 [RFC4868]": ("hmac(sha512)", 256),
    "HMAC-MD5-96 [RFC2403]": ("hmac(md5)", 96),
    "MAC-RIPEMD-160-96 [RFC2857]": ("hmac(rmd160)", 96),
    **{f"ANY {n} bit authentication [no checking]": ("any", n) for n in (64, 96, 128, 192, 256)},
}
# casefolded name -> (the name as the table spells it, its meaning); messages
# quote the table's spelling, never the file's (validate.shown: no key echoed)
_ENCRYPTION_CI = {name.casefold(): (name, value) for name, value in _ENCRYPTION.items()}
_AUTHENTICATION_CI = {name.casefold(): (name, value) for name, value in _AUTHENTICATION.items()}
_NAMES_AT = " (docs/keys.md lists the names)"
ENCRYPTION_NAMES = tuple(_ENCRYPTION)
AUTHENTICATION_NAMES = tuple(_AUTHENTICATION)

_FIELD = re.compile(r'\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|.)")
_FAMILIES = {"ipv4": 4, "ipv6": 6, "any": None, "*": None}


def is_esp_sa(text: str) -> bool:
    """True when every non-blank line is a ``#`` comment or starts with a quote."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return bool(lines) and all(line[0] in '#"' for line in lines)


ESP_SA_SECRETS_TYPE = 0x45535053  # pcapng Decryption Secrets Block "ESPS": esp_sa lines


def secrets_block_sas(secrets_type: int, data: bytes, origin: str) -> list[SecurityAssociation]:
    """The SAs of a capture's Decryption Secrets Block (none if it holds no ESP keys).

    ``origin`` names the capture; raises ``KeyFileError`` as ``parse_esp_sa`` does.
    """
    if secrets_type != ESP_SA_SECRETS_TYPE:
        return []
    text = data.decode("utf-8", errors="replace")
    return parse_esp_sa(text, f"{origin} (decryption secrets block)")


def parse_esp_sa(text: str, origin: str, log: LoadLog | None = None) -> list[SecurityAssociation]:
    """Every SA of an ``esp_sa`` table; ``origin`` names the file (or block).

    With a ``log``, a line that cannot be read is logged and skipped (the
    others still load); without one it raises ``KeyFileError``.
    """
    sas = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            try:
                sas.append(_parse_record(_fields(stripped, number, origin), number, origin))
            except KeyFileError as exc:
                if log is None:
                    raise
                log.errors.append(exc)
    return sas


def _fields(line: str, number: int, origin: str) -> list[str]:
    fields, pos = [], 0
    while pos < len(line):
        match = _FIELD.match(line, pos)
        if match is None:  # never quote the line: it holds a key
            raise KeyFileError(origin, f"line {number}: not a list of quoted fields")
        fields.append(_ESCAPE.sub(_unescape, match[1]))
        pos = match.end()
        if match[2] == "," and pos == len(line):
            raise KeyFileError(origin, f"line {number}: not a list of quoted fields")
    if len(fields) not in (8, 10):
        raise KeyFileError(
            origin, f"line {number}: has {len(fields)} fields; an esp_sa line has 8 or 10"
        )
    return fields


def _unescape(match: re.Match[str]) -> str:
    code = match[1]
    return chr(int(code[1:], 16)) if len(code) == 3 and code[0] == "x" else code


def _parse_record(fields: list[str], number: int, origin: str) -> SecurityAssociation:
    where = Where(origin, f"line {number}")
    protocol, src, dst, spi, encryption, enc_key, authentication, auth_key = fields[:8]
    if protocol.strip().casefold() not in _FAMILIES:
        raise where.error("protocol", f"protocol {shown(protocol)} is not IPv4, IPv6 or Any")
    family = _FAMILIES[protocol.strip().casefold()]
    wildcard = spi.strip() == "*"  # any SPI no other line names (packet-esp.c filter_spi_match)
    if "*" in spi and not wildcard:
        raise where.error("spi", f"SPI {shown(spi)} has a partial wildcard; give '*' or one SPI")
    name, aead, icv, auth_name = _algorithms(encryption, authentication, where)
    esn, esn_hi = _esn(fields[8:], where)
    return build_sa(
        RawSa(
            spi=None if wildcard else spi,
            any_spi=wildcard,
            algorithm=name,
            key=_key(enc_key, where, "key"),
            aead=aead,
            auth_algorithm=auth_name,
            auth_key=None if auth_name is None else _key(auth_key, where, "auth_key"),
            icv_bits=icv,
            src=_address(src, family, "Src IP", where),
            dst=_address(dst, family, "Dest IP", where),
            esn=esn,
            esn_hi=esn_hi,
            origin=f"{origin}:line {number}",
        ),
        where,
    )


def _algorithms(
    encryption: str, authentication: str, where: Where
) -> tuple[str, bool, int | None, str | None]:
    """(algorithm, AEAD?, ICV bits, integrity algorithm) of one record."""
    enc = _ENCRYPTION_CI.get(encryption.strip().casefold())
    if enc is None:
        raise where.error("algorithm", f"unknown Encryption {shown(encryption)}{_NAMES_AT}")
    auth = _AUTHENTICATION_CI.get(authentication.strip().casefold())
    if auth is None:
        why = f"unknown Authentication {shown(authentication)}{_NAMES_AT}"
        raise where.error("auth_algorithm", why)
    encryption, (name, aead, icv) = enc
    authentication, (auth_name, auth_icv) = auth
    if not aead:
        return name, False, auth_icv if auth_name else None, auth_name
    if auth_name not in (None, "any"):
        raise where.error(
            "auth_algorithm",
            f"Authentication {authentication!r} cannot go with {encryption!r}, an AEAD: "
            "use NULL or 'ANY n bit authentication [no checking]'",
        )
    if icv is None:
        if auth_name is None:
            raise where.error(
                "icv_bits",
                f"{encryption!r} takes its ICV length from Authentication "
                "'ANY n bit authentication [no checking]', which is NULL here",
            )
        return name, True, auth_icv, None
    if auth_name == "any" and auth_icv != icv:
        raise where.error(
            "icv_bits",
            f"Authentication says a {auth_icv}-bit ICV but {encryption!r} has {icv} bits",
        )
    return name, True, icv, None


def _esn(extra: list[str], where: Where) -> tuple[bool, object]:
    """ESN flag and high bits from the SN and ESN High Bits columns, if there."""
    if not extra:
        return False, 0
    sn, high = (text.strip() for text in extra)
    if sn not in ("32-bit", "64-bit"):
        raise where.error("esn", f"SN {shown(sn)} is not 32-bit or 64-bit")
    digits = high[2:] if high[:2] in ("0x", "0X") else high
    if not re.fullmatch(r"[0-9a-fA-F]{1,8}", digits):
        raise where.error("esn_hi", f"ESN High Bits {shown(high)} is not a 32-bit hex number")
    return sn == "64-bit", int(digits, 16)


def _address(text: str, family: int | None, column: str, where: Where) -> str | None:
    """One address, or ``None`` for "*" (and /0); other wildcards are refused."""
    value = text.strip()
    address, _, prefix = value.partition("/")
    name = "src" if column == "Src IP" else "dst"
    if value == "*" or prefix == "0":
        return None
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        parsed = None
    if parsed is None or (prefix and prefix != str(parsed.max_prefixlen)):
        raise where.error(
            name, f"{column} {shown(text)} is not one address or '*' (the only wildcard we take)"
        )
    if family is not None and parsed.version != family:
        raise where.error(name, f"{column} {shown(text)} is not IPv{family} as Protocol says")
    return address


def _key(text: str, where: Where, name: str) -> str | bytes:
    """Wireshark's key rule: "0x" + hex (odd: a leading 0 nibble), else ASCII."""
    value = text.strip()
    if value[:2] in ("0x", "0X"):
        digits = value[2:]
        odd = len(digits) % 2 and re.fullmatch(r"[0-9a-fA-F]+", digits)
        return "0x" + ("0" if odd else "") + digits
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        pass  # raised below, outside the handler: the chained error holds the key text
    raise where.error(name, f"{name.replace('_', ' ')} is neither 0x-hex nor ASCII")
