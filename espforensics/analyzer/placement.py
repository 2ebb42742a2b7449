"""ESP placement: the receiver finds a packet's ESP header where it really is.

In: a ``Receiving`` whose verdict the earlier steps set, for the
packets whose ICV failed at the expected offset (``auth_fail``), whose SPI
there has no usable key (``unknown_sa``, ``unsupported``) or that the
capture cut (``truncated``). Out: when the header is found later in the
datagram, the record's header columns moved there (``esp_offset``, SPI,
sequence number, seq64, IV, ``esp_len``), ``leaked`` and ``leaked_hex``
(the clear bytes in front of it), the verdict ``esp_misplaced`` (a cut
packet stays ``truncated``: nothing verified it), the packet's plaintext
when a key proved the place, and ``pkt.placed`` (checks/context.py
``Placed``) for the placement check's finding (checks/placement.py).
Raises nothing.

Proof with a key: the SA's SPI is searched at every later offset (the
SPI at the expected offset's SA, or, when that SPI has no key, every known
SA of the same addresses) and the packet is decrypted there with the AAD
of the header found (RFC 4303 s2.1-2.2: SPI and sequence number
authenticate). A packet that verifies there is the receiver's: its SA is
proven, its ESN top committed, its flow becomes the SA's whose header was
found, and its plaintext is read (analyzer/plaintext.py). Without a key
the layout is recognised structurally and reported unproven
(``checks.placement.found_by_layout``, beside the steady lane's rule for
the same bytes). Offsets are found, never assumed (the Linux GSO fault of
primer s5 puts them at 56/60 for ip6tnl, 36/40 for ipip).

A packet the capture cut (a snap length, ``tcpdump -s 96``) has no ICV to
prove anything with, keyed or keyless: it is searched by layout as a
keyless one is, the lengths its IP header gives standing for the bytes not
captured, and its ``detail`` says when its captured bytes cannot show its
header to be where it is read (``Receiving.header_doubt``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from espforensics.analyzer.plaintext import apply_plaintext
from espforensics.checks.context import Flow, Placed, Receiving
from espforensics.checks.coverage import CUT_DETAIL
from espforensics.checks.placement import MAX_CANDIDATES, found_by_layout, leak_start
from espforensics.crypto import IV_LEN, opener
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.keys.sa import SaTable
from espforensics.model.enums import Cut, Verdict

FlowFor = Callable[[int, bytes, bytes], Flow]  # the flow table's flow of (SPI, src, dst)
_SEARCHED = frozenset(
    {Verdict.AUTH_FAIL, Verdict.UNKNOWN_SA, Verdict.UNSUPPORTED, Verdict.TRUNCATED}
)


class PlacementSearch:
    """Searches failed packets for their SA's ESP header elsewhere; keeps no state."""

    __slots__ = ("_flow_for", "_sas")

    def __init__(self, sas: SaTable, flow_for: FlowFor) -> None:
        self._sas = sas
        self._flow_for = flow_for

    def place(self, pkt: Receiving) -> None:
        """Move ``pkt``'s header columns to where its ESP header is, when it is elsewhere."""
        rec = pkt.rec
        if rec.verdict not in _SEARCHED or rec.expected_offset is None:
            return
        if rec.verdict is Verdict.TRUNCATED and not pkt.cut:
            return  # whole, too short to be an ESP packet: nothing to search
        if pkt.cut:  # no ICV captured: no decryption proves a place (RFC 4303 s3.4.4)
            self._recognise(pkt)
            doubt = pkt.header_doubt
            if doubt:
                rec.cut = Cut.UNREAD
                rec.detail = f"{rec.detail}; {doubt}" if rec.detail else doubt
            return
        if self._prove(pkt, pkt.flow):
            return
        if rec.verdict is Verdict.UNKNOWN_SA:
            for flow in self._other_flows(pkt):
                if self._prove(pkt, flow):
                    pkt.flow = flow  # the packet belongs to the SA whose header was found
                    rec.algorithm = flow.state.sa.suite if flow.state.sa else ""
                    return
        self._recognise(pkt)  # no usable key: the layout alone, reported unproven

    def _other_flows(self, pkt: Receiving) -> Iterator[Flow]:
        """Flows of the known SAs that could own this packet (same addresses or wildcards)."""
        src, dst = pkt.ip.src, pkt.ip.dst
        for sa in self._sas:
            if (
                sa.supported
                and not sa.any_spi  # a wildcard names no SPI to search for
                and sa.spi != pkt.flow.spi
                and (
                    (sa.src is None or sa.src.packed == src)
                    and (sa.dst is None or sa.dst.packed == dst)
                )
            ):
                yield self._flow_for(sa.spi, src, dst)

    def _prove(self, pkt: Receiving, flow: Flow) -> bool:
        rec, data, state = pkt.rec, pkt.data, flow.state
        ctx = state.ctx
        if ctx is None or not ctx.verifies or state.sa is None or rec.expected_offset is None:
            return False  # no ICV proves a header found elsewhere (RFC 4303 s3.2)
        needle = state.sa.spi.to_bytes(4, "big")
        at = data.find(needle, rec.expected_offset + 1)
        for _ in range(MAX_CANDIDATES):
            if at < 0:
                break
            seq = int.from_bytes(data[at + 4 : at + 8], "big")
            seq64 = state.tracker.infer(seq)
            body = data[at + ESP_HEADER_LEN :]
            plain = opener(ctx)(seq64, body[: ctx.iv_len], body[ctx.iv_len :])
            if plain is not None:
                state.tracker.commit(seq64)
                state.keyed().proven = True
                problem = apply_plaintext(pkt, plain, ctx.block) if ctx.decrypts else ""
                _mark(pkt, at, seq, seq64, proven=True, iv_len=ctx.iv_len)
                if problem:
                    rec.detail += f"; trailer: {problem}"
                return True
            at = data.find(needle, at + 1)
        return False

    def _recognise(self, pkt: Receiving) -> None:
        rec = pkt.rec
        if rec.expected_offset is None or rec.spi is None or rec.seq is None:
            return
        at = found_by_layout(pkt.data, rec.expected_offset, rec.spi, rec.seq, pkt.ip.total_len)
        if at is not None:
            seq = int.from_bytes(pkt.data[at + 4 : at + 8], "big")
            ctx = pkt.state.ctx
            iv_len = IV_LEN if ctx is None else ctx.iv_len
            _mark(pkt, at, seq, pkt.state.tracker.infer(seq), False, iv_len)


