"""analyzer/header.py and analyzer/crypto.py: an ESP packet's clear columns, then its verdict."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import IPv4Address

from espforensics.analyzer.crypto import conclude, open_packet
from espforensics.analyzer.flows import FlowTable
from espforensics.analyzer.header import Sealed, read_header
from espforensics.decode.esp import EspLocation, locate_esp, parse_esp_header
from espforensics.decode.ip import PROTO_ESP, PROTO_UDP, parse_ip
from espforensics.keys import SaTable
from espforensics.keys.sa import Secret, SecurityAssociation
from espforensics.model.enums import Proto, Verdict
from espforensics.model.records import PacketRecord
from espforensics.synth.esp import EspSealer
from espforensics.synth.packets import ipv4_packet, udp_bytes

SRC, DST = IPv4Address("192.0.2.1"), IPv4Address("192.0.2.2")
SPI = 0x1001
CONSTANT = bytes.fromhex("5a17c3019e42882d")  # the seqiv constant: IV = seq64 xor it
GCM = SecurityAssociation(
    spi=SPI,
    algorithm="rfc4106(gcm(aes))",
    key=Secret(bytes(range(20))),
    icv_bits=128,
    origin="test",
)
INNER = ipv4_packet(SRC, DST, PROTO_UDP, udp_bytes(SRC, DST, 4000, 53, b"hello"))


def _sealed(
    sa: SecurityAssociation, seq64: int = 7, keys: SaTable | None = None, sealer: bool = False
) -> Sealed:
    """A tunnel-mode ESP packet with seq ``seq64`` sealed by ``GCM`` (``sealer``: by ``sa``),
    read under ``sa`` (or ``keys``)."""
    esp = EspSealer(sa if sealer else GCM, CONSTANT).seal(INNER, 4, seq64)
    data = ipv4_packet(SRC, DST, PROTO_ESP, esp)
    table = SaTable() if keys is None else keys
    if keys is None:
        table.add(sa)
    ip = parse_ip(data)
    loc = locate_esp(ip, data, frozenset({4500}))
    assert isinstance(loc, EspLocation) and (loc.offset, loc.proto) == (20, Proto.ESP)
    spi, seq = parse_esp_header(data, 20)
    flow = FlowTable(table).flow_for(spi, ip.src, ip.dst)
    rec = PacketRecord(1, 0, len(data), len(data))
    rec.esp_offset = rec.expected_offset = 20
    return read_header(rec, ip, data, loc, flow, seq)


def test_read_header_fills_the_clear_columns() -> None:
    sealed = _sealed(GCM, seq64=7)
    rec = sealed.pkt.rec
    iv = (7 ^ int.from_bytes(CONSTANT)).to_bytes(8)
    assert (rec.spi, rec.seq, rec.seq64, rec.esp_len) == (SPI, 7, 7, len(sealed.pkt.data) - 20)
    assert (rec.iv, sealed.iv, sealed.seq64, sealed.sealed_at) == (iv.hex(), iv, 7, 20 + 8 + 8)
    assert sealed.pkt.iv == int.from_bytes(iv)


def test_a_verified_packet_is_opened_then_concluded_ok() -> None:
    sealed = _sealed(GCM, seq64=7)
    pkt, rec = sealed.pkt, sealed.pkt.rec
    opened = open_packet(pkt, sealed.seq64, sealed.iv, sealed.sealed_at)
    assert opened is not None and opened.verified == 7
    assert opened.plain[: len(INNER)] == INNER
    assert pkt.state.proven and rec.verdict is Verdict.NOT_ESP  # conclude sets the verdict
    conclude(pkt, 7, opened)
    assert (rec.verdict, rec.detail, rec.next_header, rec.payload_len) == (
        Verdict.OK,
        "",
        4,
        len(INNER),
    )
    assert (rec.inner_proto, rec.inner_src, rec.inner_sport, rec.inner_dport) == (
        "udp",
        "192.0.2.1",
        4000,
        53,
    )
    assert pkt.payload == INNER and pkt.state.tracker.top == 7


def test_a_wrong_key_fails_and_places_nothing_proven() -> None:
    wrong = replace(GCM, key=Secret(bytes(20)))
    sealed = _sealed(wrong, seq64=7)
    pkt = sealed.pkt
    assert open_packet(pkt, 7, sealed.iv, sealed.sealed_at) is None
    assert (pkt.rec.verdict, pkt.rec.detail, pkt.rec.algorithm) == (
        Verdict.AUTH_FAIL,
        "ICV does not verify with the ESP header at offset 20",
        "rfc4106(gcm(aes))",
    )
    assert not pkt.state.proven and pkt.state.tracker.top == 7  # as good as no key


def test_packets_that_cannot_be_opened_say_why() -> None:
    unknown = _sealed(GCM, keys=SaTable()).pkt
    assert open_packet(unknown, 7, b"", 36) is None
    assert (unknown.rec.verdict, unknown.rec.detail) == (
        Verdict.UNKNOWN_SA,
        "no key for SPI 0x00001001",
    )
    odd = _sealed(replace(GCM, algorithm="rfc4494(foo)")).pkt
    assert open_packet(odd, 7, b"", 36) is None
    assert (odd.rec.verdict, odd.rec.detail) == (
        Verdict.UNSUPPORTED,
        "not checked: rfc4494(foo) is not decrypted by this version",
    )
    short_key = _sealed(replace(GCM, key=Secret(bytes(19)))).pkt
    assert open_packet(short_key, 7, b"", 36) is None
    assert (short_key.rec.verdict, short_key.rec.detail) == (
        Verdict.AUTH_FAIL,
        "not verified: the key of SPI 0x00001001 is 19 bytes",
    )


def test_a_packet_cut_by_the_snap_length_is_truncated_one_too_short_is_short() -> None:
    sealed = _sealed(GCM)
    cut = replace(sealed.pkt, data=sealed.pkt.data[:50])
    assert open_packet(cut, 7, sealed.iv, sealed.sealed_at) is None
    assert (cut.rec.verdict, cut.rec.detail) == (
        Verdict.TRUNCATED,
        f"captured 30 of {cut.rec.esp_len} ESP bytes",
    )
    short = replace(sealed.pkt, rec=replace(sealed.pkt.rec, esp_len=33))
    assert open_packet(short, 7, sealed.iv, sealed.sealed_at) is None
    assert (short.rec.verdict, short.rec.detail) == (
        Verdict.SHORT,
        "ESP packet of 33 bytes: shorter than the 34 that the ESP header, IV, pad length, "
        "next header and ICV take (RFC 4303 s2)",
    )


def test_a_packet_verified_with_another_high_half_than_its_place_is_esn_mismatch() -> None:
    esn = replace(GCM, esn=True)
    sealed = _sealed(esn, seq64=(1 << 32) | 7, sealer=True)  # sealed with high half 1
    pkt, rec = sealed.pkt, sealed.pkt.rec
    assert sealed.seq64 == 7  # its place: the starting high half, 0
    opened = open_packet(pkt, 7, sealed.iv, sealed.sealed_at)
    assert opened is not None and opened.verified == (1 << 32) | 7  # RFC 4303 A2.3
    assert rec.seq_hi_verified == 1
    conclude(pkt, 7, opened)
    assert (rec.verdict, rec.detail) == (
        Verdict.ESN_MISMATCH,
        "ICV verifies only with ESN high half 0x1; its place in the sequence implies 0x0",
    )
    assert pkt.payload == INNER and pkt.state.tracker.top == -1  # the ESN state is not moved
