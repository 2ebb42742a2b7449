"""Building blocks of scenarios: lab SAs, ESP flows, TCP talk, the frame log.

In: a seed (``random.Random``) for keys and IV constants, addresses and
payloads. Out: ``EspSealer`` objects for lab SAs (``make_sa``), ``SaFlow``
(one SA direction with its outer addressing and sequence counter),
``TcpTalk`` (TCP sequence bookkeeping) and ``CaptureBuilder``, which
numbers frames, stamps them and keeps their ``FrameTruth``. Raises
``ValueError`` from the packers for impossible packets.
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field, replace
from typing import Any

from espforensics.keys.sa import (
    AEAD_KEY_LAYOUT,
    CBC_AES,
    CBC_DES3,
    CIPHER_LAYOUT,
    CTR_AES,
    HMAC_DIGESTS,
    NULL_CIPHER,
    RFC4106,
    Secret,
    SecurityAssociation,
)
from espforensics.model.enums import Verdict
from espforensics.model.records import DecryptionSecrets, Frame
from espforensics.synth.esp import CLEAN, EspSealer, IvOverride, Trailer
from espforensics.synth.link import ETHERNET, Link, frame_ip
from espforensics.synth.packets import (
    PROTO_ESP,
    PROTO_TCP,
    PROTO_UDP,
    IpAddress,
    TcpSegment,
    ip_header_len,
    ip_packet,
    tcp_bytes,
    udp_bytes,
)
from espforensics.synth.truth import CaptureFormat, FrameTruth, Scenario

START_NS = 1_735_689_600_000_000_000  # 2025-01-01T00:00:00Z
NATT_PORT = 4500  # RFC 3948 s2
TEXT = b"espforensics synthetic payload, lab traffic only. "
DEFAULT_SNAPLEN = 262144
NOT_ESP = FrameTruth(0, Verdict.NOT_ESP)
_UNCUT = frozenset({Verdict.NOT_ESP, Verdict.UNDECODABLE})  # verdicts a cut does not change


def ip(text: str) -> IpAddress:
    """An address object from its text form."""
    return ipaddress.ip_address(text)


def filler(size: int, offset: int = 0) -> bytes:
    """``size`` bytes of readable text (never ends in a pad-like byte)."""
    reps = (size + offset) // len(TEXT) + 1
    return (TEXT * reps)[offset : offset + size]


# RFC 2404 / RFC 4868 s2.3 / RFC 2403: the ICV each HMAC is truncated to for ESP.
HMAC_ICV_BITS = {
    "hmac(md5)": 96,
    "hmac(sha1)": 96,
    "hmac(sha256)": 128,
    "hmac(sha384)": 192,
    "hmac(sha512)": 256,
}
_CIPHER_KEY_BYTES = {CBC_AES: 16, CBC_DES3: 24, CTR_AES: 16, NULL_CIPHER: 0}


def make_sa(
    rng: random.Random,
    spi: int,
    src: IpAddress,
    dst: IpAddress,
    *,
    key_bytes: int | None = None,
    icv_bits: int | None = None,
    esn: bool = False,
    esn_hi: int = 0,
    mode: str = "transport",
    encap_port: int | None = None,
    material: bytes | None = None,
    iv_constant: bytes | None = None,
    algorithm: str = RFC4106,
    auth_algorithm: str | None = None,
) -> EspSealer:
    """A lab SA with random keys and IV generator secret.

    An AEAD (rfc4106 unless said: key + salt, a seqiv constant) or, with
    ``auth_algorithm``, a cipher of ``CIPHER_LAYOUT`` (key, + 4-byte nonce for
    CTR) with an HMAC key as long as its hash (RFC 4868 s2.1.1) and the ICV
    of ``HMAC_ICV_BITS`` unless given; the IV secret is seqiv's constant for
    CTR, echainiv's salt for CBC, none for NULL.
    """
    if auth_algorithm is None:
        salt_len = AEAD_KEY_LAYOUT[algorithm][1]
        size = 16 if key_bytes is None else key_bytes
        key = rng.randbytes(size + salt_len) if material is None else material
        const = rng.randbytes(8) if iv_constant is None else iv_constant
        auth_key = None
        icv = 128 if icv_bits is None else icv_bits
    else:
        _, nonce_len, iv_len, _ = CIPHER_LAYOUT[algorithm]
        size = _CIPHER_KEY_BYTES[algorithm] if key_bytes is None else key_bytes
        key = rng.randbytes(size + nonce_len) if material is None else material
        auth_key = Secret(rng.randbytes(HMAC_DIGESTS[auth_algorithm][1]))
        const_len = 8 if algorithm == CTR_AES else iv_len
        const = rng.randbytes(const_len) if iv_constant is None else iv_constant
        icv = HMAC_ICV_BITS[auth_algorithm] if icv_bits is None else icv_bits
    sa = SecurityAssociation(
        spi=spi,
        algorithm=algorithm,
        key=Secret(key),
        src=src,
        dst=dst,
        icv_bits=icv,
        esn=esn,
        esn_hi=esn_hi,
        mode=mode,
        encap_port=encap_port,
        origin=f"synth:{spi:#x}",
        auth_algorithm=auth_algorithm,
        auth_key=auth_key,
    )
    return EspSealer(sa, const)


@dataclass(frozen=True, slots=True)
class Fault:
    """What to do differently to one ESP packet; ``tags`` go to its truth."""

    iv: IvOverride | None = None
    trailer: Trailer = CLEAN
    corrupt_icv: bool = False
    tags: tuple[str, ...] = ()
    # The 64-bit number the sender encrypts with (AAD and seqiv IV) when it is not the
    # packet's own: the ESN fault of primer s7 seals seq low 0xffffffff with hi + 1.
    sealed_seq64: int | None = None


NO_FAULT = Fault()


@dataclass(slots=True)
class SaFlow:
    """One direction of one SA: outer addressing, encapsulation, counters.

    ``encap`` is (UDP source port, UDP destination port) for ESP in UDP.
    ``known`` is False for an SA left out of the key file (unknown SPI).
    ``options``/``ext``: IPv4 options or IPv6 extension headers outside.
    """

    sealer: EspSealer
    src: IpAddress
    dst: IpAddress
    encap: tuple[int, int] | None = None
    known: bool = True
    options: bytes = b""
    ext: tuple[int, ...] = ()
    next_seq: int = 1
    ident: int = 0x1000

    @property
    def spi(self) -> int:
        return self.sealer.spi

    @property
    def header_len(self) -> int:
        """Outer header chain length, i.e. where ESP (or UDP) starts."""
        return ip_header_len(self.src.version, options=self.options, ext=self.ext)

    @property
    def esp_offset(self) -> int:
        return self.header_len + (8 if self.encap else 0)

    def take_seq(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        return seq

    def body(self, esp: bytes) -> tuple[bytes, int]:
        """The outer IP payload and protocol: ESP, or ESP in UDP (RFC 3948)."""
        if self.encap is None:
            return esp, PROTO_ESP
        return udp_bytes(self.src, self.dst, *self.encap, esp), PROTO_UDP

    def outer(self, body: bytes, proto: int) -> bytes:
        """Wrap ``body`` in the outer IP header chain."""
        self.ident += 1
        return ip_packet(
            self.src, self.dst, proto, body, ident=self.ident, options=self.options, ext=self.ext
        )

    def seal(
        self, payload: bytes, next_header: int, seq64: int | None = None, fault: Fault = NO_FAULT
    ) -> tuple[bytes, FrameTruth]:
        """The ESP packet (no outer header) and the truth about it."""
        seq = self.take_seq() if seq64 is None else seq64
        sealed_seq = seq if fault.sealed_seq64 is None else fault.sealed_seq64
        esp = self.sealer.seal(
            payload,
            next_header,
            sealed_seq,
            iv=fault.iv,
            trailer=fault.trailer,
            corrupt_icv=fault.corrupt_icv,
        )
        verdict = Verdict.OK
        if not self.known:
            verdict = Verdict.UNKNOWN_SA
        elif fault.corrupt_icv:
            verdict = Verdict.AUTH_FAIL
        elif sealed_seq != seq:
            verdict = Verdict.ESN_MISMATCH
        elif fault.trailer.faulty:
            verdict = Verdict.BAD_TRAILER
        nh: int | None = next_header
        if fault.trailer.next_header is not None:
            nh = fault.trailer.next_header
        if verdict in (Verdict.UNKNOWN_SA, Verdict.AUTH_FAIL) or fault.trailer.ragged:
            nh = None  # only a decrypting reader can know it (not from a ragged ciphertext)
        truth = FrameTruth(
            0,
            verdict,
            spi=self.spi,
            seq64=seq,
            next_header=nh,
            esp_offset=self.esp_offset,
            expected_offset=self.esp_offset,
            tags=fault.tags,
        )
        return esp, truth

    def send(
        self, payload: bytes, next_header: int, seq64: int | None = None, fault: Fault = NO_FAULT
    ) -> tuple[bytes, FrameTruth]:
        """The outer IP packet carrying one ESP packet, and its truth."""
        esp, truth = self.seal(payload, next_header, seq64, fault)
        return self.outer(*self.body(esp)), truth

    def send_tcp(self, seg: TcpSegment, fault: Fault = NO_FAULT) -> tuple[bytes, FrameTruth]:
        """Transport mode: the TCP segment, checksummed for the outer addresses."""
        return self.send(tcp_bytes(self.src, self.dst, seg), PROTO_TCP, None, fault)


@dataclass(slots=True)
class TcpTalk:
    """Sequence and acknowledgement numbers of one TCP connection."""

    client_port: int = 40112
    server_port: int = 5201
    client_seq: int = 0x1A2B3C4D
    server_seq: int = 0x5E6F7081
    clock: int = 100000

    def seg(self, from_client: bool, flags: int, data: bytes = b"") -> TcpSegment:
        """The next segment one side sends; advances its sequence number."""
        self.clock += 1
        if from_client:
            sport, dport, seq, ack = (
                self.client_port,
                self.server_port,
                self.client_seq,
                self.server_seq,
            )
        else:
            sport, dport, seq, ack = (
                self.server_port,
                self.client_port,
                self.server_seq,
                self.client_seq,
            )
        used = len(data) + (1 if flags & 0x03 else 0)  # SYN and FIN count one
        if from_client:
            self.client_seq += used
        else:
            self.server_seq += used
        ack_flag = 0 if flags == 0x02 and from_client else 0x10
        return TcpSegment(
            sport, dport, seq, ack if ack_flag else 0, flags | ack_flag, data, ts=self.clock
        )


@dataclass(slots=True)
class CaptureBuilder:
    """Collects frames in capture order with timestamps and truth.

    ``snaplen`` cuts every frame, like ``tcpdump -s``; an ESP frame that
    loses bytes to it becomes ``truncated`` in the truth.
    """

    seed: int
    snaplen: int | None = None
    step_ns: int = 120_000
    frames: list[Frame] = field(default_factory=list)
    truth: list[FrameTruth] = field(default_factory=list)
    _rng: random.Random = field(init=False)
    _ts: int = START_NS

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed ^ 0x7153)

    def emit(self, data: bytes, truth: FrameTruth, *, linktype: int = 1) -> int:
        """Record one frame; returns its number."""
        number = len(self.frames) + 1
        self._ts += self.step_ns + self._rng.randrange(self.step_ns)
        cut = data if self.snaplen is None else data[: self.snaplen]
        if len(cut) < len(data) and truth.verdict not in _UNCUT:
            truth = replace(truth, verdict=Verdict.TRUNCATED, next_header=None)
        self.frames.append(Frame(number, self._ts, len(cut), len(data), linktype, cut))
        self.truth.append(replace(truth, frame=number))
        return number

    def emit_ip(
        self, packet: bytes, truth: FrameTruth, link: Link = ETHERNET, *, outgoing: bool = True
    ) -> int:
        """Frame an IP packet for ``link`` and record it."""
        frame = frame_ip(packet, link, outgoing=outgoing)
        return self.emit(frame, truth, linktype=link.linktype)

    def retag(self, number: int, **changes: Any) -> None:
        """Change fields of an already recorded frame's truth."""
        self.truth[number - 1] = replace(self.truth[number - 1], **changes)

    def scenario(
        self,
        name: str,
        description: str,
        sas: tuple[EspSealer, ...],
        *,
        facts: dict[str, int] | None = None,
        capture_format: CaptureFormat = "pcap",
        secrets: tuple[DecryptionSecrets, ...] = (),
    ) -> Scenario:
        """Freeze what was recorded; ``sas`` are the ones the key file lists."""
        return Scenario(
            name,
            description,
            self.seed,
            tuple(self.frames),
            tuple(self.truth),
            tuple(s.sa for s in sas),
            dict(facts or {}),
            capture_format,
            self.snaplen or DEFAULT_SNAPLEN,
            secrets,
        )


