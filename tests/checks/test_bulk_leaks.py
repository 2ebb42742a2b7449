"""The leak check's keyless bulk rule is its per-packet rule (checks/leaks.py).

Without a key the steady lane asks ``LeakCheck.refuses_bytes`` for the
leak columns of each row and which rows are clear from right after their
ESP header on (``PacketContext.clear_from_header``: NULL encryption, no IV
to read, which the IV checks' bulk rules leave alone). A proven leak (a
clear IP header, TCP or UDP segment followed by an ESP trailer and an ICV)
and a possible one (bytes that only look like a clear IP header) are both
kept, with the ``leaked``, ``leaked_hex`` and ``leaked_fields`` the
per-packet rule writes, and ``commit`` counts them as ``observe`` does.
For generated keyless datagrams (random ciphertext; an IPv4 header with a
sound checksum or an IPv6 header whose length fits, after the IV or in its
place, with its trailer or without; a clear inner packet with its trailer
from tests/checks/test_bulk_rules.py), no row is refused, each row's
columns and clear flag are the per-packet ones, and the lane's findings
(every row committed at once) are the reference's.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from espforensics.checks.bulk import FlowRows, Leaks, LeakWords
from espforensics.checks.context import Flow, PacketContext, SaState
from espforensics.checks.leaks import LeakCheck
from espforensics.decode.clear import internet_checksum
from espforensics.decode.ip import parse_ip
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord
from tests.checks.test_bulk_rules import SETTINGS, plaintext
from tests.decode.test_clear_bulk import echo
from tests.support.bulk_batches import made

SPI = 0x0000_3001
SRC, DST = b"\xc0\x00\x02\x01", b"\xc6\x33\x64\x02"  # the addresses plaintext() sums over
OUTER = 20
BODY = OUTER + 8  # after the ESP header


def _ipv4(total: int, src: bytes = SRC, dst: bytes = DST, proto: int = 50) -> bytes:
    head = bytearray(bytes([0x45, 0]) + total.to_bytes(2) + bytes(4) + bytes([64, proto, 0, 0]))
    head += src + dst
    head[10:12] = internet_checksum(bytes(head)).to_bytes(2)
    return bytes(head)


@st.composite
def _after_header(draw: st.DrawFn, size: int) -> bytes:
    """``size`` bytes after the ESP header: random, or a clear IP header planted after an
    8-byte IV or in its place, its length fitting the datagram or not."""
    rest = bytearray(draw(st.binary(min_size=size, max_size=size)))
    kind = draw(st.sampled_from(("random", "v4", "v6")))
    at = draw(st.sampled_from((0, 8)))
    room = size - at
    if kind == "random" or room < 40:
        return bytes(rest)
    slack = draw(st.integers(-4, 16 + 255 + 2 + 4))
    if kind == "v4":
        total = max(0, room - slack) & 0xFFFF
        rest[at : at + 20] = _ipv4(total, draw(st.binary(min_size=4, max_size=4)), DST, 17)
    else:
        rest[at : at + 6] = bytes([0x60, 0, 0, 0]) + (max(0, room - 40 - slack) & 0xFFFF).to_bytes(
            2
        )
    return bytes(rest)


@st.composite
def _esp(draw: st.DrawFn) -> bytes:
    """The bytes after the ESP header of one keyless packet."""
    if draw(st.integers(0, 3)) == 0:  # a clear inner packet and its trailer, an ICV
        iv = draw(st.sampled_from((b"", bytes(range(8)))))
        icv = draw(st.sampled_from((b"", bytes(8), bytes(12), bytes(16), bytes(32))))
        return iv + draw(plaintext() | echo()) + icv
    return draw(_after_header(draw(st.integers(16, 120))))


def _datagram(seq: int, esp: bytes) -> bytes:
    after = SPI.to_bytes(4) + seq.to_bytes(4) + esp
    return _ipv4(OUTER + len(after)) + after


def _rows(flow: Flow, grams: list[bytes], first: int) -> FlowRows:
    """The lane's view of the keyless datagrams (ICV length unknown: to the end)."""
    starts = np.cumsum([0] + [len(g) for g in grams])[:-1].astype(np.int64)
    raw = b"".join(grams) + bytes(64)
    n = len(grams)
    ivs = [(g[BODY : BODY + 8] + bytes(8))[:8] for g in grams]
    return FlowRows(
        flow,
        np.arange(first, first + n, dtype=np.int64),
        np.arange(1, n + 1, dtype=np.uint64),
        np.array([int.from_bytes(iv) for iv in ivs], np.uint64),
        np.array([list(iv) for iv in ivs], np.uint8).reshape(n, 8),
        made([b""] * n),
        np.frombuffer(raw, np.uint8),
        starts + np.array([len(g) for g in grams], np.int64),
        starts,
        starts + OUTER,
        raw,
    )


def _context(flow: Flow, frame: int, seq: int, data: bytes) -> PacketContext:
    rec = PacketRecord(
        frame, 0, len(data), len(data), Verdict.UNKNOWN_SA, spi=SPI, seq=seq, seq64=seq,
        esp_offset=OUTER,
    )  # fmt: skip
    iv = int.from_bytes(data[BODY : BODY + 8])
    return PacketContext(rec, data, parse_ip(data, through_ah=True), flow, iv)


