"""Scenarios of ESN SAs whose sender uses the wrong high half (primer s7).

In: a seed. Out: ``Scenario`` objects (see docs/synth.md): ``esn-fault-v4``
and ``esn-fault-v6`` (the Linux fault: seq low 0xffffffff sealed with the
next high half, AAD and IV; the v6 one also seals a packet after the wrap
with the high half before it), and ``esn-fault-late-start`` (a capture that
starts after a wrap, with ``esn_hi`` in the key file). A late packet from
before the wrap, which a receiver accepts, is in each: it is ``ok``.
Raises nothing for valid seeds.
"""

from __future__ import annotations

import random

from espforensics.keys.sa import IpAddress
from espforensics.synth.builder import (
    NO_FAULT,
    V4_A,
    V4_B,
    V6_A,
    V6_B,
    CaptureBuilder,
    Fault,
    SaFlow,
    make_sa,
)
from espforensics.synth.scenarios_crypto import send_udp
from espforensics.synth.truth import Scenario

WRAP = 1 << 32
LOW_MAX = WRAP - 1


def _wrap_run(
    cb: CaptureBuilder, esn: SaFlow, back: SaFlow, hi: int, faults: dict[int, int]
) -> None:
    """Seq hi:fffffffb .. (hi+1):00000004 over ``esn``; ``faults`` maps delta -> hi sealed with.

    Delta -2 (hi:fffffffe) arrives after delta +1, as reordering on the wire does.
    """
    base = hi * WRAP + WRAP
    order = [-5, -4, -3, -1, 0, 1, -2, 2, 3, 4]
    for i, delta in enumerate(order):
        seq64 = base + delta
        used = faults.get(delta)
        if used is not None:
            fault = Fault(tags=("esn-mismatch",), sealed_seq64=used * WRAP + (seq64 & LOW_MAX))
        else:
            fault = Fault(tags=("late",)) if delta == -2 else NO_FAULT
        send_udp(cb, esn, seq64, fault)
        if i % 3 == 2:
            send_udp(cb, back, outgoing=False)


def _pair(rng: random.Random, a: IpAddress, b: IpAddress, esn_hi: int = 0) -> tuple[SaFlow, SaFlow]:
    esn = SaFlow(make_sa(rng, 0x6101, a, b, esn=True, esn_hi=esn_hi), a, b)
    back = SaFlow(make_sa(rng, 0x6102, b, a), b, a)
    return esn, back


def esn_fault_v4(seed: int = 1) -> Scenario:
    """IPv4: seq low 0xffffffff sealed with high half 1 while its place says 0."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    esn, back = _pair(rng, V4_A, V4_B)
    _wrap_run(cb, esn, back, 0, {-1: 1})
    desc = "ESN SA 0x6101: seq 0:fffffffb .. 1:00000004; 0:ffffffff sealed with high half 1"
    facts = {"esn_wraps": 1, "esn_mismatches": 1, "late_packets": 1}
    return cb.scenario("esn-fault-v4", desc, (esn.sealer, back.sealer), facts=facts)


def esn_fault_v6(seed: int = 1) -> Scenario:
    """IPv6: 0:ffffffff sealed with high half 1, and 1:00000002 sealed with high half 0."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    esn, back = _pair(rng, V6_A, V6_B)
    _wrap_run(cb, esn, back, 0, {-1: 1, 2: 0})
    desc = "ESN SA 0x6101 (IPv6): 0:ffffffff sealed with high half 1, 1:00000002 with 0"
    facts = {"esn_wraps": 1, "esn_mismatches": 2, "late_packets": 1}
    return cb.scenario("esn-fault-v6", desc, (esn.sealer, back.sealer), facts=facts)


def esn_fault_late_start(seed: int = 1) -> Scenario:
    """A capture that starts after the first wrap (esn_hi 1 in the key file), then wraps again."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    esn, back = _pair(rng, V4_A, V4_B, esn_hi=1)
    _wrap_run(cb, esn, back, 1, {-1: 2})
    desc = "ESN SA 0x6101, esn_hi 1: seq 1:fffffffb .. 2:00000004; 1:ffffffff sealed with 2"
    facts = {"esn_wraps": 1, "esn_mismatches": 1, "late_packets": 1}
    return cb.scenario("esn-fault-late-start", desc, (esn.sealer, back.sealer), facts=facts)
