"""The per-frame path: one frame in, the records it releases out; the capture's state.

In: frames (``FrameAnalyzer.process``) and Decryption Secrets Blocks
(``add_secrets``), an ``SaTable`` and ``Options``. Out: every record
exactly once, in capture order (``process`` returns those now released,
``finish`` the rest), and the checks' findings. Raises ``KeyFileError``
for a bad Decryption Secrets Block; a frame that cannot be decoded is a
record with verdict ``undecodable`` or ``truncated``, never an exception.
The engine (engine/run.py) sends here every frame its steady lane does not
take, and with ``Options(steady_lane=False)`` every frame: the reference.

Stages per frame, each once and forward: link -> outer IP -> (reassembly,
analyzer/fragments.py) -> (a tunnel, decode/tunnel.py: the link or IP
header it carries, and on from there, at most ``MAX_TUNNELS``) -> ESP
location -> flow and SA (analyzer/flows.py) -> the receiver's steps in
their declared order (analyzer/receive.py: header, open, ESN place,
verdict and plaintext, the ESP header searched where it really is) ->
inner ESP layers (analyzer/layers.py) -> checks -> records out in capture
order (analyzer/waiting.py). A datagram without ESP that is an ICMP error quoting an
ESP packet gets that packet's SPI and sequence number (decode/icmp.py), and
reaches no SA. Fragments that do not complete a datagram are held
back (bounded by the reassembler's limits) so that their ``detail`` can
say what became of the datagram. docs/architecture.md says who owns which
state and in which order held records are given up.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from espforensics.analyzer.esn_place import EsnPlacement
from espforensics.analyzer.flows import FlowTable
from espforensics.analyzer.fragments import Fragments
from espforensics.analyzer.layers import MAX_LAYERS, Layer, may_nest, next_layer
from espforensics.analyzer.placement import PlacementSearch
from espforensics.analyzer.receive import Receiver
from espforensics.analyzer.waiting import Run, Waiting
from espforensics.checks import Flow, Holds, SaState, make_checks
from espforensics.checks.context import Receiving
from espforensics.decode.esp import (
    ESP_HEADER_LEN,
    SPI_LEN,
    NotEsp,
    locate_esp,
    parse_esp_header,
    protocol_name,
)
from espforensics.decode.icmp import QuotedEsp, quoted_esp
from espforensics.decode.ip import PROTO_AH, PROTO_ESP, PROTO_UDP, OuterIp, parse_ip
from espforensics.decode.link import (
    ETH_IPV4,
    ETH_IPV6,
    LINKTYPE_ETHERNET,
    LINKTYPE_RAW,
    parse_link,
)
from espforensics.decode.nested import NestedEsp
from espforensics.decode.reassembly import Expired
from espforensics.decode.tunnel import TUNNEL_PROTOS, unwrap
from espforensics.errors import MalformedPacket, Truncated
from espforensics.keys import SaTable
from espforensics.keys.validate import reserved_notes
from espforensics.keys.wireshark import secrets_block_sas
from espforensics.model.enums import IvScheme, Proto, Verdict
from espforensics.model.options import Options
from espforensics.model.records import (
    DecryptionSecrets,
    Finding,
    Frame,
    PacketRecord,
    SaKey,
    UnusedSa,
)
from espforensics.receiver.prediction import ReceiverHost, ReceiverSa

# Records waiting behind a held one (a fragment, an SA's first IVs) at the most:
# past this the oldest hold is given up, so memory stays bounded by it.
MAX_WAITING = 65536
# The same for a record a check holds (an SA whose IV constant is not settled yet):
# fewer, because a capture of many short-lived SAs holds one per SA.
MAX_BEHIND_CHECK = 4096
# Tunnels opened around one frame's ESP datagram at the most (decode/tunnel.py).
MAX_TUNNELS = 4
# The datagrams whose fragments are reassembled: those that may carry ESP.
_REASSEMBLED = frozenset({PROTO_ESP, PROTO_UDP, PROTO_AH, *TUNNEL_PROTOS})


# Records that may leave, in capture order, and the caller's runs among them (``queue``)
Released = tuple[PacketRecord | Run, ...]
__all__ = ["MAX_LAYERS", "FrameAnalyzer", "Layer", "Released", "Run"]


@dataclass(frozen=True, slots=True)
class Finished:
    """What the checks hand the summary once every frame is read (``FrameAnalyzer.finished``).

    ``findings``: every check's, in the registry's order; ``iv_schemes``: the IV
    scheme of each SA the IV derivation check could name (``IvDerivationCheck.schemes``:
    one left out is unknown), ``no_ivs`` the packets it had no IV to read from
    (``IvDerivationCheck.no_ivs``); ``receivers``: the receiver
    model's prediction (per destination, per receiving state); ``unused_sas``: the
    key files' SAs no packet used, with the likely reason.
    """

    findings: tuple[Finding, ...]
    iv_schemes: dict[SaKey, IvScheme]
    no_ivs: dict[SaKey, int]
    receivers: tuple[tuple[ReceiverHost, ...], tuple[ReceiverSa, ...]]
    unused_sas: tuple[UnusedSa, ...]


class FrameAnalyzer:
    """Walks each frame forward through the stages once; the engine's handle on them.

    Owns nothing but the order: fragments.py owns the reassembly, flows.py the
    flows and SA states, esn_place.py the ESN SAs waiting for their first
    packet's place, waiting.py the records waiting behind a held one, and each
    check its own state (docs/architecture.md, "Who owns which state");
    receive.py runs the receiver's steps over an ESP packet and hands it to
    the checks.
    """

    def __init__(self, sas: SaTable, options: Options, origin: str = "<capture>") -> None:
        self.sas = SaTable()
        self.sas.merge(sas)
        self.options = options
        self._natt_ports = self._ports()
        self.origin = origin
        self._holds = Holds()
        self._fragments = Fragments(self._holds, options.reassembly_timeout_s)
        self._flows = FlowTable(self.sas)
        self._esn = EsnPlacement(self._holds)
        self._waiting = Waiting(self._holds)
        self._limits = (MAX_BEHIND_CHECK, MAX_WAITING)  # read here: tests lower them
        self.checks = make_checks(self.sas, self._holds)
        self._each = self.checks.order
        self._keys, self._ivd = self.checks.keys, self.checks.iv_derivation
        self.findings: list[Finding] = []
        # The SA states the frames processed here reached (the engine clears it): the
        # steady lane's plans for an SA hold only while no other frame reaches it.
        self.touched: set[SaState] = set()
        # The flow table's own method, not this object's: the receiver holding a method of
        # the analyzer would make a cycle, and a run's state freed only by a full collection
        # (60,000 SAs: 1.26 million objects alive after the run, 36 MB more at its peak).
        search = PlacementSearch(self.sas, self._flows.flow_for)
        self._receiver = Receiver(self._each, self._esn, search, self.touched)

    @property
    def busy(self) -> bool:
        """Are records held or waiting? Then every frame must go through ``process``."""
        return bool(self._waiting)

    @property
    def natt_ports(self) -> frozenset[int]:
        return self._natt_ports

    @property
    def unused_sas(self) -> tuple[UnusedSa, ...]:
        """The key files' SAs no packet used, with the likely reason (after ``finish``)."""
        return self._keys.unused

    def finished(self) -> Finished:
        """What the checks hand the summary, once ``finish`` ran."""
        return Finished(
            tuple(self.findings),
            self.checks.iv_derivation.schemes(),
            self.checks.iv_derivation.no_ivs(),
            self.checks.receiver.prediction(),
            self._keys.unused,
        )

    def flow_for(self, spi: int, src: bytes, dst: bytes) -> Flow:
        """The flow of (SPI, outer source, outer destination), made on first use."""
        return self._flows.flow_for(spi, src, dst)

    # -- keys inside the capture -------------------------------------------
    def add_secrets(self, item: DecryptionSecrets) -> None:
        """Load the SAs of a pcapng Decryption Secrets Block of ESP type."""
        found = secrets_block_sas(item.secrets_type, item.data, self.origin)
        if not found:
            return
        for sa in found:
            self.sas.add(sa)
        self.sas.notes.extend(reserved_notes(found))  # an SA of SPI 0 warns as from a file
        self._flows.forget_flows()
        self._natt_ports = self._ports()

    def _ports(self) -> frozenset[int]:
        """UDP ports of ESP-in-UDP: the options' and every SA's own encap port."""
        own = {sa.encap_port for sa in self.sas if sa.encap_port is not None}
        return self.options.natt_ports | own

    # -- frames: link -> outer IP -> reassembly -> ESP -> SA -> receiver -> checks
    def process(self, frame: Frame) -> Released:
        """Analyze one frame; the records now released (its own, unless records are held).

        A frame whose ESP plaintext carries ESP has a record per layer (``layer``).
        """
        return self._released(self.records(frame), frame.ts_ns)

    def records(self, frame: Frame) -> tuple[PacketRecord, ...]:
        """Analyze one frame; its own records, not put in line: for a frame that holds
        nothing (the engine's frames without ESP in a steady run), whose records the
        caller puts in line itself (``queue``) or hands on while nothing is held."""
        rec = PacketRecord(frame.number, frame.ts_ns, frame.caplen, frame.wirelen)
        if not self.options.select.frame(frame.number):
            rec.verdict = Verdict.NOT_SELECTED
            rec.detail = f"frame not selected ({self.options.select.words()})"
            return (rec,)
        pkt = self._analyze(frame, rec)
        inner = self._layers(frame, pkt) if may_nest(pkt) else ()
        if pkt is not None and pkt.state.tentative is not pkt:
            self._receiver.hand(pkt)
        for layer in inner:
            if layer.pkt is not None and layer.pkt.state.tentative is not layer.pkt:
                self._receiver.hand(layer.pkt)
        return (rec, *(layer.rec for layer in inner)) if inner else (rec,)

    def may_queue(self) -> bool:
        """May a run wait in line now (``queue``)? Not while a fragment or an ESN first
        packet is held: fragments expire by each processed frame's timestamp and an ESN
        first packet waits for its SA's next packet, so every frame goes through
        ``process`` then. The IV derivation check's holds alone, it may."""
        return not (self._fragments or len(self._esn))

    def queue(self, run: Run, ts_ns: int) -> Released:
        """Put the caller's ``run`` (of frames that hold nothing, one record each, after
        every frame processed; ``ts_ns`` its last one's time; ``may_queue``) in line, bound
        what waits as ``process`` does after each frame; what is released now.

        With only the IV derivation check's holds, ``_bound`` gives up the oldest hold
        (the head is then no fragment) once more than the smaller limit wait, and
        nothing leaves the line in between: the run goes in parts, each up to the record
        at which a bound fires, and ``_bound`` runs after each as after that frame (its
        expiry of fragments has none to expire); once nothing is held or waiting, the
        rest leaves at once, as ``process`` lets a frame's records go then. The rows
        leave with the first part released (``Run.part`` 0): nothing lies between the
        parts, none of them held.
        """
        waiting, limit = self._waiting, min(self._limits)
        out: list[PacketRecord | Run] = []
        frame, left, part = run.frame, run.records, 0
        while left:
            if not waiting:  # nothing held or waiting any more: the rest leaves now
                out.append(Run(frame, left, part))
                break
            n = min(left, max(1, limit + 1 - len(waiting)))
            waiting.push_run(Run(frame, n, part))
            out.extend(self._release(self._bound(ts_ns)))
            frame, left, part = frame + n, left - n, part + 1
        return tuple(out)

    def _released(self, recs: tuple[PacketRecord, ...], ts_ns: int) -> Released:
        """A frame's records, or those now released when records are held before them."""
        if not self._waiting:
            return recs
        self._waiting.push(recs)
        return tuple(self._release(self._bound(ts_ns)))

    def _analyze(self, frame: Frame, rec: PacketRecord) -> Receiving | None:
        """Fill ``rec``; the packet for the checks when the frame carries ESP."""
        cut = frame.caplen < frame.wirelen
        return self._link(frame, rec, frame.linktype, frame.data, (), cut, MAX_TUNNELS)

    def _link(
        self,
        frame: Frame,
        rec: PacketRecord,
        linktype: int,
        data: bytes,
        outer: tuple[str, ...],
        cut: bool,
        tunnels: int,
    ) -> Receiving | None:
        """A frame of ``linktype``: the captured one, or one a tunnel carries behind the
        carriers ``outer``. A header cut short is ``truncated`` when the bytes were cut
        (by the snap length, or by the mirror that sent them), else ``undecodable``."""
        try:
            link = parse_link(linktype, data)
            words = (*outer, *link.carriers)
            if words:
                rec.carriers = " ".join(words)
            if link.ethertype not in (ETH_IPV4, ETH_IPV6):
                rec.detail = f"not IP: {link.named} {link.ethertype:#06x}"
                return None
            return self._ip(frame, rec, data[link.offset :], cut, tunnels)
        except Truncated as exc:
            rec.verdict = Verdict.TRUNCATED if cut else Verdict.UNDECODABLE
            rec.detail = str(exc)
        except MalformedPacket as exc:
            rec.verdict = Verdict.UNDECODABLE
            rec.detail = str(exc)
        return None

    def _ip(
        self, frame: Frame, rec: PacketRecord, data: bytes, cut: bool, tunnels: int
    ) -> Receiving | None:
        """The IP header at the start of ``data``: its datagram, whole or rebuilt."""
        ip = parse_ip(data, through_ah=True)
        rec.ip_version, rec.src = ip.version, self._flows.name(ip.src)
        rec.dst = self._flows.name(ip.dst)
        if ip.frag_id is None:
            return self._whole(frame, rec, ip, data[: ip.total_len], cut, tunnels)
        return self._fragment(frame, rec, ip, data, cut, tunnels)

    def _fragment(
        self, frame: Frame, rec: PacketRecord, ip: OuterIp, data: bytes, cut: bool, tunnels: int
    ) -> Receiving | None:
        if ip.proto not in _REASSEMBLED:
            rec.detail = f"fragment of a {protocol_name(ip.proto)} datagram"
            return None
        if cut or len(data) < ip.total_len:
            rec.verdict = Verdict.TRUNCATED
            rec.detail = "fragment cut by the snap length; its datagram cannot be rebuilt"
            return None
        done = self._fragments.add(rec, ip, data, frame.ts_ns)
        if done is None:
            return None
        rec.fragments = len(done.frames)
        whole = parse_ip(done.packet, through_ah=True)
        pkt = self._whole(frame, rec, whole, done.packet, cut, tunnels)
        if rec.detail == "":
            rec.detail = f"reassembled from {len(done.frames)} fragments"
        return pkt

    def _whole(
        self, frame: Frame, rec: PacketRecord, ip: OuterIp, data: bytes, cut: bool, tunnels: int
    ) -> Receiving | None:
        """A whole datagram: the one a tunnel carries (decode/tunnel.py), else its ESP."""
        carried = unwrap(ip, data, self._natt_ports) if tunnels else None
        if carried is None:
            return self._datagram(rec, ip, data)
        outer = (*rec.carriers.split(), carried.word)
        linktype = LINKTYPE_ETHERNET if carried.ethernet else LINKTYPE_RAW
        rest, cut = data[carried.offset :], cut or carried.cut
        return self._link(frame, rec, linktype, rest, outer, cut, tunnels - 1)

    def _datagram(self, rec: PacketRecord, ip: OuterIp, data: bytes) -> Receiving | None:
        """The ESP packet of a whole datagram: located, its SA found, opened, placed."""
        loc = locate_esp(ip, data, self._natt_ports)
        if isinstance(loc, NotEsp):
            rec.udp_sport, rec.udp_dport = loc.udp_sport, loc.udp_dport
            rec.detail = f"AH, then {loc.reason}" if ip.ah else loc.reason
            quote = quoted_esp(ip, data, self._natt_ports)
            if quote is not None:
                self._quoted(rec, quote)
            if loc.payload_word is not None and loc.payload_word in self.sas.spis:
                # ESP-in-UDP on a port not given? (checks/keys.py names the SA's likely port)
                self._keys.observe_udp(loc.payload_word, loc.udp_sport, loc.udp_dport)
            return None
        rec.proto, rec.udp_sport, rec.udp_dport = loc.proto, loc.udp_sport, loc.udp_dport
        rec.expected_offset = rec.esp_offset = loc.offset
        if len(data) < loc.offset + ESP_HEADER_LEN:  # RFC 4303 s2: no whole ESP header
            self._headless(rec, ip, data, loc.offset)
            return None
        spi, seq = parse_esp_header(data, loc.offset)
        if not self.options.select.spi(spi):  # not analyzed: no flow, no check sees it
            rec.proto, rec.spi, rec.seq = Proto.OTHER, spi, seq
            rec.verdict = Verdict.NOT_SELECTED
            rec.detail = f"SPI {spi:#010x} not selected ({self.options.select.words()})"
            return None
        flow = self.flow_for(spi, ip.src, ip.dst)
        self.touched.add(flow.state)
        return self._receiver.receive(rec, ip, data, loc, flow, seq)

    def _quoted(self, rec: PacketRecord, quote: QuotedEsp) -> None:
        """An ICMP error quoting an ESP packet: its header, named; no packet of its SA."""
        rec.quoted_spi, rec.quoted_seq = quote.spi, quote.seq
        rec.quoted_src, rec.quoted_dst = self._flows.name(quote.src), self._flows.name(quote.dst)
        seq = "" if quote.seq is None else f" seq {quote.seq}"
        esp = "ESP in UDP" if quote.udp else "ESP"
        rec.detail = (
            f"{quote.error} quoting {esp} of SPI {quote.spi:#010x}{seq}"
            f" ({rec.quoted_src} -> {rec.quoted_dst})"
        )

    def _layers(self, frame: Frame, pkt: Receiving | None) -> list[Layer]:
        """The ESP packets inside ``pkt``'s plaintext, layer by layer (RFC 4303 s3.1)."""
        layers: list[Layer] = []
        while pkt is not None:
            found = next_layer(pkt, frame.number, frame.ts_ns, len(layers))
            if found is None:
                break
            rec, nested = found
            pkt = self._inner(rec, nested)
            layers.append(Layer(rec, pkt))
        return layers

    def _inner(self, rec: PacketRecord, found: NestedEsp) -> Receiving | None:
        """Analyze an ESP packet found inside another's plaintext, as a datagram of its own."""
        ip = found.ip
        rec.ip_version, rec.src = ip.version, self._flows.name(ip.src)
        rec.dst = self._flows.name(ip.dst)
        try:
            return self._datagram(rec, ip, found.data)
        except (Truncated, MalformedPacket) as exc:  # a decrypted packet is never cut short
            rec.verdict, rec.detail = Verdict.UNDECODABLE, str(exc)
        return None

    def _headless(self, rec: PacketRecord, ip: OuterIp, data: bytes, offset: int) -> None:
        """An ESP packet without its whole 8-byte header: cut by the capture (``truncated``)
        or whole and too short (``short``). With its first 4 bytes there it names its SPI,
        and its SA is one the capture holds (checks/unused.py), though no check sees it."""
        have = len(data) - offset
        rec.esp_len = ip.total_len - offset
        if len(data) < ip.total_len:
            rec.verdict, rec.detail = Verdict.TRUNCATED, f"ESP header cut at {have} bytes"
        else:
            rec.verdict = Verdict.SHORT
            rec.detail = f"ESP packet of {have} bytes: shorter than its 8-byte header (RFC 4303 s2)"
        if have < SPI_LEN:
            return
        rec.spi = int.from_bytes(data[offset : offset + SPI_LEN])
        flow = self.flow_for(rec.spi, ip.src, ip.dst)
        if flow.state.sa is not None:
            rec.algorithm = flow.state.sa.suite
        self._keys.observe_flow(flow, ip.src, ip.dst)
        self.touched.add(flow.state)

    # -- holds: what waits, and for how long ---------------------------------
    def _bound(self, ts_ns: int) -> list[Expired]:
        """Datagrams given up by ``ts_ns``; past a limit, stop waiting for the oldest hold."""
        expired = self._fragments.expire(ts_ns)
        behind_check, most = self._limits
        waiting, head = self._waiting, self._waiting.head
        if len(waiting) > behind_check and head not in self._fragments:
            self._force(head)
        elif len(waiting) > most:
            if head in self._fragments:
                why = f"incomplete when {most} later frames were waiting behind it"
                expired += self._fragments.give_up(head, why)
            else:
                self._force(head)
        return expired

    def _force(self, upto: int | None) -> None:
        """Every holder but the fragments gives up waiting for frames up to ``upto``.

        The declared order: the IV derivation check settles the SAs probing since
        then, then ESN placement confirms the first packets waiting for their place
        and hands them to the checks (where the IV derivation check may hold them
        again).
        """
        if upto is not None:
            self._ivd.force(upto)
        for first in self._esn.force(upto):
            self._receiver.hand(first)

    def finish(self) -> Iterator[PacketRecord | Run]:
        """Yield the records still held at the end; collect every check's findings.

        Order: the fragments are drained, ESN placement confirms every first
        packet still waiting (the checks see it), then each check finishes in
        the registry's order (checks/__init__.py; the IV derivation check
        settles its probing SAs there).
        """
        expired = self._fragments.drain()
        self._force(None)
        for check in self._each:
            self.findings.extend(check.finish())
        yield from self._release(expired)

    def _release(self, expired: list[Expired]) -> Iterator[PacketRecord | Run]:
        self._fragments.settle(expired)
        yield from self._waiting.release()
