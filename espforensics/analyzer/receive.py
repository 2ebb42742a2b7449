"""What the receiver does to one ESP packet before any check looks at it, in one order.

In: a whole datagram's ESP packet: its record (address columns filled), outer
IP header, bytes, ESP location, flow and clear sequence number
(``Receiver.receive``). Out: the packet as the steps left it
(``Receiving``), its record's verdict, header, trailer and inner-packet
columns filled, and the SA state the packet moved (ESN top, ``proven``);
``hand`` gives the checks the packet frozen (``PacketContext``), once the
steps are done. Raises nothing (the header was read by the caller).

``receive`` reads the clear header first (the SPI, sequence number, its
seq64 inferred from the SA's top, RFC 4303 A2.2, and IV: analyzer/header.py),
then runs the steps in the order of ``STEPS``, each once (docs/architecture.md,
"How a packet walks through the stages"):

    open       the verdict of a packet that cannot be opened (unknown SA,
               unsupported, cut, too short, ICV failure), or decrypted without
               an ICV (analyzer/unverified.py); a verified one marks its SA
               proven (analyzer/crypto.py)
    esn_place  an ESN packet's seq64 by its place; an SA's first packet that
               verified only with a neighbouring high half is held, and the
               packet that places it hands it to the checks first
               (analyzer/esn_place.py)
    conclude   the verdict of a verified packet, its ESN top committed, its
               plaintext decoded (analyzer/crypto.py, analyzer/plaintext.py)
    seen       a keyless packet, or one the capture cut before its ICV, commits
               the ESN top its clear header gives: that is all there is
    placement  a packet that failed where its outer headers put the header:
               the header found later, proven by decryption (SA proven, ESN top
               committed, the flow of the SA found, plaintext decoded) or by
               layout (analyzer/placement.py)

So every check sees the packet as the receiver left it, whatever order the
checks run in (tests/analyzer/test_check_order.py runs them in others).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from espforensics.analyzer.crypto import Opened, conclude, open_packet
from espforensics.analyzer.esn_place import EsnPlacement
from espforensics.analyzer.header import read_header
from espforensics.analyzer.placement import PlacementSearch
from espforensics.checks import Check, Flow, SaState
from espforensics.checks.context import Receiving
from espforensics.decode.esp import EspLocation
from espforensics.decode.ip import OuterIp
from espforensics.model.records import PacketRecord


@dataclass(slots=True)
class _Packet:
    """One packet between the steps: what a step leaves for the next."""

    pkt: Receiving
    flow: Flow  # the flow its header named (placement may give ``pkt`` another)
    seq64: int  # the seq64 its place infers (ESN placement may change it)
    iv: bytes
    sealed_at: int  # offset in ``pkt.data`` of the ciphertext after the IV
    opened: Opened | None = None


class Receiver:
    """The receiver's steps over one ESP packet, in the order of ``STEPS``; the hand-over.

    Holds the checks, the ESN placement and the placement search it is given,
    and the analyzer's ``touched`` set (the SA states the frames reached), never
    the analyzer itself: a method of it held here would make a reference cycle.
    """

    __slots__ = ("_checks", "_esn", "_search", "_touched")

    def __init__(
        self,
        checks: tuple[Check, ...],
        esn: EsnPlacement,
        search: PlacementSearch,
        touched: set[SaState],
    ) -> None:
        self._checks, self._esn, self._search = checks, esn, search
        self._touched = touched

    def receive(
        self, rec: PacketRecord, ip: OuterIp, data: bytes, loc: EspLocation, flow: Flow, seq: int
    ) -> Receiving:
        """Read the packet's header, run every step of ``STEPS``; the packet, for ``hand``."""
        sealed = read_header(rec, ip, data, loc, flow, seq)
        p = _Packet(sealed.pkt, flow, sealed.seq64, sealed.iv, sealed.sealed_at)
        for step in STEPS:
            step(self, p)
        return p.pkt

    def hand(self, received: Receiving) -> None:
        """Give the packet, frozen as the steps left it, to every check, in the registry's
        order (checks.make_checks)."""
        pkt = received.frozen()
        for check in self._checks:
            check.observe(pkt)
        self._touched.add(pkt.flow.state)  # placement may have given it another SA's flow

    # -- the steps, in the order of STEPS -------------------------------------
    def _open(self, p: _Packet) -> None:
        p.opened = open_packet(p.pkt, p.seq64, p.iv, p.sealed_at)

    def _esn_place(self, p: _Packet) -> None:
        ctx = p.flow.state.ctx
        if p.opened is None or ctx is None or not ctx.esn:
            return
        p.seq64, first = self._esn.place(p.pkt, p.seq64, p.opened.verified)
        if first is not None:  # the SA's first packet goes to the checks before this one
            self.hand(first)

    def _conclude(self, p: _Packet) -> None:
        if p.opened is not None:
            conclude(p.pkt, p.seq64, p.opened)

    def _seen(self, p: _Packet) -> None:
        state, pkt = p.flow.state, p.pkt
        if state.sa is None or (pkt.cut and pkt.header_is_evidence):
            # keyless, or cut before its ICV by the capture: what is seen is all there is
            state.tracker.commit(p.seq64)

    def _placement(self, p: _Packet) -> None:
        self._search.place(p.pkt)


# The receiver's steps, in the order they run (the module's docstring says what each does).
STEPS: tuple[Callable[[Receiver, _Packet], None], ...] = (
    Receiver._open,
    Receiver._esn_place,
    Receiver._conclude,
    Receiver._seen,
    Receiver._placement,
)
