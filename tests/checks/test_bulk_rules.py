"""Each bulk rule equals its per-packet rule, row by row, on generated plaintexts.

The steady lane decodes a batch's plaintexts with the bulk rules
(trailer.parse_trailers, decode.inner.parse_inners) and asks the checks'
rules over plaintexts (checks.PLAIN: checks.checksum.plaintexts, which
runs check_inners, and checks.leaks.plaintexts); every other packet goes
through the per-packet rules beside them (parse_trailer, parse_inner,
check_inner, leaks.not_encrypted).
Hypothesis generates batches of well-formed plaintexts (sound trailers,
inner IPv4 / IPv6 / transport headers with checksums that verify) and
malformed ones (a byte changed, cut short, random bytes): a row the bulk
rule answers must have exactly the per-packet rule's answer, and a row
the per-packet rule rejects (a bad trailer, a header it cannot decode, a
bad or partial checksum) must never be answered in bulk.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from espforensics.checks import PLAIN, checksum, leaks, receiver
from espforensics.checks.bulk import Outer, Payloads, Plaintexts
from espforensics.checks.checksum import check_inners
from espforensics.checks.context import HEAD_LEN
from espforensics.decode.clear import internet_checksum
from espforensics.decode.inner import (
    NATT_TRANSPORT,
    InnerColumns,
    check_inner,
    ntop,
    parse_inner,
    parse_inners,
    pseudo_header,
)
from espforensics.decode.trailer import parse_trailer, parse_trailers
from espforensics.errors import MalformedPacket
from espforensics.model.arrays import I64, Strs
from espforensics.model.enums import InnerChecksum

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_GAP = 4  # a junk byte between two rows (then aligned to 4): a row never reads its neighbour


def _joined(bodies: list[bytes]) -> tuple[np.ndarray, I64, I64]:
    """The bodies in one buffer, each at a 4-aligned start, 64 zero bytes after the last."""
    buf, starts = bytearray(), []
    for body in bodies:
        buf += b"\xa5" * (-len(buf) % _GAP or _GAP)
        starts.append(len(buf))
        buf += body
    buf += bytes(64)
    view = np.frombuffer(bytes(buf), np.uint8)
    return view, np.array(starts, np.int64), np.array([len(b) for b in bodies], np.int64)


# -- generated inner packets ------------------------------------------------------------


def _set_sum(seg: bytearray, at: int, pseudo: bytes) -> None:
    seg[at : at + 2] = bytes(2)
    seg[at : at + 2] = internet_checksum(pseudo + bytes(seg)).to_bytes(2)


_L4_AT = {6: 16, 17: 6, 58: 2, 1: 2}
_L4_MIN = {6: 20, 17: 8, 58: 4, 1: 4, 132: 12}


@st.composite
def upper_layer(draw: st.DrawFn, src: bytes, dst: bytes) -> tuple[int, bytes]:
    """(protocol, segment) with its checksum right, or zero (UDP), or partial, or wrong."""
    proto = draw(st.sampled_from((6, 17, 1, 58, 132, 50, 47, draw(st.integers(0, 255)))))
    size = _L4_MIN.get(proto, 4) + draw(st.integers(0, 24))
    seg = bytearray(draw(st.binary(min_size=size, max_size=size)))
    if proto == 17:
        seg[4:6] = len(seg).to_bytes(2)
    at = _L4_AT.get(proto)
    if at is not None:
        pseudo = b"" if proto == 1 else pseudo_header(src, dst, proto, len(seg))
        kind = draw(st.sampled_from(("right", "right", "zero", "partial", "wrong")))
        _set_sum(seg, at, pseudo)
        if kind == "zero":
            seg[at : at + 2] = bytes(2)
        elif kind == "partial":
            seg[at : at + 2] = (0xFFFF ^ internet_checksum(pseudo)).to_bytes(2)
        elif kind == "wrong":
            seg[at] ^= 0x40
    return proto, bytes(seg)


@st.composite
def inner_ipv4(draw: st.DrawFn) -> bytes:
    src, dst = draw(st.binary(min_size=4, max_size=4)), draw(st.binary(min_size=4, max_size=4))
    proto, seg = draw(upper_layer(src, dst))
    options = draw(st.sampled_from((0, 0, 0, 4)))
    ihl = 20 + options
    frag = draw(st.sampled_from((0, 0, 0, 0x2000, 0x0010, 0x4000)))
    header = bytearray(b"\x45\x00" + (ihl + len(seg)).to_bytes(2) + b"\x12\x34")
    header[0] = 0x40 | ihl // 4
    header += frag.to_bytes(2) + b"\x40" + bytes([proto]) + bytes(2) + src + dst + bytes(options)
    header[10:12] = internet_checksum(bytes(header)).to_bytes(2)
    return bytes(header) + seg


@st.composite
def inner_ipv6(draw: st.DrawFn) -> bytes:
    src, dst = draw(st.binary(min_size=16, max_size=16)), draw(st.binary(min_size=16, max_size=16))
    proto, seg = draw(upper_layer(src, dst))
    nxt = draw(st.sampled_from((proto, proto, proto, 0, 43, 44, 60)))
    return b"\x60\x00\x00\x00" + len(seg).to_bytes(2) + bytes([nxt, 64]) + src + dst + seg


@st.composite
def payload(draw: st.DrawFn, outer: tuple[bytes, bytes]) -> tuple[int, bytes]:
    """(next header, payload): an inner IP packet, a transport segment, a dummy, junk, or
    a payload another next header names (issue 34: next header 1 over an IPv4 packet)."""
    kind = draw(st.sampled_from(("v4", "v6", "transport", "dummy", "junk", "mismatch")))
    if kind == "mismatch":
        nh, body = draw(
            st.one_of(
                st.tuples(st.sampled_from((1, 6, 17, 58, 132, 41)), inner_ipv4()),
                st.tuples(st.sampled_from((1, 6, 17, 58, 132, 4)), inner_ipv6()),
                st.tuples(st.sampled_from((4, 41)), upper_layer(*outer).map(lambda u: u[1])),
            )
        )
    elif kind == "v4":
        nh, body = 4, draw(inner_ipv4())
    elif kind == "v6":
        nh, body = 41, draw(inner_ipv6())
    elif kind == "transport":
        nh, body = draw(upper_layer(*outer))
    elif kind == "dummy":
        nh, body = 59, draw(st.binary(max_size=40))
    else:
        nh, body = draw(st.sampled_from((4, 41, 6, 17))), draw(st.binary(max_size=70))
    body += draw(st.binary(max_size=draw(st.sampled_from((0, 0, 8)))))  # TFC padding
    if draw(st.integers(0, 4)) == 0 and body:  # malformed: a byte changed, or cut short
        at = draw(st.integers(0, len(body) - 1))
        if draw(st.booleans()):
            body = body[:at] + bytes([body[at] ^ draw(st.integers(1, 255))]) + body[at + 1 :]
        else:
            body = body[:at]
    return nh, body


@st.composite
def plaintext(draw: st.DrawFn) -> bytes:
    """payload | padding 1, 2, 3, ... | pad length | next header; sometimes damaged."""
    nh, body = draw(payload((b"\xc0\x00\x02\x01", b"\xc6\x33\x64\x02")))
    pad = -(len(body) + 2) % 4 + 4 * draw(st.integers(0, 2))
    text = body + bytes(range(1, pad + 1)) + bytes([pad, nh])
    damage = draw(st.integers(0, 5))
    if damage == 0:
        text = text[: draw(st.integers(0, len(text)))]
    elif damage == 1:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + bytes([draw(st.integers(0, 255))]) + text[at + 1 :]
    elif damage == 2:
        text = draw(st.binary(max_size=40))
    return text


# -- the trailer (RFC 4303 s2.4) ------------------------------------------------------------


@SETTINGS
@given(st.lists(plaintext(), min_size=1, max_size=12))
def test_parse_trailers_is_parse_trailer(texts: list[bytes]) -> None:
    view, start, n = _joined(texts)
    bulk = parse_trailers(view, start, n)
    for row, text in enumerate(texts):
        one = parse_trailer(text)
        assert bool(bulk.sound[row]) == (one.problem == ""), (text.hex(), one)
        if one.problem == "":
            got = (bulk.payload_len[row], bulk.pad_len[row], bulk.next_header[row])
            assert tuple(map(int, got)) == one[:3]


def test_parse_trailers_on_known_plaintexts() -> None:
    texts = [b"abcd" + b"\x01\x02\x02\x04", b"ab\x00\x06", b"ab\x01\x06", b"abcd\x01\x03\x02\x04"]
    bulk = parse_trailers(*_joined(texts))
    assert bulk.sound.tolist() == [True, True, False, False]
    assert bulk.payload_len[:2].tolist() == [4, 2]
    assert bulk.next_header[:2].tolist() == [4, 6]


# -- the inner headers and their checksums -------------------------------------------------

_OUTERS = (
    (b"\xc0\x00\x02\x01", b"\xc6\x33\x64\x02"),
    (bytes.fromhex("20010db8000000000000000000000001"), bytes.fromhex("20010db8" + "0" * 23 + "2")),
)


Row = tuple[int, bytes, tuple[bytes, bytes], bool]  # next header, payload, outer addresses, NAT-T


@st.composite
def batch(draw: st.DrawFn) -> list[Row]:
    rows = []
    for _ in range(draw(st.integers(1, 12))):
        outer = draw(st.sampled_from(_OUTERS))
        nh, body = draw(payload(outer))
        rows.append((nh, body, outer, draw(st.integers(0, 3)) == 0))
    return rows


def _plaintexts(rows: list[Row]) -> Plaintexts:
    """The rows as the lane hands them to the checks' rules: every row plain but those the
    per-packet parser cannot decode (the lane's glue drops those first)."""
    view, start, n = _joined([body for _, body, _, _ in rows])
    nh = np.array([r[0] for r in rows], np.int64)
    src = np.array([ntop(r[2][0]) for r in rows], dtype=object)
    dst = np.array([ntop(r[2][1]) for r in rows], dtype=object)
    inner = parse_inners(view, start, n, nh, np.ones(len(rows), np.bool_), src, dst)
    plain = np.ones(len(rows), np.bool_)
    for row, (number, body, (a, b), _) in enumerate(rows):
        if not inner.decoded[row]:
            try:
                parse_inner(number, body, ntop(a), ntop(b))
            except MalformedPacket:
                plain[row] = False
    words = [
        sum(int.from_bytes(a[i : i + 2]) for a in r[2] for i in range(0, len(a), 2)) for r in rows
    ]
    outer = Outer(
        np.array(words, np.int64),
        np.array([len(r[2][0]) == 4 for r in rows]),
        np.array([r[3] for r in rows]),
    )
    heads = view[start[:, None] + np.arange(HEAD_LEN)]
    clear = np.zeros(len(rows), np.bool_)
    return Plaintexts(Payloads(view, start, n, nh), inner, heads, heads ^ 0x5A, clear, outer, plain)


def _columns(rows: list[Row]) -> tuple[InnerColumns, Strs, Strs, I64]:
    p = _plaintexts(rows)
    inner = p.inner
    status, detail, tfc = check_inners(p.payloads, inner, inner.decoded, p.outer)
    return inner, status, detail, tfc


@SETTINGS
@given(batch())
def test_parse_inners_is_parse_inner(rows: list[Row]) -> None:
    inner = _columns(rows)[0]
    for row, (nh, body, (src, dst), _) in enumerate(rows):
        try:
            one = parse_inner(nh, body, ntop(src), ntop(dst))
        except MalformedPacket:
            assert not inner.decoded[row], (nh, body.hex())
            continue
        if not inner.decoded[row]:
            continue  # a layout left to the per-packet rule (IPv6 extension headers)
        sport, dport = int(inner.sport[row]), int(inner.dport[row])
        got = (
            inner.proto_name[row],
            inner.src[row],
            inner.dst[row],
            None if sport < 0 else sport,
            None if dport < 0 else dport,
        )
        assert got == tuple(one), (nh, body.hex())


@pytest.mark.slow
@SETTINGS
@given(batch())
def test_check_inners_is_check_inner(rows: list[Row]) -> None:
    inner, status, detail, tfc = _columns(rows)
    for row, (nh, body, (src, dst), natt) in enumerate(rows):
        if not inner.decoded[row]:
            assert status[row] == "", row  # only decoded rows are checked in bulk
            continue
        one = check_inner(nh, body, src, dst, NATT_TRANSPORT if natt else "")
        if one.status in (InnerChecksum.BAD, InnerChecksum.PARTIAL) or one.mismatch:
            assert status[row] == "", (nh, body.hex())  # the per-packet path's finding
            continue
        if status[row] == "":
            continue  # left to the per-packet rule (a detail with numbers in it)
        got = (status[row], detail[row], int(tfc[row]))
        want = (one.status.value, one.detail, -1 if one.tfc_len is None else one.tfc_len)
        assert got == want, (nh, body.hex(), natt)


@pytest.mark.slow
@SETTINGS
@given(batch())
def test_the_checksum_rule_is_check_inner(rows: list[Row]) -> None:
    """checks.checksum.plaintexts, rows decoded in bulk and one by one alike: a row it takes
    has check_inner's columns; a row with a bad or partial checksum it refuses."""
    p = _plaintexts(rows)
    said = checksum.plaintexts(p)
    assert said.refused is not None
    assert said.inner_checks is not None
    got = said.inner_checks
    for row, (nh, body, (src, dst), natt) in enumerate(rows):
        if not p.plain[row]:
            continue  # the glue's: not a plain row
        tunnel = not p.inner.decoded[row]  # one by one: only an inner IP packet's are taken
        if tunnel and nh not in (4, 41):
            assert said.refused[row], row
            continue
        addrs = (b"", b"") if tunnel else (src, dst)
        one = check_inner(nh, body, *addrs, NATT_TRANSPORT if natt and not tunnel else "")
        whole = check_inner(nh, body, src, dst, NATT_TRANSPORT if natt else "")
        if one.status in (InnerChecksum.BAD, InnerChecksum.PARTIAL) or whole.mismatch:
            assert said.refused[row], (nh, body.hex())  # the per-packet path's finding
            continue
        if said.refused[row]:
            assert got.status[row] == "", row  # left to the per-packet rule
            continue
        tfc = int(got.tfc_len[row])
        columns = (got.status[row], got.detail[row], None if tfc < 0 else tfc)
        assert columns == (one.status.value, one.detail, one.tfc_len), (nh, body.hex(), natt)


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=HEAD_LEN, max_size=HEAD_LEN),
            st.integers(-1, HEAD_LEN - 1),  # where the ciphertext first differs (-1: nowhere)
            st.booleans(),  # clear by design
        ),
        min_size=1,
        max_size=16,
    )
)
def test_the_leak_rule_is_not_encrypted(rows: list[tuple[bytes, int, bool]]) -> None:
    """checks.leaks.plaintexts refuses a row exactly when leaks.not_encrypted proves it a
    leak (ciphertext equal to plaintext over MIN_RUN bytes) and its SA is not clear by
    design."""
    heads = np.array([list(pt) for pt, _, _ in rows], np.uint8).reshape(len(rows), HEAD_LEN)
    cts = heads.copy()
    for row, (_, differs, _) in enumerate(rows):
        if differs >= 0:
            cts[row, differs] ^= 0xFF
    p = _plaintexts([(59, b"", _OUTERS[0], False)] * len(rows))
    clear = np.array([c for _, _, c in rows], np.bool_)
    said = leaks.plaintexts(Plaintexts(p.payloads, p.inner, heads, cts, clear, p.outer, p.plain))
    assert said.refused is not None
    assert said.inner_checks is None
    for row, (pt, _, is_clear) in enumerate(rows):
        proven = leaks.not_encrypted(cts[row, : leaks.MIN_RUN].tobytes(), pt)
        assert bool(said.refused[row]) == (proven and not is_clear), row


