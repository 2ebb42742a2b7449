"""Scenarios of the non-AEAD algorithms: a cipher with an HMAC (RFC 4303 s3.2.1).

In: a seed. Out: ``Scenario`` objects (see docs/synth.md for counts):
``encauth``, every cipher the analyzer opens (``cbc(aes)`` 128/192/256,
``cbc(des3_ede)``, ``rfc3686(ctr(aes))``, ``ecb(cipher_null)``) with every
HMAC (MD5-96, SHA-1-96, SHA-256-128, SHA-384-192, SHA-512-256), IPv4 and
IPv6, transport and tunnel, with and without ESN, plus one CBC SA across
the 32-bit wrap, every frame ``ok``; and ``encauth-faults``: a CBC IV
repeated (two packets built from one sequence number), CBC IVs chained
from the previous packet's last cipher block, ciphertexts that are not a
whole number of cipher blocks, bad padding and bad ICVs. Raises nothing
for valid seeds.
"""

from __future__ import annotations

import random

from espforensics.keys.sa import CBC_AES, CBC_DES3, CTR_AES, NULL_CIPHER
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
    ip,
    make_sa,
    sa_pair,
)
from espforensics.synth.esp import EspSealer, IvChained, IvSeqOffset, Trailer
from espforensics.synth.packets import PROTO_UDP, IpAddress, udp_bytes
from espforensics.synth.traffic import session, transport, tunnel
from espforensics.synth.truth import Scenario

WRAP = 1 << 32
# (cipher, key bytes without the CTR nonce) in the order of the SPIs.
CIPHERS: tuple[tuple[str, int], ...] = (
    (CBC_AES, 16),
    (CBC_AES, 24),
    (CBC_AES, 32),
    (CBC_DES3, 24),
    (CTR_AES, 16),
    (NULL_CIPHER, 0),
)
HMACS = ("hmac(md5)", "hmac(sha1)", "hmac(sha256)", "hmac(sha384)", "hmac(sha512)")
# (outer a, outer b, mode), taken in turn by the combinations.
LAYOUTS: tuple[tuple[IpAddress, IpAddress, str], ...] = (
    (V4_A, V4_B, "transport"),
    (V6_A, V6_B, "tunnel"),
    (V6_A, V6_B, "transport"),
    (V4_A, V4_B, "tunnel"),
)
ENCAUTH_BASE = 0x7400  # SPI of combination i: 0x7401 + i, back direction + 0x100
DATA_SEGMENTS = 4  # per combination: a TCP session of 6 + 4 + 2 frames
# Inner addresses of the tunnels, by outer IP version: IPv4 in IPv4, IPv6 in IPv6.
INNER: dict[int, tuple[IpAddress, IpAddress]] = {
    4: (ip("10.9.0.1"), ip("10.9.0.2")),
    6: (ip("fd00:9::1"), ip("fd00:9::2")),
}


def combinations() -> list[tuple[int, str, int, str, bool]]:
    """(SPI, cipher, key bytes, HMAC, ESN) of every ``encauth`` SA pair, in order.

    ESN alternates so that every cipher and every HMAC is seen with and without it.
    """
    rows = []
    for c, (cipher, key_bytes) in enumerate(CIPHERS):
        for h, auth in enumerate(HMACS):
            spi = ENCAUTH_BASE + 1 + c * len(HMACS) + h
            rows.append((spi, cipher, key_bytes, auth, (c + h) % 2 == 1))
    return rows


def send_udp(cb: CaptureBuilder, flow: SaFlow, seq64: int, payload: bytes, fault: Fault) -> None:
    """One UDP datagram (ports 6000 -> 6001) over ``flow``, transport mode."""
    datagram = udp_bytes(flow.src, flow.dst, 6000, 6001, payload)
    packet, truth = flow.send(datagram, PROTO_UDP, seq64, fault)
    cb.emit_ip(packet, truth)


