"""A keyless key group's first packet kept packed until the group's next read.

(checks/iv_reuse.py ``IvReuseCheck._lone``, checks/iv_groups.py ``pack``.)

A capture of many one-packet SAs keeps one key group per SA: the check keeps
the first use of each keyless group as one bytes value, by SPI, and makes
the group at the next packet of its SPI and destination. What it reports
must be what a group made at the first packet reports: a reuse names both
uses, frames and sequence numbers, with the XOR of their ciphertexts; a
byte-identical replay is no reuse; SAs of one SPI to two destinations are
two groups, and two sources to one destination one group.
"""

from __future__ import annotations

from espforensics.checks.context import Flow, SaState
from espforensics.checks.iv_reuse import IvReuseCheck
from espforensics.keys.sa import SaTable
from espforensics.model.enums import FindingKind, Severity, Verdict
from espforensics.model.evidence import IvReuse, IvUse
from tests.support.bulk_batches import Pkt, context

IV = bytes.fromhex("0011223344556677")


def _flow(spi: int, src: str, dst: str) -> Flow:
    return Flow(spi, src, dst, SaState())  # no key: a group by SPI and destination


def _pkt(frame: int, seq64: int, fill: int) -> Pkt:
    # no clear IP header after the ESP header: the 8 bytes after it are read as an IV
    return Pkt(frame, seq64, IV, bytes([fill]) * 40, bytes(16), verdict=Verdict.UNKNOWN_SA)


def test_keyless_groups_of_one_packet_report_as_groups_made_at_once() -> None:
    check = IvReuseCheck(SaTable(()))
    a = _flow(0x2001, "192.0.2.1", "192.0.2.2")
    b = _flow(0x2001, "192.0.2.1", "192.0.2.3")  # same SPI, another destination
    c = _flow(0x2001, "192.0.2.9", "192.0.2.2")  # same SPI and destination as a: a's group
    d = _flow(0x3001, "192.0.2.1", "192.0.2.2")
    steps = [
        (a, _pkt(1, 1, 0xA0)),
        (b, _pkt(2, 1, 0xB0)),  # the lone group of a (SPI 0x2001) becomes a group
        (c, _pkt(3, 5, 0xC0)),  # a's IV again: reused
        (b, _pkt(4, 2, 0xB4)),  # b's IV again: reused
        (d, _pkt(5, 7, 0xD0)),
        (d, _pkt(6, 7, 0xD0)),  # the same bytes again: a replay, not a reuse
    ]
    pkts = [context(flow, p) for flow, p in steps]
    for pkt in pkts:
        check.observe(pkt)
    assert [p.rec.iv_reused for p in pkts] == [False, False, True, True, False, False]
    found = sorted(check.finish(), key=lambda f: tuple(f.frames))
    # one run of values in each group of two packets: a counter's, so counter mode: critical
    assert [(f.kind, f.severity, f.spi, tuple(f.frames), f.count) for f in found] == [
        (FindingKind.IV_REUSE, Severity.CRITICAL, 0x2001, (1, 3), 2),
        (FindingKind.IV_REUSE, Severity.CRITICAL, 0x2001, (2, 4), 2),
    ]
    iv = int.from_bytes(IV)
    assert [f.evidence for f in found] == [
        IvReuse(iv, 8, (IvUse(1, 1), IvUse(3, 5)), bytes([0xA0 ^ 0xC0]) * 16, None),
        IvReuse(iv, 8, (IvUse(2, 1), IvUse(4, 2)), bytes([0xB0 ^ 0xB4]) * 16, None),
    ]
