"""analyzer/esn_place.py: an ESN SA's first packet waits for its place (RFC 4303 A2.2)."""

from __future__ import annotations

from ipaddress import IPv4Address

from espforensics.analyzer.esn_place import EsnPlacement, mismatch_words
from espforensics.analyzer.flows import FlowTable
from espforensics.checks.context import Flow, Receiving
from espforensics.checks.perflow import Holds
from espforensics.decode.ip import OuterIp
from espforensics.keys import SaTable
from espforensics.keys.sa import Secret, SecurityAssociation
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord

A, B = IPv4Address("192.0.2.1").packed, IPv4Address("192.0.2.2").packed
IP = OuterIp(4, A, B, 50, 20, 100, None, 0, False, 20, 0)
WRAP = 1 << 32


def _flows() -> FlowTable:
    table = SaTable()
    for spi in (0x1001, 0x1002):
        table.add(
            SecurityAssociation(
                spi=spi,
                algorithm="rfc4106(gcm(aes))",
                key=Secret(bytes(20)),
                icv_bits=128,
                esn=True,
                origin="test",
            )
        )
    return FlowTable(table)


def _pkt(flow: Flow, frame: int, seq_lo: int, verified: int) -> Receiving:
    rec = PacketRecord(frame, frame, 100, 100)
    rec.seq, rec.seq_hi_verified, rec.verdict = seq_lo, verified >> 32, Verdict.OK
    return Receiving(rec, b"", IP, flow)


def test_a_packet_verified_where_its_place_says_is_placed_at_once() -> None:
    holds = Holds()
    esn = EsnPlacement(holds)
    flow = _flows().flow_for(0x1001, A, B)
    assert esn.place(_pkt(flow, 1, 5, 5), 5, 5) == (5, None)
    assert not holds and len(esn) == 0


def test_a_capture_that_starts_after_a_wrap_confirms_the_first_packet() -> None:
    holds = Holds()
    esn = EsnPlacement(holds)
    flow = _flows().flow_for(0x1001, A, B)
    first = _pkt(flow, 1, 5, WRAP | 5)
    assert esn.place(first, 5, WRAP | 5) == (WRAP | 5, None)  # provisionally
    assert 1 in holds and flow.state.tentative is first and len(esn) == 1
    flow.state.tracker.commit(WRAP | 5)  # as crypto.conclude does
    second = _pkt(flow, 2, 6, WRAP | 6)
    assert esn.place(second, WRAP | 6, WRAP | 6) == (WRAP | 6, first)
    assert not holds and flow.state.tentative is None and len(esn) == 0
    assert (first.rec.verdict, first.rec.detail) == (Verdict.OK, "")


def test_a_first_packet_sealed_with_the_wrong_high_half_is_esn_mismatch() -> None:
    """Primer s7: the capture starts with seq low 0xffffffff, sealed with high half 1."""
    holds = Holds()
    esn = EsnPlacement(holds)
    flow = _flows().flow_for(0x1001, A, B)
    first = _pkt(flow, 1, 0xFFFFFFFF, WRAP | 0xFFFFFFFF)
    assert esn.place(first, 0xFFFFFFFF, WRAP | 0xFFFFFFFF) == (WRAP | 0xFFFFFFFF, None)
    flow.state.tracker.commit(WRAP | 0xFFFFFFFF)
    second = _pkt(flow, 2, 0, WRAP)  # its place after the first says 2 << 32; it verifies at 1
    assert esn.place(second, 2 * WRAP, WRAP) == (WRAP, first)
    assert (first.rec.verdict, first.rec.seq64, first.rec.detail) == (
        Verdict.ESN_MISMATCH,
        0xFFFFFFFF,
        "ICV verifies only with ESN high half 0x1; its place in the sequence implies 0x0",
    )
    assert flow.state.tracker.top == WRAP and not holds


def test_force_confirms_the_oldest_first_packets_up_to_a_frame() -> None:
    holds = Holds()
    esn = EsnPlacement(holds)
    flows = _flows()
    one, two = flows.flow_for(0x1001, A, B), flows.flow_for(0x1002, A, B)
    first_one, first_two = _pkt(one, 3, 5, WRAP | 5), _pkt(two, 8, 9, WRAP | 9)
    esn.place(first_one, 5, WRAP | 5)
    esn.place(first_two, 9, WRAP | 9)
    assert esn.force(2) == []
    assert esn.force(5) == [first_one]
    assert 3 not in holds and 8 in holds and one.state.tentative is None
    assert esn.force(None) == [first_two]
    assert not holds and len(esn) == 0


def test_mismatch_words() -> None:
    assert mismatch_words(0x2_0000_0001, 3) == (
        "ICV verifies only with ESN high half 0x3; its place in the sequence implies 0x2"
    )
