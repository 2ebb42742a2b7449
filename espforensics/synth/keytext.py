"""Key files for synthetic captures: keys.yaml, ``ip xfrm state``, esp_sa.

In: the ``SecurityAssociation`` objects of a scenario. Out: text in the
three formats the analyzer loads. Raises nothing.

This module reveals key material, the one place outside
``espforensics.crypto`` that does: the builder made these lab keys and
writing them to a key file is its job. The YAML is written by hand (the
format is tiny and fixed) so PyYAML stays in the keys.yaml loader.
"""

from __future__ import annotations

from collections.abc import Iterable

from espforensics.keys.sa import (
    CBC_AES,
    CBC_DES3,
    CTR_AES,
    NULL_CIPHER,
    RFC4106,
    RFC7539ESP,
    SecurityAssociation,
)
from espforensics.keys.wireshark import ESP_SA_SECRETS_TYPE
from espforensics.model.records import DecryptionSecrets


def _key_hex(sa: SecurityAssociation) -> str:
    return "0x" + sa.key.reveal().hex()


def _auth_key_hex(sa: SecurityAssociation) -> str:
    return "" if sa.auth_key is None else "0x" + sa.auth_key.reveal().hex()


def _addr(sa: SecurityAssociation, which: str) -> str:
    value = sa.src if which == "src" else sa.dst
    return "" if value is None else str(value)


def keys_yaml(sas: Iterable[SecurityAssociation]) -> str:
    """The project's keys.yaml: a ``sas:`` list, one mapping per SA."""
    lines = ["# keys.yaml written by espforensics.synth: random lab keys, test data only", "sas:"]
    for sa in sas:
        encap = "null" if sa.encap_port is None else str(sa.encap_port)
        if sa.auth_algorithm is None:
            algorithms = [f"    aead: {sa.algorithm}", f'    key: "{_key_hex(sa)}"']
        else:  # docs/keys.md: an enc + auth SA (RFC 4303 s3.2.2 combined mode: neither)
            algorithms = [
                f"    enc: {sa.algorithm}",
                f'    key: "{_key_hex(sa)}"',
                f"    auth: {sa.auth_algorithm}",
                f'    auth_key: "{_auth_key_hex(sa)}"',
            ]
        lines += [
            f'  - spi: "0x{sa.spi:08x}"',
            f'    src: "{_addr(sa, "src")}"',
            f'    dst: "{_addr(sa, "dst")}"',
            *algorithms,
            f"    icv: {sa.icv_bits}",
            f"    esn: {'true' if sa.esn else 'false'}",
            f"    esn_hi: {sa.esn_hi}",
            f"    mode: {sa.mode or 'transport'}",
            f"    encap: {encap}",
        ]
    return "\n".join(lines) + "\n"


def _xfrm_block(sa: SecurityAssociation, reqid: int) -> list[str]:
    any_net = "0.0.0.0/0" if sa.src is None or sa.src.version == 4 else "::/0"
    lines = [
        f"src {_addr(sa, 'src')} dst {_addr(sa, 'dst')}",
        f"\tproto esp spi 0x{sa.spi:08x} reqid {reqid} mode {sa.mode or 'transport'}",
        "\treplay-window 0 flag esn" if sa.esn else "\treplay-window 0 ",
    ]
    if sa.auth_algorithm is None:
        lines.append(f"\taead {sa.algorithm} {_key_hex(sa)} {sa.icv_bits}")
    else:  # iproute2 prints the integrity line first (XFRMA_ALG_AUTH_TRUNC < XFRMA_ALG_CRYPT)
        lines += [
            f"\tauth-trunc {sa.auth_algorithm} {_auth_key_hex(sa)} {sa.icv_bits}",
            f"\tenc {sa.algorithm} {_key_hex(sa)}",
        ]
    if sa.encap_port is not None:
        lines.append(
            f"\tencap type espinudp sport {sa.encap_port} dport {sa.encap_port} addr 0.0.0.0"
        )
    if sa.esn:
        lines += [
            "\tanti-replay esn context:",
            f"\t seq-hi {sa.esn_hi:#x}, seq 0x0, oseq-hi {sa.esn_hi:#x}, oseq 0x0",
            "\t replay_window 128, bitmap-length 4",
            "\t 00000000 00000000 00000000 00000000 ",
        ]
    else:
        lines.append("\tanti-replay context: seq 0x0, oseq 0x0, bitmap 0x00000000")
    lines.append(f"\tsel src {any_net} dst {any_net} ")
    return lines