V4_A = ip("192.0.2.1")
V4_B = ip("192.0.2.2")
V6_A = ip("2001:db8::1")
V6_B = ip("2001:db8::2")


def sa_pair(
    rng: random.Random,
    spis: tuple[int, int],
    a: IpAddress,
    b: IpAddress,
    *,
    encap_port: int | None = None,
    options: bytes = b"",
    ext: tuple[int, ...] = (),
    known: bool = True,
    mode: str = "transport",
    key_bytes: int | None = None,
    icv_bits: int | None = None,
    algorithm: str = RFC4106,
    esn: bool = False,
    esn_hi: int = 0,
    auth_algorithm: str | None = None,
) -> tuple[SaFlow, SaFlow]:
    """Two SAs, a -> b with ``spis[0]`` and b -> a with ``spis[1]``; ESN ones start at esn_hi."""
    flows = []
    for spi, src, dst in ((spis[0], a, b), (spis[1], b, a)):
        sealer = make_sa(
            rng,
            spi,
            src,
            dst,
            mode=mode,
            encap_port=encap_port,
            key_bytes=key_bytes,
            icv_bits=icv_bits,
            algorithm=algorithm,
            esn=esn,
            esn_hi=esn_hi,
            auth_algorithm=auth_algorithm,
        )
        encap = None if encap_port is None else (encap_port, encap_port)
        flows.append(SaFlow(sealer, src, dst, encap, known, options, ext, (esn_hi << 32) + 1))
    return flows[0], flows[1]
