"""The ESP datagrams of one capture as reconcile reads them: once, in capture order.

In: a capture path, the UDP ports of ESP-in-UDP and, for the receiver's
capture with keys, an ``SaTable``: then every frame also goes through the
analysis's own pass (the engine and the per-frame path, as ``analyze``
runs them) in the same reading, and each packet carries the receiver
model's verdict of it (analyze's ``receiver`` column). Out: ``WireReader``,
an iterator of ``WirePacket`` that counts the frames that are not whole
ESP datagrams. Raises ``CaptureError`` (from the reader) for a capture it
cannot read, ``KeyFileError`` for a bad Decryption Secrets Block.

Each ESP datagram (outer IPv4/IPv6, ESP or ESP in UDP; not outer
fragments, nor ESP inside tunnels) is read as (SPI, 64-bit sequence
number, digest of the ESP bytes from the SPI to the end, outer header:
addresses, UDP ports, traffic class and TTL / hop limit).
The high half of the number is inferred per SPI as RFC 4303 A2.2 does (the
one that puts it closest to the highest seen, decode/esn.py's own rule), so a
join on it holds across a 32-bit wrap.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from espforensics.analyzer.collector import fewer_collections
from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.capture import Capture, open_capture
from espforensics.decode.digest import esp_digest
from espforensics.decode.esn import EsnTracker
from espforensics.decode.esp import EspLocation, locate_esp, parse_esp_header
from espforensics.decode.inner import ntop
from espforensics.decode.ip import IpMarks, parse_ip, parse_marks
from espforensics.decode.link import ETH_IPV4, ETH_IPV6, parse_link
from espforensics.engine import Engine, SteadyRows, deliver
from espforensics.errors import MalformedPacket
from espforensics.keys import SaTable
from espforensics.model.options import Options
from espforensics.model.records import DecryptionSecrets, Frame, PacketRecord

# The steady lane's rows are the packets the receiver check accepts (tables/packets.py).
_LANE_VERDICT = "accept"


@dataclass(frozen=True, slots=True, eq=False)
class Outer:
    """A datagram's outer header, as far as the join compares it (one object per
    distinct header of a capture, shared by its packets: compared by identity, its
    fields by reconcile/outer.py)."""

    src: str
    dst: str
    sport: int | None  # UDP ports of ESP-in-UDP, else None
    dport: int | None
    version: int  # 4 or 6
    traffic_class: int  # IPv4 TOS / IPv6 Traffic Class: DSCP and ECN
    hops: int  # IPv4 TTL / IPv6 Hop Limit


class WirePacket(NamedTuple):
    """One ESP datagram as a capture holds it (a tuple, as ``Frame``: one is made per
    packet of both captures, at a third of a frozen dataclass's cost)."""

    frame: int
    ts_ns: int
    spi: int
    seq64: int
    digest: bytes  # of the ESP bytes, SPI to the end
    outer: Outer
    verdict: str | None = None  # the receiver model's, when read through the analysis


class _Decoder:
    """Frame -> ``WirePacket`` or None, with the per-SPI state the number's high half
    needs (the highest number seen) and the shared outer headers."""

    def __init__(self, natt_ports: frozenset[int]) -> None:
        self.natt_ports = natt_ports
        self._tops: dict[int, int] = {}
        # one Outer per distinct raw header: the addresses are written out once
        self._outers: dict[tuple[bytes, bytes, int | None, int | None, IpMarks], Outer] = {}

    def __call__(self, frame: Frame) -> WirePacket | None:
        try:
            link = parse_link(frame.linktype, frame.data)
            if link.ethertype not in (ETH_IPV4, ETH_IPV6):
                return None
            data = frame.data[link.offset :]
            ip = parse_ip(data)
            if ip.frag_id is not None:
                return None
            where = locate_esp(ip, data, self.natt_ports)
            if not isinstance(where, EspLocation):
                return None
            spi, seq = parse_esp_header(data, where.offset)
            marks = parse_marks(data)
        except MalformedPacket:
            return None
        top = self._tops.get(spi)
        seq64 = seq if top is None else EsnTracker.nearest(top, seq)  # RFC 4303 A2.2
        self._tops[spi] = seq64 if top is None else max(top, seq64)
        digest = esp_digest(data[where.offset : ip.total_len])
        raw = (ip.src, ip.dst, where.udp_sport, where.udp_dport, marks)
        outer = self._outers.get(raw)
        if outer is None:
            sport, dport = where.udp_sport, where.udp_dport
            outer = Outer(ntop(ip.src), ntop(ip.dst), sport, dport, ip.version, *marks)
            self._outers[raw] = outer
        return WirePacket(frame.number, frame.ts_ns, spi, seq64, digest, outer)


class WireReader:
    """The ESP packets of one capture, in capture order; iterate once.

    ``esp`` and ``other`` count the frames read so far that are and are not
    whole ESP datagrams. With ``sas`` the frames are read through the
    analysis's pass as well; its records come out in capture order, a
    batch behind at the most, and each packet waits for its frame's record.
    """

    def __init__(
        self, path: str | os.PathLike[str], natt_ports: frozenset[int], sas: SaTable | None = None
    ) -> None:
        self.path = os.fspath(path)
        self.esp = 0
        self.other = 0
        self._capture: Capture = open_capture(path)
        self._sas = sas
        self._decode = _Decoder(natt_ports)

    def __iter__(self) -> Iterator[WirePacket]:
        try:
            source = self._plain() if self._sas is None else self._analyzed(self._sas)
            for packet in source:
                if packet is None:
                    self.other += 1
                else:
                    self.esp += 1
                    yield packet
        finally:
            self._capture.close()

    def close(self) -> None:
        self._capture.close()

    def _plain(self) -> Iterator[WirePacket | None]:
        for item in self._capture:
            if isinstance(item, Frame):
                yield self._decode(item)

    def _analyzed(self, sas: SaTable) -> Iterator[WirePacket | None]:
        """The frames through the analysis (engine/run.py) and the decoder alike: each
        packet with the receiver model's verdict of its frame's outermost ESP layer."""
        options = Options(natt_ports=self._decode.natt_ports)
        analyzer = FrameAnalyzer(sas, options, self.path)
        self._decode.natt_ports = analyzer.natt_ports  # the SAs' own encap ports too
        engine = Engine(analyzer, options)
        waiting: deque[tuple[int, WirePacket | None]] = deque()
        verdicts = _Verdicts()

        def tapped() -> Iterator[Frame | DecryptionSecrets]:
            for item in self._capture:
                if isinstance(item, Frame):
                    waiting.append((item.number, self._decode(item)))
                yield item

        try:
            with fewer_collections():
                for row in engine.iter_rows(tapped()):
                    deliver(row, verdicts)
                    for frame, verdict in verdicts.take():
                        number, packet = waiting.popleft()
                        assert number == frame, "the analysis releases records in capture order"
                        if packet is None or not verdict:
                            yield packet
                        else:
                            yield packet._replace(verdict=verdict)
        finally:
            engine.close()


class _Verdicts:
    """The (frame, receiver verdict) of each frame the engine's rows release (a ``RowSink``);
    a frame's inner ESP layers (``layer`` above 1) are not the receiver's verdict of it."""

    def __init__(self) -> None:
        self._said: list[tuple[int, str]] = []

    def observe(self, rec: PacketRecord) -> None:
        if rec.layer == 1:
            self._said.append((rec.frame, rec.receiver))

    def observe_rows(self, rows: SteadyRows) -> None:
        said = [(rec.frame, rec.receiver) for rec in rows.records if rec.layer == 1]
        said += [(int(frame), _LANE_VERDICT) for frame in rows.frame.tolist()]
        said.sort()
        self._said += said

    def take(self) -> list[tuple[int, str]]:
        """What the rows since the last call released, in frame order."""
        said, self._said = self._said, []
        return said
