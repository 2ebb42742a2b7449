"""Tests of espforensics.keys: every format, every field, every message.

Each error case also checks that the message (and its repr and any chained
exception) does not contain the key of the input, in hex.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.errors import KeyFileError
from espforensics.keys import (
    FORMATS,
    SaTable,
    SecurityAssociation,
    load_sas,
    parse_esp_sa,
    parse_sas,
)
from espforensics.keys.validate import RawSa, shown
from espforensics.keys.wireshark import AUTHENTICATION_NAMES, ENCRYPTION_NAMES

DATA = Path(__file__).parents[1] / "data" / "keys"
DOCS = Path(__file__).parents[2] / "docs" / "keys.md"
GCM = "rfc4106(gcm(aes))"
KEY = "a1b2c3d4e5f60718293a4b5c6d7e8f90deadbeef"  # 16-byte AES key + 4-byte salt
KEY2 = "00112233445566778899aabbccddeeff01020304"
CBC_KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
HMAC_KEY = "55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa55aa"


def addr(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def fields(sa: SecurityAssociation) -> tuple[object, ...]:
    """Every field of an SA, keys revealed, for exact comparisons."""
    return (
        sa.spi,
        sa.src,
        sa.dst,
        sa.algorithm,
        sa.key.reveal().hex(),
        sa.icv_bits,
        sa.esn,
        sa.esn_hi,
        sa.mode,
        sa.encap_port,
        sa.auth_algorithm,
        None if sa.auth_key is None else sa.auth_key.reveal().hex(),
        sa.origin,
    )


def expect(
    spi: int,
    src: str | None,
    dst: str | None,
    algorithm: str,
    key: str,
    origin: str,
    *,
    icv: int = 128,
    esn: bool = False,
    esn_hi: int = 0,
    mode: str | None = None,
    encap: int | None = None,
    auth: str | None = None,
    auth_key: str | None = None,
) -> tuple[object, ...]:
    """The ``fields`` tuple of the SA a test expects; defaults are expectations too."""
    return (
        spi,
        None if src is None else addr(src),
        None if dst is None else addr(dst),
        algorithm,
        key,
        icv,
        esn,
        esn_hi,
        mode,
        encap,
        auth,
        auth_key,
        origin,
    )


def key_pieces() -> set[str]:
    """Every 8-digit run of every test key: no message may hold any of them."""
    return {key[i : i + 8] for key in (KEY, KEY2, CBC_KEY, HMAC_KEY) for i in range(len(key) - 7)}


PIECES = key_pieces()


def assert_no_key(*texts: str) -> None:
    for text in texts:
        assert not [piece for piece in PIECES if piece in text.lower()]


def failure(text: str, origin: str = "k") -> str:
    """The message of the KeyFileError ``text`` raises, checked to hold no key."""
    with pytest.raises(KeyFileError) as info:
        parse_sas(text, origin)
    exc = info.value
    assert_no_key(str(exc), repr(exc), repr(exc.__cause__), repr(exc.__context__))
    assert exc.path == origin
    return str(exc)


# -- keys.yaml ---------------------------------------------------------------

YAML_FULL = f"""\
# every field
sas:
  - spi: 0x1001
    src: fd00:a::1
    dst: 2001:0:0:0:0:0:0:1   # YAML 1.1 reads this as a base-60 int
    aead: rfc4106(gcm(aes))
    key: 0x{KEY}
    icv: 96
    esn: true
    esn_hi: 0x2
    mode: tunnel
    encap: 4500
  - spi: "4098"
    aead: rfc4106(gcm(aes))
    key: "0x{KEY2}"