def xfrm_state_text(sas: Iterable[SecurityAssociation]) -> str:
    """``ip xfrm state`` output (iproute2 layout) for these SAs."""
    lines: list[str] = []
    for reqid, sa in enumerate(sas, start=1):
        lines += _xfrm_block(sa, reqid)
    return "\n".join(lines) + "\n"


# Wireshark's names (epan/dissectors/packet-ipsec.c, as keys/wireshark.py reads them).
_WIRESHARK_CIPHERS = {
    CBC_AES: "AES-CBC [RFC3602]",
    CBC_DES3: "TripleDES-CBC [RFC2451]",
    CTR_AES: "AES-CTR [RFC3686]",
    NULL_CIPHER: "NULL",
}
_WIRESHARK_HMACS = {
    ("hmac(md5)", 96): "HMAC-MD5-96 [RFC2403]",
    ("hmac(sha1)", 96): "HMAC-SHA-1-96 [RFC2404]",
    ("hmac(sha256)", 96): "HMAC-SHA-256-96 [draft-ietf-ipsec-ciph-sha-256-00]",
    ("hmac(sha256)", 128): "HMAC-SHA-256-128 [RFC4868]",
    ("hmac(sha384)", 192): "HMAC-SHA-384-192 [RFC4868]",
    ("hmac(sha512)", 256): "HMAC-SHA-512-256 [RFC4868]",
}


def _wireshark_cipher(sa: SecurityAssociation) -> str | None:
    """The esp_sa encryption column of an SA; None: Wireshark has none (AES-CCM, GMAC)."""
    if sa.auth_algorithm is not None:
        return _WIRESHARK_CIPHERS.get(sa.algorithm)
    if sa.algorithm == RFC4106:
        return f"AES-GCM with {sa.icv_len} octet ICV [RFC4106]"
    if sa.algorithm == RFC7539ESP:
        return "ChaCha20 with Poly1305 [RFC7634]"
    return None


def _wireshark_auth(sa: SecurityAssociation) -> tuple[str, str] | None:
    """The esp_sa Authentication column and key; None: Wireshark has no such HMAC."""
    if sa.auth_algorithm is None:
        return "NULL", ""
    name = _WIRESHARK_HMACS.get((sa.auth_algorithm, sa.icv_bits))
    return None if name is None else (name, _auth_key_hex(sa))


def esp_sa_text(sas: Iterable[SecurityAssociation], *, esn_columns: bool = False) -> str:
    """Wireshark ``esp_sa`` UAT lines (what strongSwan's save-keys writes).

    SAs of an algorithm Wireshark's ESP dissector does not take (AES-CCM, GMAC) are
    left out: a line for them would not load there either. The 8-column form
    strongSwan writes has no ESN column: an ESN SA's line is written as is;
    ``esn_columns`` adds SN and ESN High Bits (Wireshark 4.4 takes them, 4.0
    discards them with a warning).
    """
    rows = []
    for sa in sas:
        family = "IPv6" if sa.dst is not None and sa.dst.version == 6 else "IPv4"
        cipher, auth = _wireshark_cipher(sa), _wireshark_auth(sa)
        if cipher is None or auth is None:
            continue
        fields: tuple[str, ...] = (
            family,
            _addr(sa, "src"),
            _addr(sa, "dst"),
            f"0x{sa.spi:08x}",
            cipher,
            "" if sa.algorithm == NULL_CIPHER else _key_hex(sa),
            *auth,
        )
        if esn_columns:
            fields += ("64-bit" if sa.esn else "32-bit", f"{sa.esn_hi:x}")
        rows.append(",".join(f'"{f}"' for f in fields))
    return "\n".join(rows) + "\n"


def esp_sa_secrets(sas: Iterable[SecurityAssociation]) -> DecryptionSecrets:
    """A pcapng Decryption Secrets Block carrying the esp_sa lines."""
    return DecryptionSecrets(ESP_SA_SECRETS_TYPE, esp_sa_text(sas).encode())
