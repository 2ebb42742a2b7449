"""What a check sees of one ESP packet, and the per-SA receiver state.

In: built by the per-frame path for every frame that carries ESP. Out:
``Receiving``, the packet while the receiver's steps (analyzer/receive.py)
fill its fields (the IV, the plaintext, where its header is, its flow), and
``PacketContext``, the same packet frozen once they are done: what a check
reads (the record it fills, the datagram bytes, the outer header, the SA
and its state, the first ``HEAD_LEN`` plaintext bytes when it decrypted:
all any check reads of a plaintext); ``SaState`` (``KeyedSaState``) and
``Flow``. Raises nothing. What a check keeps per flow, and the frames held
back: checks/perflow.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from espforensics.checks.coverage import NOT_COUNTED
from espforensics.crypto import IV_LEN, CipherContext, context_for
from espforensics.decode.clear import clear_after_header, clear_ip_header, ip_start_fits
from espforensics.decode.digest import esp_digest
from espforensics.decode.esn import EsnTracker
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.decode.ip import OuterIp
from espforensics.keys.sa import CLEAR_BY_DESIGN, SecurityAssociation
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord, SaKey

T = TypeVar("T")
HEAD_LEN = 16  # plaintext bytes the checks see: evidence of IV reuse, equal-to-ciphertext test


class SaState(EsnTracker):
    """Per-SA receiver state: ESN top and the cipher, built once.

    It is the SA's ``EsnTracker`` (``tracker`` is itself): one object per SA,
    not two (a capture of many SAs has one per SA, keyless flows one per
    flow). This class is a flow's without an SA (``SaState()``): what only an
    SA with a key changes (its SA, cipher, proof and tentative first packet)
    is a class default, so that a keyless flow's state holds its ESN top and
    ``clear_whole`` alone (56 bytes, 96 with every field). ``KeyedSaState`` is
    an SA's of the key files.

    ``tentative``: the SA's first packet when it verified only with a
    neighbour of the starting high half, and ``tentative_start`` the seq64
    the starting high half gives it; the pipeline waits for the SA's next
    verified packet to tell a capture that starts after a wrap from one
    that starts with a packet sealed with the wrong high half.
    """

    __slots__ = ("clear_whole",)

    sa: SecurityAssociation | None = None
    ctx: CipherContext | None = None
    proven: bool = False  # a packet of the SA verified: its key is the right one
    tentative: Receiving | None = None
    tentative_start: int = 0

    def __init__(self, esn_hi: int = 0) -> None:
        super().__init__(esn_hi)
        # Without a key: was the SA's last whole packet clear from its header on
        # (``PacketContext.clear_from_header``)? None before its first whole one.
        self.clear_whole: bool | None = None

    @property
    def tracker(self) -> EsnTracker:
        """The SA's RFC 4303 appendix A state: this object."""
        return self

    @property
    def no_iv(self) -> bool:
        """A key of an algorithm without explicit IV (NULL, RFC 2410): no IV to judge."""
        return self.ctx is not None and not self.ctx.iv_len

    def keyed(self) -> KeyedSaState:
        """This state, as what only an SA with a key writes it (``proven``, ``tentative``):
        a packet verified under its key, so it is a ``KeyedSaState``."""
        assert isinstance(self, KeyedSaState), "a keyless flow's state has no key"
        return self


class KeyedSaState(SaState):
    """The ``SaState`` of an SA of the key files (or of a Decryption Secrets Block)."""

    __slots__ = ("ctx", "proven", "sa", "tentative", "tentative_start")

    def __init__(self, sa: SecurityAssociation) -> None:
        super().__init__(sa.esn_hi)
        self.sa = sa
        self.proven = False
        self.tentative = None
        self.tentative_start = 0
        self.ctx = usable_context(sa)


def usable_context(sa: SecurityAssociation | None) -> CipherContext | None:
    """The SA's cipher context, when this version opens its algorithm with its key."""
    if sa is None or not (sa.supported and sa.key_usable):
        return None
    return context_for(sa)


class Flow:
    """One (SPI, outer source, outer destination): its SA state and address text.

    Made once per flow by the pipeline; checks key their per-flow state by
    ``wire``, the flow table's own key (``flow_wire``): one bytes value per
    flow, not a tuple of its texts as well.
    """

    __slots__ = ("dst", "known_to", "spi", "src", "state", "wire")

    def __init__(
        self, spi: int, src: str, dst: str, state: SaState, wire: bytes | None = None
    ) -> None:
        self.spi, self.src, self.dst, self.state = spi, src, dst, state
        # (``wire`` None: the flow made from its texts, as tests make one)
        self.wire = wire if wire is not None else flow_wire(spi, _packed(src), _packed(dst))
        self.known_to = 0  # a bit per PerFlow that made or found this flow's state

    @property
    def key(self) -> SaKey:
        """(SPI, src, dst): how the per-SA tables name the flow."""
        return SaKey(self.spi, self.src, self.dst)