"""


def test_yaml_every_field_and_defaults() -> None:
    sas = parse_sas(YAML_FULL, "keys.yaml")
    assert [fields(sa) for sa in sas] == [
        expect(
            0x1001,
            "fd00:a::1",
            "2001::1",
            GCM,
            KEY,
            "keys.yaml:entry 1",
            icv=96,
            esn=True,
            esn_hi=2,
            mode="tunnel",
            encap=4500,
        ),
        expect(4098, None, None, GCM, KEY2, "keys.yaml:entry 2"),
    ]


def test_yaml_unquoted_key_keeps_its_leading_zero_bytes() -> None:
    text = f"sas:\n- spi: 1\n  aead: {GCM}\n  key: 0x0000{KEY[4:]}\n"
    (sa,) = parse_sas(text, "keys.yaml")
    assert sa.key.reveal().hex() == "0000" + KEY[4:]


# Every way to write an IPv6 address, and every YAML layout a field can take: the
# address must read the same unquoted as quoted (docs/keys.md "Quoting").
IPV6_FORMS = ["2001:db8:1a::", "2001:db8::", "::", "::1", "fe80::1%eth0", "fe80::", "::ffff:a00:1"]
YAML_LAYOUTS = {
    "block": "sas:\n  - spi: 1\n    src: {a}\n    dst: {b}\n    aead: {gcm}\n    key: 0x{key}\n",
    "comment": "sas:\n  - spi: 1\n    src: {a}   # a comment\n    dst: {b}\n"
    "    aead: {gcm}\n    key: 0x{key}\n",
    "next line": "sas:\n  - spi: 1\n    src:\n      {a}\n    dst:\n      {b}\n"
    "    aead: {gcm}\n    key: 0x{key}\n",
    "flow": "sas:\n  - {{spi: 1, src: {a}, dst: {b}, aead: {gcm}, key: 0x{key}}}\n",
    "flow list": "sas: [{{aead: {gcm}, key: 0x{key}, spi: 1, src: {a}, dst: {b}}}]\n",
}


@pytest.mark.parametrize("layout", list(YAML_LAYOUTS))
@pytest.mark.parametrize("address", IPV6_FORMS)
def test_yaml_ipv6_addresses_read_as_written_quoted_or_not(address: str, layout: str) -> None:
    text = YAML_LAYOUTS[layout]
    plain = parse_sas(text.format(a=address, b=address, gcm=GCM, key=KEY), "k")
    quoted = parse_sas(text.format(a=f'"{address}"', b=f"'{address}'", gcm=GCM, key=KEY), "k")
    assert [fields(sa) for sa in plain] == [fields(sa) for sa in quoted]
    assert plain[0].src == plain[0].dst == addr(address)


def test_yaml_an_address_ending_in_two_colons_is_an_address() -> None:
    """Issue 34: ``src: 2001:db8:1a::`` was a YAML syntax error ("mapping values")."""
    (sa,) = parse_sas(f"sas:\n- spi: 1\n  src: 2001:db8:1a::\n  aead: {GCM}\n  key: 0x{KEY}\n", "k")
    assert sa.src == addr("2001:db8:1a::") and sa.dst is None


_MAPPING = "mapping values are not allowed here"


@pytest.mark.parametrize(
    ("value", "column"),
    [("2001:db8:::", 20), ("cafe::beef:", 20), ("gg::", 13)],  # not addresses: YAML's colon
)
def test_yaml_a_trailing_colon_of_no_address_is_a_syntax_error(value: str, column: int) -> None:
    message = f"k: YAML syntax error at line 3, column {column}: {_MAPPING}"
    assert failure(f"sas:\n  - spi: 1\n    src: {value}\n    aead: {GCM}\n") == message


def test_yaml_enc_and_auth_entries_give_the_sa_of_each_algorithm() -> None:
    text = (
        "sas:\n"
        f"- {{spi: 1, enc: cbc(aes), key: '0x{CBC_KEY}', auth: hmac(sha256),"
        f" auth_key: '0x{HMAC_KEY}', icv: 128, esn: true}}\n"
        f"- {{spi: 2, enc: ecb(cipher_null), key: '', auth: hmac(sha1), auth_key: '{KEY}'}}\n"
        f"- {{spi: 3, enc: rfc3686(ctr(aes)), key: '{KEY}', auth: hmac(sha512),"
        f" auth_key: '{HMAC_KEY * 2}', icv: 256}}\n"
    )
    cbc, null, ctr = parse_sas(text, "keys.yaml")
    assert [
        (sa.algorithm, sa.auth_algorithm, sa.icv_bits, sa.esn, len(sa.key), sa.supported)
        for sa in (cbc, null, ctr)
    ] == [
        ("cbc(aes)", "hmac(sha256)", 128, True, 16, True),
        ("ecb(cipher_null)", "hmac(sha1)", 96, False, 0, True),  # RFC 2404's 96 by default
        ("rfc3686(ctr(aes))", "hmac(sha512)", 256, False, 20, True),
    ]
    assert cbc.key.reveal().hex() == CBC_KEY
    assert cbc.auth_key is not None and cbc.auth_key.reveal().hex() == HMAC_KEY


def test_yaml_other_aeads_load_and_implicit_iv_is_unsupported() -> None:
    chacha = KEY + "00" * 16
    text = f"sas:\n- spi: 7\n  aead: rfc7539esp(chacha20,poly1305)\n  key: 0x{chacha}\n"
    (sa,) = parse_sas(text, "keys.yaml")
    assert (sa.algorithm, len(sa.key), sa.icv_bits, sa.supported) == (
        "rfc7539esp(chacha20,poly1305)",
        36,
        128,
        True,
    )
    text = f"sas:\n- spi: 8\n  aead: rfc4543(gcm(aes))\n  key: 0x{KEY}\n"
    (gmac,) = parse_sas(text, "keys.yaml")
    assert (gmac.algorithm, gmac.supported) == ("rfc4543(gcm(aes))", True)
    text = f"sas:\n- spi: 9\n  aead: rfc8750(gcm(aes))\n  key: 0x{KEY}\n"
    (iiv,) = parse_sas(text, "keys.yaml")  # RFC 8750: no IV on the wire, not opened yet
    assert (iiv.algorithm, iiv.supported) == ("rfc8750(gcm(aes))", False)


# -- ip xfrm state -----------------------------------------------------------

A6, B6 = "fd00:a::1", "fd00:a::2"
A4, B4 = "192.0.2.1", "192.0.2.2"
# file -> [(spi, src, dst, key, encap_port, line of the block)]
REAL_CAPTURES = {
    "ip6tnl-transport-tso-off": [
        (0x1002, B6, A6, "3a5d0f138eb418171248695ba3a9ca20112c9eff", None, 1),
        (0x1001, A6, B6, "6849d7f59ca255add51d2fbfeec3eeabc915e513", None, 10),
    ],
    "ip6tnl-transport-tso-on": [
        (0x1002, B6, A6, "e29b34180d543718b1d3851630d44518cfb2ce90", None, 1),
        (0x1001, A6, B6, "d824fd4ac37675f3f7a857301662848459818b40", None, 10),
    ],
    "natt-espinudp-v4": [
        (0x1002, B4, A4, "7220db652edf7dd2fd31ad0a5c923759dbc18415", 4500, 1),
        (0x1001, A4, B4, "9590c3d25b0b5776a31f7a5a737f2f86777a0a56", 4500, 11),
    ],
    "tcp-transport-v4": [
        (0x1002, B4, A4, "eedef9f4906bb5387b1e42269900048c0377404d", None, 1),
        (0x1001, A4, B4, "034a8e29cac6abde4f1e5b4e20a07e6235690735", None, 10),
    ],
    "tcp-tunnel-4in4": [
        (0x1002, B4, A4, "05f364a713886e1a71412a56f0744af891c3b04b", None, 1),
        (0x1001, A4, B4, "eafa8677041e84fc2d37ef21bdde77e624915c51", None, 10),
    ],
}


@pytest.mark.parametrize(("name", "expected"), REAL_CAPTURES.items())
def test_xfrm_real_captures(
    name: str, expected: list[tuple[int, str, str, str, int | None, int]]
) -> None:
    """ip xfrm state of the Linux 6.1 captures: the anti-replay esn context is no ESN."""
    path = DATA / "linux-6.1" / f"{name}.txt"
    mode = "tunnel" if "tunnel" in name else "transport"
    assert [fields(sa) for sa in load_sas([path])] == [
        expect(spi, s, d, GCM, key, f"{path}:line {n}", mode=mode, encap=encap)
        for spi, s, d, key, encap, n in expected
    ]


XFRM_STATS = f"""\
src 192.0.2.1 dst 192.0.2.2 \t
\tproto esp spi 0x00001001(4097) reqid 1(0x00000001) mode transport
\treplay-window 0 seq 0x00000000 flag af-unspec esn (0x10100000)
\taead rfc4106(gcm(aes)) 0x{KEY} (160 bits) 64
\tanti-replay esn context:
\t seq-hi 0x0, seq 0x0, oseq-hi 0x1, oseq 0x145
\t replay_window 128, bitmap-length 4
\t 00000000 00000000 00000000 00000000 \n\
\tsel src 0.0.0.0/0 dst 0.0.0.0/0 uid 0
\tlifetime config:
\t  limit: soft (INF)(bytes), hard (INF)(bytes)
\t  limit: soft (INF)(packets), hard (INF)(packets)
\t  expire add: soft 0(sec), hard 0(sec)
\t  expire use: soft 0(sec), hard 0(sec)
\tlifetime current:
\t  24780(bytes), 325(packets)
\t  add 2026-11-29 23:40:01 use 2026-11-29 23:40:02
\tstats:
\t  replay-window 0 replay 0 failed 0
src 192.0.2.2 dst 192.0.2.1
\tproto esp spi 0x00001002(4098) reqid 2(0x00000002) mode tunnel
\treplay-window 0 seq 0x00000000 flag  (0x00000000)
\taead rfc4106(gcm(aes)) 0x{KEY2} (160 bits) 128
\tlifetime current:
\t  0(bytes), 0(packets)
\tstats:
\t  replay-window 0 replay 0 failed 0
"""


def test_xfrm_stats_output() -> None:
    sas = parse_sas(XFRM_STATS, "s.txt")
    assert [fields(sa) for sa in sas] == [
        expect(0x1001, A4, B4, GCM, KEY, "s.txt:line 1", icv=64, esn=True, mode="transport"),
        expect(0x1002, B4, A4, GCM, KEY2, "s.txt:line 20", mode="tunnel"),
    ]


XFRM_MIXED = f"""\
src 10.0.0.1 dst 10.0.0.2
    proto esp spi 0xc0ffee01 reqid 7 mode tunnel
    replay-window 32 flag af-unspec
    auth-trunc hmac(sha256) 0x{HMAC_KEY} 128
    enc cbc(aes) 0x{CBC_KEY}
    encap type espinudp sport 4500 dport 4501 addr 0.0.0.0
    sel src 0.0.0.0/0 dst 0.0.0.0/0
