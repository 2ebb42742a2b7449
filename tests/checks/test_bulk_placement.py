"""The placement check's bulk rule covers its per-frame rule without a key (checks/placement.py).

The receiver searches a keyless packet for its ESP header later in the
datagram by layout (``found_by_layout``, run by analyzer/placement.py);
the steady lane must never take a packet in which that search would find
one. For generated keyless datagrams (random ciphertext, or primer s5's
misplaced layout: a stale header and IV, the start of a clear IP header
whose length fits or not, then the SPI again with a sequence number near
or far), every row the layout finds a header in is refused by
``refuses_bytes``.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from espforensics.checks.context import Flow, SaState
from espforensics.checks.placement import SEQ_SLACK, PlacementCheck, found_by_layout
from espforensics.keys.sa import SaTable
from tests.support.bulk_batches import OUTER, Pkt, datagram, flow_rows

SPI = 0x0000_2001
FLOW = Flow(SPI, "192.0.2.1", "192.0.2.2", SaState())
START = OUTER + 8 + 8  # where the clear bytes start: after the stale ESP header and IV


@st.composite
def _packets(draw: st.DrawFn, frame: int) -> Pkt:
    """A keyless packet: random ciphertext, or a clear IP header and the real ESP header."""
    seq = draw(st.integers(SEQ_SLACK * 2, (1 << 32) - SEQ_SLACK * 2))
    iv = draw(st.binary(min_size=8, max_size=8))
    if not draw(st.booleans()):
        return Pkt(frame, seq, iv, draw(st.binary(min_size=16, max_size=80)), b"")
    filler = draw(st.binary(min_size=0, max_size=24))
    near = draw(st.sampled_from([0, 1, -1, SEQ_SLACK, SEQ_SLACK + 1, -SEQ_SLACK - 1]))
    tail = draw(st.binary(min_size=8, max_size=60))
    later = SPI.to_bytes(4) + (seq + near).to_bytes(4) + tail
    size = OUTER + 8 + 8 + 6 + len(filler) + len(later)  # the datagram's length
    slack = draw(st.integers(-4, 16 + 255 + 2 + 4))  # ip_start_fits: 0 to 273 fit
    if draw(st.booleans()):  # IPv4: the total length at bytes 2-3
        length = max(0, size - START - slack) & 0xFFFF
        head = bytes([0x45, 0]) + length.to_bytes(2) + bytes(2)
    else:  # IPv6: 40 + the payload length at bytes 4-5
        length = max(0, size - START - slack - 40) & 0xFFFF
        head = bytes([0x60, 0, 0, 0]) + length.to_bytes(2)
    return Pkt(frame, seq, iv, head + filler + later, b"")


@st.composite
def _batches(draw: st.DrawFn) -> list[Pkt]:
    count = draw(st.integers(1, 6))
    return [draw(_packets(n)) for n in range(1, count + 1)]


def _found(p: Pkt) -> int | None:
    data = datagram(FLOW, p)
    return found_by_layout(data, OUTER, SPI, p.seq64, len(data))


# A clear IPv4 header of 24 bytes (6 of them in front of the real header), the real ESP
# header (seq 5001), its IV and 8 more bytes: the datagram ends 6 bytes after the 24.
CLEAR = bytes([0x45, 0, 0, 24]) + bytes(2)
MISPLACED = Pkt(1, 5000, bytes(8), CLEAR + SPI.to_bytes(4) + (5001).to_bytes(4) + bytes(16), b"")


@settings(max_examples=300, deadline=None)
@given(_batches())
@example([MISPLACED])
def test_every_row_the_layout_finds_a_header_in_is_refused(pkts: list[Pkt]) -> None:
    refused = PlacementCheck(SaTable()).refuses_bytes(flow_rows(FLOW, pkts)).refused
    for i, p in enumerate(pkts):
        if _found(p) is not None:
            assert refused[i], i


def test_the_misplaced_layout_is_found_and_refused() -> None:
    """The example above is a find: the real ESP header right after the clear bytes."""
    assert _found(MISPLACED) == START + 6
    rule = PlacementCheck(SaTable()).refuses_bytes(flow_rows(FLOW, [MISPLACED]))
    assert rule.refused.tolist() == [True]