def flow_wire(spi: int, src: bytes, dst: bytes) -> bytes:
    """A flow's key: SPI, address length and the packed addresses in one bytes value
    (about a third of what a tuple of the three keeps alive per flow)."""
    return b"%b%c%b%b" % (spi.to_bytes(4), len(src), src, dst)


def _packed(text: str) -> bytes:
    return ipaddress.ip_address(text).packed


@dataclass(frozen=True, slots=True)
class Placed:
    """Where the receiver found a packet's ESP header, later than its outer headers put it.

    analyzer/placement.py sets it; the placement check counts it. ``proven``:
    the packet verified there under its SA's key, else found by layout alone.
    """

    spi: int  # the SPI of the header found
    expected: int  # offset in the datagram where the outer headers put the ESP header
    at: int  # offset where it is
    proven: bool


class Memo:
    """What a packet's reads computed once: its digest, whether it is clear from its header."""

    __slots__ = ("clear", "clear_at", "digest")

    def __init__(self, digest: bytes | None = None) -> None:
        self.digest = digest
        self.clear: bool | None = None
        self.clear_at: int | None = None  # the ESP offset ``clear`` was found for


class _Reads:
    """What a packet says beyond its fields, the same while the receiver works on it
    (``Receiving``) and once the checks read it (``PacketContext``)."""

    __slots__ = ()

    if TYPE_CHECKING:  # the fields of both dataclasses below

        @property
        def rec(self) -> PacketRecord: ...
        @property
        def data(self) -> bytes: ...
        @property
        def ip(self) -> OuterIp: ...
        @property
        def flow(self) -> Flow: ...
        @property
        def plain_head(self) -> bytes | None: ...
        @property
        def memo(self) -> Memo: ...

    @property
    def state(self) -> SaState:
        return self.flow.state

    @property
    def cut(self) -> bool:
        """Did the capture hold less of the datagram than its IP header says (the snap length)?

        Then its end (padding, trailer, ICV) was not captured: no ICV verifies it
        and no byte past the cut is evidence of anything.
        """
        return len(self.data) < self.ip.total_len

    @property
    def misplaced(self) -> bool:
        """Was its ESP header found later than its outer headers put it (analyzer/placement.py)?

        ``esp_misplaced``, or a packet cut by the capture whose header was found
        there by layout (its verdict stays ``truncated``: nothing verified it).
        """
        return self.rec.misplaced

    @property
    def header_is_evidence(self) -> bool:
        """May the clear SPI, sequence number and IV count, as they do without a key?

        Not when the ICV failed under a key that verifies the SA's other packets:
        the packet is damaged or forged. A key that verified nothing yet (a wrong
        key) proves nothing either way, so its packets count as keyless ones do.
        Nor when the capture cut the packet before its bytes could show that its
        ESP header is where its outer headers put it (``header_held``).
        """
        if self.rec.verdict is Verdict.AUTH_FAIL and self.flow.state.proven:
            return False
        return not self.cut or self.header_held

    @property
    def header_held(self) -> bool:
        """Did the capture hold what shows that this packet's ESP header is where it is read?"""
        return not self.header_doubt

    @property
    def header_doubt(self) -> str:
        """Why the capture does not show this packet's ESP header to be where it is read ("").

        A whole datagram was searched whole for a misplaced header
        (analyzer/placement.py), and a header found later by layout is the one
        read. A cut one that was not: primer s5's misplaced layout leaves a
        stale ESP header and IV at the expected offset, then the inner IP
        header's first bytes in clear, then the real header. When the capture
        ends before the real header, the 6 bytes after the expected header and
        IV tell: they must be captured and not start an IP header whose length
        fits the datagram (random ciphertext does by chance about once in 2,500
        packets: such a packet's header then counts for nothing, never for a
        finding). An SA clear by design (NULL, GMAC) or a keyless packet in
        clear from its header on has its inner packet there: no doubt.
        """
        if not self.cut or self.misplaced:
            return ""
        rec, state = self.rec, self.flow.state
        ctx, sa = state.ctx, state.sa
        if (sa is not None and sa.algorithm in CLEAR_BY_DESIGN) or state.no_iv:
            return ""
        start = (rec.esp_offset or 0) + ESP_HEADER_LEN + (IV_LEN if ctx is None else ctx.iv_len)
        if len(self.data) < start + 6:
            return (
                f"{NOT_COUNTED}: the capture ends before byte {start + 6}, "
                "where the bytes that tell its ESP header from a misplaced one's end"
            )
        if ip_start_fits(self.data, start, start + 6, self.ip.total_len) and not (
            ctx is None and self.clear_from_header
        ):
            return (
                f"{NOT_COUNTED}: the bytes at {start} read as the start of a clear "
                "IP header, as in front of a misplaced ESP header, which the capture cut"
            )
        return ""

    @property
    def digest(self) -> bytes:
        """A fingerprint of the ESP bytes on the wire: tells a replay from a new packet.

        A verified packet's ICV is one already (equal ICVs of different packets
        would be a forgery, RFC 4106 s6); other packets are hashed.
        """
        memo = self.memo
        if memo.digest is None:
            ctx = self.flow.state.ctx
            if self.plain_head is not None and ctx is not None and ctx.verifies:
                memo.digest = self.data[-ctx.icv_len :]
            else:
                start = self.rec.esp_offset or 0
                memo.digest = esp_digest(self.data[start:])
        return memo.digest

    @property
    def clear_from_header(self) -> bool:
        """Is this keyless packet a whole clear packet from right after its ESP header on?

        That is how ``ecb(cipher_null)`` (RFC 2410) sends: no IV, the payload,
        an ESP trailer and an ICV (decode/clear.py tests the bytes). Without a
        key it cannot be told from a leak; what is sure is that the 8 bytes
        after the header are no IV, so the IV checks leave such packets alone.
        Asked once per packet, after decryption (a key or a plaintext: False).

        A packet cut by the capture has no trailer to test: it is taken as clear
        when a clear IP header that its datagram's length fits follows its ESP
        header, or when its SA's last whole packet was clear, so that bytes a
        whole capture would show to be no IV are not read as one.
        """
        memo = self.memo
        if memo.clear is None or memo.clear_at != self.rec.esp_offset:
            rec, data, state = self.rec, self.data, self.flow.state
            memo.clear_at = rec.esp_offset
            clear = False
            if state.ctx is None and self.plain_head is None and rec.esp_offset is not None:
                body = rec.esp_offset + ESP_HEADER_LEN
                if self.cut:  # the IP header's bytes captured, its length the datagram's
                    held = len(data) >= body + 20 and clear_ip_header(data, body, self.ip.total_len)
                    clear = bool(held) or bool(state.clear_whole)
                else:
                    clear = clear_after_header(data, body, self.ip.src, self.ip.dst)
                if not self.cut:
                    state.clear_whole = clear
            memo.clear = clear
        return memo.clear