def encauth(seed: int = 1) -> Scenario:
    """30 SA pairs, one per cipher x HMAC, and a CBC SA across 2^32 with ESN."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    sealers: list[EspSealer] = []
    for i, (spi, cipher, key_bytes, auth, esn) in enumerate(combinations()):
        a, b, mode = LAYOUTS[i % len(LAYOUTS)]
        ab, ba = sa_pair(
            rng,
            (spi, spi + 0x100),
            a,
            b,
            mode=mode,
            key_bytes=key_bytes,
            algorithm=cipher,
            auth_algorithm=auth,
            esn=esn,  # RFC 4303 s2.2.1: the high half (0) enters the ICV, never the wire
        )
        size = 100 + 7 * i  # every pad length of the CBC blocks comes round
        if mode == "tunnel":
            inner_a, inner_b = INNER[a.version]
            ab_send, ba_send = tunnel(ab, inner_a, inner_b), tunnel(ba, inner_b, inner_a)
        else:
            ab_send, ba_send = transport(ab), transport(ba)
        session(cb, ab_send, ba_send, DATA_SEGMENTS, size)
        sealers += [ab.sealer, ba.sealer]
    wrap = SaFlow(
        make_sa(
            rng, 0x7480, V4_A, V4_B, algorithm=CBC_AES, auth_algorithm="hmac(sha256)", esn=True
        ),
        V4_A,
        V4_B,
    )
    for seq64 in range(WRAP - 3, WRAP + 3):
        send_udp(cb, wrap, seq64, filler(43 + seq64 - WRAP, seq64 & 0xFF), NO_FAULT)  # pads 9-14
    sealers.append(wrap.sealer)
    desc = (
        "30 SA pairs 0x7401-0x741e (+0x100 back): cbc(aes) 128/192/256, cbc(des3_ede), "
        "rfc3686(ctr(aes)), ecb(cipher_null) x hmac md5/sha1/sha256/sha384/sha512, "
        "IPv4/IPv6 transport/tunnel in turn, ESN on every other; "
        "cbc(aes)+hmac(sha256) ESN SA 0x7480 across 2^32"
    )
    return cb.scenario("encauth", desc, tuple(sealers), facts={"esn_wraps": 1})


def _udp_flow(rng: random.Random, spi: int, cipher: str, auth: str, v6: bool = False) -> SaFlow:
    a, b = (V6_A, V6_B) if v6 else (V4_A, V4_B)
    key_bytes = 24 if cipher == CBC_DES3 else None
    sealer = make_sa(rng, spi, a, b, algorithm=cipher, auth_algorithm=auth, key_bytes=key_bytes)
    return SaFlow(sealer, a, b)


def encauth_faults(seed: int = 1) -> Scenario:
    """CBC IV reuse, chained CBC IVs, ragged ciphertexts, bad padding, bad ICVs."""
    rng, cb = random.Random(seed), CaptureBuilder(seed)
    # 0x7501, IPv6: seq 5 and 9 are built from the sequence number after them (the esp6
    # GSO fault, primer s7: esp6_xmit takes the IV's number after the GSO increment), so
    # echainiv gives them the IVs of seq 6 and 10, which seq 6 and 10 then use again; each
    # of those carries the same datagram as the packet before: equal first cipher blocks.
    reuse = _udp_flow(rng, 0x7501, CBC_AES, "hmac(sha256)", v6=True)
    for seq in range(1, 13):
        fault = NO_FAULT
        if seq in (5, 9):
            fault = Fault(iv=IvSeqOffset(1), tags=("iv_reused_later",))
        elif seq in (6, 10):
            fault = Fault(tags=("iv_reuse",))
        payload = filler(64, 8 * (seq - 1 if seq in (6, 10) else seq))
        send_udp(cb, reuse, seq, payload, fault)
    # 0x7502: every IV after the first is the last cipher block of the packet before.
    chained = _udp_flow(rng, 0x7502, CBC_AES, "hmac(sha1)")
    for seq in range(1, 11):
        fault = NO_FAULT if seq == 1 else Fault(iv=IvChained(), tags=("iv_chained",))
        send_udp(cb, chained, seq, filler(48, seq), fault)
    # 0x7503-0x7506: one or two broken packets among sound ones.
    broken = {
        0x7503: (CBC_AES, "hmac(sha256)", {3: Trailer(ragged=4), 5: Trailer(bad_pad=True)}),
        0x7504: (CBC_DES3, "hmac(sha1)", {3: Trailer(ragged=4), 4: Trailer(bad_pad=True)}),
        0x7505: (CTR_AES, "hmac(sha512)", {}),
        0x7506: (NULL_CIPHER, "hmac(sha384)", {}),
    }
    flows = [reuse, chained]
    for spi, (cipher, auth, trailers) in broken.items():
        flow = _udp_flow(rng, spi, cipher, auth)
        for seq in range(1, 7):
            trailer = trailers.get(seq)
            if trailer is not None:
                tag = "ragged_ciphertext" if trailer.ragged else "bad_padding"
                fault = Fault(trailer=trailer, tags=(tag,))
            elif seq == 2 and not trailers:
                fault = Fault(corrupt_icv=True, tags=("bad_icv",))
            else:
                fault = NO_FAULT
            send_udp(cb, flow, seq, filler(30 + seq, seq), fault)
        flows.append(flow)
    desc = (
        "cbc(aes) SA 0x7501 (IPv6): seq 6, 10 repeat the IVs of 5, 9; 0x7502: IVs chained "
        "from the previous packet's last block; 0x7503 (cbc(aes)), 0x7504 (cbc(des3_ede)): "
        "a ciphertext 4 bytes past a whole block, bad padding; 0x7505 (ctr), 0x7506 (null): "
        "a bad ICV"
    )
    facts = {"iv_repeats": 2, "iv_chained": 9, "ragged_ciphertexts": 2, "bad_padding": 2}
    facts["bad_icvs"] = 2
    return cb.scenario("encauth-faults", desc, tuple(f.sealer for f in flows), facts=facts)
