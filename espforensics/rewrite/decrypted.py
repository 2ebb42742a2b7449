"""``analyze --decrypted``: the capture with each verified ESP packet replaced by its inner packet.

In: the capture path, its packets.parquet (one row per frame, in capture
order), the SAs of the key files, the target's name (its suffix picks
the format) and a binary stream. Out: every frame, in capture order with
its timestamp: a verified ESP packet as the packet it carried
(rebuild.py), every other frame as it was; returns the frames written.
Here a frame at a time (``Decryptor.frame``, ``write_decrypted_frames``):
the reference of rewrite/bulk.py's ``write_decrypted``, which the command
runs, a batch at a time, and which hands this module every packet it does
not rebuild itself.
Raises ``OutputError`` naming the target when a pcap would have to hold
two link types, ``CaptureError`` for a damaged capture (after the frames
before the damage), ``KeyFileError`` for a bad Decryption Secrets Block
(the analysis raised it first).

Which packets become their inner packet (docs/outputs.md): verdict ``ok``;
``esn_mismatch`` (its ICV verifies, with the high half in
``seq_hi_verified``, though a receiver drops it); ``esp_misplaced`` when
proven by decryption at the offset that verified (``esp_offset``);
``bad_trailer`` only when the payload's own length (inner IP length, UDP
length) confirms the end the pad length gives. Each is decrypted again
with ``crypto.context_for(sa)`` (one context per SA) at ``esp_offset``
with the seq64 that verified. Frames of an outer fragmented datagram stay
as they were (their datagram spans several frames). A packet that cannot
be rebuilt (a dummy packet, mode beet, a link type that cannot say the
inner IP version) stays as it was too, and in pcapng output says why. An
ESP datagram inside tunnels (decode/tunnel.py) is replaced inside them,
their lengths and checksums fixed (rewrite/tunnels.py).

Format: pcap (nanosecond, the capture's link type: a frame keeps its
link header, the EtherType or address family fixed) unless the target
ends in ``.pcapng``: then pcapng with one interface per link type and a
comment on each decrypted frame naming the original frame, SPI and seq.
In pcap, output frame N is capture frame N (no frame is added or dropped).
Memory: a frame and its row at a time (bulk.py: a batch), one context and
one inner IPv4 header (for the GSO rebuild) per SA.
"""

from __future__ import annotations

from pathlib import Path

from espforensics.capture import open_capture
from espforensics.capture.writer import FrameRun, PcapngStream, PcapStream, Writable
from espforensics.crypto import CipherContext, context_for
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.decode.ip import PROTO_UDP, OuterIp, parse_ip
from espforensics.decode.link import LINKTYPE_IPV4, LINKTYPE_IPV6, parse_link
from espforensics.decode.trailer import NO_NEXT_HEADER, parse_trailer
from espforensics.decode.tunnel import TUNNEL_WORDS
from espforensics.errors import MalformedPacket, OutputError
from espforensics.keys import SaTable, SecurityAssociation
from espforensics.keys.wireshark import secrets_block_sas
from espforensics.model.enums import Verdict
from espforensics.model.records import DecryptionSecrets, Frame, PacketRecord, new_tuple
from espforensics.rewrite.rebuild import (
    PROTO_IPIP,
    PROTO_IPV6,
    ip_length,
    misplaced_ipv4,
    relink,
    transport,
    tunnel,
)
from espforensics.rewrite.rows import same_frame
from espforensics.rewrite.tunnels import rewrap, walk
from espforensics.tables.packets import iter_packet_records

COLUMNS = (
    "verdict",
    "spi",
    "seq",
    "seq64",
    "seq_hi_verified",
    "esp_offset",
    "leaked",
    "fragments",
    "detail",
    "carriers",
)
TRIED = frozenset({Verdict.OK, Verdict.ESN_MISMATCH, Verdict.ESP_MISPLACED, Verdict.BAD_TRAILER})
_IP_NEXT = frozenset({PROTO_IPIP, PROTO_IPV6})
MAX_FLOWS = 65536  # (SPI, addresses) whose SA lookup is remembered
Found = tuple[SecurityAssociation, CipherContext] | None


