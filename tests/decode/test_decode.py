"""decode/: link, IP, ESP location, inner packets, reassembly; trailer and ESN.

Cases are (bytes, expected) tables; a Hypothesis test feeds every decoder
random bytes and accepts only a value or MalformedPacket.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.decode.esn import EsnTracker
from espforensics.decode.esp import EspLocation, NotEsp, locate_esp, parse_esp_header
from espforensics.decode.inner import Inner, parse_inner
from espforensics.decode.ip import IpMarks, parse_ip, parse_marks
from espforensics.decode.link import LinkLayer, parse_link
from espforensics.decode.reassembly import Completed, Expired, Reassembler
from espforensics.decode.trailer import parse_trailer
from espforensics.errors import MalformedPacket, Truncated
from espforensics.model.enums import Proto

A4, B4 = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])
A6, B6 = bytes.fromhex("fd00000a" + "00" * 11 + "01"), bytes.fromhex("fd00000a" + "00" * 11 + "02")


def v4(
    proto: int,
    payload: bytes,
    *,
    options: bytes = b"",
    ident: int = 7,
    flags_frag: int = 0,
    total: int | None = None,
) -> bytes:
    ihl = (20 + len(options)) // 4
    length = total if total is not None else 20 + len(options) + len(payload)
    head = struct.pack(
        ">BBHHHBBH4s4s", 0x40 | ihl, 0, length, ident, flags_frag, 64, proto, 0, A4, B4
    )
    return head + options + payload


def v6(nxt: int, payload: bytes, exts: bytes = b"") -> bytes:
    return (
        struct.pack(">IHBB16s16s", 6 << 28, len(exts) + len(payload), nxt, 64, A6, B6)
        + exts
        + payload
    )


ESP = struct.pack(">II", 0x1001, 7) + b"\x11" * 8 + b"\xee" * 32

# ---------------------------------------------------------------- link layer
PPPOE = "PPPoE session, PPP protocol"
V, S, M = ("vlan",), ("pppoes",), ("mpls",)  # the libpcap keywords a filter crosses
LINK_CASES = [
    (1, b"\x00" * 12 + b"\x08\x00" + b"E", LinkLayer(14, 0x0800)),
    (1, b"\x00" * 12 + b"\x81\x00\x00\x05\x86\xdd", LinkLayer(18, 0x86DD, carriers=V)),
    (
        1,
        b"\x00" * 12 + b"\x88\xa8\x00\x05\x81\x00\x00\x06\x08\x00",
        LinkLayer(22, 0x0800, carriers=V + V),
    ),
    (1, b"\x00" * 12 + b"\x08\x06", LinkLayer(14, 0x0806)),
    (113, b"\x00" * 14 + b"\x86\xdd", LinkLayer(16, 0x86DD)),
    (276, b"\x08\x00" + b"\x00" * 18, LinkLayer(20, 0x0800)),
    (101, b"\x45", LinkLayer(0, 0x0800)),
    (101, b"\x60", LinkLayer(0, 0x86DD)),
    (12, b"\x45", LinkLayer(0, 0x0800)),
    (228, b"", LinkLayer(0, 0x0800)),
    (229, b"", LinkLayer(0, 0x86DD)),
    (0, b"\x02\x00\x00\x00", LinkLayer(4, 0x0800)),
    (0, b"\x00\x00\x00\x02", LinkLayer(4, 0x0800)),
    (0, b"\x18\x00\x00\x00", LinkLayer(4, 0x86DD)),
    (0, b"\x1e\x00\x00\x00", LinkLayer(4, 0x86DD)),
    (108, b"\x00\x00\x00\x1c", LinkLayer(4, 0x86DD)),
    # PPPoE session (RFC 2516 s4: ver/type 0x11, code 0, session, length), then PPP's protocol
    (
        1,
        b"\x00" * 12 + b"\x88\x64\x11\x00\x00\x07\x00\x40\x00\x21E",
        LinkLayer(22, 0x0800, carriers=S),
    ),
    (
        1,
        b"\x00" * 12 + b"\x81\x00\x00\x05\x88\x64\x11\x00\x00\x07\x00\x40\x00\x57`",
        LinkLayer(26, 0x86DD, carriers=V + S),
    ),
    (
        1,
        b"\x00" * 12 + b"\x88\x64\x11\x00\x00\x07\x00\x40\xc0\x21",
        LinkLayer(22, 0xC021, PPPOE, S),
    ),  # LCP
    (1, b"\x00" * 12 + b"\x88\x64\x11\x09\x00\x00\x00\x00\x00\x21", LinkLayer(14, 0x8864)),  # PADI
    (
        113,
        b"\x00" * 14 + b"\x88\x64\x11\x00\x00\x07\x00\x40\x00\x21",
        LinkLayer(24, 0x0800, carriers=S),
    ),
    # MPLS (RFC 3032): label entries to the bottom of stack (S bit), then the version nibble
    (1, b"\x00" * 12 + b"\x88\x47\x00\x01\x01\x40E", LinkLayer(18, 0x0800, carriers=M)),
    (
        1,
        b"\x00" * 12 + b"\x88\x47\x00\x01\x00\x40\x00\x02\x01\x40`",
        LinkLayer(22, 0x86DD, carriers=M + M),
    ),
    (
        1,
        b"\x00" * 12 + b"\x88\x47\x00\x01\x01\x40\x00\x00",
        LinkLayer(18, 0x8847, carriers=M),
    ),  # a PW
    (276, b"\x88\x48" + b"\x00" * 18 + b"\x00\x01\x01\x40E", LinkLayer(24, 0x0800, carriers=M)),
    # PPP (RFC 1661/1662): address and control or not, a 2- or 1-byte protocol
    (9, b"\xff\x03\x00\x21E", LinkLayer(4, 0x0800)),
    (9, b"\x00\x57`", LinkLayer(2, 0x86DD)),
    (9, b"\x21E", LinkLayer(1, 0x0800)),  # protocol field compression
    (9, b"\xff\x03\xc0\x21", LinkLayer(4, 0xC021, "PPP protocol")),  # LCP
    (50, b"\xff\x03\x00\x57", LinkLayer(4, 0x86DD)),
    (50, b"\x0f\x00\x08\x00", LinkLayer(4, 0x0800)),  # Cisco PPP with HDLC framing
    (104, b"\x8f\x00\x86\xdd", LinkLayer(4, 0x86DD)),  # Cisco HDLC
    (104, b"\x0f\x00\x80\x35", LinkLayer(4, 0x8035)),  # RARP: not IP
    (51, b"\x11\x00\x00\x07\x00\x40\x00\x21E", LinkLayer(8, 0x0800)),  # PPPoE, no Ethernet
    (51, b"\x11\x00\x00\x07\x00\x40\xc0\x21", LinkLayer(8, 0xC021, PPPOE)),
    # raw IP: the version nibble says which; another is no IP, and the detail names it
    (101, b"E\x00", LinkLayer(0, 0x0800)),
    (12, b"`\x00", LinkLayer(0, 0x86DD)),
    (101, b"\x50\x00", LinkLayer(0, 5, "IP version")),
]


@pytest.mark.parametrize(("linktype", "data", "expected"), LINK_CASES)
def test_parse_link(linktype: int, data: bytes, expected: LinkLayer) -> None:
    assert parse_link(linktype, data) == expected


def test_link_errors() -> None:
    with pytest.raises(Truncated):
        parse_link(1, b"\x00" * 13)
    with pytest.raises(Truncated):
        parse_link(113, b"\x00" * 15)
    with pytest.raises(MalformedPacket, match="link type 147 is not supported"):
        parse_link(147, b"\x00" * 40)
    with pytest.raises(Truncated, match="PPP header cut at 3 bytes"):
        parse_link(9, b"\xff\x03\x00")
    with pytest.raises(Truncated, match="Cisco HDLC header cut at 3 bytes"):
        parse_link(104, b"\x0f\x00\x08")
    with pytest.raises(Truncated, match="PPPoE header cut at 7 bytes"):
        parse_link(1, b"\x00" * 12 + b"\x88\x64" + bytes(7))
    with pytest.raises(Truncated, match="MPLS label stack cut at 20 bytes"):
        parse_link(1, b"\x00" * 12 + b"\x88\x47\x00\x01\x00\x40\x00\x02")


# ---------------------------------------------------------------- IP
def test_ipv4_with_options() -> None:
    ip = parse_ip(v4(50, ESP, options=b"\x01\x01\x01\x00"))
    assert (ip.version, ip.src, ip.dst, ip.proto, ip.header_len, ip.total_len) == (
        4,
        A4,
        B4,
        50,
        24,
        24 + len(ESP),
    )
    assert ip.frag_id is None


def test_ipv4_fragment_fields() -> None:
    ip = parse_ip(v4(50, ESP, flags_frag=0x2000 | 3, ident=0x1234))
    assert (ip.frag_id, ip.frag_offset, ip.more_fragments) == (0x1234, 24, True)
    last = parse_ip(v4(50, ESP, flags_frag=5, ident=0x1234))
    assert (last.frag_id, last.frag_offset, last.more_fragments) == (0x1234, 40, False)


def test_ipv6_extension_headers() -> None:
    hbh = bytes([43, 0]) + b"\x01\x04\x00\x00\x00\x00"  # next: routing
    rt = bytes([60, 0, 0, 0]) + b"\x00" * 4  # next: destination options
    dst = bytes([50, 1]) + b"\x01\x0c" + b"\x00" * 12  # 16 bytes, next: ESP
    ip = parse_ip(v6(0, ESP, hbh + rt + dst))
    assert (ip.proto, ip.header_len, ip.total_len) == (50, 40 + 8 + 8 + 16, 72 + len(ESP))


def test_ipv6_fragment_header() -> None:
    frag = struct.pack(">BBHI", 50, 0, (185 << 3) | 1, 0xABCDEF)
    ip = parse_ip(v6(44, ESP, frag))
    assert (ip.proto, ip.header_len, ip.frag_id, ip.frag_offset, ip.more_fragments) == (
        50,
        48,
        0xABCDEF,
        1480,
        True,
    )
    assert (ip.unfrag_len, ip.next_header_at) == (40, 6)


IP_ERRORS = [
    (b"", Truncated),
    (b"\x45" + b"\x00" * 10, Truncated),
    (b"\x75" + b"\x00" * 30, MalformedPacket),
    (b"\x44" + b"\x00" * 30, MalformedPacket),  # IHL 4
    (v4(50, b"", total=10), MalformedPacket),
    (v6(0, b"", b"")[:39], Truncated),
    (v6(0, b"", bytes([50, 4])), Truncated),
]


@pytest.mark.parametrize(("data", "error"), IP_ERRORS)
def test_ip_errors(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_ip(data)


# ---------------------------------------------------------------- ESP location
def udp(sport: int, dport: int, payload: bytes) -> bytes:
    return struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload


LOCATE_CASES = [
    (v4(50, ESP), EspLocation(20, Proto.ESP, None, None)),
    (v4(17, udp(4500, 4500, ESP)), EspLocation(28, Proto.ESP_UDP, 4500, 4500)),
    (
        v4(17, udp(4500, 4500, b"\x00\x00\x00\x00ike")),
        NotEsp("IKE (non-ESP marker, RFC 3948 s2.2)", 4500, 4500),
    ),
    (v4(17, udp(4500, 4500, b"\xff")), NotEsp("NAT-keepalive (RFC 3948 s2.3)", 4500, 4500)),
    (v4(17, udp(53, 53, b"dns")), NotEsp("UDP 53 -> 53", 53, 53)),
    (v4(6, b"\x00" * 20), NotEsp("TCP")),
    (v6(50, ESP), EspLocation(40, Proto.ESP, None, None)),
]


@pytest.mark.parametrize(("data", "expected"), LOCATE_CASES)
def test_locate_esp(data: bytes, expected: EspLocation | NotEsp) -> None:
    assert locate_esp(parse_ip(data), data, frozenset({4500})) == expected


def test_other_natt_port_and_header() -> None:
    data = v4(17, udp(10000, 4501, ESP))
    assert locate_esp(parse_ip(data), data, frozenset({4501})) == EspLocation(
        28, Proto.ESP_UDP, 10000, 4501
    )
    assert parse_esp_header(data, 28) == (0x1001, 7)
    with pytest.raises(Truncated):
        parse_esp_header(data[:33], 28)


# ---------------------------------------------------------------- inner
INNER_CASES = [
    (6, b"\x04\xd2\x16\x2e" + b"\x00" * 16, Inner("tcp", "a", "b", 1234, 5678)),
    (17, b"\x00\x35\x00\x35\x00\x08\x00\x00", Inner("udp", "a", "b", 53, 53)),
    (1, b"\x08\x00\x00\x00", Inner("icmp", "a", "b", None, None)),
    (59, b"", Inner("none", "a", "b", None, None)),
    (4, v4(17, udp(1, 2, b"x")), Inner("udp", "192.0.2.1", "192.0.2.2", 1, 2)),
    (
        41,
        v6(6, b"\x00\x50\x01\xbb" + b"\x00" * 16),
        Inner("tcp", "fd00:a::1", "fd00:a::2", 80, 443),
    ),
]


@pytest.mark.parametrize(("nh", "payload", "expected"), INNER_CASES)
def test_parse_inner(nh: int, payload: bytes, expected: Inner) -> None:
    assert parse_inner(nh, payload, "a", "b") == expected


# ---------------------------------------------------------------- trailer
TRAILER_CASES = [
    (b"abcd" + b"\x01\x02\x02\x06", (4, 2, 6, "")),
    (b"ab" + b"\x00\x06", (2, 0, 6, "")),
    (b"abcd" + b"\x01\x03\x02\x06", (4, 2, 6, "pad byte 2 is 0x03, expected 0x02")),
    (b"a" + b"\x01\x01\x06", (1, 1, 6, "")),
    (b"a" + b"\x01\x02\x06", (0, 2, 6, "pad byte 1 is 0x61, expected 0x01")),
    (b"abc" + b"\x01\x01\x06", (3, 1, 6, "trailer not 4-byte aligned: plaintext is 6 bytes")),
    (b"\x09\x06", (0, 9, 6, "pad length 9 exceeds the 0 bytes before it")),
    (b"ab" + b"\x00\xff", (2, 0, 255, "next header 255 is not an assigned protocol")),
    (b"\x06", (0, 0, 0, "plaintext of 1 bytes has no room for a trailer")),
]


@pytest.mark.parametrize(("plain", "expected"), TRAILER_CASES)
def test_parse_trailer(plain: bytes, expected: tuple[int, int, int, str]) -> None:
    assert tuple(parse_trailer(plain)) == expected


# ---------------------------------------------------------------- ESN
def test_esn_wrap_both_sides() -> None:
    t = EsnTracker()
    seen = []
    for lo in (0xFFFFFFFB, 0xFFFFFFFF, 0, 1, 0xFFFFFFFE, 2):
        s = t.infer(lo)
        t.commit(s)
        seen.append(s)
    assert seen == [0xFFFFFFFB, 0xFFFFFFFF, 1 << 32, (1 << 32) + 1, 0xFFFFFFFE, (1 << 32) + 2]


def test_esn_start_high_bits() -> None:
    assert EsnTracker(esn_hi=3).infer(0xFFFFFFF0) == (3 << 32) | 0xFFFFFFF0
    assert EsnTracker.alternatives(5 << 32) == ((6 << 32), (4 << 32))


# ---------------------------------------------------------------- reassembly
def _frags(payload: bytes, size: int) -> list[bytes]:
    out = []
    for off in range(0, len(payload), size):
        more = 0x2000 if off + size < len(payload) else 0
        out.append(v4(50, payload[off : off + size], ident=9, flags_frag=more | (off // 8)))
    return out


def test_reassembly_out_of_order() -> None:
    whole = v4(50, ESP * 3)
    pieces = _frags(ESP * 3, 48)
    r = Reassembler()
    results = [
        r.add(parse_ip(p), p, n, n) for n, p in [(1, pieces[2]), (2, pieces[0]), (3, pieces[1])]
    ]
    assert results[:2] == [None, None]
    done = results[2]
    assert isinstance(done, Completed) and done.frames == (1, 2, 3)
    assert done.packet[20:] == whole[20:]
    assert parse_ip(done.packet).total_len == len(whole) and parse_ip(done.packet).frag_id is None


def test_reassembly_ipv6_unlinks_fragment_header() -> None:
    body = ESP * 2
    f1 = v6(44, body[:48], struct.pack(">BBHI", 50, 0, 1, 77))
    f2 = v6(44, body[48:], struct.pack(">BBHI", 50, 0, 48, 77))
    r = Reassembler()
    assert r.add(parse_ip(f1), f1, 1, 0) is None
    done = r.add(parse_ip(f2), f2, 2, 0)
    assert isinstance(done, Completed)
    assert done.packet == v6(50, body)


def test_reassembly_timeout_and_drain() -> None:
    pieces = _frags(ESP * 3, 48)
    r = Reassembler(timeout_ns=10)
    assert r.add(parse_ip(pieces[0]), pieces[0], 1, 0) is None
    assert r.expire(5) == []
    assert r.expire(11) == [Expired((1,), "incomplete after 1e-08 s of capture time")]
    assert r.add(parse_ip(pieces[1]), pieces[1], 2, 20) is None
    assert r.drain() == [Expired((2,), "incomplete at the end of the capture")]


def test_reassembly_duplicate_offset_ruins() -> None:
    pieces = _frags(ESP * 3, 48)
    r = Reassembler()
    r.add(parse_ip(pieces[0]), pieces[0], 1, 0)
    assert r.add(parse_ip(pieces[0]), pieces[0], 2, 0) == Expired(
        (1, 2), "overlapping or oversized fragment"
    )


def _v4_pair(last: int) -> tuple[bytes, bytes]:
    """Two IPv4 fragments: 65,512 bytes at offset 0, then ``last`` bytes."""
    head = v4(50, b"\x11" * 65512, ident=5, flags_frag=0x2000)
    return head, v4(50, b"\x22" * last, ident=5, flags_frag=65512 // 8)


def _v6_pair(last: int) -> tuple[bytes, bytes]:
    """Two IPv6 fragments: 65,520 bytes at offset 0, then ``last`` bytes."""
    head = v6(44, b"\x11" * 65520, struct.pack(">BBHI", 50, 0, 1, 78))
    return head, v6(44, b"\x22" * last, struct.pack(">BBHI", 50, 0, 65520, 78))


@pytest.mark.parametrize(
    ("pair", "last", "why"),
    [
        (_v4_pair, 4, "reassembled length 65536 exceeds 65,535"),  # RFC 791 s3.1
        (_v6_pair, 16, "reassembled payload length 65536 exceeds 65,535"),  # RFC 8200 s3
    ],
)
def test_reassembly_beyond_a_16_bit_length_expires(
    pair: Callable[[int], tuple[bytes, bytes]], last: int, why: str
) -> None:
    # Minimized from the bad-input campaign: this raised OverflowError in int.to_bytes.
    for order in ((0, 1), (1, 0)):
        r = Reassembler()
        frags = pair(last)
        first, second = (frags[i] for i in order)
        assert r.add(parse_ip(first), first, 1, 0) is None
        assert r.add(parse_ip(second), second, 2, 0) == Expired((1, 2), why)
        assert r.drain() == []
    r = Reassembler()  # one byte less is the largest datagram there is, and it completes
    first, second = pair(last - 1)
    assert r.add(parse_ip(first), first, 1, 0) is None
    done = r.add(parse_ip(second), second, 2, 0)
    assert isinstance(done, Completed)
    assert parse_ip(done.packet).total_len == len(done.packet) == 65535 + 40 * (pair is _v6_pair)


@pytest.mark.parametrize(
    ("header", "marks"),
    [
        (bytes.fromhex("45b8") + bytes(6) + b"\x3f" + bytes(11), IpMarks(0xB8, 63)),  # EF, TTL 63
        (bytes.fromhex("6b a3 00 00") + bytes(3) + b"\x01" + bytes(32), IpMarks(0xBA, 1)),
    ],
)
def test_parse_marks(header: bytes, marks: IpMarks) -> None:
    """IPv4 TOS byte and TTL; IPv6 Traffic Class (the 8 bits after the version) and Hop
    Limit."""
    assert parse_marks(header) == marks
    with pytest.raises(Truncated):
        parse_marks(header[:-1])


# ---------------------------------------------------------------- fuzz
@settings(max_examples=400, deadline=None)
@given(
    st.binary(max_size=200),
    st.sampled_from([0, 1, 9, 12, 50, 51, 101, 104, 108, 113, 228, 229, 276, 147]),
    st.sampled_from([b"", b"\x88\x64", b"\x88\x47", b"\x81\x00\x00\x01\x88\x64"]),
    st.booleans(),
)
def test_decoders_raise_only_our_errors(
    data: bytes, linktype: int, carrier: bytes, through_ah: bool
) -> None:
    framed = bytes(12) + carrier + data if carrier and linktype == 1 else data  # PPPoE, MPLS
    if through_ah and len(data) > 9:  # an IPv4 header announcing AH (RFC 4302), the rest random
        data = b"\x45" + data[1:9] + b"\x33" + data[10:]
    for call in (
        lambda: parse_link(linktype, framed),
        lambda: parse_ip(data, through_ah=through_ah),
        lambda: parse_marks(data),
        lambda: locate_esp(parse_ip(data, through_ah=through_ah), data, frozenset({4500})),
        lambda: parse_esp_header(data, 3),
        lambda: parse_inner(data[0] if data else 4, data[1:], "a", "b"),
    ):
        with contextlib.suppress(MalformedPacket):
            call()
    parse_trailer(data)
