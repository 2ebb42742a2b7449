"""crypto: RFC 4106 open/seal against the published ESP test cases.

Vectors: draft-mcgrew-gcm-test-01 section 4 (GCM in ESP), cases 1, 2, 3, 5:
key || salt, SPI, sequence number (ESN in case 1), IV, plaintext, ciphertext || ICV.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from espforensics.analysis import analyze
from espforensics.crypto import AeadContext, build_aad
from espforensics.keys.sa import RFC4106, RFC4309, RFC7539ESP, Secret, SecurityAssociation

# (key hex, salt hex, spi, seq64, esn, iv hex, plaintext hex, ciphertext||tag hex)
VECTORS = [
    (
        "4c80cdefbb5d10da906ac73c3613a634",
        "2e443b68",
        0x4321,
        0x8765432100000000,
        True,
        "4956ed7e3b244cfe",
        "45000048699a000080114db7c0a80102c0a801010a9bf15638d301000001000000000000045f736970"
        "045f756470037369700963796265726369747902646b000021000101020201",
        "fecf537e729d5b07dc30df528dd22b768d1b98736696a6fd348509fa13ceac34cfa2436f14a3f3cf6592"
        "5bf1f4a13c5d15b21e1884f5ff6247aeabb786b93bce61bc17d768fd9732459018148f6cbe722fd04796"
        "562dfdb4",
    ),
    (
        "feffe9928665731c6d6a8f9467308308feffe9928665731c",
        "cafebabe",
        0xA5F8,
        10,
        False,
        "facedbaddecaf888",
        "45000028a4ad4000400678800a01038f0a010612802306b8cb712602dd6bb03e501016d075680001",
        "a5b1f8066029aea40e598b8122de02420938b3ab33f828e687b8858b5bfbdbd0315b27452144cc77"
        "95457b9652037f5318027b5b4cd7a636",
    ),
    (
        "abbccddef00112233445566778899aababbccddef00112233445566778899aab",
        "11223344",
        0x4A2CBFE3,
        2,
        False,
        "0102030405060708",
        "4500003069a6400080062690c0a801029389155e0a9e008b2dc57ee0000000007002400020bf0000020405"
        "b40101040201020201",
        "ff425c9b724599df7a3bcd510194e00d6a78107f1b0b1cbf06efae9d65a5d763748a637985771d347f05"
        "45659f14e99def842d8eb335f4eecfdbf831824b4c4915956c96",
    ),
    (
        "7d773d00c144c525ac619d18c84a3f47",
        "d9664267",
        0x335467AE,
        0xFFFFFFFF,
        False,
        "43457e9182443bc6",
        "01020201",
        "437f866bcb3f699fe9b0822bac961c4504bef270",
    ),
]


def _ctx(key: str, salt: str, spi: int, esn: bool, icv_bits: int = 128) -> AeadContext:
    sa = SecurityAssociation(
        spi=spi,
        algorithm=RFC4106,
        key=Secret(bytes.fromhex(key + salt)),
        icv_bits=icv_bits,
        esn=esn,
    )
    return AeadContext(sa)


@pytest.mark.parametrize(("key", "salt", "spi", "seq64", "esn", "iv", "plain", "sealed"), VECTORS)
def test_open_and_seal_match_published_vectors(
    key: str, salt: str, spi: int, seq64: int, esn: bool, iv: str, plain: str, sealed: str
) -> None:
    ctx = _ctx(key, salt, spi, esn)
    assert ctx.open(seq64, bytes.fromhex(iv), bytes.fromhex(sealed)) == bytes.fromhex(plain)
    assert ctx.seal(seq64, bytes.fromhex(iv), bytes.fromhex(plain)) == bytes.fromhex(sealed)


@pytest.mark.parametrize("icv_bits", [64, 96])
def test_truncated_icv_is_a_prefix_of_the_full_tag(icv_bits: int) -> None:
    key, salt, spi, seq64, esn, iv, plain, sealed = VECTORS[1]
    full = bytes.fromhex(sealed)
    n = len(bytes.fromhex(plain))
    short = full[: n + icv_bits // 8]  # RFC 4106 s6: the ICV is the tag's leading bytes
    ctx = _ctx(key, salt, spi, esn, icv_bits)
    assert ctx.open(seq64, bytes.fromhex(iv), short) == bytes.fromhex(plain)
    assert ctx.seal(seq64, bytes.fromhex(iv), bytes.fromhex(plain)) == short


def test_wrong_aad_or_flipped_bit_fails() -> None:
    key, salt, spi, seq64, esn, iv, _plain, sealed = VECTORS[2]
    ctx = _ctx(key, salt, spi, esn)
    data = bytearray(bytes.fromhex(sealed))
    assert ctx.open(seq64 + 1, bytes.fromhex(iv), bytes(data)) is None
    data[-1] ^= 1
    assert ctx.open(seq64, bytes.fromhex(iv), bytes(data)) is None
    assert ctx.open(seq64, bytes.fromhex(iv), b"short") is None


def test_aad_layouts() -> None:
    assert build_aad(0x1001, 0x0000000200000005, False) == bytes.fromhex("0000100100000005")
    assert build_aad(0x1001, 0x0000000200000005, True) == bytes.fromhex("000010010000000200000005")


def test_secret_never_prints_key() -> None:
    sa = SecurityAssociation(spi=1, algorithm=RFC4106, key=Secret(bytes.fromhex("ab" * 20)))
    assert "ab" * 4 not in repr(sa) and "<secret 20 bytes>" in repr(sa)


# RFC 8439 s2.8.2 (the AEAD_CHACHA20_POLY1305 example) read as an ESP packet of
# rfc7539esp (RFC 7634 s2): its 12-byte nonce is salt 07000000 || IV 4041424344454647
# and its 12-byte AAD is SPI 50515253 || seq_hi c0c1c2c3 || seq_lo c4c5c6c7 (ESN).
CHACHA_KEY = bytes(range(0x80, 0xA0))
CHACHA_PT = (
    b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for "
    b"the future, sunscreen would be it."
)
CHACHA_CT_HEAD = "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d6"
CHACHA_TAG = "1ae10b594f09e26a7e902ecbd0600691"


def test_chacha20_poly1305_esp_matches_rfc8439_vector() -> None:
    sa = SecurityAssociation(
        spi=0x50515253,
        algorithm=RFC7539ESP,
        key=Secret(CHACHA_KEY + bytes.fromhex("07000000")),
        esn=True,
    )
    ctx, iv, seq64 = AeadContext(sa), bytes.fromhex("4041424344454647"), 0xC0C1C2C3C4C5C6C7
    sealed = ctx.seal(seq64, iv, CHACHA_PT)
    assert (sealed[:32].hex(), sealed[-16:].hex(), len(sealed)) == (
        CHACHA_CT_HEAD,
        CHACHA_TAG,
        len(CHACHA_PT) + 16,
    )
    assert ctx.open(seq64, iv, sealed) == CHACHA_PT
    assert ctx.open(seq64 + 1, iv, sealed) is None  # another seq: another AAD


@pytest.mark.parametrize("icv_bits", [64, 96, 128])
@pytest.mark.parametrize("key_bytes", [16, 24, 32])
def test_ccm_opens_what_it_seals_with_an_11_byte_nonce(icv_bits: int, key_bytes: int) -> None:
    """RFC 4309 s4: nonce = 3-byte salt || 8-byte IV; s3.1: ICV 8, 12 or 16 bytes."""
    material = bytes(range(key_bytes)) + b"\xaa\xbb\xcc"
    sa = SecurityAssociation(spi=0x1001, algorithm=RFC4309, key=Secret(material), icv_bits=icv_bits)
    ctx, iv = AeadContext(sa), bytes(8)
    sealed = ctx.seal(7, iv, b"\x01\x02\x02\x06")
    assert len(sealed) == 4 + icv_bits // 8
    assert ctx.open(7, iv, sealed) == b"\x01\x02\x02\x06"
    flipped = bytes([sealed[0] ^ 1]) + sealed[1:]
    assert ctx.open(7, iv, flipped) is None
    other_salt = AeadContext(
        SecurityAssociation(
            spi=0x1001, algorithm=RFC4309, key=Secret(material[:-1] + b"\x00"), icv_bits=icv_bits
        )
    )
    assert other_salt.open(7, iv, sealed) is None  # the salt is part of the nonce


SCAPY = Path(__file__).parents[1] / "data" / "scapy"


def test_packets_sealed_by_scapy_open_with_every_aead() -> None:
    """An independent implementation's ESP (tests/data/scapy/make_aeads.py): GMAC, CCM,
    ChaCha20-Poly1305 and GCM, with and without ESN, 5 packets each, transport mode."""
    result = analyze(SCAPY / "aeads.pcap", [SCAPY / "aeads.keys.yaml"])
    packets = result.packets
    assert list(packets["verdict"]) == ["ok"] * 35
    per_spi = packets.groupby("algorithm")["spi"].unique().map(sorted).to_dict()
    assert per_spi == {
        "rfc4106(gcm(aes))": [0x9007],
        "rfc4309(ccm(aes))": [0x9003, 0x9004],
        "rfc4543(gcm(aes))": [0x9001, 0x9002],
        "rfc7539esp(chacha20,poly1305)": [0x9005, 0x9006],
    }
    esn = packets["spi"].isin([0x9002, 0x9004, 0x9006, 0x9007])
    seqs = [(1 << 32) * hi + s for hi in (0, 1) for s in range(1, 6)]
    assert sorted({int(v) for v in packets["seq64"]}) == seqs
    assert all(int(v) >> 32 == 1 for v in packets[esn]["seq64"])
    # The UDP datagram each packet carried: ports 1001..1005 -> 2000, 20 + 7 * seq bytes.
    assert list(packets["inner_sport"]) == list(range(1001, 1006)) * 7
    assert list(packets["payload_len"]) == [8 + 20 + 7 * s for s in range(1, 6)] * 7
    assert set(packets["inner_dport"]) == {2000} and set(packets["next_header"]) == {17}
    # GMAC's payload is in clear by design (RFC 4543): not a leak.
    assert result.summary.findings["cleartext_leak"] == 0