class DecryptionKeys:
    """The SAs (the key files', then each secrets block's) and one context per SA."""

    def __init__(self, sas: SaTable, origin: str) -> None:
        self.table = SaTable()
        self.table.merge(sas)
        self._origin = origin
        self._contexts: dict[int, CipherContext] = {}
        self._found: dict[tuple[int, bytes, bytes], Found] = {}

    def add_secrets(self, item: DecryptionSecrets) -> None:
        found = secrets_block_sas(item.secrets_type, item.data, self._origin)
        for sa in found:
            self.table.add(sa)
        if found:
            self._found.clear()

    def find(self, spi: int, ip: OuterIp) -> Found:
        return self.find_addrs(spi, ip.src, ip.dst)

    def find_addrs(self, spi: int, src: bytes, dst: bytes) -> Found:
        """The SA of ``spi`` between the outer addresses, and its context."""
        key = (spi, src, dst)
        if key not in self._found:
            if len(self._found) >= MAX_FLOWS:  # a scan's many flows: bounded, looked up again
                self._found.clear()
            self._found[key] = self._find(spi, src, dst)
        return self._found[key]

    def _find(self, spi: int, src: bytes, dst: bytes) -> Found:
        sa = self.table.lookup(spi, src, dst)
        if sa is None or not sa.supported or not sa.key_usable:
            return None
        if id(sa) not in self._contexts:
            self._contexts[id(sa)] = context_for(sa)
        return sa, self._contexts[id(sa)]


def _verified_seq(rec: PacketRecord) -> int:
    """The seq64 the ICV verified with (analyzer/crypto.py): ESN's verified high half."""
    if rec.seq_hi_verified is not None:
        return rec.seq_hi_verified << 32 | (rec.seq or 0)
    return rec.seq64 or 0


def _confirmed(payload: bytes, next_header: int) -> bool:
    """Does the payload's own length field say it ends where the trailer says?"""
    if next_header in _IP_NEXT:
        return ip_length(payload) == len(payload)
    return next_header == PROTO_UDP and int.from_bytes(payload[4:6]) == len(payload)


def _relinked(frame: Frame, ip_at: int, packet: bytes) -> bytes:
    """The frame's link header, naming the packet's IP version, then the packet."""
    header = relink(frame.linktype, frame.data[:ip_at], packet[0] >> 4)
    if header is None:
        if frame.linktype in (LINKTYPE_IPV4, LINKTYPE_IPV6):
            raise MalformedPacket(f"link type {frame.linktype} cannot carry the inner IP version")
        raise MalformedPacket("its PPPoE or MPLS header is not rewritten for the inner packet")
    return header + packet


class Decryptor:
    """Turns a frame and its row into the frame to write, or the reason it stays."""

    def __init__(self, keys: DecryptionKeys) -> None:
        self.keys = keys
        self._templates: dict[int, bytes] = {}  # id(sa) -> its last inner IPv4 header

    def remember(self, sa: SecurityAssociation, head: bytes) -> None:
        """``head``: the inner IPv4 header the SA's last packet carried (the bulk writer's
        packets, rewrite/bulk.py, in capture order with this one's)."""
        self._templates[id(sa)] = head

    def rebuild(self, frame: Frame, rec: PacketRecord) -> Frame:
        """The frame with the inner packet; ``MalformedPacket`` says why it is kept as it was."""
        link = parse_link(frame.linktype, frame.data)
        tunnels = [word for word in rec.carriers.split() if word in TUNNEL_WORDS]
        layers, at_ip = walk(frame.data, link.offset, tunnels)
        ip = parse_ip(frame.data[at_ip:])
        datagram = frame.data[at_ip : at_ip + ip.total_len]
        found = self.keys.find(rec.spi or 0, ip)
        at = rec.esp_offset
        if found is None or at is None or len(datagram) < ip.total_len:
            raise MalformedPacket("no usable key for its SA")
        sa, ctx = found
        body = at + ESP_HEADER_LEN
        plain = ctx.open(
            _verified_seq(rec), datagram[body : body + ctx.iv_len], datagram[body + ctx.iv_len :]
        )
        if plain is None:
            raise MalformedPacket("its ICV does not verify again")
        trailer = parse_trailer(plain, ctx.block)
        payload, nh = plain[: trailer.payload_len], trailer.next_header
        if trailer.problem and not _confirmed(payload, nh):
            raise MalformedPacket(f"the payload's end is not proven ({trailer.problem})")
        if nh == NO_NEXT_HEADER:
            raise MalformedPacket("a dummy packet (next header 59, RFC 4303 s2.6)")
        packet = self._packet(sa, rec, datagram[: ip.header_len], datagram[:at], payload, nh)
        if layers:
            data = rewrap(frame.data, layers, at_ip, packet)
        else:
            data = _relinked(frame, link.offset, packet)
        return new_tuple(
            Frame, (frame.number, frame.ts_ns, len(data), len(data), frame.linktype, data)
        )

    def _packet(
        self,
        sa: SecurityAssociation,
        rec: PacketRecord,
        chain: bytes,
        before: bytes,
        payload: bytes,
        nh: int,
    ) -> bytes:
        """The packet replacing the datagram; ``before``: the bytes in front of the ESP header."""
        if sa.mode not in (None, "tunnel", "transport"):
            raise MalformedPacket(f"mode {sa.mode} is not rebuilt")
        inner = payload
        if rec.verdict is Verdict.ESP_MISPLACED and rec.leaked and nh == PROTO_IPIP:
            clear = before[len(before) - rec.leaked :]
            template = self._templates.get(id(sa), b"")
            try:
                inner = misplaced_ipv4(clear, template, payload)
            except MalformedPacket:
                if ip_length(payload) is None:  # neither the GSO layout nor an IP packet
                    raise
        if nh in _IP_NEXT and ip_length(inner) is None:
            raise MalformedPacket(f"next header {nh}, but the payload is no IP packet")
        if nh == PROTO_IPIP and inner[:1] == b"\x45":
            self._templates[id(sa)] = inner[:20]
        as_tunnel = sa.mode == "tunnel" or (sa.mode is None and nh in _IP_NEXT)
        return tunnel(inner, nh) if as_tunnel else transport(chain, inner, nh)

    def frame(self, frame: Frame, rec: PacketRecord) -> tuple[Frame, str]:
        """The frame to write and its comment ("" for a frame that is not ESP to decrypt)."""
        if rec.verdict not in TRIED or rec.fragments is not None:
            return frame, ""
        if rec.verdict is Verdict.ESP_MISPLACED and "proven by decryption" not in rec.detail:
            return frame, "espforensics: kept as captured: ESP header found by layout, unproven"
        try:
            out = self.rebuild(frame, rec)
        except MalformedPacket as exc:
            return frame, f"espforensics: kept as captured: {exc}"
        note = "" if rec.verdict is Verdict.OK else f" ({rec.verdict.value})"
        return out, decrypted_comment(frame.number, rec.spi or 0, _verified_seq(rec), note)


