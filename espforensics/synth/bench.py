"""Benchmark captures: many Ethernet/IPv4/ESP frames, generated lazily.

In: a frame count, a seed, a mean frame size, an algorithm and a sender's
IV profile. Out: ``iter_bench_frames`` yields ``Frame`` values one at a
time (memory stays flat for millions of frames), and ``bench_sas`` gives
the two SAs for the key file. Raises ``ValueError`` for a negative count
or a profile the algorithm's IVs cannot follow.

The traffic is one bulk TCP transfer over IPv4 transport mode: full-size
data segments a -> b on SPI 0x1001 and ACKs b -> a on SPI 0x1002, mixed so
that the mean frame length is close to ``mean_size``. Every frame is really
sealed, encrypted but with GMAC and NULL (the IVs of Linux's generator: seqiv, echainiv
for CBC, none for NULL; valid
padding, to the cipher block for CBC) and every checksum is right; to stay
fast, headers are patched from templates and checksums are finished from
precomputed partial sums (RFC 1071 s2: the sum is associative).

The IV profiles (``IV_PROFILES``, primer s9: speed must not depend on
which one a capture holds): ``linux``, the IVs of Linux's generators
(seqiv, ``IV = seq64 xor c``; echainiv for CBC); ``seq``, ``IV = seq64``
(DPDK's rte_ipsec: xor and add cannot be told apart); ``counter``, an
additive counter ``IV = seq64 + c`` mod 2^64 (VPP keeps one per SA);
``random``, IVs drawn at random (CBC's 16 bytes too). ``seq`` and
``counter`` are for the 8-byte IVs of counter modes only (GMAC's too): CBC
IVs that follow a counter are a finding (RFC 3602 s2.1), not a sender
profile, and NULL has no IV (``linux`` and ``random`` send none).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator

from espforensics.keys.sa import (
    CBC_AES,
    NULL_CIPHER,
    RFC4106,
    RFC4309,
    RFC4543,
    RFC7539ESP,
    SecurityAssociation,
)
from espforensics.model.records import Frame
from espforensics.synth.builder import START_NS, V4_A, V4_B, filler, make_sa
from espforensics.synth.esp import EspSealer, build_plaintext
from espforensics.synth.link import ETH_IPV4, MAC_A, MAC_B
from espforensics.synth.packets import PROTO_ESP, PROTO_TCP, IpAddress, l4_checksum

OVERHEAD = 14 + 20 + 8 + 8 + 16  # Ethernet, IPv4, ESP header, IV, ICV (the AEADs)
TCP_HEADER = 32  # with the timestamps option, as Linux sends it
MTU_FRAME = 1514
_TCP = struct.Struct(">HHIIHHHH")
_IP = struct.Struct(">BBHHHBBH4s4s")
_TS_OPT = b"\x01\x01\x08\x0a\x00\x00\x10\x00\x00\x00\x00\x00"


# What a benchmark capture can be sealed with: (kernel name, key bytes without salt,
# integrity algorithm or None for an AEAD). cbc: AES-128-CBC + HMAC-SHA-256-128 (RFC 4868);
# gmac: AES-128-GMAC (RFC 4543, the payload in clear); null: NULL encryption (RFC 2410, no
# IV) + HMAC-SHA-256-128, as kernel selftests often configure.
BENCH_ALGORITHMS: dict[str, tuple[str, int, str | None]] = {
    "gcm": (RFC4106, 16, None),
    "ccm": (RFC4309, 16, None),
    "chacha20": (RFC7539ESP, 32, None),
    "cbc": (CBC_AES, 16, "hmac(sha256)"),
    "gmac": (RFC4543, 16, None),
    "null": (NULL_CIPHER, 0, "hmac(sha256)"),
}


IV_PROFILES = ("linux", "seq", "counter", "random")
_U64 = (1 << 64) - 1


def _iv_maker(sealer: EspSealer, profile: str, rng: random.Random) -> Callable[[int], bytes]:
    """The function giving each seq64 its IV under ``profile`` (``IV_PROFILES``)."""
    width = sealer.iv_len
    if profile == "linux":
        return sealer.iv_for
    if profile == "random":
        return lambda seq64: rng.getrandbits(8 * width).to_bytes(width, "big")
    if width != 8 or sealer.block != 4:
        raise ValueError(
            f"IV profile {profile!r} is for 8-byte counter-mode IVs, not CBC's nor NULL's (none)"
        )
    if profile == "seq":
        return lambda seq64: seq64.to_bytes(8, "big")
    if profile == "counter":
        const = rng.getrandbits(64)
        return lambda seq64: ((seq64 + const) & _U64).to_bytes(8, "big")
    raise ValueError(f"unknown IV profile {profile!r}; one of {', '.join(IV_PROFILES)}")


def _bench_sealers(seed: int, algorithm: str = "gcm") -> tuple[EspSealer, EspSealer]:
    rng = random.Random(seed)
    name, key_bytes, auth = BENCH_ALGORITHMS[algorithm]
    return (
        make_sa(rng, 0x1001, V4_A, V4_B, algorithm=name, key_bytes=key_bytes, auth_algorithm=auth),
        make_sa(rng, 0x1002, V4_B, V4_A, algorithm=name, key_bytes=key_bytes, auth_algorithm=auth),
    )


def bench_sas(seed: int = 1, algorithm: str = "gcm") -> tuple[SecurityAssociation, ...]:
    """The data (0x1001, a -> b) and ACK (0x1002, b -> a) SAs of a benchmark."""
    return tuple(s.sa for s in _bench_sealers(seed, algorithm))


def _fold(total: int) -> int:
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _words(value: int) -> int:
    return (value >> 16) + (value & 0xFFFF)


class _Segment:
    """A TCP segment template whose seq and ack are filled per frame."""

    __slots__ = ("base", "dport", "flags", "sport", "tail")

    def __init__(
        self, ends: tuple[IpAddress, IpAddress], ports: tuple[int, int], flags: int, data: bytes
    ) -> None:
        self.sport, self.dport = ports
        self.flags = (8 << 12) | flags
        self.tail = _TS_OPT + data
        blank = _TCP.pack(self.sport, self.dport, 0, 0, self.flags, 502, 0, 0) + self.tail
        self.base = 0xFFFF - l4_checksum(ends[0], ends[1], PROTO_TCP, blank)

    def pack(self, seq: int, ack: int) -> bytes:
        csum = ~_fold(self.base + _words(seq) + _words(ack)) & 0xFFFF
        head = _TCP.pack(self.sport, self.dport, seq, ack, self.flags, 502, csum, 0)
        return head + self.tail


class _Flow:
    """One SA's ESP frames: Ethernet + IPv4 header templates and counters."""

    __slots__ = ("dst", "ip_base", "iv", "mac", "sealer", "seq", "src")

    def __init__(
        self,
        sealer: EspSealer,
        ends: tuple[IpAddress, IpAddress],
        mac: bytes,
        iv: Callable[[int], bytes],
    ) -> None:
        self.sealer, self.mac, self.seq, self.iv = sealer, mac, 0, iv
        self.src, self.dst = ends[0].packed, ends[1].packed
        blank = _IP.pack(0x45, 0, 0, 0, 0x4000, 64, PROTO_ESP, 0, self.src, self.dst)
        self.ip_base = sum(struct.unpack(">10H", blank))

    def frame(self, plaintext: bytes) -> bytes:
        self.seq += 1
        esp = self.sealer.seal_raw(plaintext, self.seq, self.iv(self.seq))
        length, ident = 20 + len(esp), self.seq & 0xFFFF
        csum = ~_fold(self.ip_base + length + ident) & 0xFFFF
        ip = _IP.pack(0x45, 0, length, ident, 0x4000, 64, PROTO_ESP, csum, self.src, self.dst)
        return self.mac + ip + esp


