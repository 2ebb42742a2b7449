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

from espforensics.keys.sa import RFC4106, RFC7539ESP, SecurityAssociation
from espforensics.model import DecryptionSecrets

ESP_SA_SECRETS_TYPE = 0x45535053  # pcapng DSB type "ESPS", Wireshark esp_sa lines


def _key_hex(sa: SecurityAssociation) -> str:
    return "0x" + sa.key.reveal().hex()


def _addr(sa: SecurityAssociation, which: str) -> str:
    value = sa.src if which == "src" else sa.dst
    return "" if value is None else str(value)


def keys_yaml(sas: Iterable[SecurityAssociation]) -> str:
    """The project's keys.yaml: a ``sas:`` list, one mapping per SA."""
    lines = ["# keys.yaml written by espforensics.synth: random lab keys, test data only", "sas:"]
    for sa in sas:
        encap = "null" if sa.encap_port is None else str(sa.encap_port)
        lines += [
            f'  - spi: "0x{sa.spi:08x}"',
            f'    src: "{_addr(sa, "src")}"',
            f'    dst: "{_addr(sa, "dst")}"',
            f"    aead: {sa.algorithm}",
            f'    key: "{_key_hex(sa)}"',
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
        f"\taead {sa.algorithm} {_key_hex(sa)} {sa.icv_bits}",
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


def _wireshark_cipher(sa: SecurityAssociation) -> str | None:
    """The esp_sa encryption column of an SA; None: Wireshark has none (AES-CCM, GMAC)."""
    if sa.algorithm == RFC4106:
        return f"AES-GCM with {sa.icv_len} octet ICV [RFC4106]"
    if sa.algorithm == RFC7539ESP:
        return "ChaCha20 with Poly1305 [RFC7634]"
    return None


def esp_sa_text(sas: Iterable[SecurityAssociation]) -> str:
    """Wireshark ``esp_sa`` UAT lines (what strongSwan's save-keys writes).

    SAs of an algorithm Wireshark's ESP dissector does not take (AES-CCM, GMAC) are
    left out: a line for them would not load there either.
    """
    rows = []
    for sa in sas:
        family = "IPv6" if sa.dst is not None and sa.dst.version == 6 else "IPv4"
        cipher = _wireshark_cipher(sa)
        if cipher is None:
            continue
        fields = (
            family,
            _addr(sa, "src"),
            _addr(sa, "dst"),
            f"0x{sa.spi:08x}",
            cipher,
            _key_hex(sa),
            "NULL",
            "",
        )
        rows.append(",".join(f'"{f}"' for f in fields))
    return "\n".join(rows) + "\n"


def esp_sa_secrets(sas: Iterable[SecurityAssociation]) -> DecryptionSecrets:
    """A pcapng Decryption Secrets Block carrying the esp_sa lines."""
    return DecryptionSecrets(ESP_SA_SECRETS_TYPE, esp_sa_text(sas).encode())