# A possible leak (an IPv6 header in the IV's place whose length fits, no trailer), a
# random packet, and an IPv4 header with a sound checksum after the IV.
_V6 = bytes([0x60, 0, 0, 0]) + (100 - 40 - 20).to_bytes(2) + bytes(range(94))
_V4 = bytes(range(8)) + _ipv4(92 - 20, SRC, DST, 6) + bytes(range(72))


@SETTINGS
@given(st.lists(_esp(), min_size=1, max_size=8))
@example([_V6, bytes(range(40)), _V4])
def test_the_keyless_bulk_rule_is_the_per_packet_rule(esps: list[bytes]) -> None:
    grams = [_datagram(seq, esp) for seq, esp in enumerate(esps, 1)]
    lane_flow = Flow(SPI, "192.0.2.1", "198.51.100.2", SaState())
    rule = LeakCheck().refuses_bytes(_rows(lane_flow, grams, 1))
    ref, ref_flow = LeakCheck(), Flow(SPI, "192.0.2.1", "198.51.100.2", SaState())
    pkts = [_context(ref_flow, n, n, g) for n, g in enumerate(grams, 1)]
    kept: dict[int, LeakWords] = {}
    if rule.leaks is not None:
        kept = dict(zip(rule.leaks.at.tolist(), rule.leaks.words(), strict=True))
    clear = rule.clear if rule.clear is not None else np.zeros(len(grams), np.bool_)
    assert not rule.refused.any()  # every row kept, with its columns
    for i, pkt in enumerate(pkts):
        ref.observe(pkt)
        rec = pkt.rec
        assert bool(clear[i]) == pkt.clear_from_header, i
        words = kept.get(i, LeakWords("", "", 0))
        assert words == (rec.leaked_hex, rec.leaked_fields, rec.leaked or 0), i
    # The lane: every row committed at once.
    lane = LeakCheck()
    leaks = Leaks.of(np.array(sorted(kept), np.intp), [kept[i] for i in sorted(kept)])
    lane.commit(replace(_rows(lane_flow, grams, 1), leaks=leaks if kept else None))
    assert list(lane.finish()) == list(ref.finish())


def test_a_possible_leak_is_kept_with_its_columns() -> None:
    """The example above: an IPv6 header in the IV's place and an IPv4 header after the IV,
    neither followed by a trailer, are kept with their columns; the random packet has none."""
    grams = [_datagram(seq, esp) for seq, esp in enumerate([_V6, bytes(range(40)), _V4], 1)]
    rule = LeakCheck().refuses_bytes(
        _rows(Flow(SPI, "192.0.2.1", "198.51.100.2", SaState()), grams, 1)
    )
    assert rule.refused.tolist() == [False, False, False]
    assert rule.leaks is not None
    assert rule.leaks.at.tolist() == [0, 2]
    assert rule.leaks.hex.texts().tolist() == [_V6[:40].hex(" "), _V4[8:28].hex(" ")]
    assert rule.leaks.fields[0].startswith("possible: IPv6 version+traffic class+flow label, ")
    assert rule.leaks.fields[1].startswith("possible: IPv4 version+IHL, TOS, total length, ")
    assert rule.leaks.leaked.tolist() == [0, 0]  # nothing proves them: ``leaked`` stays empty


def _ping() -> bytes:
    """An ICMP echo request (RFC 792), its checksum right, its trailer naming ICMP."""
    message = bytearray(b"\x08\x00\x00\x00\x00\x07\x00\x01" + bytes(range(20)))
    message[2:4] = internet_checksum(bytes(message)).to_bytes(2)
    return bytes(message) + bytes([1, 2, 2, 1])


def test_a_clear_ping_is_a_proven_leak_after_an_iv_or_in_its_place() -> None:
    """A ping as NULL encryption sends it (right after the ESP header) and as GMAC does
    (after an 8-byte IV), each with a 16-byte ICV: both kept with their ICMP header's 8
    bytes, proven, by the bulk rule as by the per-packet one; the first is clear from its
    header on (no IV), the second is not."""
    grams = [_datagram(1, _ping() + bytes(16)), _datagram(2, b"\x2a" * 8 + _ping() + bytes(16))]
    flow = Flow(SPI, "192.0.2.1", "198.51.100.2", SaState())
    rule = LeakCheck().refuses_bytes(_rows(flow, grams, 1))
    assert rule.leaks is not None and rule.clear is not None
    header = _ping()[:8].hex(" ")
    assert list(rule.leaks.words()) == [LeakWords(header, "ICMP header", 8)] * 2
    assert rule.leaks.at.tolist() == [0, 1]
    assert rule.clear.tolist() == [True, False]
    ref = Flow(SPI, "192.0.2.1", "198.51.100.2", SaState())
    for n, gram in enumerate(grams, 1):
        pkt = _context(ref, n, n, gram)
        LeakCheck().observe(pkt)
        assert (pkt.rec.leaked_hex, pkt.rec.leaked_fields, pkt.rec.leaked) == (
            header,
            "ICMP header",
            8,
        )
