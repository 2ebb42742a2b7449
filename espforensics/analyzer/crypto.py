"""The verdict of one ESP packet under its SA's key (RFC 4303 s3.4).

In: a ``Receiving`` whose header columns are filled, the seq64 its
place infers, its IV and where its sealed bytes start. ``open_packet``
sets the verdict of every packet that cannot be opened, or is opened
without an ICV to verify (unverified.py), and returns what the ICV verified
with otherwise; the caller places an ESN packet (esn_place.py) and then
``conclude`` sets the verdict and plaintext columns. Raises nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from espforensics.analyzer.esn_place import mismatch_words
from espforensics.analyzer.plaintext import apply_plaintext
from espforensics.analyzer.unverified import no_icv
from espforensics.checks.context import Receiving
from espforensics.checks.coverage import CUT_DETAIL
from espforensics.crypto import CipherContext, opener
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.model.enums import Cut, Verdict


@dataclass(frozen=True, slots=True)
class Opened:
    """A packet whose ICV verified: the seq64 it verified with and its plaintext."""

    verified: int
    plain: bytes


def open_packet(pkt: Receiving, seq64: int, iv: bytes, sealed_at: int) -> Opened | None:
    """Decrypt at the expected offset; the verified plaintext, else the verdict is set."""
    rec, state, data = pkt.rec, pkt.state, pkt.data
    sa, ctx = state.sa, state.ctx
    if too_short(pkt):
        return None
    if sa is None:
        if cut_short(pkt):
            return None
        rec.verdict = Verdict.UNKNOWN_SA
        rec.detail = no_key(rec.spi or 0)
        return None
    rec.algorithm = sa.suite
    if ctx is None and not sa.supported:
        rec.verdict = Verdict.UNSUPPORTED
        rec.detail = f"not checked: {sa.suite} is not decrypted by this version"
        return None
    if ctx is None:  # loaded, but no length its algorithm takes (keys/validate.py)
        rec.verdict = Verdict.AUTH_FAIL
        rec.detail = f"not verified: the key of SPI {sa.spi:#010x} is {len(sa.key)} bytes"
        return None
    if cut_short(pkt):
        return None
    sealed = data[sealed_at:]
    if not ctx.verifies:  # no ICV to check: the trailer and inner header are the evidence
        no_icv(pkt, seq64, ctx.open(seq64, iv, sealed), ctx.block, ctx.unchecked)
        return None
    return _verify(pkt, ctx, seq64, iv, sealed)


def _verify(
    pkt: Receiving, ctx: CipherContext, seq64: int, iv: bytes, sealed: bytes
) -> Opened | None:
    """Check the ICV with the inferred seq64, for ESN also with its neighbours (RFC 4303 A2.3)."""
    rec, state = pkt.rec, pkt.state
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
        return None
    state.keyed().proven = True
    if ctx.esn:
        rec.seq_hi_verified = verified >> 32
    return Opened(verified, plain)


def conclude(pkt: Receiving, seq64: int, opened: Opened) -> None:
    """The verdict of a verified packet whose place implies ``seq64``; its plaintext columns."""
    rec, state = pkt.rec, pkt.state
    ctx = state.ctx
    if opened.verified != seq64:
        esn_mismatch(pkt, seq64, opened.verified, opened.plain)
        return
    rec.seq64 = seq64
    state.tracker.commit(seq64)
    if ctx is not None and not ctx.decrypts:
        rec.verdict = Verdict.AUTHENTIC_NOT_DECRYPTED
        rec.detail = f"ICV verified; {ctx.unchecked}"
        return
    problem = apply_plaintext(pkt, opened.plain, 4 if ctx is None else ctx.block)
    rec.verdict = Verdict.BAD_TRAILER if problem else Verdict.OK
    if problem:
        rec.detail = problem


def esn_mismatch(pkt: Receiving, placed: int, verified: int, plain: bytes) -> None:
    """A sender fault: the ICV verifies only with a high half the packet's place rules out.

    The record keeps the seq64 its place implies and the ESN state is not
    moved (primer s7): a receiver drops the packet (RFC 4303 A2.2).
    """
    rec = pkt.rec
    rec.verdict = Verdict.ESN_MISMATCH
    rec.detail = mismatch_words(placed, verified >> 32)
    ctx = pkt.state.ctx
    if ctx is not None and not ctx.decrypts:
        return  # authentic under the other high half; no plaintext to read
    problem = apply_plaintext(pkt, plain, 4 if ctx is None else ctx.block)
    if problem:
        rec.detail += f"; trailer: {problem}"


def no_key(spi: int) -> str:
    """The detail of a packet whose SPI has no key (``unknown_sa``)."""
    return f"no key for SPI {spi:#010x}"


def cut_short(pkt: Receiving) -> bool:
    """Was the packet cut by the capture's snap length? Then it is ``truncated``.

    Its ICV was not captured, so nothing verifies it, keyed or keyless (the
    detail says why); the checks read what its captured bytes show, as they
    do without a key (checks/placement.py finds a misplaced header by layout).
    """
    rec, sa = pkt.rec, pkt.state.sa
    if not pkt.cut:
        return False
    rec.verdict, rec.cut = Verdict.TRUNCATED, Cut.READ  # placement may find otherwise
    rec.detail = CUT_DETAIL.format(len(pkt.data) - (rec.esp_offset or 0), rec.esp_len)
    if sa is None:
        rec.detail += f"; {no_key(rec.spi or 0)}"
    else:
        rec.algorithm = sa.suite
    return True


def too_short(pkt: Receiving) -> bool:
    """Is the whole ESP packet too short to be one? Then it is ``short``.

    RFC 4303 s2: after the header come the IV, at least the pad length and
    next header, and the ICV. A packet shorter than that for its algorithm
    (or, without a key, nothing but the 8-byte header and less than 2 bytes)
    cannot verify under any key: KLIPS drops it as too short, tshark and
    tcpdump call it truncated. It says nothing about the key.
    """
    rec, ctx = pkt.rec, pkt.state.ctx
    if pkt.cut or rec.esp_len is None:
        return False  # cut by the snap length: cut_short says so
    need = ESP_HEADER_LEN + 2 + (0 if ctx is None else ctx.iv_len + ctx.icv_len)
    if rec.esp_len >= need:
        return False
    if pkt.state.sa is not None:
        rec.algorithm = pkt.state.sa.suite
    rec.verdict = Verdict.SHORT
    rec.detail = (
        f"ESP packet of {rec.esp_len} bytes: shorter than the {need} that the ESP header, "
        f"IV, pad length, next header and ICV take (RFC 4303 s2)"
    )
    return True