@SETTINGS
@given(st.lists(st.binary(max_size=6), min_size=1, max_size=16))
def test_the_receiver_rule_is_leaves_payload(bodies: list[bytes]) -> None:
    """checks.receiver.plaintexts refuses a row exactly when receiver.leaves_payload says
    the receiver drops it (its pad length leaves no payload byte)."""
    p = _plaintexts([(59, body, _OUTERS[0], False) for body in bodies])
    said = receiver.plaintexts(p)
    assert said.inner_checks is None
    refused = said.refused if said.refused is not None else np.zeros(len(bodies), np.bool_)
    assert [bool(x) for x in refused] == [not receiver.leaves_payload(len(b)) for b in bodies]


def test_every_plaintext_rule_is_tested_here() -> None:
    """The registry's rules are the three this module holds equal to their per-packet forms."""
    assert (leaks.plaintexts, checksum.plaintexts, receiver.plaintexts) == PLAIN


def test_well_formed_inner_packets_verify_in_bulk() -> None:
    """A TCP segment in IPv4, a UDP datagram in IPv6 and a transport UDP, checksums right."""
    v4_src, v4_dst = _OUTERS[0]
    udp = bytearray(b"\x30\x39\x00\x35\x00\x0c\x00\x00abcd")
    _set_sum(udp, 6, pseudo_header(v4_src, v4_dst, 17, len(udp)))
    tcp = bytearray(b"\x04\xd2\x00\x50" + bytes(8) + b"\x50\x10\x01\x00" + bytes(4))
    _set_sum(tcp, 16, pseudo_header(b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", 6, len(tcp)))
    v4 = bytearray(b"\x45\x00" + (20 + len(tcp)).to_bytes(2) + bytes(4) + b"\x40\x06\x00\x00")
    v4 += b"\x0a\x00\x00\x01\x0a\x00\x00\x02"
    v4[10:12] = internet_checksum(bytes(v4)).to_bytes(2)
    v6_src, v6_dst = _OUTERS[1]
    udp6 = bytearray(b"\x00\x07\x00\x07\x00\x0a\x00\x00hi")
    _set_sum(udp6, 6, pseudo_header(v6_src, v6_dst, 17, len(udp6)))
    v6 = b"\x60\x00\x00\x00\x00\x0a\x11\x40" + v6_src + v6_dst + bytes(udp6)
    rows = [
        (4, bytes(v4 + tcp) + bytes(4), _OUTERS[1], False),
        (41, v6, _OUTERS[0], False),
        (17, bytes(udp), _OUTERS[0], False),
        (17, bytes(udp), _OUTERS[0], True),
    ]
    inner, status, detail, tfc = _columns(rows)
    assert inner.decoded.tolist() == [True] * 4
    assert list(inner.proto_name) == ["tcp", "udp", "udp", "udp"]
    assert list(inner.src) == ["10.0.0.1", "2001:db8::1", "192.0.2.1", "192.0.2.1"]
    assert inner.sport.tolist() == [1234, 7, 12345, 12345]
    assert list(status) == ["ok", "ok", "ok", "not_checked"]
    assert detail[3] == NATT_TRANSPORT
    assert tfc.tolist() == [4, 0, -1, -1]