def _data_size(mean_size: int, overhead: int = OVERHEAD, block: int = 4) -> int:
    """TCP data of a full frame: its ESP plaintext fills whole blocks, padding 0."""
    frame = max(mean_size, MTU_FRAME)
    return frame - overhead - TCP_HEADER - 2 - (frame - overhead) % block


def iter_bench_frames(
    n: int, seed: int = 1, mean_size: int = 1289, algorithm: str = "gcm", ivs: str = "linux"
) -> Iterator[Frame]:
    """``n`` Ethernet/IPv4/ESP frames (rfc4106 unless said, two SAs), built lazily.

    ``algorithm``: a key of ``BENCH_ALGORITHMS``; ``ivs``: one of ``IV_PROFILES``."""
    if n < 0:
        raise ValueError("frame count must not be negative")
    data_sa, ack_sa = _bench_sealers(seed, algorithm)
    rng = random.Random(f"bench ivs {seed}")  # not the keys' stream: the keys stay the same
    data_iv, ack_iv = _iv_maker(data_sa, ivs, rng), _iv_maker(ack_sa, ivs, rng)
    return _frames(n, mean_size, (data_sa, data_iv), (ack_sa, ack_iv))


SPI_AT = 14 + 20  # the SPI's offset in a bench frame: after its Ethernet and IPv4 headers


