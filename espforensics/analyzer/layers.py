"""The ESP packets inside another's plaintext, one layer at a time (RFC 4303 s3.1).

In: an analyzed ESP packet whose plaintext was read. Out: the next layer's
ESP datagram and its record (``next_layer``), or None when there is none;
a layer that cannot be followed (a cut inner datagram, too many layers)
says why in the outer record's ``detail``. The caller analyzes each layer
as a datagram of its own. Raises nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from espforensics.checks.context import Receiving
from espforensics.decode.nested import NestedEsp, may_carry, nested_esp
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord

MAX_LAYERS = 4  # ESP layers of one frame analyzed at the most (the outermost is 1)
# The verdicts whose plaintext is read for an inner ESP packet (RFC 4303 s3.4.4: verified,
# or decrypted where there is no ICV to verify).
OPENED = frozenset({Verdict.OK, Verdict.DECRYPTED_NO_ICV})


@dataclass(frozen=True, slots=True)
class Layer:
    """An inner ESP packet: its record, and its packet once analyzed (None: undecodable)."""

    rec: PacketRecord
    pkt: Receiving | None


def may_nest(pkt: Receiving | None) -> bool:
    """May ``pkt``'s plaintext carry an ESP packet? (The cheap test, for every frame.)"""
    if pkt is None or not pkt.payload:
        return False
    return may_carry(pkt.inner_next or 0, pkt.payload)


def next_layer(
    pkt: Receiving, frame: int, ts_ns: int, depth: int
) -> tuple[PacketRecord, NestedEsp] | None:
    """The ESP datagram in ``pkt``'s plaintext and a record for it, at layer ``depth + 2``.

    ``depth``: the inner layers found so far. None when the plaintext was not
    read, carries no ESP, or its ESP cannot be followed (then ``pkt`` says why).
    """
    if pkt.payload is None or pkt.rec.verdict not in OPENED:
        return None
    found = nested_esp(pkt.inner_next or 0, pkt.payload, pkt.ip, pkt.data)
    if found is None:
        return None
    if isinstance(found, str) or depth + 1 >= MAX_LAYERS:
        why = found if isinstance(found, str) else f"more than {MAX_LAYERS} ESP layers"
        rec = pkt.rec
        rec.detail = f"{rec.detail}; {why}" if rec.detail else why
        return None
    size = len(found.data)
    return PacketRecord(frame, ts_ns, size, size, layer=depth + 2), found
