"""Scenarios of senders that are not Linux, and of ESP packets with nothing to check.

In: a seed. Out: ``Scenario`` objects (see docs/synth.md): ``iv-counter``
(an additive counter, ``IV = seq64 + c``, on two SAs of 200 and 40
packets, one packet of the second built from seq+1), ``iv-random``
(random IVs), ``iv-constant`` (one IV on every packet), ``null-icmp``
(NULL encryption with HMAC-SHA1 carrying ICMP echoes: no IV at all),
``esp-header-only`` (an ESP packet of 8 bytes, SPI and sequence number
only, among sound ones) and ``esn-below`` (an ESN SA whose key file says
high half 0x201 while its packets are sealed with 0x200).
Raises nothing for valid seeds.
"""

from __future__ import annotations

import hashlib
import random

from espforensics.keys.sa import NULL_CIPHER
from espforensics.model.enums import Verdict
from espforensics.synth.builder import (
    NO_FAULT,
    V4_A,
    V4_B,
    CaptureBuilder,
    Fault,
    SaFlow,
    make_sa,
)
from espforensics.synth.esp import ESP_HEADER, IvFixed, IvRandom
from espforensics.synth.packets import icmp_echo, icmp_proto
from espforensics.synth.scenarios_crypto import send_udp
from espforensics.synth.truth import FrameTruth, Scenario

_U64 = (1 << 64) - 1
PACKETS = 40  # per SA: past ivscheme.MIN_RANDOM (16) and MIN_SCHEME (4)
LONG = 200  # past the IV derivation check's window (64), so the steady lane may take the rest


def counter_iv(seq64: int, constant: int) -> bytes:
    """An additive counter's IV: seq64 + c mod 2^64, big endian."""
    return ((seq64 + constant) & _U64).to_bytes(8, "big")


def iv_counter(seed: int = 1) -> Scenario:
    """Two SAs whose IVs are seq64 + c (200 and 40 packets); 0xb002's seq 20 has seq 21's IV."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    clean = SaFlow(make_sa(rng, 0xB001, V4_A, V4_B), V4_A, V4_B)
    broken = SaFlow(make_sa(rng, 0xB002, V4_B, V4_A), V4_B, V4_A)
    # Odd constants: xor and add differ from seq 1 on, so the scheme is told at once.
    c1, c2 = rng.getrandbits(64) | 1, rng.getrandbits(64) | 1
    for seq in range(1, LONG + 1):  # past the 64-packet window: the steady lane's case
        send_udp(cb, clean, seq, Fault(iv=IvFixed(counter_iv(seq, c1)), tags=("iv_counter",)))
        if seq > PACKETS:
            continue
        ahead = seq == 20
        tags = ("iv_counter", "iv_not_counter", "iv_reused_later") if ahead else ("iv_counter",)
        fault = Fault(iv=IvFixed(counter_iv(seq + ahead, c2)), tags=tags)
        send_udp(cb, broken, seq, fault, outgoing=False)
        if ahead:
            cb.retag(len(cb.frames), iv_seq_delta=1)
        elif seq == 21:
            cb.retag(len(cb.frames), tags=("iv_counter", "iv_reuse"))
    desc = "SAs 0xb001 (seq 1..200), 0xb002 (1..40): IV = seq64 + c; 0xb002 seq 20 from seq 21"
    facts = {"iv_repeats": 1, "iv_not_counter": 1}
    return cb.scenario("iv-counter", desc, (clean.sealer, broken.sealer), facts=facts)


def iv_random(seed: int = 1) -> Scenario:
    """One SA whose 40 IVs are random (a sound scheme for GCM: RFC 4106 s3.1 wants unique)."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    flow = SaFlow(make_sa(rng, 0xB101, V4_A, V4_B), V4_A, V4_B)
    for seq in range(1, PACKETS + 1):
        send_udp(cb, flow, seq, Fault(iv=IvRandom(seed * 7919 + seq), tags=("iv_random",)))
    desc = "SA 0xb101: 40 random IVs"
    return cb.scenario("iv-random", desc, (flow.sealer,))


