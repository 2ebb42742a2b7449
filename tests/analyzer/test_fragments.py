"""analyzer/fragments.py: the reassembly stage, its holds and what each fragment's record says."""

from __future__ import annotations

from ipaddress import IPv4Address

from espforensics.analyzer.fragments import Fragments
from espforensics.checks.perflow import Holds
from espforensics.decode.ip import PROTO_ESP, parse_ip
from espforensics.decode.reassembly import Completed
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord
from espforensics.synth.packets import ipv4_packet

SRC, DST = IPv4Address("192.0.2.1"), IPv4Address("192.0.2.2")
PAYLOAD = bytes(range(48))  # an ESP packet's bytes, as far as reassembly cares
SECOND = 10**9


def _pieces(ident: int) -> tuple[bytes, bytes]:
    """``PAYLOAD`` in two IPv4 fragments: bytes 0-23 and 24-47 (RFC 791 s3.2)."""
    first = ipv4_packet(SRC, DST, PROTO_ESP, PAYLOAD[:24], ident=ident, more_fragments=True)
    last = ipv4_packet(SRC, DST, PROTO_ESP, PAYLOAD[24:], ident=ident, frag_offset=24)
    return first, last


def _add(
    frags: Fragments, frame: int, data: bytes, ts_ns: int = 0
) -> tuple[PacketRecord, Completed | None]:
    rec = PacketRecord(frame, ts_ns, len(data), len(data))
    return rec, frags.add(rec, parse_ip(data), data, ts_ns)


def test_two_fragments_complete_their_datagram_and_both_leave() -> None:
    holds = Holds()
    frags = Fragments(holds, 30.0)
    first, last = _pieces(7)
    rec1, done1 = _add(frags, 1, first)
    assert done1 is None and 1 in frags and 1 in holds
    assert (rec1.verdict, rec1.detail) == (
        Verdict.FRAGMENT,
        "fragment; waiting for the rest of the datagram",
    )
    rec2, done2 = _add(frags, 2, last)
    assert done2 is not None and done2.frames == (1, 2)
    whole = parse_ip(done2.packet)
    assert (whole.frag_id, whole.total_len) == (None, 20 + 48)
    assert done2.packet[20:] == PAYLOAD
    assert rec1.detail == "fragment of the datagram completed in frame 2"
    assert rec2.verdict is Verdict.NOT_ESP and rec2.detail == ""  # the caller fills them
    assert not holds and 1 not in frags


def test_expired_datagram_is_said_only_once_settled() -> None:
    holds = Holds()
    frags = Fragments(holds, 30.0)
    rec, _ = _add(frags, 1, _pieces(8)[0], ts_ns=0)
    assert frags.expire(30 * SECOND) == []  # not older than the timeout yet
    expired = frags.expire(30 * SECOND + 1)
    assert [(e.frames, e.reason) for e in expired] == [
        ((1,), "incomplete after 30 s of capture time")
    ]
    assert rec.detail == "fragment; waiting for the rest of the datagram" and 1 in holds
    frags.settle(expired)
    assert (
        rec.detail
        == "fragment of a datagram never completed: incomplete after 30 s of capture time"
    )
    assert not holds and 1 not in frags


def test_give_up_and_drain_name_only_the_datagrams_still_waiting() -> None:
    holds = Holds()
    frags = Fragments(holds, 30.0)
    rec1, _ = _add(frags, 1, _pieces(1)[0])
    rec2, _ = _add(frags, 2, _pieces(2)[0])
    given_up = frags.give_up(1, "too many frames behind it")
    assert [(e.frames, e.reason) for e in given_up] == [((1,), "too many frames behind it")]
    assert frags.give_up(1, "again") == []
    frags.settle(given_up)
    drained = frags.drain()
    assert [(e.frames, e.reason) for e in drained] == [
        ((2,), "incomplete at the end of the capture")
    ]
    frags.settle(drained)
    assert rec1.detail == "fragment of a datagram never completed: too many frames behind it"
    assert (
        rec2.detail
        == "fragment of a datagram never completed: incomplete at the end of the capture"
    )
    assert not holds


def test_a_fragment_that_ruins_its_datagram_says_so_and_holds_nothing() -> None:
    holds = Holds()
    frags = Fragments(holds, 30.0)
    first, _ = _pieces(9)
    rec1, _ = _add(frags, 1, first)
    clash = ipv4_packet(SRC, DST, PROTO_ESP, bytes(24), ident=9, more_fragments=True)
    rec2, done = _add(frags, 2, clash)  # the same bytes 0-23, other contents: overlap
    assert done is None
    assert rec2.verdict is Verdict.FRAGMENT
    assert rec2.detail.startswith("fragment of a datagram never completed: ")
    assert rec1.detail == rec2.detail
    assert not holds and 1 not in frags and 2 not in frags