def with_spis(frames: Iterator[Frame], spis: int) -> Iterator[Frame]:
    """The bench frames with their SPIs rewritten to cycle over ``spis`` values from
    0x10000 (a scan, or an archive of many short-lived SAs; its SAs have no keys)."""
    for f in frames:
        spi = (0x10000 + f.number % spis).to_bytes(4, "big")
        data = f.data[:SPI_AT] + spi + f.data[SPI_AT + 4 :]
        yield Frame(f.number, f.ts_ns, f.caplen, f.wirelen, f.linktype, data)


def with_stray_spis(frames: Iterator[Frame], every: int) -> Iterator[Frame]:
    """The bench frames with every ``every``-th frame's SPI rewritten to one of its own
    (from 0x40000 + its frame number): a few one-packet SAs amid the bulk transfer."""
    for f in frames:
        if f.number % every:
            yield f
            continue
        spi = (0x40000 + f.number).to_bytes(4, "big")
        data = f.data[:SPI_AT] + spi + f.data[SPI_AT + 4 :]
        yield Frame(f.number, f.ts_ns, f.caplen, f.wirelen, f.linktype, data)


def one_packet_sas(n: int, seed: int = 1) -> tuple[list[Frame], tuple[SecurityAssociation, ...]]:
    """``n`` frames, each the one packet (a TCP ACK) of an SA of its own (rfc4106, seqiv
    IVs, its own key; SPIs 0x20001, 0x20003, ..., 192.0.2.2 -> 192.0.2.1), and those SAs
    each with its reverse, which sends nothing, as a key file of both directions lists
    them: a keyed capture of many short-lived SAs (benchmarks/bench_sa_memory.py)."""
    rng = random.Random(f"one-packet sas {seed}")
    frames: list[Frame] = []
    sas: list[SecurityAssociation] = []
    for i in range(n):
        silent = make_sa(rng, 0x20000 + 2 * i, V4_A, V4_B)
        sender = make_sa(rng, 0x20001 + 2 * i, V4_B, V4_A)
        pair = (silent, _iv_maker(silent, "linux", rng)), (sender, _iv_maker(sender, "linux", rng))
        f = next(_frames(1, 1289, *pair))  # a benchmark's first frame: the ACK, b -> a
        frames.append(Frame(i + 1, f.ts_ns + 1000 * i, f.caplen, f.wirelen, f.linktype, f.data))
        sas += [silent.sa, sender.sa]
    return frames, tuple(sas)


def _frames(
    n: int,
    mean_size: int,
    sending: tuple[EspSealer, Callable[[int], bytes]],
    acking: tuple[EspSealer, Callable[[int], bytes]],
) -> Iterator[Frame]:
    (data_sa, data_iv), (ack_sa, ack_iv) = sending, acking
    eth = ETH_IPV4.to_bytes(2, "big")
    data_flow = _Flow(data_sa, (V4_A, V4_B), MAC_B + MAC_A + eth, data_iv)
    ack_flow = _Flow(ack_sa, (V4_B, V4_A), MAC_A + MAC_B + eth, ack_iv)
    block = data_sa.block
    overhead = 14 + 20 + 8 + data_sa.iv_len + data_sa.sa.icv_len
    size = _data_size(mean_size, overhead, block)
    big = [_Segment((V4_A, V4_B), (40112, 5201), 0x18, filler(size, k * 7)) for k in range(4)]
    ack = _Segment((V4_B, V4_A), (5201, 40112), 0x10, b"")
    large_frame = overhead + TCP_HEADER + size + 2
    small_frame = overhead + TCP_HEADER + 2 + (-(TCP_HEADER + 2)) % block
    share = min(1.0, max(0.0, (mean_size - small_frame) / (large_frame - small_frame)))
    client_seq, server_seq, credit, ts = 0x1A2B3C4D, 0x5E6F7081, 0.0, START_NS
    for number in range(1, n + 1):
        credit += share
        if credit >= 1.0:
            credit -= 1.0
            segment = big[number % 4].pack(client_seq & 0xFFFFFFFF, server_seq)
            client_seq += size
            data = data_flow.frame(build_plaintext(segment, PROTO_TCP, block=block))
        else:
            segment = ack.pack(server_seq, client_seq & 0xFFFFFFFF)
            data = ack_flow.frame(build_plaintext(segment, PROTO_TCP, block=block))
        ts += 1_000 + len(data)
        yield Frame(number, ts, len(data), len(data), 1, data)
