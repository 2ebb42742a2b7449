"""Scenarios about keys, IVs and sequence numbers.

In: a seed. Out: ``Scenario`` objects (see docs/synth.md for counts):
``esn-wrap``, ``algorithms``, ``iv-reuse``, ``iv-seq-minus-1``,
``iv-policies``, ``sequence`` and ``shared-key``. Every ESP frame in them
decrypts (verdict ``ok``); the anomalies are in the tags and the facts.
Raises nothing for valid seeds.
"""

from __future__ import annotations

import random

from espforensics.keys.sa import RFC4309, RFC4543, RFC7539ESP
from espforensics.synth.builder import (
    NO_FAULT,
    V4_A,
    V4_B,
    V6_A,
    V6_B,
    CaptureBuilder,
    Fault,
    SaFlow,
    filler,
    make_sa,
    sa_pair,
)
from espforensics.synth.esp import IvFixed, IvFromSeq, IvRandom, IvSeqOffset
from espforensics.synth.packets import PROTO_UDP, udp_bytes
from espforensics.synth.traffic import ping, session, transport, tunnel
from espforensics.synth.truth import Scenario

WRAP = 1 << 32
FIXED_IV = bytes.fromhex("0011223344556677")


def send_udp(
    cb: CaptureBuilder,
    flow: SaFlow,
    seq64: int | None = None,
    fault: Fault = NO_FAULT,
    size: int = 24,
    outgoing: bool = True,
) -> bytes:
    """Send one small UDP datagram over ``flow``; returns the IP packet."""
    datagram = udp_bytes(flow.src, flow.dst, 6000, 6001, filler(size))
    packet, truth = flow.send(datagram, PROTO_UDP, seq64, fault)
    cb.emit_ip(packet, truth, outgoing=outgoing)
    return packet


def esn_wrap(seed: int = 1) -> Scenario:
    """ESN SA crossing 2^32, with a late packet from before the wrap."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    esn = SaFlow(make_sa(rng, 0x6001, V4_A, V4_B, esn=True), V4_A, V4_B)
    back = SaFlow(make_sa(rng, 0x6002, V4_B, V4_A), V4_B, V4_A)
    order = [-5, -4, -3, -1, 0, 1, 2, 3, -2, 4, 5]
    for i, delta in enumerate(order):
        late = delta == -2
        send_udp(cb, esn, WRAP + delta, Fault(tags=("late",)) if late else NO_FAULT)
        if i % 2:
            send_udp(cb, back, outgoing=False)
    desc = "ESN SA 0x6001: seq 2^32-5 .. 2^32+5, 2^32-2 arrives late; 0x6002 plain"
    facts = {"esn_wraps": 1, "late_packets": 1}
    return cb.scenario("esn-wrap", desc, (esn.sealer, back.sealer), facts=facts)


def algorithms(seed: int = 1) -> Scenario:
    """AES-128/192/256 crossed with ICV 64/96/128 bits: nine SAs."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    sealers = []
    spi = 0x7000
    for key_bytes in (16, 24, 32):
        for icv_bits in (64, 96, 128):
            spi += 1
            ab, ba = sa_pair(
                rng, (spi, spi + 0x100), V4_A, V4_B, key_bytes=key_bytes, icv_bits=icv_bits
            )
            send_udp(cb, ab)
            ping(cb, ab, ba, spi & 0xFFFF)
            sealers += [ab.sealer, ba.sealer]
    desc = "9 SA pairs 0x7001-0x7009 (+0x100 back): AES-128/192/256 x ICV 64/96/128"
    return cb.scenario("algorithms", desc, tuple(sealers))


