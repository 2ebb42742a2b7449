"""Key notations users already have: tcpdump -E, esp_sa wildcards, HMAC key lengths, NULL, policies.

Every test checks the SAs a text gives (SPI, addresses, algorithm, key
length: never key bytes) or the exact one-line message and warnings.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from espforensics.errors import KeyFileError
from espforensics.keys import ANY_SPI, SaTable, load_sas, parse_sas, read_sas
from espforensics.keys.sa import SecurityAssociation
from espforensics.keys.tcpdump import is_tcpdump_secrets

AES128 = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
AES256 = AES128 * 2
DES3 = "4043434545464649494a4a4c4c4f4f515152525454575758"
HMAC256 = "20c1ebdf268d3343b24888115945d92c11216f3a0a2c47b29086cf545f6357f3"
SECRETS = (AES128, AES256, DES3, HMAC256)


def shape(sa: SecurityAssociation) -> tuple[object, ...]:
    """What a user checks of a parsed SA, never its key bytes."""
    auth = None if sa.auth_key is None else len(sa.auth_key)
    return (
        sa.spi_text,
        str(sa.src or "any"),
        str(sa.dst or "any"),
        sa.suite,
        len(sa.key),
        sa.icv_bits,
        auth,
        sa.icv_unchecked,
    )


def no_secret_in(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text and secret[:16] not in text


# -- tcpdump -E ---------------------------------------------------------------------------

TCPDUMP = f"""\
# tcpdump -E secrets (print-esp.c grammar)
0x12345678@192.1.2.45 3des-cbc-hmac96:0x{DES3}
0x1001@192.0.2.2 aes128-cbc-hmac96:0x{AES128}, 4098@fd00:a::1 aes256-cbc:0x{AES256}
010@10.0.0.1 cast128-cbc:"sixteen-byte-key"
des-cbc:0x0123456789abcdef
0x2001@10.0.0.2 none:
"""


def test_tcpdump_secrets_parse_to_exact_sas() -> None:
    sas = parse_sas(TCPDUMP, "secrets")
    assert [shape(sa) for sa in sas] == [
        ("0x12345678", "any", "192.1.2.45", "cbc(des3_ede) + any", 24, 96, None, True),
        ("0x00001001", "any", "192.0.2.2", "cbc(aes) + any", 16, 96, None, True),
        ("0x00001002", "any", "fd00:a::1", "cbc(aes)", 32, 0, None, False),
        ("0x00000008", "any", "10.0.0.1", "cbc(cast5)", 16, 0, None, False),  # octal 010
        ("any", "any", "any", "cbc(des)", 8, 0, None, False),
        ("0x00002001", "any", "10.0.0.2", "ecb(cipher_null)", 0, 0, None, False),
    ]
    assert [sa.origin for sa in sas] == [
        "secrets:line 2",
        "secrets:line 3 item 1",
        "secrets:line 3 item 2",
        "secrets:line 4",
        "secrets:line 5",
        "secrets:line 6",
    ]
    # an ICV with no key: decrypted, the ICV skipped (verdict decrypted_no_icv)
    assert [(sa.supported, sa.icv_unchecked) for sa in sas[:3]] == [
        (True, True),
        (True, True),
        (True, False),
    ]


def test_tcpdump_ascii_secret_is_its_bytes() -> None:
    (sa,) = parse_sas('0x1@10.0.0.1 cast128-cbc:"sixteen-byte-key"\n', "s")
    assert len(sa.key) == 16
    (bare,) = parse_sas("0x1@10.0.0.1 blowfish-cbc:abcdefgh\n", "s")
    assert (bare.algorithm, len(bare.key)) == ("cbc(blowfish)", 8)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (TCPDUMP, True),
        (f"aes128-cbc:0x{AES128}\n", True),
        (f"0x1@10.0.0.1 rc5-cbc:0x{AES128}\n", False),  # no cipher it knows: not this format
        ("sas:\n  - spi: 1\n", False),
        ("src 10.0.0.1 dst 10.0.0.2\n", False),
        ('"IPv4","*","*","*","NULL","","NULL",""\n', False),
        ("hello\n", False),
        ("sa:\n  - spi: 1\n", False),
        # tcpdump's tests/ikev2pI2-secrets.txt: IKEv2 keys only, still tcpdump's notation
        ("ikev2 I 0x0001020304050607 0xc02e7a3031a03188 sha1:0x4e aes128:0x3f\n", True),
        ("file /etc/esp-secrets\n", True),
        ("ikev2\n", False),
    ],
)
def test_tcpdump_detected_by_content(text: str, expected: bool) -> None:
    assert is_tcpdump_secrets(text) is expected


def test_tcpdump_bad_items_are_warnings_the_rest_loads(tmp_path: Path) -> None:
    path = tmp_path / "secrets"
    path.write_text(
        f"0x1001@192.0.2.2 aes128-cbc:0x{AES128}\n"
        f"0x1002@192.0.2.300 aes128-cbc:0x{AES128}\n"
        f"0x1003@192.0.2.2 aes256-cbc:0x{AES128}\n"
        f"0x1004@192.0.2.2 rc5-cbc:0x{AES128}\n"
        "ikev2 I 0x0011223344556677 0x8899aabbccddeeff sha1:0x00 aes128:0x00\n"
    )
    table = load_sas([path])
    assert [shape(sa)[:3] for sa in table] == [("0x00001001", "any", "192.0.2.2")]
    assert table.notes == [
        f"{path}: line 2: address '192.0.2.300' after @ is not an IP address "
        "(skipped; the other lines loaded)",
        f"{path}: line 3: aes256-cbc takes a 32-byte secret; this one is 16 bytes "
        "(skipped; the other lines loaded)",
        f"{path}: line 4: unknown tcpdump algorithm 'rc5-cbc'; known: 3des, aes-128, aes-192, "
        "aes-256, aes128, aes192, aes256, blowfish, camellia-128, camellia-192, camellia-256, "
        "camellia128, camellia192, camellia256, cast128, cast5, des, des-ede3, none "
        "(skipped; the other lines loaded)",
        f"{path}: line 5: an `ikev2` item holds IKEv2 keys, not ESP keys "
        "(skipped; the other lines loaded)",
    ]
    no_secret_in("\n".join(table.notes))


def test_tcpdump_file_of_only_bad_items_is_refused_with_its_first_error(tmp_path: Path) -> None:
    path = tmp_path / "secrets"
    path.write_text(f"0x100000000@192.0.2.2 aes128-cbc:0x{AES128}\n0x1@1.2.3.4 des-cbc:0x00\n")
    with pytest.raises(KeyFileError) as info:
        load_sas([path])
    assert str(info.value) == f"{path}: line 1: spi (a 33-bit number) is not in 0..0xffffffff"


def test_tcpdump_file_of_only_ikev2_keys_is_refused_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "ikev2pI2-secrets.txt"  # as in tcpdump's tests: keys of one IKE SA
    path.write_text(
        "ikev2 I 0x0001020304050607 0xc02e7a3031a03188 sha1:0x4ea8e662 aes128:0x3f44bf47\n"
        "ikev2 R 0x0001020304050607 0xc02e7a3031a03188 sha1:0x515b0bd2 aes128:0xbedb67ec\n"
    )
    with pytest.raises(KeyFileError) as info:
        load_sas([path])
    assert str(info.value) == f"{path}: line 1: an `ikev2` item holds IKEv2 keys, not ESP keys"
    no_secret_in(str(info.value))


def test_tcpdump_text_given_in_place_of_a_path() -> None:
    text = f"0x1001@192.0.2.2 aes128-cbc-hmac96:0x{AES128}"
    table = load_sas([text])
    assert [shape(sa) for sa in table] == [
        ("0x00001001", "any", "192.0.2.2", "cbc(aes) + any", 16, 96, None, True)
    ]
    assert [sa.origin for sa in table] == ["--sa (tcpdump -E text):line 1"]
    with pytest.raises(KeyFileError) as info:  # the secret never shows in a message
        load_sas([f"0x1001@192.0.2.2 aes256-cbc:0x{AES128}"])
    assert str(info.value) == (
        "--sa (tcpdump -E text): line 1: aes256-cbc takes a 32-byte secret; this one is 16 bytes"
    )


def test_ikev2_keys_given_in_place_of_a_path_are_never_quoted() -> None:
    """They were taken for a path that does not exist, and the error quoted the keys."""
    text = f"ikev2 I 0x0001020304050607 0xc02e7a3031a03188 sha1:0x{AES128} aes128:0x{AES128}"
    with pytest.raises(KeyFileError) as info:
        load_sas([text])
    assert str(info.value) == (
        "--sa (tcpdump -E text): line 1: an `ikev2` item holds IKEv2 keys, not ESP keys"
    )
    no_secret_in(str(info.value))


def test_a_secret_with_an_unknown_cipher_is_never_quoted_as_a_path() -> None:
    with pytest.raises(KeyFileError) as info:
        load_sas([f"0x1001@192.0.2.2 rc5-cbc:0x{AES128}"])
    assert str(info.value) == (
        "--sa (59 characters): no such file, nor tcpdump -E text of a cipher espforensics knows"
    )
    with pytest.raises(KeyFileError) as typo:
        load_sas(["keys:v2.yaml"])
    assert str(typo.value) == (
        "--sa 'keys:v2.yaml': no such file, nor tcpdump -E text of a cipher espforensics knows"
    )
    with pytest.raises(KeyFileError) as missing:  # a path that is no secret: named as before
        load_sas(["no/such/keys.yaml"])
    assert str(missing.value) == "no/such/keys.yaml: cannot open: No such file or directory"


def test_an_existing_file_is_read_even_if_its_name_looks_like_a_secret(tmp_path: Path) -> None:
    name = tmp_path / "des-cbc:0x0123456789abcdef"
    name.write_text(f"0x7@10.0.0.1 aes128-cbc:0x{AES128}\n")
    assert [sa.spi for sa in load_sas([name])] == [7]


# -- the wildcard SA in the table ---------------------------------------------------------


def _packed(text: str) -> bytes:
    return ipaddress.ip_address(text).packed


def test_wildcard_spi_matches_only_what_no_exact_sa_claims() -> None:
    sas = parse_sas(
        f"0x1001@192.0.2.2 aes128-cbc:0x{AES128}\n"
        f"aes256-cbc:0x{AES256}\n"
        f"0x1002@192.0.2.1 3des-cbc:0x{DES3}\n",
        "s",
    )
    table = SaTable(tuple(sas))
    exact = table.lookup(0x1001, _packed("192.0.2.1"), _packed("192.0.2.2"))
    assert exact is sas[0]
    made = table.lookup(0x5555, _packed("192.0.2.1"), _packed("192.0.2.2"))
    assert made is not None and (made.spi, made.algorithm, len(made.key)) == (
        0x5555,
        "cbc(aes)",
        32,
    )
    assert table.entry_of(made) is sas[1]
    # one SA per SPI, the same object every time (its own ESN and IV state)
    assert table.lookup(0x5555, _packed("10.9.9.9"), _packed("10.8.8.8")) is made
    other = table.lookup(0x6666, _packed("192.0.2.1"), _packed("192.0.2.2"))
    assert other is not made and other is not None and other.spi == 0x6666
    # 0x1001 towards another destination: no exact SA claims it, the wildcard does
    moved = table.lookup(0x1001, _packed("192.0.2.2"), _packed("192.0.2.1"))
    assert moved is not None and moved.algorithm == "cbc(aes)" and len(moved.key) == 32
    assert table.spis == frozenset({0x1001, 0x1002})
    assert [sa.any_spi for sa in table] == [False, True, False]
    assert sas[1].spi == ANY_SPI


# -- Wireshark esp_sa ---------------------------------------------------------------------

HALF = HMAC256[:32]
ESP_SA = f"""\
# This file is automatically generated, DO NOT MODIFY.
"IPv4","*","*","*","AES-CBC [RFC3602]","0x{AES128}","HMAC-SHA-256-128 [RFC4868]","0x{HMAC256}"
"IPv6","*","fd00:a::2","*","AES-CBC [RFC3602]","0x{AES256}","HMAC-SHA-256-128 [RFC4868]","0x{HALF}"
"IPv4","192.0.2.1","192.0.2.2","0x00001001","AES-CBC [RFC3602]","0x{AES128}","NULL",""
"IPv4","192.0.2.1","bad","0x00001002","AES-CBC [RFC3602]","0x{AES128}","NULL",""
"IPv4","192.0.2.1","192.0.2.2","0x00001003","AES-CBC [RFC3602]","0x{AES128[:30]}","NULL",""
"IPv4","192.0.2.1","192.0.2.2","0x0000100*","AES-CBC [RFC3602]","0x{AES128}","NULL",""
"""


def test_esp_sa_wildcards_load_and_bad_lines_are_warnings(tmp_path: Path) -> None:
    path = tmp_path / "esp_sa"
    path.write_text(ESP_SA)
    table = load_sas([path])
    assert [shape(sa) for sa in table] == [
        ("any", "any", "any", "cbc(aes) + hmac(sha256)", 16, 128, 32, False),
        ("any", "any", "fd00:a::2", "cbc(aes) + hmac(sha256)", 32, 128, 16, False),
        ("0x00001001", "192.0.2.1", "192.0.2.2", "cbc(aes)", 16, 0, None, False),
    ]
    assert table.notes == [
        f"{path}: line 5: Dest IP 'bad' is not one address or '*' (the only wildcard we take) "
        "(skipped; the other lines loaded)",
        f"{path}: line 6 (spi 0x00001003): key is 15 bytes; cbc(aes) takes 16, 24 or 32 "
        "(skipped; the other lines loaded)",
        f"{path}: line 7: SPI '0x0000100*' has a partial wildcard; give '*' or one SPI "
        "(skipped; the other lines loaded)",
    ]
    no_secret_in("\n".join(table.notes))
    # the strict reader (and a capture's secrets block) still stops at the first bad line
    with pytest.raises(KeyFileError) as info:
        parse_sas(ESP_SA, "e")
    assert str(info.value).startswith("e: line 5: Dest IP 'bad'")


def test_esp_sa_with_no_readable_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "esp_sa"
    path.write_text('"IPv4","*","*","0x1*","NULL","","NULL",""\n')
    with pytest.raises(KeyFileError) as info:
        load_sas([path])
    assert str(info.value) == (
        f"{path}: line 1: SPI '0x1*' has a partial wildcard; give '*' or one SPI"
    )


# -- HMAC keys of any length (RFC 2104 s3) ------------------------------------------------


@pytest.mark.parametrize("key_len", [10, 16, 20, 33, 64])
def test_hmac_keys_of_other_lengths_load_as_given(key_len: int) -> None:
    text = (
        "sas:\n  - spi: 0x1001\n    enc: cbc(aes)\n"
        f"    key: 0x{AES128}\n    auth: hmac(sha256)\n"
        f"    auth_key: 0x{'ab' * key_len}\n    icv: 128\n"
    )
    (sa,) = parse_sas(text, "k")
    assert sa.auth_key is not None and len(sa.auth_key) == key_len
    assert sa.supported and sa.key_usable
    assert sa.rfc_hmac_key_len == (None if key_len == 32 else 32)


# -- ip xfrm state: NULL encryption, policy blocks ----------------------------------------

NULL_STATE = (  # iproute2 6.1 ends lines with a space; the NULL key is printed as nothing
    "src 192.0.2.1 dst 192.0.2.2\n"
    "\tproto esp spi 0x00001001 reqid 1 mode transport\n"
    "\treplay-window 0 \n"
    f"\tauth-trunc hmac(sha256) 0x{HMAC256} 128\n"
    "\tenc ecb(cipher_null) \n"
    "\tsel src 0.0.0.0/0 dst 0.0.0.0/0 \n"
)
POLICIES = (
    "src 192.0.2.1/32 dst 192.0.2.2/32 \n"
    "\tdir out priority 0 ptype main \n"
    "\ttmpl src 192.0.2.1 dst 192.0.2.2\n"
    "\t\tproto esp reqid 1 mode transport\n"
    "src 192.0.2.2/32 dst 192.0.2.1/32 proto udp dport 500\n"
    "\tdir in priority 0 ptype main \n"
    "\ttmpl src 192.0.2.2 dst 192.0.2.1\n"
    "\t\tproto esp reqid 2 mode transport\n"
    "src ::/0 dst ::/0 \n"
    "\tsocket out priority 0 ptype main \n"
)


def test_xfrm_null_encryption_with_nothing_after_the_name() -> None:
    (sa,) = parse_sas(NULL_STATE, "s")
    assert shape(sa) == (
        "0x00001001",
        "192.0.2.1",
        "192.0.2.2",
        "ecb(cipher_null) + hmac(sha256)",
        0,
        128,
        32,
        False,
    )
    assert sa.supported


def test_xfrm_policy_blocks_after_the_states_are_skipped_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "xfrm.txt"
    path.write_text(NULL_STATE + POLICIES)
    table = load_sas([path])
    assert [sa.spi for sa in table] == [0x1001]
    assert table.notes == [
        f"{path}: skipped 3 `ip xfrm policy` blocks (lines 7, 11, 15): a policy holds no keys"
    ]
    sas, log = read_sas(NULL_STATE + POLICIES, "x")
    assert len(sas) == 1 and log.errors == []


def test_xfrm_policy_output_alone_is_refused() -> None:
    with pytest.raises(KeyFileError) as info:
        parse_sas(POLICIES, "p")
    assert str(info.value) == (
        "p: line 1: `ip xfrm policy` output, which holds no keys (give `ip xfrm state` output)"
    )


def test_a_device_as_key_file_is_one_line_and_a_fifo_is_read(tmp_path: Path) -> None:
    """`--sa /dev/zero` never ended; `--sa <(ip xfrm state)` (a FIFO) must still be read."""
    import os
    import threading

    from espforensics.errors import KeyFileError
    from espforensics.keys import load_sas

    with pytest.raises(KeyFileError) as err:
        load_sas(["/dev/zero"])
    assert str(err.value) == "/dev/zero: not a regular file: character device"
    fifo = tmp_path / "keys.fifo"
    os.mkfifo(fifo)
    text = "sas:\n  - spi: 0x1001\n    aead: rfc4106(gcm(aes))\n    key: 0x" + "11" * 20 + "\n"
    writer = threading.Thread(target=fifo.write_text, args=(text,))  # a process substitution
    writer.start()
    try:
        table = load_sas([fifo])
    finally:
        writer.join()
    assert [sa.spi for sa in table] == [0x1001]
