"""analyzer/layers.py: the ESP packet inside another's plaintext, one layer at a time."""

from __future__ import annotations

from ipaddress import IPv4Address

from espforensics.analyzer.flows import FlowTable
from espforensics.analyzer.layers import MAX_LAYERS, may_nest, next_layer
from espforensics.checks.context import Receiving
from espforensics.decode.ip import PROTO_ESP, PROTO_UDP, parse_ip
from espforensics.keys import SaTable
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord
from espforensics.synth.packets import ipv4_packet, udp_bytes

OUT_SRC, OUT_DST = IPv4Address("192.0.2.1"), IPv4Address("192.0.2.2")
MID_SRC, MID_DST = IPv4Address("203.0.113.1"), IPv4Address("203.0.113.2")
INNER_ESP = ipv4_packet(MID_SRC, MID_DST, PROTO_ESP, bytes.fromhex("0000b00200000001") + bytes(40))
OUTER = ipv4_packet(OUT_SRC, OUT_DST, PROTO_ESP, bytes(80))


def _opened(payload: bytes | None, next_header: int, verdict: Verdict = Verdict.OK) -> Receiving:
    """An outer ESP packet whose plaintext (before its trailer) is ``payload``."""
    ip = parse_ip(OUTER)
    flow = FlowTable(SaTable()).flow_for(0xB001, ip.src, ip.dst)
    rec = PacketRecord(9, 100, len(OUTER), len(OUTER))
    rec.verdict = verdict
    return Receiving(rec, OUTER, ip, flow, payload=payload, inner_next=next_header)


def test_a_tunnelled_esp_packet_is_the_next_layer() -> None:
    pkt = _opened(INNER_ESP, 4)
    assert may_nest(pkt)
    found = next_layer(pkt, 9, 100, 0)
    assert found is not None
    rec, nested = found
    assert (rec.frame, rec.time, rec.caplen, rec.len, rec.layer) == (9, 100, 68, 68, 2)
    assert nested.data == INNER_ESP
    assert (nested.ip.src, nested.ip.dst, nested.ip.proto) == (
        MID_SRC.packed,
        MID_DST.packed,
        PROTO_ESP,
    )
    deeper = next_layer(pkt, 9, 100, 2)
    assert deeper is not None and deeper[0].layer == 4


def test_transport_mode_esp_keeps_the_outer_header() -> None:
    esp = bytes.fromhex("0000b00400000001") + bytes(24)
    found = next_layer(_opened(esp, PROTO_ESP), 9, 100, 0)
    assert found is not None
    assert found[1].data == OUTER[:20] + esp and found[1].ip.total_len == 20 + len(esp)


def test_no_next_layer_without_esp_or_without_a_read_plaintext() -> None:
    udp = ipv4_packet(MID_SRC, MID_DST, PROTO_UDP, udp_bytes(MID_SRC, MID_DST, 1, 2, b"x"))
    assert not may_nest(_opened(udp, 4)) and next_layer(_opened(udp, 4), 9, 100, 0) is None
    assert not may_nest(_opened(None, 4)) and not may_nest(None)
    failed = _opened(INNER_ESP, 4, Verdict.AUTH_FAIL)
    assert next_layer(failed, 9, 100, 0) is None and failed.rec.detail == ""


def test_a_layer_that_cannot_be_followed_says_why_in_the_outer_record() -> None:
    deep = _opened(INNER_ESP, 4)
    assert next_layer(deep, 9, 100, MAX_LAYERS - 1) is None
    assert deep.rec.detail == "more than 4 ESP layers"
    cut = _opened(INNER_ESP[:40], 4)
    cut.rec.detail = "reassembled from 2 fragments"
    assert next_layer(cut, 9, 100, 0) is None
    assert cut.rec.detail == (
        "reassembled from 2 fragments; inner ESP not analyzed: inner IP length 68 in 40 bytes"
    )
