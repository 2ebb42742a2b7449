"""The per-frame path: one frame in, the records it releases out; the capture's state.

In: frames (``FrameAnalyzer.process``) and Decryption Secrets Blocks
(``add_secrets``), an ``SaTable`` and ``Options``. Out: every record
exactly once, in capture order (``process`` returns those now released,
``finish`` the rest), and the checks' findings. Raises ``KeyFileError``
for a bad Decryption Secrets Block; a frame that cannot be decoded is a
record with verdict ``undecodable`` or ``truncated``, never an exception.
The engine (engine/run.py) sends here every frame its steady lane does not
take, and with ``Options(steady_lane=False)`` every frame: the reference.

Stages per frame: link -> outer IP -> (reassembly) -> ESP location ->
SA lookup -> ESN -> open (AEAD, or cipher and ICV) -> trailer -> inner
decode; unverified.py for an SA whose ICV is absent or not checked, or
whose cipher is not opened. Fragments that
do not complete a datagram are held back (bounded by the reassembler's
limits) so that their ``detail`` can say what became of the datagram,
and records still leave in capture order.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from espforensics.checks import Check, Flow, Holds, PacketContext, SaState, make_checks
from espforensics.checks.keys import KeyCheck
from espforensics.crypto import IV_LEN, opener
from espforensics.decode.esp import (
    ESP_HEADER_LEN,
    NotEsp,
    locate_esp,
    parse_esp_header,
    protocol_name,
)
from espforensics.decode.inner import ntop
from espforensics.decode.ip import PROTO_ESP, PROTO_UDP, OuterIp, parse_ip
from espforensics.decode.link import ETH_IPV4, ETH_IPV6, parse_link
from espforensics.decode.nested import NestedEsp, may_carry, nested_esp
from espforensics.decode.reassembly import Completed, Expired, Reassembler
from espforensics.errors import MalformedPacket, Truncated
from espforensics.esn import EsnTracker
from espforensics.keys import SaTable
from espforensics.keys.wireshark import secrets_block_sas
from espforensics.model import (
    DecryptionSecrets,
    Finding,
    Frame,
    PacketRecord,
    UnusedSa,
    Verdict,
)
from espforensics.unverified import no_icv

# Records waiting behind a held one (a fragment, an SA's first IVs) at the most:
# past this the oldest hold is given up, so memory stays bounded by it.
MAX_WAITING = 65536
# The same for a record a check holds (an SA whose IV constant is not settled yet):
# fewer, because a capture of many short-lived SAs holds one per SA.
MAX_BEHIND_CHECK = 4096


Released = tuple[PacketRecord, ...]  # records that may leave, in capture order
Layer = tuple[PacketRecord, "PacketContext | None"]  # an inner ESP layer's record, its packet
MAX_LAYERS = 4  # ESP layers of one frame analyzed at the most (the outermost is 1)
# The verdicts whose plaintext is read for an inner ESP packet (RFC 4303 s3.4.4: verified,
# or decrypted where there is no ICV to verify).
_OPENED = frozenset({Verdict.OK, Verdict.DECRYPTED_NO_ICV})


class _FewerCollections:
    """Run the cyclic GC after 50,000 allocations instead of 700 while analyses run.

    The per-frame path makes many short-lived containers and few cycles; at
    the default threshold the collector took about 6% of a run (measured on
    the bench capture: 25.7 -> 24.6 us per frame on the main thread). The
    first analysis in the process sets the threshold and the last one to end
    restores the caller's (analyses may run on several threads, as on Dask).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._saved: tuple[int, int, int] = gc.get_threshold()

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if not self._running:
                self._saved = gc.get_threshold()
                gc.set_threshold(50_000, *self._saved[1:])
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    gc.set_threshold(*self._saved)


fewer_collections = _FewerCollections()