def _mark(
    pkt: Receiving, at: int, seq: int, seq64: int, proven: bool, iv_len: int = IV_LEN
) -> None:
    """The record's header columns at the header found at ``at``; ``pkt.placed``."""
    rec, data = pkt.rec, pkt.data
    if rec.expected_offset is None or rec.spi is None:
        return
    spi = int.from_bytes(data[at : at + 4], "big")
    start = leak_start(data, rec.expected_offset, spi)
    clear = data[start:at] if at > start else b""
    cut = pkt.cut
    if not cut:  # a cut packet stays truncated: nothing verified it
        rec.verdict = Verdict.ESP_MISPLACED
    rec.spi, rec.seq, rec.seq64, rec.esp_offset = spi, seq, seq64, at
    iv = data[at + ESP_HEADER_LEN : at + ESP_HEADER_LEN + iv_len]
    rec.iv = iv.hex()
    pkt.iv = int.from_bytes(iv) if iv_len and len(iv) == iv_len else None
    rec.esp_len = pkt.ip.total_len - at
    rec.leaked, rec.leaked_hex = len(clear), clear.hex(" ")
    if proven:
        how = "proven by decryption there"
    elif cut:
        how = "unproven: its ICV cut by the capture, found by layout"
    else:
        how = "unproven: no key, found by layout"
    rec.detail = (
        f"ESP header at offset {at}, expected at {rec.expected_offset}; "
        f"{len(clear)} bytes in clear before it; {how}"
    )
    if cut:  # first, as on every truncated packet
        rec.cut = Cut.FOUND
        rec.detail = f"{CUT_DETAIL.format(len(data) - at, rec.esp_len)}; {rec.detail}"
    pkt.placed = Placed(spi, rec.expected_offset, at, proven)