def aeads(seed: int = 1) -> Scenario:
    """AES-CCM (RFC 4309), ChaCha20-Poly1305 (RFC 7634), GMAC (RFC 4543): v4, v6, ESN wraps."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    sealers = []
    pairs = (
        (0x7201, RFC4309, 16, 64, V4_A, V4_B, "transport"),
        (0x7202, RFC4309, 32, 128, V4_A, V4_B, "transport"),
        (0x7203, RFC7539ESP, 32, 128, V6_A, V6_B, "tunnel"),
        (0x7206, RFC4543, 16, 128, V4_A, V4_B, "transport"),
    )
    for spi, algorithm, key_bytes, icv_bits, a, b, mode in pairs:
        ab, ba = sa_pair(
            rng,
            (spi, spi + 0x100),
            a,
            b,
            key_bytes=key_bytes,
            icv_bits=icv_bits,
            algorithm=algorithm,
            mode=mode,
        )
        if mode == "tunnel":
            session(cb, tunnel(ab, V4_A, V4_B), tunnel(ba, V4_B, V4_A), 12, 300)
        else:
            session(cb, transport(ab), transport(ba), 12, 300)
        sealers += [ab.sealer, ba.sealer]
    for spi, algorithm, key_bytes in ((0x7204, RFC4309, 16), (0x7205, RFC7539ESP, 32)):
        sealer = make_sa(rng, spi, V4_A, V4_B, key_bytes=key_bytes, algorithm=algorithm, esn=True)
        flow = SaFlow(sealer, V4_A, V4_B)
        for seq64 in range(WRAP - 3, WRAP + 3):
            send_udp(cb, flow, seq64)
        sealers.append(flow.sealer)
    desc = (
        "CCM SA pairs 0x7201 (AES-128, ICV 64), 0x7202 (AES-256, ICV 128) in IPv4 transport; "
        "ChaCha20-Poly1305 0x7203 in IPv6 tunnel (+0x100 back); ESN SAs 0x7204 (CCM), "
        "0x7205 (ChaCha20) across 2^32; GMAC (RFC 4543) pair 0x7206 in IPv4 transport"
    )
    return cb.scenario("aeads", desc, tuple(sealers), facts={"esn_wraps": 2})


def iv_reuse(seed: int = 1) -> Scenario:
    """1000 packets of one SA; seq 700 repeats the IV of seq 300."""
    rng, cb = random.Random(seed), CaptureBuilder(seed, step_ns=20_000)
    flow = SaFlow(make_sa(rng, 0xA001, V4_A, V4_B), V4_A, V4_B)
    for seq in range(1, 1001):
        fault = NO_FAULT
        if seq == 300:
            fault = Fault(tags=("iv_reused_later",))
        elif seq == 700:
            fault = Fault(iv=IvFromSeq(300), tags=("iv_reuse", "iv_not_seqiv"))
        send_udp(cb, flow, seq, fault, size=8)
    desc = "SA 0xa001, seq 1..1000 with seqiv IVs; seq 700 carries the IV of seq 300"
    facts = {"iv_repeats": 1, "iv_not_seqiv": 1}
    return cb.scenario("iv-reuse", desc, (flow.sealer,), facts=facts)


def iv_seq_minus_1(seed: int = 1) -> Scenario:
    """Every 8th data segment takes the IV of the packet before it."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    ab, ba = sa_pair(rng, (0xA101, 0xA102), V4_A, V4_B)
    stale = Fault(iv=IvSeqOffset(-1), tags=("iv_reuse", "iv_not_seqiv"))
    faults = dict.fromkeys(range(7, 40, 8), stale)
    session(cb, transport(ab), transport(ba), 40, 800, faults=faults)
    desc = "SA 0xa101: data segments 8, 16, 24, 32, 40 reuse the IV of seq - 1"
    facts = {"iv_repeats": 5, "iv_not_seqiv": 5}
    return cb.scenario("iv-seq-minus-1", desc, (ab.sealer, ba.sealer), facts=facts)


def iv_policies(seed: int = 1) -> Scenario:
    """Random IVs and one fixed IV used three times, among seqiv IVs."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    flow = SaFlow(make_sa(rng, 0xA201, V4_A, V4_B), V4_A, V4_B)
    for seq in range(1, 17):
        fault = NO_FAULT
        if seq in (4, 9, 14):
            fault = Fault(iv=IvRandom(seed * 1000 + seq), tags=("iv_random", "iv_not_seqiv"))
        elif seq in (6, 11, 16):
            fault = Fault(iv=IvFixed(FIXED_IV), tags=("iv_fixed", "iv_not_seqiv"))
        send_udp(cb, flow, seq, fault)
    desc = "SA 0xa201: seq 4, 9, 14 random IVs; seq 6, 11, 16 the same fixed IV"
    facts = {"iv_repeats": 2, "iv_not_seqiv": 6}
    return cb.scenario("iv-policies", desc, (flow.sealer,), facts=facts)


def sequence(seed: int = 1) -> Scenario:
    """A replayed duplicate, a gap of five and a swapped pair."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    flow = SaFlow(make_sa(rng, 0xB001, V4_A, V4_B), V4_A, V4_B)
    for seq in range(1, 11):
        send_udp(cb, flow, seq)
    replayed = send_udp(cb, flow, 11)
    cb.emit_ip(replayed, cb.truth[-1])
    cb.retag(len(cb.frames), tags=("duplicate",))
    for seq in (12, 13, 14, *range(20, 26)):
        send_udp(cb, flow, seq)
    early = flow.send(udp_bytes(V4_A, V4_B, 6000, 6001, filler(24)), PROTO_UDP, 26)
    send_udp(cb, flow, 27)
    cb.emit_ip(early[0], early[1])
    cb.retag(len(cb.frames), tags=("reordered",))
    for seq in (28, 29, 30):
        send_udp(cb, flow, seq)
    desc = "SA 0xb001: seq 11 twice, 15-19 missing, 27 before 26"
    facts = {"seq_duplicates": 1, "seq_gaps": 1, "seq_missing": 5, "seq_reordered": 1}
    return cb.scenario("sequence", desc, (flow.sealer,), facts=facts)


def shared_key(seed: int = 1) -> Scenario:
    """Three SAs with one key; two of them also share the seqiv constant."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    material, const, other = rng.randbytes(20), rng.randbytes(8), rng.randbytes(8)
    flows = [
        SaFlow(make_sa(rng, spi, V4_A, V4_B, material=material, iv_constant=c), V4_A, V4_B)
        for spi, c in ((0xC001, const), (0xC002, other), (0xC003, const))
    ]
    for seq in range(1, 7):
        for flow in flows:
            tags = ("iv_reuse",) if flow.spi == 0xC003 else ()
            send_udp(cb, flow, seq, Fault(tags=tags))
    desc = "SAs 0xc001-0xc003 share key and salt; 0xc003 repeats 0xc001's IVs"
    facts = {"shared_key_sas": 3, "iv_repeats": 6}
    return cb.scenario("shared-key", desc, tuple(f.sealer for f in flows), facts=facts)
