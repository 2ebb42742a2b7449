"""The RFC 1071 checksum of decode/clear.py: the values dpkt's ``in_cksum`` gives.

``internet_checksum`` verifies the clear IP headers of the leak test and every inner
IPv4, TCP, UDP and ICMP checksum; it used to call ``dpkt.in_cksum`` (dpkt stays a
dependency: the synth builds its packets with it), so the two must agree on every input.
"""

from __future__ import annotations

import dpkt
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.decode.clear import (
    _sums_by_rows,
    _sums_by_words,
    internet_checksum,
    l4_checksum_ok,
    udp_checksum,
    word_sums,
)


def test_the_worked_example_of_rfc_1071() -> None:
    """RFC 1071 s3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (carries folded); the
    checksum is its complement."""
    assert internet_checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D


def test_a_sound_ipv4_header_sums_to_zero_and_a_flipped_bit_does_not() -> None:
    header = bytearray.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert internet_checksum(bytes(header)) == 0xB861  # the value the header carries
    header[10:12] = (0xB861).to_bytes(2)
    assert internet_checksum(bytes(header)) == 0
    header[15] ^= 0x04
    assert internet_checksum(bytes(header)) == 0xFFFB  # the sum 0xFFFF + 4, folded


def test_zero_words_and_all_ones_words_are_told_apart() -> None:
    """A ones' complement sum is 0 only when every word is 0 (its complement 0xFFFF);
    words of 0xFFFF sum to 0xFFFF ("negative zero", checksum 0)."""
    assert internet_checksum(b"") == 0xFFFF
    assert internet_checksum(bytes(7)) == 0xFFFF
    assert internet_checksum(b"\xff\xff") == 0
    assert internet_checksum(b"\xff" * 9) == 0x00FF  # the odd byte padded with a zero
    assert internet_checksum(b"\x80\x00\x80\x00") == 0xFFFE  # the carry goes around


def test_an_odd_last_byte_is_the_high_byte_of_a_word() -> None:
    """RFC 1071 s4.1: an odd count is padded with a zero byte at the end."""
    assert internet_checksum(b"\x12\x34\x56") == internet_checksum(b"\x12\x34\x56\x00")
    assert internet_checksum(b"\x12\x34\x56") == 0xFFFF ^ (0x1234 + 0x5600)


def test_a_udp_segment_verifies_over_its_pseudo_header() -> None:
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    segment = bytearray((1234).to_bytes(2) + (53).to_bytes(2) + (12).to_bytes(2) + bytes(2))
    segment += b"abcd"
    pseudo = src + dst + bytes([0, 17]) + len(segment).to_bytes(2)
    segment[6:8] = internet_checksum(pseudo + bytes(segment)).to_bytes(2)
    assert l4_checksum_ok(src, dst, 17, bytes(segment))
    segment[8] ^= 1
    assert not l4_checksum_ok(src, dst, 17, bytes(segment))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=1600))
def test_equal_to_dpkt_on_random_bytes(data: bytes) -> None:
    assert internet_checksum(data) == dpkt.in_cksum(data)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=65535 + 40), st.sampled_from([0x00, 0xFF, 0x80]))
def test_equal_to_dpkt_on_long_uniform_bytes(length: int, byte: int) -> None:
    """Up to an IP packet's largest size and its pseudo-header, odd lengths included:
    runs of 0x00 (sum 0) and 0xFF (sum 0xFFFF) are where 0 and 0xFFFF part."""
    data = bytes([byte]) * length
    assert internet_checksum(data) == dpkt.in_cksum(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans(), st.binary(min_size=32, max_size=32))
def test_udp_checksum_is_the_field_dpkt_writes(body: bytes, v6: bool, addrs: bytes) -> None:
    """``udp_checksum`` (rewrite/tunnels.py fills VXLAN's and Geneve's with it) is the value
    dpkt packs for the same datagram over IPv4 or IPv6, and the segment then verifies."""
    width = 16 if v6 else 4
    src, dst = addrs[:width], addrs[16 : 16 + width]
    datagram = dpkt.udp.UDP(sport=40000, dport=4789, data=body)
    datagram.ulen = 8 + len(body)
    if v6:
        bytes(dpkt.ip6.IP6(src=src, dst=dst, nxt=17, data=datagram))  # packing fills the sum
    else:
        bytes(dpkt.ip.IP(src=src, dst=dst, p=17, data=datagram))
    segment = (40000).to_bytes(2) + (4789).to_bytes(2) + (8 + len(body)).to_bytes(2)
    value = udp_checksum(src, dst, segment + b"\x00\x00" + body)
    assert value == datagram.sum
    assert l4_checksum_ok(src, dst, 17, segment + value.to_bytes(2) + body)


@st.composite
def _segments(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int]]]:
    """A buffer and segments of it: any offset (odd ones too), any length (odd ones, none,
    one byte), overlapping or not, in any order, some ending at the buffer's last byte."""
    data = draw(st.binary(min_size=1, max_size=400) | st.sampled_from((b"\xff" * 301, bytes(64))))
    spans = st.integers(0, len(data)).flatmap(
        lambda at: st.tuples(st.just(at), st.integers(0, len(data) - at))
    )
    return data, draw(st.lists(spans, min_size=1, max_size=20))


@settings(max_examples=400, deadline=None)
@given(_segments(), st.booleans())
def test_word_sums_fold_as_internet_checksum_folds(
    case: tuple[bytes, list[tuple[int, int]]], offset: bool
) -> None:
    """Both ways ``word_sums`` reads (one numpy pass over the buffer's words, or each row as
    one number) give each segment the sum modulo 0xFFFF that ``internet_checksum``
    complements: a segment verifies as one exactly when its sum is 0 and it is not all
    zeros. The buffer starts at an odd address too (a view one byte into its memory)."""
    data, spans = case
    memory = np.frombuffer(b"\x00" + data, np.uint8)
    view = memory[1:] if offset else np.frombuffer(data, np.uint8)
    start = np.array([at for at, _ in spans], np.int64)
    length = np.array([n for _, n in spans], np.int64)
    want = [(int.from_bytes(data[at : at + n]) << (8 * (n & 1))) % 0xFFFF for at, n in spans]
    for sums in (_sums_by_words, _sums_by_rows):
        got = sums(view, start, length).tolist()
        assert got == want, sums.__name__
    every = word_sums(view, start, length, np.ones(len(spans), np.bool_)).tolist()
    assert every == want
    for (at, n), total in zip(spans, want, strict=True):
        segment = data[at : at + n]
        assert (internet_checksum(segment) == 0) == (total == 0 and any(segment))