@dataclass(frozen=True, slots=True)
class Options:
    """How to analyze a capture."""

    natt_ports: frozenset[int] = frozenset({4500})  # RFC 3948 s2
    reassembly_timeout_s: float = 30.0
    # The engine's steady lane (engine/steady.py) takes the packets whose checks it can
    # run over a batch's columns; False sends every frame down the per-frame path, the
    # reference the steady lane is tested against. The outputs are the same either way.
    steady_lane: bool = True
    batch_frames: int = 4096  # frames per batch of the engine (tests use small ones)


class FrameAnalyzer:
    """Turns frames into records; holds the per-capture state."""

    def __init__(self, sas: SaTable, options: Options, origin: str = "<capture>") -> None:
        self.sas = SaTable()
        self.sas.merge(sas)
        self.options = options
        self._natt_ports = self._ports()
        self.origin = origin
        self._reasm = Reassembler(timeout_ns=int(options.reassembly_timeout_s * 1e9))
        self._flows: dict[tuple[int, bytes, bytes], Flow] = {}
        self._names: dict[bytes, str] = {}
        self._by_sa: dict[int, SaState] = {}
        self._queue: deque[PacketRecord] = deque()
        self._fragments: dict[int, PacketRecord] = {}
        self._holds = Holds()
        self.checks: tuple[Check, ...] = make_checks(self.sas, self._holds, self.flow_for)
        self._keys = next(c for c in self.checks if isinstance(c, KeyCheck))
        # ESN SAs whose first packet verified only with a neighbour of esn_hi, by frame.
        self._tentative: OrderedDict[SaState, PacketContext] = OrderedDict()
        self._holds.on_force(self._force_tentative)
        self.findings: list[Finding] = []
        # The SA states the frames processed here reached (the engine clears it): the
        # steady lane's plans for an SA hold only while no other frame reaches it.
        self.touched: set[SaState] = set()

    @property
    def busy(self) -> bool:
        """Are records held or waiting? Then every frame must go through ``process``."""
        return bool(self._holds or self._queue)

    @property
    def natt_ports(self) -> frozenset[int]:
        return self._natt_ports

    # -- keys inside the capture -------------------------------------------
    def add_secrets(self, item: DecryptionSecrets) -> None:
        """Load the SAs of a pcapng Decryption Secrets Block of ESP type."""
        found = secrets_block_sas(item.secrets_type, item.data, self.origin)
        if not found:
            return
        for sa in found:
            self.sas.add(sa)
        self._flows.clear()
        self._natt_ports = self._ports()

    def _ports(self) -> frozenset[int]:
        """UDP ports of ESP-in-UDP: the options' and every SA's own encap port."""
        own = {sa.encap_port for sa in self.sas if sa.encap_port is not None}
        return self.options.natt_ports | own

    # -- frames -------------------------------------------------------------
    def process(self, frame: Frame) -> Released:
        """Analyze one frame; the records now released (its own, unless records are held).

        A frame whose ESP plaintext carries ESP has a record per layer (``layer``).
        """
        rec = PacketRecord(frame.number, frame.ts_ns, frame.caplen, frame.wirelen)
        pkt = self._analyze(frame, rec)
        if pkt is not None and pkt.payload and may_carry(pkt.inner_next or 0, pkt.payload):
            return self._emit(rec, pkt, frame.ts_ns, self._layers(frame, pkt))
        return self._emit(rec, pkt, frame.ts_ns)

    def _layers(self, frame: Frame, pkt: PacketContext) -> list[Layer]:
        """The ESP packets inside ``pkt``'s plaintext, layer by layer (RFC 4303 s3.1)."""
        layers: list[Layer] = []
        while pkt.payload is not None and pkt.rec.verdict in _OPENED:
            found = nested_esp(pkt.inner_next or 0, pkt.payload, pkt.ip, pkt.data)
            if found is None:
                break
            if isinstance(found, str) or len(layers) + 1 >= MAX_LAYERS:
                why = found if isinstance(found, str) else f"more than {MAX_LAYERS} ESP layers"
                pkt.rec.detail = f"{pkt.rec.detail}; {why}" if pkt.rec.detail else why
                break
            size = len(found.data)
            rec = PacketRecord(frame.number, frame.ts_ns, size, size, layer=len(layers) + 2)
            inner = self._inner(rec, found)
            layers.append((rec, inner))
            if inner is None:
                break
            pkt = inner
        return layers

    def _inner(self, rec: PacketRecord, found: NestedEsp) -> PacketContext | None:
        """Analyze an ESP packet found inside another's plaintext, as a datagram of its own."""
        ip = found.ip
        rec.ip_version, rec.src, rec.dst = ip.version, self._name(ip.src), self._name(ip.dst)
        try:
            return self._datagram(rec, ip, found.data)
        except (Truncated, MalformedPacket) as exc:  # a decrypted packet is never cut short
            rec.verdict, rec.detail = Verdict.UNDECODABLE, str(exc)
        return None

    def _emit(
        self, rec: PacketRecord, pkt: PacketContext | None, ts_ns: int, inner: Sequence[Layer] = ()
    ) -> Released:
        """Run the checks on an ESP packet and let records leave in capture order."""
        if pkt is not None and pkt.state.tentative is not pkt:
            self._observe(pkt)
        for _, deeper in inner:
            if deeper is not None and deeper.state.tentative is not deeper:
                self._observe(deeper)
        if self._holds or self._queue:
            queue = self._queue
            queue.append(rec)
            queue.extend(r for r, _ in inner)
            expired = self._reasm.expire(ts_ns)
            if len(queue) > MAX_BEHIND_CHECK and queue[0].frame not in self._fragments:
                self._holds.force(queue[0].frame)
            elif len(queue) > MAX_WAITING:
                expired += self._unblock()
            return tuple(self._release(expired))
        return (rec, *(r for r, _ in inner)) if inner else (rec,)

    def _unblock(self) -> list[Expired]:
        """Too many records wait behind the oldest held one: stop waiting for it."""
        head = self._queue[0].frame
        if head in self._fragments:
            why = f"incomplete when {MAX_WAITING} later frames were waiting behind it"
            return self._reasm.expire_frame(head, why)
        self._holds.force(head)
        return []

    @property
    def unused_sas(self) -> tuple[UnusedSa, ...]:
        """The key files' SAs no packet used, with the likely reason (after ``finish``)."""
        return self._keys.unused

    def finish(self) -> Iterator[PacketRecord]:
        """Yield the records still held at the end; collect every check's findings."""
        expired = self._reasm.drain()
        self._force_tentative(None)
        for check in self.checks:
            self.findings.extend(check.finish())
        yield from self._release(expired)

    def _release(self, expired: list[Expired]) -> Iterator[PacketRecord]:
        for exp in expired:
            self._settle(exp.frames, f"fragment of a datagram never completed: {exp.reason}")
        q, holds = self._queue, self._holds
        while q and q[0].frame not in holds:
            yield q.popleft()

    def _settle(self, frames: tuple[int, ...], detail: str) -> None:
        for n in frames:
            rec = self._fragments.pop(n, None)
            if rec is not None:
                rec.detail = detail
                self._holds.release(n)

    def _analyze(self, frame: Frame, rec: PacketRecord) -> PacketContext | None:
        """Fill ``rec``; the packet for the checks when the frame carries ESP."""
        cut = frame.caplen < frame.wirelen
        try:
            link = parse_link(frame.linktype, frame.data)
            if link.ethertype not in (ETH_IPV4, ETH_IPV6):
                rec.detail = f"not IP: EtherType {link.ethertype:#06x}"
                return None
            data = frame.data[link.offset :]
            ip = parse_ip(data)
            rec.ip_version, rec.src, rec.dst = ip.version, self._name(ip.src), self._name(ip.dst)
            if ip.frag_id is None:
                return self._datagram(rec, ip, data[: ip.total_len])
            return self._fragment(frame, rec, ip, data, cut)
        except Truncated as exc:
            rec.verdict = Verdict.TRUNCATED if cut else Verdict.UNDECODABLE
            rec.detail = str(exc)
        except MalformedPacket as exc:
            rec.verdict = Verdict.UNDECODABLE
            rec.detail = str(exc)
        return None

    def _fragment(
        self, frame: Frame, rec: PacketRecord, ip: OuterIp, data: bytes, cut: bool
    ) -> PacketContext | None:
        if ip.proto not in (PROTO_ESP, PROTO_UDP):
            rec.detail = f"fragment of a {protocol_name(ip.proto)} datagram"
            return None
        if cut or len(data) < ip.total_len:
            rec.verdict = Verdict.TRUNCATED
            rec.detail = "fragment cut by the snap length; its datagram cannot be rebuilt"
            return None
        done = self._reasm.add(ip, data, frame.number, frame.ts_ns)
        if done is None:
            rec.verdict = Verdict.FRAGMENT
            rec.detail = "fragment; waiting for the rest of the datagram"
            self._fragments[frame.number] = rec
            self._holds.hold(frame.number)
            return None
        if isinstance(done, Completed):
            self._settle(done.frames, f"fragment of the datagram completed in frame {frame.number}")
            whole = parse_ip(done.packet)
            rec.fragments = len(done.frames)
            pkt = self._datagram(rec, whole, done.packet)
            if rec.detail == "":
                rec.detail = f"reassembled from {len(done.frames)} fragments"
            return pkt
        rec.verdict = Verdict.FRAGMENT
        self._settle(done.frames, f"fragment of a datagram never completed: {done.reason}")
        rec.detail = f"fragment of a datagram never completed: {done.reason}"
        return None

    def flow_for(self, spi: int, src: bytes, dst: bytes) -> Flow:
        """The flow of (SPI, outer source, outer destination), made on first use."""
        key = (spi, src, dst)
        flow = self._flows.get(key)
        if flow is None:
            sa = self.sas.lookup(spi, src, dst)
            if sa is None:
                state = SaState(None)
            else:
                state = self._by_sa.get(id(sa)) or SaState(sa)
                self._by_sa[id(sa)] = state
            flow = self._flows[key] = Flow(spi, self._name(src), self._name(dst), state)
        return flow

    def _name(self, addr: bytes) -> str:
        """Text of an address, cached (bounded: captures of scans hold millions)."""
        name = self._names.get(addr)
        if name is None:
            if len(self._names) > 65536:
                self._names.clear()
            name = self._names[addr] = ntop(addr)
        return name

    def _datagram(self, rec: PacketRecord, ip: OuterIp, data: bytes) -> PacketContext | None:
        loc = locate_esp(ip, data, self._natt_ports)
        if isinstance(loc, NotEsp):
            rec.detail, rec.udp_sport, rec.udp_dport = loc.reason, loc.udp_sport, loc.udp_dport
            if loc.payload_word is not None and loc.payload_word in self.sas.spis:
                # ESP-in-UDP on a port not given? (checks/keys.py names the SA's likely port)
                self._keys.observe_udp(loc.payload_word, loc.udp_sport, loc.udp_dport)
            return None
        rec.proto, rec.udp_sport, rec.udp_dport = loc.proto, loc.udp_sport, loc.udp_dport
        rec.expected_offset = rec.esp_offset = loc.offset
        spi, seq = parse_esp_header(data, loc.offset)
        flow = self.flow_for(spi, ip.src, ip.dst)
        state = flow.state
        self.touched.add(state)
        seq64 = state.tracker.infer(seq)
        rec.spi, rec.seq, rec.seq64 = spi, seq, seq64
        rec.esp_len = ip.total_len - loc.offset
        body = loc.offset + ESP_HEADER_LEN
        iv_len = IV_LEN if state.ctx is None else state.ctx.iv_len  # unknown: an AEAD's
        iv = data[body : body + iv_len]
        rec.iv = iv.hex()
        iv_int = int.from_bytes(iv) if iv_len and len(iv) == iv_len else None
        pkt = PacketContext(rec, data, ip, flow, iv_int)
        self._verify(pkt, seq64, iv, body + iv_len)
        if state.sa is None:
            state.tracker.commit(seq64)  # keyless: what is seen is all there is
        return pkt

    def _verify(self, pkt: PacketContext, seq64: int, iv: bytes, sealed_at: int) -> None:
        """Decrypt at the expected offset and set the verdict (RFC 4303 s3.4)."""
        rec, state, data = pkt.rec, pkt.state, pkt.data
        sa, ctx = state.sa, state.ctx
        if self._too_short(pkt):
            return
        if sa is None:
            rec.verdict = Verdict.UNKNOWN_SA
            rec.detail = f"no key for SPI {rec.spi:#010x}"
            return
        rec.algorithm = sa.suite
        if ctx is None and not sa.supported:
            rec.verdict = Verdict.UNSUPPORTED
            rec.detail = f"not checked: {sa.suite} is not decrypted by this version"
            return
        if ctx is None:  # loaded, but no length its algorithm takes (keys/validate.py)
            rec.verdict = Verdict.AUTH_FAIL
            rec.detail = f"not verified: the key of SPI {sa.spi:#010x} is {len(sa.key)} bytes"
            return
        if len(data) < pkt.ip.total_len:
            rec.verdict = Verdict.TRUNCATED
            rec.detail = f"captured {len(data) - (rec.esp_offset or 0)} of {rec.esp_len} ESP bytes"
            return
        sealed = data[sealed_at:]
        if not ctx.verifies:  # no ICV to check: the trailer and inner header are the evidence
            no_icv(pkt, seq64, ctx.open(seq64, iv, sealed), ctx.block, ctx.unchecked)
            return
        opened = opener(ctx)
        verified, plain = seq64, opened(seq64, iv, sealed)
        if plain is None and ctx.esn:
            # RFC 4303 A2.3: the inferred high half may be off by one; try its neighbours.
            for alt in state.tracker.alternatives(seq64):
                plain = opened(alt, iv, sealed)
                if plain is not None:
                    verified = alt
                    break
        if plain is None:
            rec.verdict = Verdict.AUTH_FAIL
            rec.detail = f"ICV does not verify with the ESP header at offset {rec.esp_offset}"
            if not state.proven:  # a key that verified nothing yet: as good as none
                state.tracker.commit(seq64)
            return
        state.proven = True
        if ctx.esn:
            rec.seq_hi_verified = verified >> 32
            seq64 = self._esn_place(pkt, seq64, verified)
        if verified != seq64:
            self._esn_mismatch(pkt, seq64, verified, plain)
            return
        rec.seq64 = verified
        state.tracker.commit(verified)
        if not ctx.decrypts:
            rec.verdict = Verdict.AUTHENTIC_NOT_DECRYPTED
            rec.detail = f"ICV verified; {ctx.unchecked}"
            return
        problem = pkt.apply_plaintext(plain, ctx.block)
        rec.verdict = Verdict.BAD_TRAILER if problem else Verdict.OK
        if problem:
            rec.detail = problem

    @staticmethod
    def _too_short(pkt: PacketContext) -> bool:
        """Is the whole ESP packet too short to be one? Then it is ``truncated``.

        RFC 4303 s2: after the header come the IV, at least the pad length and
        next header, and the ICV. A packet shorter than that for its algorithm
        (or, without a key, nothing but the 8-byte header and less than 2 bytes)
        cannot verify under any key: KLIPS drops it as too short, tshark and
        tcpdump call it truncated. It says nothing about the key.
        """
        rec, ctx = pkt.rec, pkt.state.ctx
        if len(pkt.data) < pkt.ip.total_len or rec.esp_len is None:
            return False  # cut by the snap length: _verify says so
        need = ESP_HEADER_LEN + 2 + (0 if ctx is None else ctx.iv_len + ctx.icv_len)
        if rec.esp_len >= need:
            return False
        if pkt.state.sa is not None:
            rec.algorithm = pkt.state.sa.suite
        rec.verdict = Verdict.TRUNCATED
        rec.detail = (
            f"ESP packet of {rec.esp_len} bytes: shorter than the {need} that the ESP header, "
            f"IV, pad length, next header and ICV take (RFC 4303 s2)"
        )
        return True

    def _esn_place(self, pkt: PacketContext, inferred: int, verified: int) -> int:
        """The seq64 a verified ESN packet's place implies (RFC 4303 A2.2).

        An SA's first packet that verified only with a neighbour of esn_hi has
        no place yet: it waits (held, unchecked) for the SA's next packet.
        """
        state, seq_lo = pkt.state, pkt.rec.seq or 0
        if state.tentative is not None:
            self._place_first(state, seq_lo, verified, inferred)
            return state.tracker.infer(seq_lo)
        if verified != inferred and not state.tracker.placed:
            state.tentative, state.tentative_start = pkt, inferred
            self._tentative[state] = pkt
            self._holds.hold(pkt.rec.frame)
            return verified  # provisionally: the SA's next packet tells
        return inferred

    def _observe(self, pkt: PacketContext) -> None:
        for check in self.checks:
            check.observe(pkt)
        self.touched.add(pkt.flow.state)  # placement may have given it another SA's flow

    def _place_first(self, state: SaState, seq_lo: int, verified: int, inferred: int) -> None:
        """The SA's next verified packet decides where its tentative first packet sits.

        The first packet verified only with esn_hi's neighbour: either the capture
        starts after a wrap (it then places the SA, and this packet verifies where
        that inference puts it), or it was sealed with the wrong high half (primer
        s7: a capture that starts with the packet of seq low 0xffffffff) and this
        packet verifies where the starting high half puts it. Then the first packet
        is the ``esn_mismatch`` one and this packet places the SA.
        """
        first = state.tentative
        if first is None:
            return
        start = state.tentative_start
        if verified != inferred and verified == EsnTracker.nearest(start, seq_lo):
            frec = first.rec
            frec.verdict, frec.seq64 = Verdict.ESN_MISMATCH, start
            frec.detail = self._mismatch_words(start, frec.seq_hi_verified or 0)
            state.tracker.rebase(verified)
        self._confirm(state)

    def _confirm(self, state: SaState) -> None:
        """Let the tentative first packet of ``state`` go to the checks and leave."""
        first = state.tentative
        if first is None:
            return
        state.tentative = None
        del self._tentative[state]
        self._observe(first)
        self._holds.release(first.rec.frame)

    def _force_tentative(self, upto: int | None) -> None:
        """Stop waiting for the next packet of SAs whose first packet is ``upto`` or older."""
        while self._tentative:
            state, first = next(iter(self._tentative.items()))
            if upto is not None and first.rec.frame > upto:
                return
            self._confirm(state)

    @staticmethod
    def _mismatch_words(placed: int, hi: int) -> str:
        return (
            f"ICV verifies only with ESN high half {hi:#x}; "
            f"its place in the sequence implies {placed >> 32:#x}"
        )

    @staticmethod
    def _esn_mismatch(pkt: PacketContext, placed: int, verified: int, plain: bytes) -> None:
        """A sender fault: the ICV verifies only with a high half the packet's place rules out.

        The record keeps the seq64 its place implies and the ESN state is not
        moved (primer s7): a receiver drops the packet (RFC 4303 A2.2).
        """
        rec = pkt.rec
        rec.verdict = Verdict.ESN_MISMATCH
        rec.detail = FrameAnalyzer._mismatch_words(placed, verified >> 32)
        ctx = pkt.state.ctx
        if ctx is not None and not ctx.decrypts:
            return  # authentic under the other high half; no plaintext to read
        problem = pkt.apply_plaintext(plain, 4 if ctx is None else ctx.block)
        if problem:
            rec.detail += f"; trailer: {problem}"