src 10.0.0.1 dst 10.0.0.2
    proto ah spi 0x00000200 reqid 8 mode transport
    replay-window 0
    auth-trunc hmac(sha1) 0x{HMAC_KEY[:40]} 96
src 10.0.0.1 dst 10.0.0.2
    proto comp spi 0x00001234 reqid 9 mode tunnel
    replay-window 0
    comp deflate 0x
src 10.0.0.2 dst 10.0.0.1
    proto esp spi 0xc0ffee02 reqid 7 mode beet
    auth hmac(sha1) 0x{HMAC_KEY[:40]}
    enc ecb(cipher_null) 0x
"""


def test_xfrm_non_aead_sas_and_other_protocols() -> None:
    """enc + auth load as SAs that are opened (CBC, NULL with HMACs); AH and IPComp are skipped."""
    sas = parse_sas(XFRM_MIXED, "m.txt")
    assert (
        [fields(sa) for sa in sas]
        == [
            expect(
                0xC0FFEE01,
                "10.0.0.1",
                "10.0.0.2",
                "cbc(aes)",
                CBC_KEY,
                "m.txt:line 1",
                mode="tunnel",
                encap=4501,
                auth="hmac(sha256)",
                auth_key=HMAC_KEY,
            ),
            expect(
                0xC0FFEE02,
                "10.0.0.2",
                "10.0.0.1",
                "ecb(cipher_null)",
                "",
                "m.txt:line 16",
                icv=96,  # the kernel's default for hmac(sha1) when no auth-trunc
                mode="beet",
                auth="hmac(sha1)",
                auth_key=HMAC_KEY[:40],
            ),
        ]
    )
    assert all(sa.supported and sa.key_usable for sa in sas)


@pytest.mark.parametrize(
    ("lines", "esn"),
    [
        ("\treplay-window 0 flag af-unspec esn\n", True),
        ("\treplay-window 0 flag af-unspec 80\n", True),  # older iproute2: no name for ESN
        ("\treplay-window 0 seq 0x00000000 flag esn (0x10000000)\n", True),
        ("\tflag esn\n", True),  # SAs with a direction print flags on their own line
        ("\treplay-window 0 seq 0x00000000 flag  (0x00000000)\n", False),
        ("\treplay-window 0 flag af-unspec\n", False),
        ("\treplay-window 0 \n\tanti-replay esn context:\n\t seq-hi 0x0, seq 0x0\n", False),
    ],
)
def test_xfrm_esn_only_from_the_esn_flag(lines: str, esn: bool) -> None:
    text = (
        "src 192.0.2.1 dst 192.0.2.2\n\tproto esp spi 0x00001001 reqid 1 mode transport\n"
        f"{lines}\taead {GCM} 0x{KEY} 128\n"
    )
    (sa,) = parse_sas(text, "e.txt")
    assert sa.esn is esn


def test_xfrm_crlf_and_blank_lines() -> None:
    text = (
        f"\r\nsrc 192.0.2.1 dst 192.0.2.2  \r\n\r\n"
        f"  proto esp spi 0x1001 reqid 1 mode transport\r\n  aead {GCM} 0x{KEY} 128\r\n"
    )
    (sa,) = parse_sas(text, "c.txt")
    assert (sa.spi, sa.key.reveal().hex(), sa.origin) == (0x1001, KEY, "c.txt:line 2")


# -- Wireshark esp_sa --------------------------------------------------------

ESP_SA = f"""\
# This file is automatically generated, DO NOT MODIFY.
"IPv4","192.0.2.1","192.0.2.2","0x00001001","AES-GCM with 16 octet ICV [RFC4106]",\
"0x{KEY}","NULL",""
"IPv6","*","fd00::2/128","0x00001002","AES-GCM with 8 octet ICV [RFC4106]",\
"0X{KEY2.upper()}","ANY 64 bit authentication [no checking]","","64-bit","0x1f"
"Any","*","*","4099","AES-CBC [RFC3602]","0x{CBC_KEY}","HMAC-SHA-1-96 [RFC2404]",\
"0x{HMAC_KEY[:40]}","32-bit","0"
"IPv4","0.0.0.0/0","10.0.0.1","0x00001004","NULL","","NULL","","32-bit","0"
"IPv4","10.0.0.2","10.0.0.1","0x00001005","AES-CBC [RFC3602]","0123456789\\x22bcdef",\
"ANY 96 bit authentication [no checking]","0xabc"
"""


def test_esp_sa_8_and_10_columns() -> None:
    sas = parse_sas(ESP_SA, "esp_sa")
    ascii_key = b'0123456789"bcdef'.hex()  # ASCII key with a \x22 escape
    line = "esp_sa:line"
    assert [fields(sa) for sa in sas] == [
        expect(0x1001, A4, B4, GCM, KEY, f"{line} 2"),
        expect(0x1002, None, "fd00::2", GCM, KEY2, f"{line} 3", icv=64, esn=True, esn_hi=31),
        expect(
            4099,
            None,
            None,
            "cbc(aes)",
            CBC_KEY,
            f"{line} 4",
            icv=96,
            auth="hmac(sha1)",
            auth_key=HMAC_KEY[:40],
        ),
        expect(0x1004, None, "10.0.0.1", "ecb(cipher_null)", "", f"{line} 5", icv=0),
        # odd hex gets a leading 0 nibble, as in Wireshark
        expect(
            0x1005,
            "10.0.0.2",
            "10.0.0.1",
            "cbc(aes)",
            ascii_key,
            f"{line} 6",
            icv=96,
            auth="any",
            auth_key="0abc",
        ),
    ]


STRONGSWAN = f"""\
"IPv4","192.0.2.1","192.0.2.2","0xc3a1b2d4","AES-GCM [RFC4106]","0x{KEY}",\
"ANY 128 bit authentication [no checking]","0x"
"IPv4","192.0.2.2","192.0.2.1","0xc9e8f7a6","AES-GCM [RFC4106]","0x{KEY2}",\
"ANY 64 bit authentication [no checking]","0x"
"IPv6","fd00::1","fd00::2","0xcafe0001","TripleDes-CBC [RFC2451]","0x{KEY}{CBC_KEY[:8]}",\
"HMAC-SHA-256-128 [RFC4868]","0x{HMAC_KEY}"
"""


def test_esp_sa_written_by_strongswan() -> None:
    """ "AES-GCM [RFC4106]" takes its ICV length from "ANY n bit authentication"."""
    sas = parse_esp_sa(STRONGSWAN, "cap.pcapng (decryption secrets block)")
    at = "cap.pcapng (decryption secrets block):line"
    assert [fields(sa) for sa in sas] == [
        expect(0xC3A1B2D4, A4, B4, GCM, KEY, f"{at} 1"),
        expect(0xC9E8F7A6, B4, A4, GCM, KEY2, f"{at} 2", icv=64),
        expect(
            0xCAFE0001,
            "fd00::1",
            "fd00::2",
            "cbc(des3_ede)",
            KEY + CBC_KEY[:8],
            f"{at} 3",
            auth="hmac(sha256)",
            auth_key=HMAC_KEY,
        ),
    ]


# -- detection, loading, the table -------------------------------------------


def test_formats_registry_order() -> None:
    assert [f.name for f in FORMATS] == ["keys.yaml", "ip xfrm state", "esp_sa", "tcpdump -E"]


def test_load_sas_detects_by_content_and_merges(tmp_path: Path) -> None:
    files = {"a.esp_sa": YAML_FULL, "b.yaml": STRONGSWAN, "c": XFRM_MIXED}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    table = load_sas([tmp_path / name for name in files])
    assert [(sa.spi, sa.origin.rsplit("/", 1)[1]) for sa in table] == [
        (0x1001, "a.esp_sa:entry 1"),
        (4098, "a.esp_sa:entry 2"),
        (0xC3A1B2D4, "b.yaml:line 1"),
        (0xC9E8F7A6, "b.yaml:line 2"),
        (0xCAFE0001, "b.yaml:line 3"),
        (0xC0FFEE01, "c:line 1"),
        (0xC0FFEE02, "c:line 16"),
    ]


def test_load_sas_reads_utf8_with_bom(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + YAML_FULL.encode())
    assert len(load_sas([str(path)])) == 2


def test_lookup_prefers_both_addresses_then_dst_then_src_then_none() -> None:
    a, b, x = "192.0.2.1", "192.0.2.2", "198.51.100.9"
    entries = [("both", a, b), ("dst", None, b), ("src", a, None), ("none", None, None)]
    text = "sas:\n" + "".join(
        f"- spi: 0x1001\n  aead: {GCM}\n  key: 0x{KEY}\n  mode: tunnel\n"
        + (f"  src: {s}\n" if s else "")
        + (f"  dst: {d}\n" if d else "")
        for _, s, d in entries
    )
    table = SaTable(tuple(parse_sas(text, "k")))
    p = {name: addr(name).packed for name in (a, b, x)}
    found = {
        "both": table.lookup(0x1001, p[a], p[b]),
        "dst": table.lookup(0x1001, p[x], p[b]),
        "src": table.lookup(0x1001, p[a], p[x]),
        "none": table.lookup(0x1001, p[x], p[x]),
    }
    assert {name: sa.origin if sa else None for name, sa in found.items()} == {
        "both": "k:entry 1",
        "dst": "k:entry 2",
        "src": "k:entry 3",
        "none": "k:entry 4",
    }
    assert table.lookup(0x1002, p[a], p[b]) is None


def test_no_repr_shows_a_key() -> None:
    sas = parse_sas(XFRM_MIXED, "m.txt") + parse_sas(ESP_SA, "e")
    raw = RawSa(spi=1, algorithm=GCM, key="0x" + KEY, auth_key="0x" + HMAC_KEY)
    assert_no_key(repr(sas), str(sas), repr(raw))


def test_docs_name_every_format_and_wireshark_algorithm() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    for name in (*ENCRYPTION_NAMES, *AUTHENTICATION_NAMES):
        assert name in docs


# -- errors ------------------------------------------------------------------


def yaml_entry(**fields: str) -> str:
    body = {"spi": "0x1001", "aead": GCM, "key": f"0x{KEY}", **fields}
    return "sas:\n  - " + "\n    ".join(f"{k}: {v}" for k, v in body.items() if v != "-") + "\n"


YAML_ERRORS = [
    (
        "sas:\n  - spi: 1\n   key: [\n",
        "k: YAML syntax error at line 3, column 4: "
        "expected <block end>, but found '<block mapping start>'",
    ),
    ("sas: 5\n", "k: `sas` must be a list of SA entries"),
    ("sas: []\nversion: 1\n", "k: unknown top-level field 'version'; only `sas` is known"),
    ("sas:\n  - 5\n", "k: entry 1: an entry must be a mapping of fields"),
    (yaml_entry(spi="-"), "k: entry 1: spi is missing"),
    (yaml_entry(spi="0x100000000"), "k: entry 1: spi (a 33-bit number) is not in 0..0xffffffff"),
    (yaml_entry(spi="0xffffffff1"), "k: entry 1: spi (a 36-bit number) is not in 0..0xffffffff"),
    (yaml_entry(spi="-5"), "k: entry 1: spi -5 is not in 0..0xffffffff"),
    (yaml_entry(spi="abc"), "k: entry 1: spi 'abc' is not a number"),
    (yaml_entry(spi="[1]"), "k: entry 1: spi must be a number"),
    (
        yaml_entry(aead="gcm(aes)"),
        "k: entry 1 (spi 0x00001001): unknown AEAD 'gcm(aes)'; "
        "known: rfc4106(gcm(aes)), rfc4309(ccm(aes)), rfc4543(gcm(aes)), "
        "rfc7539esp(chacha20,poly1305), rfc8750(gcm(aes)), rfc8750(chacha20,poly1305)",
    ),
    (yaml_entry(aead="-"), "k: entry 1 (spi 0x00001001): aead (or enc with auth) is missing"),
    (  # ip xfrm's own split: an AEAD is an "aead" line, a cipher an "enc" line
        yaml_entry(aead="-", enc="rfc4106(gcm(aes))"),
        "k: entry 1 (spi 0x00001001): rfc4106(gcm(aes)) is an AEAD, not a cipher: "
        "give it as aead (no auth)",
    ),
    (
        yaml_entry(aead="cbc(aes)"),
        "k: entry 1 (spi 0x00001001): cbc(aes) is a cipher, not an AEAD: give it as enc, with auth",
    ),
    (
        yaml_entry(enc="cbc(aes)"),
        "k: entry 1 (spi 0x00001001): an SA has aead or enc (with auth), not both",
    ),
    (
        yaml_entry(auth="hmac(sha256)", auth_key=f"0x{HMAC_KEY}"),
        "k: entry 1 (spi 0x00001001): an AEAD takes no separate integrity algorithm",
    ),
    (
        yaml_entry(aead="-", enc="cbc(aes)", key=f"0x{CBC_KEY}", auth="hmac(sha256)"),
        "k: entry 1 (spi 0x00001001): auth key is missing",
    ),
    (
        yaml_entry(aead="-", enc="cbc(aes)", key=f"0x{CBC_KEY}00"),
        "k: entry 1 (spi 0x00001001): key is 17 bytes; cbc(aes) takes 16, 24 or 32",
    ),
    (
        yaml_entry(aead="-", enc="cbc(aes)", key=f"0x{CBC_KEY}", auth="hmac(sha1)", auth_key="0x"),
        "k: entry 1 (spi 0x00001001): auth key is empty; hmac(sha1) takes 20 bytes",
    ),
    (
        yaml_entry(
            aead="-",
            enc="cbc(aes)",
            key=f"0x{CBC_KEY}",
            auth="hmac(sha1)",
            auth_key=f"0x{KEY}",
            icv="192",
        ),
        "k: entry 1 (spi 0x00001001): ICV is 192 bits; hmac(sha1) takes a multiple of 8 up to 160",
    ),
    (
        yaml_entry(aead="5"),
        "k: entry 1 (spi 0x00001001): aead must be an algorithm name such as rfc4106(gcm(aes))",
    ),
    (yaml_entry(key="-"), "k: entry 1 (spi 0x00001001): key is missing"),
    (
        yaml_entry(key=f"0x{KEY[:36]}"),
        "k: entry 1 (spi 0x00001001): key is 18 bytes; "
        "rfc4106(gcm(aes)) takes 20, 28 or 36 (AES key + 4-byte salt)",
    ),
    (
        yaml_entry(key=f"0x{KEY[:8]}zz{KEY[10:]}"),
        "k: entry 1 (spi 0x00001001): key is not hex: character 11 is not a hex digit",
    ),
    (
        yaml_entry(key=f"'0x{KEY}0'"),
        "k: entry 1 (spi 0x00001001): key is not hex: odd number of digits (41)",
    ),
    (yaml_entry(key=f"[0x{KEY}]"), "k: entry 1 (spi 0x00001001): key must be a hex string"),
    (
        yaml_entry(aead="rfc7539esp(chacha20,poly1305)"),
        "k: entry 1 (spi 0x00001001): "
        "key is 20 bytes; rfc7539esp(chacha20,poly1305) takes 36 (ChaCha20 key + 4-byte salt)",
    ),
    (
        yaml_entry(icv="100"),
        "k: entry 1 (spi 0x00001001): ICV is 100 bits; rfc4106(gcm(aes)) takes 64, 96 or 128",
    ),
    (yaml_entry(icv="true"), "k: entry 1 (spi 0x00001001): icv must be a number"),
    (
        yaml_entry(src="10.0.0.300"),
        "k: entry 1 (spi 0x00001001): src '10.0.0.300' is not an IP address",
    ),
    (
        yaml_entry(src="10.0.0.1", dst="fd00::1"),
        "k: entry 1 (spi 0x00001001): src is IPv4 but dst is IPv6",
    ),
    (
        yaml_entry(icv_bits="96"),
        "k: entry 1 (spi 0x00001001): unknown field 'icv_bits'; "
        "known: spi, src, dst, aead, enc, key, auth, auth_key, icv, esn, esn_hi, mode, encap, "
        "replay_window, replay_esn",
    ),
    (
        yaml_entry(spi="-", sp1="0x1001"),
        "k: entry 1: unknown field 'sp1'; "
        "known: spi, src, dst, aead, enc, key, auth, auth_key, icv, esn, esn_hi, mode, encap, "
        "replay_window, replay_esn",
    ),
    (
        yaml_entry() + "    mode: tunnel\n    mode: transport\n",
        "k: entry 1 (spi 0x00001001): field 'mode' is given twice",
    ),
    (yaml_entry(esn="1"), "k: entry 1 (spi 0x00001001): esn must be true or false"),
    (yaml_entry(esn_hi="1"), "k: entry 1 (spi 0x00001001): esn_hi is set but esn is false"),
    (
        yaml_entry(esn="true", esn_hi="0x100000000"),
        "k: entry 1 (spi 0x00001001): esn_hi (a 33-bit number) is not in 0..0xffffffff",
    ),
    (
        yaml_entry(mode="transprt"),
        "k: entry 1 (spi 0x00001001): mode 'transprt' is not one of transport, tunnel, beet, iptfs",
    ),
    (yaml_entry(encap="0"), "k: entry 1 (spi 0x00001001): encap port 0 is not in 1..65535"),
]


@pytest.mark.parametrize(("text", "message"), YAML_ERRORS)
def test_yaml_errors(text: str, message: str) -> None:
    assert failure(text) == message


def xfrm(*lines: str, head: str = "src 192.0.2.1 dst 192.0.2.2") -> str:
    body = lines or ("proto esp spi 0x00001001 reqid 1 mode transport", f"aead {GCM} 0x{KEY} 128")
    return head + "\n" + "".join(f"\t{line}\n" for line in body)


PROTO = "proto esp spi 0x00001001 reqid 1 mode transport"
AEAD = f"aead {GCM} 0x{KEY} 128"
KNOWN_CIPHERS = (
    "ecb(cipher_null), cbc(des), cbc(des3_ede), cbc(cast5), cbc(blowfish), cbc(aes), "
    "cbc(serpent), cbc(camellia), cbc(twofish), cbc(sm4), rfc3686(ctr(aes))"
)
KNOWN_INTEGRITY = (
    "digest_null, hmac(md5), hmac(sha1), hmac(sha256), hmac(sha384), hmac(sha512), "
    "hmac(rmd160), xcbc(aes), cmac(aes), hmac(sm3), any"
)

XFRM_ERRORS = [
    ("root# ip xfrm state\n" + xfrm(), "k: line 1: expected a `src ADDRESS dst ADDRESS` line"),
    ("\tproto esp\n" + xfrm(), "k: line 1: expected a `src ADDRESS dst ADDRESS` line"),
    (
        xfrm(head="src 192.0.2.1 dst 192.0.2.2 extra"),
        "k: line 1: expected a `src ADDRESS dst ADDRESS` line",
    ),
    (
        xfrm(
            "dir out priority 0",
            "tmpl src 0.0.0.0 dst 0.0.0.0",
            head="src 0.0.0.0/0 dst 10.0.0.0/8",
        ),
        "k: line 1: `ip xfrm policy` output, which holds no keys (give `ip xfrm state` output)",
    ),
    (xfrm(PROTO, "replay-window 0"), "k: line 1: no aead or enc line for this ESP SA"),
    (
        xfrm(PROTO, AEAD, f"enc cbc(aes) 0x{CBC_KEY}"),
        "k: line 4: an SA has an aead or an enc line, not both",
    ),
    (xfrm(PROTO, AEAD, AEAD), "k: line 4: a second aead line for this SA"),
    (xfrm(PROTO, f"aead {GCM} 0x{KEY}"), "k: line 3: cannot read this aead line"),
    (
        xfrm(PROTO, f"aead {GCM} 0x{KEY[:36]} 128"),
        "k: line 3 (spi 0x00001001): key is 18 bytes; "
        "rfc4106(gcm(aes)) takes 20, 28 or 36 (AES key + 4-byte salt)",
    ),
    (
        xfrm(PROTO, f"aead {GCM} 0x{KEY} 32"),
        "k: line 3: ICV is 32 bits; rfc4106(gcm(aes)) takes 64, 96 or 128",
    ),
    (
        xfrm(PROTO, f"aead gcm(aes) 0x{KEY} 128"),
        "k: line 3: unknown AEAD 'gcm(aes)'; "
        "known: rfc4106(gcm(aes)), rfc4309(ccm(aes)), rfc4543(gcm(aes)), "
        "rfc7539esp(chacha20,poly1305), rfc8750(gcm(aes)), rfc8750(chacha20,poly1305)",
    ),
    (
        xfrm(PROTO, AEAD, f"auth-trunc hmac(sha256) 0x{KEY} 128"),
        "k: line 4: an AEAD takes no separate integrity algorithm",
    ),
    (xfrm("proto esp reqid 1 mode transport", AEAD), "k: line 2: spi is missing"),
    (
        xfrm("proto esp spi 0x1001 reqid 1 mode ro", AEAD),
        "k: line 2: mode 'ro' is not one of transport, tunnel, beet, iptfs",
    ),
    (xfrm(head="src fd00::zz dst fd00::1"), "k: line 1: src 'fd00::zz' is not an IP address"),
    (xfrm(head="src 192.0.2.1 dst fd00::1"), "k: line 1: src is IPv4 but dst is IPv6"),
    (
        xfrm(PROTO, f"enc {GCM} 0x{KEY}"),
        "k: line 3: rfc4106(gcm(aes)) is an AEAD, not a cipher: give it as aead (no auth)",
    ),
    (
        xfrm(PROTO, f"enc cbc(foo) 0x{KEY}"),
        f"k: line 3: unknown encryption algorithm 'cbc(foo)'; known: {KNOWN_CIPHERS}",
    ),
    (
        xfrm(PROTO, f"enc cbc(aes) 0x{KEY[:20]}"),
        "k: line 3 (spi 0x00001001): key is 10 bytes; cbc(aes) takes 16, 24 or 32",
    ),
    (
        xfrm(PROTO, f"enc cbc(cast5) 0x{KEY}"),
        "k: line 3 (spi 0x00001001): key is 20 bytes; cbc(cast5) takes 5 to 16",
    ),
    (
        xfrm(PROTO, f"enc cbc(aes) 0x{CBC_KEY}", f"auth-trunc hmac(sha7) 0x{KEY} 96"),
        f"k: line 4: unknown integrity algorithm 'hmac(sha7)'; known: {KNOWN_INTEGRITY}",
    ),
    (
        xfrm(PROTO, f"enc cbc(aes) 0x{CBC_KEY}", f"auth-trunc hmac(sha1) 0x{KEY} 90"),
        "k: line 4: ICV is 90 bits; hmac(sha1) takes a multiple of 8 up to 160",
    ),
    (
        xfrm(PROTO, f"enc cbc(aes) 0x{CBC_KEY}", f"auth-trunc hmac(sha1) 0x{KEY}x 96"),
        "k: line 4 (spi 0x00001001): auth key is not hex: character 43 is not a hex digit",
    ),
    (xfrm(PROTO, AEAD, "encap type espinudp sport 4500"), "k: line 4: cannot read this encap line"),
    (
        xfrm(PROTO, AEAD, "encap type espinudp sport 4500 dport 0 addr 0.0.0.0"),
        "k: line 4: encap port 0 is not in 1..65535",
    ),
    (
        xfrm("proto ah spi 0x00001001 reqid 1 mode transport", f"auth-trunc hmac(sha1) 0x{KEY} 96"),
        "k: no ESP SA in this ip xfrm state file",
    ),
]


@pytest.mark.parametrize(("text", "message"), XFRM_ERRORS)
def test_xfrm_errors(text: str, message: str) -> None:
    assert failure(text) == message


def row(*fields: str) -> str:
    base = ["IPv4", "192.0.2.1", "192.0.2.2", "0x00001001", "AES-GCM with 16 octet ICV [RFC4106]"]
    values = [*base, f"0x{KEY}", "NULL", ""]
    for i, value in enumerate(fields):
        if value != "=":
            values[i] = value
    return ",".join(f'"{v}"' for v in values) + "\n"


def esn_row(sn: str, high: str) -> str:
    return row().rstrip("\n") + f',"{sn}","{high}"\n'


ESP_SA_ERRORS = [
    (row().replace(',"NULL"', ",NULL"), "k: line 1: not a list of quoted fields"),
    (row().rstrip("\n") + ",\n", "k: line 1: not a list of quoted fields"),
    (
        "# header\n" + row().rstrip("\n") + ',"x"\n',
        "k: line 2: has 9 fields; an esp_sa line has 8 or 10",
    ),
    (row("IPX"), "k: line 1: protocol 'IPX' is not IPv4, IPv6 or Any"),
    (
        row("=", "=", "=", "0x0000100*"),
        "k: line 1: SPI '0x0000100*' has a partial wildcard; give '*' or one SPI",
    ),
    (
        row("=", "=", "=", "0x1000000000"),
        "k: line 1: spi (a 37-bit number) is not in 0..0xffffffff",
    ),
    (
        row("=", "10.0.0.0/24"),
        "k: line 1: Src IP '10.0.0.0/24' is not one address or '*' (the only wildcard we take)",
    ),
    (
        row("=", "=", "192.168.*.*"),
        "k: line 1: Dest IP '192.168.*.*' is not one address or '*' (the only wildcard we take)",
    ),
    (row("IPv6"), "k: line 1: Src IP '192.0.2.1' is not IPv6 as Protocol says"),
    (
        row("=", "=", "=", "=", "AES-GCM with 20 octet ICV [RFC4106]"),
        "k: line 1: unknown Encryption (35 characters) (docs/keys.md lists the names)",
    ),
    (
        row("=", "=", "=", "=", "=", "=", "HMAC-SHA-1-97"),
        "k: line 1: unknown Authentication (13 characters) (docs/keys.md lists the names)",
    ),
    (
        row("=", "=", "=", "=", "=", "=", "HMAC-SHA-1-96 [RFC2404]"),
        "k: line 1: Authentication 'HMAC-SHA-1-96 [RFC2404]' cannot go with "
        "'AES-GCM with 16 octet ICV [RFC4106]', an AEAD: "
        "use NULL or 'ANY n bit authentication [no checking]'",
    ),
    (
        row("=", "=", "=", "=", "AES-GCM [RFC4106]"),
        "k: line 1: 'AES-GCM [RFC4106]' takes its ICV length from Authentication "
        "'ANY n bit authentication [no checking]', which is NULL here",
    ),
    (
        row("=", "=", "=", "=", "=", "=", "ANY 96 bit authentication [no checking]"),
        "k: line 1: Authentication says a 96-bit ICV but "
        "'AES-GCM with 16 octet ICV [RFC4106]' has 128 bits",
    ),
    (
        row(
            "=", "=", "=", "=", "AES-GCM [RFC4106]", "=", "ANY 192 bit authentication [no checking]"
        ),
        "k: line 1: ICV is 192 bits; rfc4106(gcm(aes)) takes 64, 96 or 128",
    ),
    (
        row("=", "=", "=", "=", "=", f"0x{KEY[:36]}"),
        "k: line 1 (spi 0x00001001): key is 18 bytes; "
        "rfc4106(gcm(aes)) takes 20, 28 or 36 (AES key + 4-byte salt)",
    ),
    (
        row("=", "=", "=", "=", "=", f"0x{KEY[:6]}g{KEY[7:]}"),
        "k: line 1 (spi 0x00001001): key is not hex: character 9 is not a hex digit",
    ),
    (
        row(
            "=",
            "=",
            "=",
            "=",
            "AES-CBC [RFC3602]",
            f"0x{KEY[:32]}",
            "HMAC-MD5-96 [RFC2403]",
            "0x12z4",
        ),
        "k: line 1 (spi 0x00001001): auth key is not hex: character 5 is not a hex digit",
    ),
    (esn_row("48-bit", "0"), "k: line 1: SN '48-bit' is not 32-bit or 64-bit"),
    (esn_row("64-bit", "0x1g"), "k: line 1: ESN High Bits '0x1g' is not a 32-bit hex number"),
    (esn_row("32-bit", "0x1"), "k: line 1: esn_hi is set but esn is false"),
    ("# only a header\n", "k: no ESP SA in this esp_sa file"),
]


@pytest.mark.parametrize(("text", "message"), ESP_SA_ERRORS)
def test_esp_sa_errors(text: str, message: str) -> None:
    assert failure(text) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "k: file is empty"),
        (" \n\t\n", "k: file is empty"),
        (
            "hello\n",
            "k: not a keys.yaml, `ip xfrm state` output, Wireshark esp_sa or tcpdump -E file",
        ),
        (
            '{"sa": []}',
            "k: not a keys.yaml, `ip xfrm state` output, Wireshark esp_sa or tcpdump -E file",
        ),
    ],
)
def test_unknown_or_empty_text(text: str, message: str) -> None:
    assert failure(text) == message


def test_unreadable_files(tmp_path: Path) -> None:
    missing, folder, binary = tmp_path / "missing", tmp_path / "dir", tmp_path / "bin"
    folder.mkdir()
    binary.write_bytes(b"sas:\n\xff\xfe")
    messages = []
    for path in (missing, folder, binary):
        with pytest.raises(KeyFileError) as info:
            load_sas([path])
        messages.append(str(info.value))
    assert messages == [
        f"{missing}: cannot open: No such file or directory",
        f"{folder}: cannot open: Is a directory",
        f"{binary}: not UTF-8 text (byte 6)",
    ]


def test_duplicate_sa_names_both_files_and_entries(tmp_path: Path) -> None:
    first, second = tmp_path / "keys.yaml", tmp_path / "state.txt"
    first.write_text(
        yaml_entry(src="192.0.2.1", dst="192.0.2.2", key=f"0x{KEY2}"), encoding="utf-8"
    )
    second.write_text(xfrm(), encoding="utf-8")
    with pytest.raises(KeyFileError) as info:
        load_sas([first, second])
    assert str(info.value) == (
        f"{second}: line 1: duplicate SA: SPI 0x00001001 src 192.0.2.1 dst 192.0.2.2 "
        f"is also given by {first}:entry 1"
    )
    assert_no_key(str(info.value))


def test_same_sa_twice_with_the_same_key_is_kept_once(tmp_path: Path) -> None:
    first, second = tmp_path / "keys.yaml", tmp_path / "state.txt"
    first.write_text(yaml_entry(src="192.0.2.1", dst="192.0.2.2"), encoding="utf-8")
    second.write_text(xfrm(), encoding="utf-8")
    table = load_sas([first, second])
    assert [sa.origin for sa in table] == [f"{first}:entry 1"]


def test_duplicate_sa_within_one_file() -> None:
    text = yaml_entry() + yaml_entry(key=f"0x{KEY2}")[len("sas:\n") :]
    with pytest.raises(KeyFileError) as info:
        SaTable(tuple(parse_sas(text, "k.yaml")))
    assert str(info.value) == (
        "k.yaml: entry 2: duplicate SA: SPI 0x00001001 src any dst any "
        "is also given by k.yaml:entry 1"
    )


# -- robustness --------------------------------------------------------------

FRAGMENTS = [
    "sas:",
    "  - spi: 0x1001",
    "    aead: rfc4106(gcm(aes))",
    f"    key: 0x{KEY}",
    "    icv: 64",
    "src 192.0.2.1 dst 192.0.2.2",
    f"\t{PROTO}",
    f"\t{AEAD}",
    "\treplay-window 0 flag esn",
    "\tenc cbc(aes) 0x00",
    "\tencap type espinudp sport 1 dport 2",
    row().rstrip("\n"),
    esn_row("64-bit", "1").rstrip("\n"),
    '"IPv4","*"',
    "# c",
    "",
    "\t",
    ":",
    "- [",
    '"',
]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=120), st.lists(st.sampled_from(FRAGMENTS), max_size=12)))
def test_parse_sas_raises_only_key_file_error(data: str | list[str]) -> None:
    text = data if isinstance(data, str) else "\n".join(data)
    try:
        parse_sas(text, "fuzz")
    except KeyFileError as exc:
        assert_no_key(str(exc))


# -- bad inputs that once escaped as Python errors (minimized) -----------------

LONG = "9" * 5000  # more digits than int() converts (4,300)
BAD_INPUTS = [
    (yaml_entry(spi=LONG), "k: entry 1: spi is a number of 5000 digits, too long"),
    (yaml_entry(icv=LONG), "k: entry 1: icv is a number of 5000 digits, too long"),
    (yaml_entry(mode=f"[1, {LONG}]"), "k: line 5: a number of 5000 digits, too long"),
    ("sas: []\nx: [" + LONG + "]\n", "k: line 2: a number of 5000 digits, too long"),
    (
        xfrm(PROTO, f"aead {GCM} 0x{KEY} {LONG}"),
        "k: line 3: icv is a number of 5000 digits, too long",
    ),
    (
        xfrm(PROTO, AEAD, f"encap type espinudp sport 1 dport {LONG}"),
        "k: line 4: encap is a number of 5000 digits, too long",
    ),
    (row("=", "=", "=", LONG), "k: line 1: spi is a number of 5000 digits, too long"),
    (
        "sas:\n  - " + "[" * 2000 + "]" * 2000 + "\n",
        "k: line 2: nested more than 20 deep (a keys.yaml needs 3)",
    ),
    (
        "sas:\n" + "".join(" " * (2 * i) + "-\n" for i in range(1, 2000)),
        "k: line 21: nested more than 20 deep (a keys.yaml needs 3)",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_INPUTS)
def test_bad_inputs_are_one_key_file_error(text: str, message: str) -> None:
    assert failure(text) == message


SHOWN = [  # validate.shown: quoted only when it cannot be a key (docs/keys.md)
    ("10.0.0.0/24", "'10.0.0.0/24'"),  # 11 characters
    ("transport12x", "'transport12x'"),  # 12
    ("transport123x", "(13 characters)"),
    ("0xdeadbeef", "(10 characters)"),  # 8 hex digits in a row
    ("x-deadbee", "'x-deadbee'"),  # 7
    ("a\x00b", "(3 characters)"),  # not printable: raw key bytes
    (0xFFFFFFFF, "4294967295"),
    (1 << 32, "(a 33-bit number)"),
    (-(1 << 32), "(a 33-bit number)"),
    ({"key": KEY}, "(a YAML mapping)"),
    ([KEY], "(a YAML list)"),
]


@pytest.mark.parametrize(("value", "text"), SHOWN)
def test_values_are_quoted_only_when_they_cannot_be_keys(value: object, text: str) -> None:
    assert shown(value) == text


def test_yaml_messages_never_quote_tags_or_aliases() -> None:
    assert failure(yaml_entry(mode=f"!k{KEY} x")) == (
        "k: YAML syntax error at line 5, column 11: "
        "could not determine a constructor for the tag (42 characters)"
    )
    assert failure(yaml_entry(mode=f"*k{KEY}")) == (
        "k: YAML syntax error at line 5, column 11: found undefined alias (41 characters)"
    )


@pytest.mark.parametrize(
    "text",
    [
        'base: &b\n  key: *b\nsas:\n  - <<: *b\n    spi: "0x1001"\n',  # found by fuzz/
        "sas: &s\n  - *s\n",
        "sas:\n  - &e\n    spi: 0x1001\n    key: *e\n    aead: rfc4106(gcm(aes))\n",
    ],
    ids=["anchor-holds-its-alias", "list-holds-itself", "entry-holds-itself"],
)
def test_a_cyclic_yaml_alias_is_one_line_not_a_loop(tmp_path: Path, text: str) -> None:
    """An anchor that holds its own alias makes the node graph cyclic: walk it once."""
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    with pytest.raises(KeyFileError) as err:
        load_sas([path])
    assert str(err.value).startswith(f"{path}: ")
