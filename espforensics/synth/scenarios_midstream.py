"""Captures that start in the middle of a transfer, inside a burst of seq+1 IVs.

In: a seed, the parity of the first sequence number and how many seq+1
segments open the capture. Out: a ``Scenario``; the registry lists
``midstream-even-2``, ``-10``, ``-100`` and the same with ``odd`` (see
docs/synth.md for counts). Raises ``KeyError`` for a parity other than
``even`` and ``odd``.

Primer s7: on IPv6 with esp6_offload loaded, Linux builds the IV of a
GSO-sized packet from seq + 1, and the next packet built from its own
number repeats that IV under the same key. A capture that starts inside
such a burst opens with packets whose ``seq xor IV`` is ``c xor m`` for
several masks m: two even-seq packets agree on ``c xor 1``. The truth
states every frame's ``iv_seq_delta``; the analyzer must give it exactly
whatever the parity of the first sequence number and the burst's length.
"""

from __future__ import annotations

import random
from dataclasses import replace

from espforensics.synth.builder import (
    NO_FAULT,
    CaptureBuilder,
    Fault,
    SaFlow,
    TcpTalk,
    filler,
    ip,
    sa_pair,
)
from espforensics.synth.esp import IvSeqOffset
from espforensics.synth.packets import TCP_ACK, TCP_PSH
from espforensics.synth.truth import Scenario

STARTS = {"even": 0x0003_A2C4, "odd": 0x0003_A2C5}  # the sender's seq at the capture's start
BURST, ROUNDS = 3, 8  # then 8 rounds of 3 GSO segments (seq+1) and one own-seq packet
SIZE = 1200
A, B = ip("fd00:c::1"), ip("fd00:c::2")
GSO = Fault(iv=IvSeqOffset(1), tags=("iv_not_seqiv",))
LAST_GSO = Fault(iv=IvSeqOffset(1), tags=("iv_not_seqiv", "iv_reused_later"))
REUSE = Fault(tags=("iv_reuse",))  # built from its own seq: the IV the segment before took


def _send(cb: CaptureBuilder, flow: SaFlow, talk: TcpTalk, fault: Fault, data: bool) -> None:
    """One TCP segment over ``flow``, its truth stating the IV's delta."""
    if data:
        seg = talk.seg(True, TCP_PSH | TCP_ACK, filler(SIZE, talk.client_seq % 97))
    else:
        seg = talk.seg(False, TCP_ACK)
    packet, truth = flow.send_tcp(seg, fault)
    delta = fault.iv.delta if isinstance(fault.iv, IvSeqOffset) else 0
    cb.emit_ip(packet, replace(truth, iv_seq_delta=delta), outgoing=data)


def _faults(lead: int) -> list[Fault]:
    """The data segments' IVs: ``lead`` from seq+1, then ROUNDS bursts after one own."""
    round_ = [*[GSO] * (BURST - 1), LAST_GSO, REUSE]
    return [*[GSO] * (lead - 1), LAST_GSO, REUSE, *round_ * ROUNDS]


def midstream(seed: int = 1, parity: str = "even", lead: int = 2) -> Scenario:
    """IPv6 transport TCP caught mid-transfer at a ``parity`` seq, ``lead`` seq+1 segments in."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0x1501, 0x1502), A, B)
    ab.next_seq, ba.next_seq = STARTS[parity], STARTS[parity] // 2
    talk = TcpTalk()
    faults = _faults(lead)
    for i, fault in enumerate(faults):
        _send(cb, ab, talk, fault, data=True)
        if i % 2:
            _send(cb, ba, talk, NO_FAULT, data=False)
    name = f"midstream-{parity}-{lead}"
    desc = (
        f"IPv6 SA 0x1501 caught at {parity} seq {STARTS[parity]:#x}, inside a burst: "
        f"{lead} IVs from seq+1, then {ROUNDS} x ({BURST} from seq+1, 1 own)"
    )
    facts = {
        "iv_not_seqiv": lead + BURST * ROUNDS,
        "iv_repeats": 1 + ROUNDS,
    }
    return cb.scenario(name, desc, (ab.sealer, ba.sealer), facts=facts)