@dataclass(frozen=True, slots=True)
class PacketContext(_Reads):
    """One ESP packet as the checks read it: what the receiver's steps left (frozen).

    Its record (``rec``) is the row the checks fill, each its own columns.
    """

    rec: PacketRecord
    data: bytes  # the datagram from its outer IP header, trimmed to its length
    ip: OuterIp
    flow: Flow
    iv: int | None = None  # the explicit IV as an integer, when all 8 bytes were captured
    plain_head: bytes | None = None  # the first HEAD_LEN plaintext bytes, once the ICV verified
    payload: bytes | None = None  # the plaintext before its trailer, once the trailer is sound
    # What ``payload`` is: the trailer's next header, or an IPComp payload's (RFC 3173 s2.2),
    # ``payload`` then being the inflated packet.
    inner_next: int | None = None
    placed: Placed | None = None  # its ESP header found elsewhere (analyzer/placement.py)
    memo: Memo = field(default_factory=Memo)


@dataclass(slots=True)
class Receiving(_Reads):
    """One ESP packet while the receiver's steps work on it (analyzer/receive.py).

    The steps fill its fields (the IV, the plaintext, where its header is, its
    flow); ``frozen`` is the packet the checks read, once they are done.
    """

    rec: PacketRecord
    data: bytes  # the datagram from its outer IP header, trimmed to its length
    ip: OuterIp
    flow: Flow
    iv: int | None = None  # the explicit IV as an integer, when all 8 bytes were captured
    plain_head: bytes | None = None  # the first HEAD_LEN plaintext bytes, once the ICV verified
    payload: bytes | None = None  # the plaintext before its trailer, once the trailer is sound
    # What ``payload`` is: the trailer's next header, or an IPComp payload's (RFC 3173 s2.2),
    # ``payload`` then being the inflated packet.
    inner_next: int | None = None
    placed: Placed | None = None  # its ESP header found elsewhere (analyzer/placement.py)
    memo: Memo = field(default_factory=Memo)

    def frozen(self) -> PacketContext:
        """The packet as the receiver's steps left it, for the checks (every field)."""
        pkt = _new(PacketContext)
        _rec(pkt, self.rec)
        _data(pkt, self.data)
        _ip(pkt, self.ip)
        _flow(pkt, self.flow)
        _iv(pkt, self.iv)
        _plain_head(pkt, self.plain_head)
        _payload(pkt, self.payload)
        _inner_next(pkt, self.inner_next)
        _placed(pkt, self.placed)
        _memo(pkt, self.memo)
        return pkt


# ``Receiving.frozen`` sets the frozen copy's fields through their slots: the dataclass's
# own __init__ sets each with object.__setattr__, about three times slower, and one copy is
# made per ESP packet of the per-frame path. tests/analyzer/test_check_order.py
# holds the copy equal to the packet, field by field.
_new = object.__new__
_slot = PacketContext.__dict__
_rec, _data, _ip, _flow = (_slot[n].__set__ for n in ("rec", "data", "ip", "flow"))
_iv, _plain_head, _payload = (_slot[n].__set__ for n in ("iv", "plain_head", "payload"))
_inner_next, _placed, _memo = (_slot[n].__set__ for n in ("inner_next", "placed", "memo"))
