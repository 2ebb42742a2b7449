"""reconcile's ``outer_changes`` and ``outer_rewritten``: every outer field a router or a
middlebox changes, on IPv4 and IPv6, ESP and ESP-in-UDP; the path's usual TTL / hop limit
decrement is named but is not a rewrite."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from espforensics.reconcile.run import FateRow, reconcile
from espforensics.synth.builder import V4_A, V4_B, V6_A, V6_B, SaFlow, ip, sa_pair
from espforensics.synth.packets import udp_bytes
from tests.reconcile.test_reconcile import _packet, _write

ECT0, CE, EF = 0b10, 0b11, 46 << 2  # RFC 3168 ECN codepoints; RFC 3246 Expedited Forwarding


def _marked(packet: bytes, tc: int, hops: int) -> bytes:
    """``packet`` with its outer traffic class (TOS) and TTL / hop limit set (the IPv4
    header checksum made again)."""
    data = bytearray(packet)
    if data[0] >> 4 == 4:
        data[1], data[8] = tc, hops
        ihl = (data[0] & 0x0F) * 4
        data[10:12] = b"\0\0"
        words = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, ihl, 2))
        while words > 0xFFFF:
            words = (words & 0xFFFF) + (words >> 16)
        data[10:12] = (~words & 0xFFFF).to_bytes(2, "big")
    else:
        data[0] = 0x60 | tc >> 4
        data[1] = (tc & 0x0F) << 4 | data[1] & 0x0F
        data[7] = hops
    return bytes(data)


CASES = {
    # (version, ESP in UDP): the NAT's packet 5 and packet 6 rewrites, as outer_changes
    (4, False): ("dst 192.0.2.2->198.51.100.7", "src 192.0.2.1->203.0.113.9"),
    (4, True): ("dst 192.0.2.2->198.51.100.7", "sport 4500->31000"),
    (6, False): ("dst 2001:db8::2->2001:db8::99", "src 2001:db8::1->2001:db8::77"),
    (6, True): ("dst 2001:db8::2->2001:db8::99", "dport 4500->4501"),
}


def _pair(tmp: Path, version: int, udp: bool) -> tuple[Path, Path]:
    """SA a -> b, 8 packets sent ECN-capable (ECT(0)) with TTL / hop limit 64; a router on
    the way takes one hop from each. Packet 2 is marked CE, 3 re-marked EF, 4 took one more
    hop, 5 and 6 went through a NAT (addresses or ports)."""
    a, b = (V4_A, V4_B) if version == 4 else (V6_A, V6_B)
    flow, _ = sa_pair(random.Random(7), (0x5001, 0x5002), a, b, encap_port=4500 if udp else None)
    nat_dst = ip("198.51.100.7") if version == 4 else ip("2001:db8::99")
    nat_src = ip("203.0.113.9") if version == 4 else ip("2001:db8::77")
    encap = flow.encap
    six = {
        (4, False): SaFlow(flow.sealer, nat_src, b),
        (4, True): SaFlow(flow.sealer, a, b, (31000, 4500)),
        (6, False): SaFlow(flow.sealer, nat_src, b),
        (6, True): SaFlow(flow.sealer, a, b, (4500, 4501)),
    }[version, udp]
    five = SaFlow(flow.sealer, a, nat_dst, encap)
    data = {n: udp_bytes(a, b, 4000, 5000, bytes([n]) * 24) for n in range(1, 9)}
    sent = {n: _marked(_packet(flow, n, data[n]), ECT0, 64) for n in range(1, 9)}
    got = {n: _marked(sent[n], ECT0, 63) for n in (1, 7, 8)}
    got[2] = _marked(sent[2], CE, 63)
    got[3] = _marked(sent[3], EF | ECT0, 63)
    got[4] = _marked(sent[4], ECT0, 62)
    got[5] = _marked(_packet(five, 5, data[5]), ECT0, 63)
    got[6] = _marked(_packet(six, 6, data[6]), ECT0, 63)
    sender = _write(tmp / "s.pcap", [(10 * n, sent[n]) for n in range(1, 9)])
    receiver = _write(tmp / "r.pcap", [(10 * n + 50, got[n]) for n in range(1, 9)])
    return sender, receiver


@pytest.mark.parametrize(
    ("version", "udp"), list(CASES), ids=[f"v{v}-{'udp' if u else 'esp'}" for v, u in CASES]
)
def test_every_outer_field(tmp_path: Path, version: int, udp: bool) -> None:
    rows: list[FateRow] = []
    result = reconcile(*_pair(tmp_path, version, udp), sink=rows.append)
    hops = "ttl" if version == 4 else "hop_limit"
    nat, other = CASES[version, udp]
    expected = [
        ("delivered", 1, f"{hops} 64->63", ""),
        ("outer_rewritten", 2, f"{hops} 64->63; ecn ect0->ce", "outer rewritten: ecn ect0->ce"),
        ("outer_rewritten", 3, f"{hops} 64->63; dscp 0->46", "outer rewritten: dscp 0->46"),
        ("outer_rewritten", 4, f"{hops} 64->62", f"outer rewritten: {hops} 64->62"),
        ("outer_rewritten", 5, f"{hops} 64->63; {nat}", f"outer rewritten: {nat}"),
        ("outer_rewritten", 6, f"{hops} 64->63; {other}", f"outer rewritten: {other}"),
        ("delivered", 7, f"{hops} 64->63", ""),
        ("delivered", 8, f"{hops} 64->63", ""),
    ]
    assert [(r.fate.value, r.seq64, r.outer_changes, r.detail) for r in rows] == expected
    assert result.decrements == {(0x5001, "sender->receiver"): 1}  # the path's usual one