def decrypted_comment(number: int, spi: int, seq: int, note: str) -> str:
    """The pcapng comment of a decrypted frame."""
    return f"espforensics: decrypted from frame {number}: ESP SPI {spi:#010x} seq {seq}{note}"


class PcapSink:
    """A pcap of the first frame's link type; refuses a frame of another."""

    def __init__(self, out: Writable, target: Path) -> None:
        self._out, self._target = out, target
        self._stream: PcapStream | None = None

    def write(self, frame: Frame, comment: str) -> None:
        del comment  # pcap has no place for it: frame N is the capture's frame N
        if self._stream is None:
            self._stream = PcapStream(self._out, linktype=frame.linktype)
        if frame.linktype != self._stream.linktype:
            raise OutputError(
                str(self._target),
                f"frame {frame.number} has link type {frame.linktype}, the frames before "
                f"{self._stream.linktype}: a pcap holds one; name the file .pcapng",
            )
        self._stream.write(frame)

    def write_run(self, run: FrameRun) -> None:
        """``write`` of each frame of ``run``, at once when it is of the file's link type."""
        if self._stream is None and len(run):
            self._stream = PcapStream(self._out, linktype=int(run.linktype[0]))
        if self._stream is None or (run.linktype != self._stream.linktype).any():
            for frame, _ in run.frames():
                self.write(frame, "")
            return
        self._stream.write_run(run)

    def close(self) -> None:
        if self._stream is None:  # no frame: a valid empty pcap
            self._stream = PcapStream(self._out, linktype=1)


class PcapngSink:
    def __init__(self, out: Writable) -> None:
        self._stream = PcapngStream(out)

    def write(self, frame: Frame, comment: str) -> None:
        self._stream.write(frame, (comment,) if comment else ())

    def write_run(self, run: FrameRun) -> None:
        self._stream.write_run(run)

    def close(self) -> None:
        """Nothing is pending: every block is written whole."""


Sink = PcapSink | PcapngSink


def sink_for(target: Path, out: Writable) -> Sink:
    """pcapng when the target's name ends in .pcapng, else pcap."""
    return PcapngSink(out) if target.suffix.lower() == ".pcapng" else PcapSink(out, target)


def write_decrypted_frames(
    capture: Path, parquet: Path, sas: SaTable, target: Path, out: Writable
) -> int:
    """Write the decrypted copy of ``capture`` to ``out`` a frame at a time, the reference
    of rewrite/bulk.py's ``write_decrypted``; the number of frames written."""
    keys = DecryptionKeys(sas, str(capture))
    decryptor = Decryptor(keys)
    sink = sink_for(target, out)
    rows, frames = iter_packet_records(parquet, COLUMNS), 0
    with open_capture(capture) as cap:
        for item in cap:
            if isinstance(item, DecryptionSecrets):
                keys.add_secrets(item)
                continue
            rec = next(rows, None)
            if rec is None:  # the analysis stopped before this frame (a damaged capture)
                break
            same_frame(rec.frame, item.number)
            sink.write(*decryptor.frame(item, rec))
            frames += 1
    sink.close()
    return frames