def iv_constant(seed: int = 1) -> Scenario:
    """One SA sending one fixed IV on all 20 packets: 19 nonce reuses."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    flow = SaFlow(make_sa(rng, 0xB201, V4_A, V4_B), V4_A, V4_B)
    # Not from ``rng``: its stream after make_sa holds bytes other scenarios' keys of the
    # same seed are drawn from, and an IV equal to key bytes trips the key-secrecy scan.
    fixed = hashlib.sha256(f"iv-constant {seed}".encode()).digest()[:8]
    for seq in range(1, 21):
        tags = ("iv_fixed",) if seq == 1 else ("iv_fixed", "iv_reuse")
        send_udp(cb, flow, seq, Fault(iv=IvFixed(fixed), tags=tags))
    desc = "SA 0xb201: one IV on all 20 packets"
    return cb.scenario("iv-constant", desc, (flow.sealer,), facts={"iv_repeats": 19})


def null_icmp(seed: int = 1) -> Scenario:
    """NULL encryption + HMAC-SHA1 in transport mode carrying 20 ICMP echo requests."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    sa = make_sa(rng, 0xB301, V4_A, V4_B, algorithm=NULL_CIPHER, auth_algorithm="hmac(sha1)")
    flow = SaFlow(sa, V4_A, V4_B)
    for n in range(1, 21):
        echo = icmp_echo(0x4D2, n, bytes(range(48)))
        packet, truth = flow.send(echo, icmp_proto(4), None, NO_FAULT)
        cb.emit_ip(packet, truth)
    desc = "SA 0xb301: ecb(cipher_null) + hmac(sha1), transport, 20 ICMP echo requests"
    return cb.scenario("null-icmp", desc, (flow.sealer,))


def esp_header_only(seed: int = 1) -> Scenario:
    """Eight sound packets, then an ESP packet of its 8-byte header only, then eight more."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    flow = SaFlow(make_sa(rng, 0xB401, V4_A, V4_B), V4_A, V4_B)
    for seq in range(1, 9):
        send_udp(cb, flow, seq)
    flow.next_seq = 9
    bare = ESP_HEADER.pack(flow.spi, flow.take_seq())
    truth = FrameTruth(
        0,
        Verdict.SHORT,
        spi=flow.spi,
        seq64=9,
        esp_offset=flow.esp_offset,
        expected_offset=flow.esp_offset,
        tags=("header_only",),
    )
    cb.emit_ip(flow.outer(*flow.body(bare)), truth)
    for seq in range(10, 18):
        send_udp(cb, flow, seq)
    desc = "SA 0xb401: seq 1..17; seq 9 is an ESP packet of 8 bytes (SPI and seq only)"
    return cb.scenario("esp-header-only", desc, (flow.sealer,), facts={"header_only": 1})


ESN_HI_GIVEN = 0x201
ESN_HI_USED = 0x200


def esn_below(seed: int = 1) -> Scenario:
    """An ESN SA whose key file says high half 0x201; its 100 packets are sealed with 0x200."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    sa = make_sa(rng, 0xB501, V4_A, V4_B, esn=True, esn_hi=ESN_HI_GIVEN)
    flow = SaFlow(sa, V4_A, V4_B)
    for seq in range(1, 101):  # past the 64-packet window: the steady lane must refuse them
        # sealed with 0x200; a receiver at 0x201 places it there, and drops it
        fault = Fault(sealed_seq64=ESN_HI_USED << 32 | seq, tags=("esn_below",))
        send_udp(cb, flow, ESN_HI_GIVEN << 32 | seq, fault)
    desc = "ESN SA 0xb501, esn_hi 0x201 in the key file: seq 0x200:00000001 .. 0x200:00000064"
    return cb.scenario("esn-below", desc, (flow.sealer,), facts={"esn_below": 100})
