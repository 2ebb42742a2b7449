"""The keyless lane's test of clear bytes holds every packet the per-packet tests find clear.

A keyless ESP packet goes to the steady lane only when ``may_be_clear``
(decode/clear.py, the bulk side) says its bytes after the ESP header cannot
be a clear packet. So it must be a superset of the per-packet tests the leak
check and ``PacketContext.clear_from_header`` run on a keyless packet:
``clear_ip_header`` at the header's end or after an 8-byte IV, and
``clear_transport`` and ``clear_icmp`` there. Hypothesis builds datagrams
whose bytes after the ESP header are a clear inner packet with its trailer
and an ICV of each length an unknown SA may use (the generated plaintexts
of tests/checks/test_bulk_rules.py: IPv4, IPv6, TCP, UDP, ICMP, sometimes damaged;
ICMP echoes and errors as NULL encryption carries a ping),
after an IV or not, or random bytes; every row a per-packet test finds clear
must be a row the bulk test refuses. Likewise ``may_start_ip`` for
``ip_start_fits`` after the ESP header and an 8-byte IV, where the
placement check's keyless search looks for a clear IP header.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from espforensics.decode.clear import (
    KEYLESS_ICV_LENS,
    ClearAt,
    address_sums,
    clear_icmp,
    clear_ip_header,
    clear_rows,
    clear_transport,
    internet_checksum,
    ip_start_fits,
    may_be_clear,
    may_start_ip,
    trailer_follows,
    udp_checksum,
)
from espforensics.model.arrays import I64, U8
from tests.checks.test_bulk_rules import SETTINGS, plaintext

SRC, DST = b"\xc0\x00\x02\x01", b"\xc6\x33\x64\x02"  # the addresses plaintext() sums over
OUTER = bytes.fromhex("450000000000000040320000")  # IPv4 to ESP, up to its addresses
BODY = 20 + 8  # the outer IPv4 header and the ESP header


@st.composite
def echo(draw: st.DrawFn) -> bytes:
    """A clear ICMP echo or error (RFC 792), its checksum right, with its trailer: how
    NULL encryption carries a ping."""
    kind = draw(st.sampled_from((0, 3, 8, 11)))
    message = bytearray(bytes([kind, 0, 0, 0]) + draw(st.binary(min_size=4, max_size=60)))
    message[2:4] = internet_checksum(bytes(message)).to_bytes(2)
    pad = -(len(message) + 2) % 4
    return bytes(message) + bytes(range(1, pad + 1)) + bytes([pad, 1])


@st.composite
def datagram(draw: st.DrawFn) -> bytes:
    text = draw(plaintext() | echo())
    iv = draw(st.sampled_from((b"", bytes(range(8)))))
    icv = draw(
        st.sampled_from(KEYLESS_ICV_LENS).flatmap(lambda n: st.binary(min_size=n, max_size=n))
        | st.binary(max_size=40)
    )
    esp = b"\x00\x00\x10\x01" + b"\x00\x00\x00\x07" + iv + text + icv
    return OUTER + SRC + DST + esp


def _clear(gram: bytes) -> bool:
    """Do the per-packet tests a keyless packet meets find its bytes clear?"""
    n = len(gram)
    for start in (BODY, BODY + 8):
        if clear_ip_header(gram, start, n):
            return True
        if clear_transport(gram, start, SRC, DST, KEYLESS_ICV_LENS)[1]:
            return True
    return bool(clear_icmp(gram, BODY, SRC, DST, KEYLESS_ICV_LENS))


@pytest.mark.slow
@SETTINGS
@given(st.lists(datagram(), min_size=1, max_size=12))
def test_may_be_clear_holds_every_packet_the_per_packet_tests_find_clear(
    grams: list[bytes],
) -> None:
    starts = np.cumsum([0] + [len(g) + 3 for g in grams])[:-1]  # 3 junk bytes between rows
    joined = b"\xff\xff\xff".join(grams) + bytes(16)
    view = np.frombuffer(joined, np.uint8)
    end = starts + np.array([len(g) for g in grams])
    bulk = may_be_clear(view, starts + BODY, end)
    fits = may_start_ip(view, starts + BODY + 8, end)
    for row, gram in enumerate(grams):
        clear = _clear(gram)
        if clear:
            assert bulk[row], gram.hex()
        if ip_start_fits(gram, BODY + 8, len(gram), len(gram)):  # placement's keyless search
            assert fits[row], gram.hex()


def test_random_ciphertext_is_mostly_not_refused() -> None:
    """The bulk test is cheap to pass: of 2,000 packets of random bytes after the header,
    at most 1% are refused (the per-packet tests find about 1 in 5,000 clear)."""
    rng = np.random.default_rng(7)
    grams = [OUTER + SRC + DST + rng.bytes(int(rng.integers(60, 1400))) for _ in range(2000)]
    starts = np.cumsum([0] + [len(g) for g in grams])[:-1]
    view = np.frombuffer(b"".join(grams) + bytes(16), np.uint8)
    end = starts + np.array([len(g) for g in grams])
    refused = int(may_be_clear(view, starts + BODY, end).sum())
    assert refused <= 20, refused


def _joined(grams: list[bytes]) -> tuple[U8, I64, I64]:
    """The datagrams joined with junk between them (odd offsets too): view, starts, ends."""
    starts = np.cumsum([0] + [len(g) + 3 for g in grams])[:-1].astype(np.int64)
    view = np.frombuffer(b"\xff\xff\xff".join(grams) + bytes(16), np.uint8)
    return view, starts, starts + np.array([len(g) for g in grams], np.int64)


@st.composite
def _random_after_header(draw: st.DrawFn) -> bytes:
    """A datagram whose bytes after the ESP header are random, or an IPv4 header with a
    sound checksum (its IHL 5 to 15) followed by random bytes: headers without trailers."""
    rest = bytearray(draw(st.binary(min_size=24, max_size=200)))
    if draw(st.booleans()):
        ihl = draw(st.integers(5, 15))
        rest[0] = 0x40 | ihl
        rest[2:4] = draw(st.integers(min(ihl * 4, len(rest)), len(rest))).to_bytes(2)
        rest[10:12] = bytes(2)
        if len(rest) >= ihl * 4:
            rest[10:12] = internet_checksum(bytes(rest[: ihl * 4])).to_bytes(2)
    return OUTER + SRC + DST + b"\x00\x00\x10\x01\x00\x00\x00\x07" + bytes(rest)


def _places(view: U8, body: I64, end: I64, ip_at: I64) -> dict[int, ClearAt]:
    """``clear_rows`` by the shift from ``body`` of each place it reads."""
    found = clear_rows(view, body, end, ip_at)
    return {8: found.after_iv, 0: found.at_body}


@SETTINGS
@given(st.lists(datagram() | _random_after_header(), min_size=1, max_size=12))
def test_the_bulk_tests_are_the_per_packet_tests(grams: list[bytes]) -> None:
    """After the ESP header and after an 8-byte IV, the bulk ``clear_rows`` finds exactly
    the TCP or UDP header the per-packet ``clear_transport`` finds (the checksum over the
    outer IPv4 addresses, the trailer, the ICV lengths in their order), the header
    ``clear_ip_header`` finds, what ``trailer_follows`` says after it, and what
    ``clear_icmp`` says."""
    view, starts, end = _joined(grams)
    for shift, got in _places(view, starts + BODY, end, starts).items():
        for row, gram in enumerate(grams):
            name, n = clear_transport(gram, BODY + shift, SRC, DST, KEYLESS_ICV_LENS)
            want = {"TCP": 6, "UDP": 17, "": 0}[name]
            assert (int(got.proto[row]), int(got.size[row])) == (want, n), (shift, gram.hex())
            icmp = clear_icmp(gram, BODY + shift, SRC, DST, KEYLESS_ICV_LENS)
            assert int(got.icmp[row]) == icmp, (shift, gram.hex())
            ip = clear_ip_header(gram, BODY + shift, len(gram))
            assert int(got.ip[row]) == ip, (shift, gram.hex())
            follows = bool(ip) and trailer_follows(gram, BODY + shift, KEYLESS_ICV_LENS)
            assert bool(got.packet[row]) == follows, (shift, gram.hex())


def test_clear_segments_over_ipv6_outer_addresses() -> None:
    """A UDP segment and a TCP segment whose checksums cover IPv6 outer addresses (RFC 8200
    s8.1's pseudo-header), each followed by a trailer and a 16-byte ICV, in an IPv6
    datagram: found by both tests, and not once a checksum byte is changed."""
    src6, dst6 = bytes(range(16)), bytes(range(100, 116))
    udp = bytearray(b"\x12\x34\x11\x94" + (8 + 21).to_bytes(2) + bytes(2) + bytes(range(21)))
    udp[6:8] = udp_checksum(src6, dst6, bytes(udp)).to_bytes(2)
    tcp = bytearray(b"\x9c\xb0\x14\x51" + bytes(8) + b"\x50\x10\x01\xf6" + bytes(4) + b"ab")
    tcp[16:18] = (internet_checksum(_pseudo6(src6, dst6, 6, len(tcp)) + bytes(tcp))).to_bytes(2)
    grams = []
    for segment, nh in ((bytes(udp), 17), (bytes(tcp), 6), (bytes(udp[:-1]) + b"\x01", 17)):
        pad = -(len(segment) + 2) % 4
        esp = bytes(8) + segment + bytes(range(1, pad + 1)) + bytes([pad, nh]) + bytes(16)
        head = bytes([0x60, 0, 0, 0]) + len(esp).to_bytes(2) + bytes([50, 64]) + src6 + dst6
        grams.append(head + esp)
    view, starts, end = _joined(grams)
    got = _places(view, starts + 48, end, starts)[0]
    proto, size = got.proto, got.size
    for row, gram in enumerate(grams):
        name, n = clear_transport(gram, 48, src6, dst6, KEYLESS_ICV_LENS)
        assert (int(proto[row]), int(size[row])) == ({"TCP": 6, "UDP": 17, "": 0}[name], n)
    assert proto.tolist() == [17, 6, 0] and size.tolist() == [8, 20, 0]


def _pseudo6(src: bytes, dst: bytes, proto: int, n: int) -> bytes:
    return src + dst + n.to_bytes(4) + bytes([0, 0, 0, proto])


def test_clear_messages_over_ipv6_and_a_message_of_zeros() -> None:
    """An ICMPv6 echo request whose checksum covers IPv6 outer addresses (RFC 4443 s2.3),
    then one over IPv4 addresses whose checksum covers them as TCP's pseudo-header would
    (ICMPv6 needs IPv6's: not clear), an ICMP echo reply of zeros
    over IPv4 (its words sum to 0, which no checksum verifies) and a sound one: both tests
    say the same of each."""
    src6, dst6 = bytes(range(16)), bytes(range(100, 116))
    echo6 = bytearray(b"\x80\x00\x00\x00\x12\x34\x00\x01" + bytes(range(24)))
    echo6[2:4] = internet_checksum(_pseudo6(src6, dst6, 58, len(echo6)) + bytes(echo6)).to_bytes(2)
    over4 = bytearray(echo6[:2] + bytes(2) + echo6[4:])
    pseudo4 = SRC + DST + bytes([0, 58]) + len(over4).to_bytes(2)
    over4[2:4] = internet_checksum(pseudo4 + bytes(over4)).to_bytes(2)
    zeros = bytes(16)
    reply = bytearray(b"\x00\x00\x00\x00\x12\x34\x00\x01" + bytes(8))
    reply[2:4] = internet_checksum(bytes(reply)).to_bytes(2)

    def esp(message: bytes, nh: int) -> bytes:
        pad = -(len(message) + 2) % 4
        return bytes(8) + message + bytes(range(1, pad + 1)) + bytes([pad, nh]) + bytes(16)

    v6_head = bytes([0x60, 0, 0, 0]) + len(esp(bytes(echo6), 58)).to_bytes(2) + bytes([50, 64])
    grams = [
        v6_head + src6 + dst6 + esp(bytes(echo6), 58),
        OUTER + SRC + DST + esp(bytes(over4), 58),
        OUTER + SRC + DST + esp(zeros, 1),
        OUTER + SRC + DST + esp(bytes(reply), 1),
    ]
    view, starts, end = _joined(grams)
    body = starts + np.array([48, BODY, BODY, BODY])
    got = _places(view, body, end, starts)[0].icmp
    addresses = [(48, src6, dst6), (BODY, SRC, DST), (BODY, SRC, DST), (BODY, SRC, DST)]
    want = [
        clear_icmp(gram, at, src, dst, KEYLESS_ICV_LENS)
        for gram, (at, src, dst) in zip(grams, addresses, strict=True)
    ]
    assert got.tolist() == want == [58, 0, 0, 1]


@pytest.mark.parametrize(
    ("padding", "found"),
    [
        (b"", True),
        (b"\x01", True),
        (b"\x02", False),
        (b"\x01\x02", True),
        (b"\x01\x03", False),
        (b"\x02\x02", False),
        (b"\x01\x02\x03", True),
        (b"\x01\x05\x03", False),
        (b"\x01\x02\x03\x04\x05", True),
        (b"\x01\x02\x07\x04\x05", False),
    ],
)
def test_clear_rows_read_every_pad_byte(padding: bytes, found: bool) -> None:
    """A clear UDP segment after the ESP header, its checksum right, then the padding
    given (RFC 4303 s2.4: 1, 2, 3, ...), the pad length, next header 17 and a 16-byte
    ICV: found, at both places, exactly when the per-packet test finds it."""
    data = 16 + -(8 + len(padding) + 2) % 4  # the trailer ends 4-byte aligned
    udp = bytearray(b"\x12\x34\x11\x94" + (8 + data).to_bytes(2) + bytes(2) + bytes(range(data)))
    udp[6:8] = udp_checksum(SRC, DST, bytes(udp)).to_bytes(2)
    esp = b"\x00\x00\x10\x01\x00\x00\x00\x07" + bytes(udp) + padding + bytes([len(padding), 17])
    grams = [
        OUTER + SRC + DST + esp + bytes(16),
        OUTER + SRC + DST + esp[:8] + bytes(8) + esp[8:] + bytes(16),
    ]
    assert all((len(g) - 16 - BODY) % 4 == 0 for g in grams)
    view, starts, end = _joined(grams)
    places = _places(view, starts + BODY, end, starts)
    for row, shift in ((0, 0), (1, 8)):
        want = clear_transport(grams[row], BODY + shift, SRC, DST, KEYLESS_ICV_LENS)
        assert want == (("UDP", 8) if found else ("", 0))
        assert (int(places[shift].proto[row]), int(places[shift].size[row])) == (
            (17, 8) if found else (0, 0)
        )


def test_address_sums_to_the_end_of_the_buffer() -> None:
    """The words of each datagram's source and destination addresses (IPv4: 4 words from
    byte 12; IPv6: 16 from byte 8), an IPv4 header ending the buffer."""
    src6, dst6 = bytes(range(1, 17)), bytes(range(200, 216))
    v6_head = bytes([0x60, 0, 0, 0, 0, 0, 50, 64]) + src6 + dst6
    v4_head = OUTER + SRC + DST
    view = np.frombuffer(v6_head + v4_head, np.uint8)
    got = address_sums(view, np.array([0, 40], np.int64), np.array([True, False]))

    def words(addresses: bytes) -> int:
        return sum(int.from_bytes(addresses[i : i + 2]) for i in range(0, len(addresses), 2))

    assert got.tolist() == [words(src6 + dst6), words(SRC + DST)]
