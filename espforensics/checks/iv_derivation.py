"""IV derivation: do the IVs follow the sequence numbers as Linux's seqiv promises?

In: ``PacketContext`` of ESP packets. Out: ``iv_seq_delta`` (0 when the
IV was built from the packet's own sequence number, d when it was built
from seq64 + d; empty when the SA's IVs are not counter-derived, or when
the IV encodes no sequence number within 2^32 of the one the packet was
sealed with) and one ``iv_derivation`` finding per SA with deviating
packets. Raises nothing.

Primer s4 and s7: seqiv makes ``IV = seq64 xor c`` with one constant c
per SA. The first packets of a capture do not give c: when most packets
are built from seq + 1, two even-seq packets agree on ``c xor 1``. So c
is chosen from the SA's first ``WINDOW`` packets (held until then, or
until the pipeline forces them): every ``IV xor (seq64 + d)`` (and, for an
additive counter, ``IV - (seq64 + d)``) with ``|d| <= SPAN`` is a
candidate, and the one with the most concentrated histogram of deltas
wins: the largest product of n^n over the deltas' counts (``ivmath.rank``
gives the full order). This does not depend on which packet comes first,
only on which packets the window holds (ivscheme.py says from how many
packets a scheme is named at all).

CBC (RFC 3602 s2.1) needs IVs no one can predict, and Linux makes them
with echainiv: random-looking on the wire, but decrypted with the SA's key
each IV block holds ``(salt | 1) * seq64`` per word (echainiv.py), so with
the key a CBC SA is judged like a seqiv one, its multipliers in place of
c. Its IVs are also tested for chaining (chains.py): an IV equal to the
last ciphertext block of the SA's previous packet (the chained,
predictable IVs of CVE-2022-46397) is a finding.

Other senders follow other schemes (ivscheme.py): an additive counter
(``IV = seq64 + c``), random IVs, or worse. The window names each SA's
scheme (``schemes()``, the ``iv_scheme`` column of sas.csv); packets are
judged only against a counter scheme their SA follows, and a finding is
made only where the scheme itself is unsound (a constant IV, chained or
counter CBC IVs) or where a packet breaks its SA's own scheme. NULL
encryption has no IV: its SAs are ``none`` and nothing is read as an IV.

Without a usable key the high half of seq64 is the ESN inference's guess
(RFC 4303 A2: the wire carries the low 32 bits, and the first packet's
high half is unknown), so for such an SA only the low 32 bits of the IV
and of the sequence number are compared: a guess must not make a finding.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from espforensics.bounded.frames import with_frame
from espforensics.bounded.intervals import U64
from espforensics.checks import chains, echainiv
from espforensics.checks import coverage as coverage_reasons
from espforensics.checks.bulk import NOTHING, BulkColumns, BulkRules, FlowRows, Mask, first_refused
from espforensics.checks.context import Flow, PacketContext
from espforensics.checks.iv_sa import (
    IvSa,
    chained_finding,
    constant_finding,
    deviating_finding,
    predictable_finding,
)
from espforensics.checks.ivmath import signed_delta
from espforensics.checks.ivscheme import (
    CHAINED,
    MIN_SCHEME,
    Candidate,
    Reading,
    choose_constant,
    followed,
    read_ivs,
)
from espforensics.checks.perflow import Holds, PerFlow
from espforensics.crypto import EncAuthContext
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.model.enums import IvScheme, Verdict
from espforensics.model.records import Finding, PacketRecord, SaKey

_COUNTERS = (IvScheme.SEQIV, IvScheme.COUNTER)
# A packet held while its SA's scheme is chosen: its record, its seq64 and IV as read (the
# SA's mask; CBC: echainiv's words), its IV on the wire
_Probe = tuple[PacketRecord, int, int, int]
__all__ = ["WINDOW", "IvDerivationCheck", "choose_constant"]  # choose_constant: seqiv only

WINDOW = 64  # packets of an SA that decide its constant
NEARBY = 1 << 32  # a larger difference means the IV is unrelated to the packet's number
_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1  # keyless: the low halves only, the high half being a guess
_NOT_COUNTER = -1


def _sealed_with(rec: PacketRecord, seq64: int) -> int:
    """The number the sender sealed with: another high half on an ``esn_mismatch`` packet."""
    if rec.verdict is Verdict.ESN_MISMATCH and rec.seq_hi_verified is not None:
        return rec.seq_hi_verified << 32 | seq64 & 0xFFFFFFFF
    return seq64


class IvDerivationCheck(BulkRules):
    """Finds each SA's IV constant and the packets that do not fit it."""

    name = "iv_derivation"

    def __init__(self, holds: Holds) -> None:
        self._holds = holds
        self._sas: PerFlow[IvSa] = PerFlow(IvSa)
        # SAs still choosing their constant (capture order of their first packet), with the
        # packets held meanwhile (``_Probe``): kept here, not a field of every SA's state.
        self._probing: OrderedDict[IvSa, list[_Probe]] = OrderedDict()

    def observe(self, pkt: PacketContext) -> None:
        rec = pkt.rec
        if rec.seq64 is None or not pkt.header_is_evidence:
            return  # an auth_fail header under a key that verifies others may be forged
        ctx = pkt.flow.state.ctx
        if pkt.iv is None or pkt.clear_from_header:
            # NULL (RFC 2410) has no IV, keyed or keyless (clear from the header on)
            if pkt.flow.state.no_iv or pkt.clear_from_header:
                self._sas.get(pkt.flow).no_iv += 1
            return
        sa = self._sas.get(pkt.flow)
        if isinstance(ctx, EncAuthContext) and not ctx.counter:  # CBC: echainiv
            start = (rec.esp_offset or 0) + ESP_HEADER_LEN
            raw = pkt.data[start : start + ctx.iv_len]
            chains.chaining(sa, pkt, raw, ctx.icv_len)
            sa.cbc, wire = True, int.from_bytes(raw)
            if ctx.decrypts:
                sa.words = ctx.iv_len // 8
                iv = echainiv.pack(ctx.iv_words(raw)[0].tolist())
            else:  # echainiv's words are read by decrypting the IV: the IVs on the wire only
                iv = wire & _MASK64
        else:
            if not sa.packets and not pkt.flow.state.proven:
                sa.mask = _MASK32
            if ctx is None and sa.scheme not in _COUNTERS:  # a counter's IVs chain nothing
                chains.chaining_keyless(sa, pkt, pkt.iv)
            iv, wire = pkt.iv & sa.mask, pkt.iv
        sa.packets += 1
        if sa.scheme is not None:
            self._judge(sa, rec, iv)
            if sa.scheme is IvScheme.CONSTANT:
                self._repeat(sa, rec, wire)
            return
        probe = self._probing.get(sa)
        if probe is None:
            probe = self._probing[sa] = []
        probe.append((rec, rec.seq64 & sa.mask, iv, wire))
        self._holds.hold(rec.frame)
        if len(probe) >= WINDOW:
            self._settle(sa)

    @staticmethod
    def _repeat(sa: IvSa, rec: PacketRecord, wire: int) -> None:
        """A packet of a constant-IV SA: count it if it carries the constant IV."""
        reading = sa.reading
        if reading is None or reading.constant_iv is None or wire != reading.constant_iv:
            return
        sa.repeated += 1
        note = "IV built from no sequence number (the SA's one constant IV)"
        rec.detail = f"{rec.detail}; {note}" if rec.detail else note
        sa.repeated_frames = with_frame(sa.repeated_frames, rec.frame)

    # -- the steady lane's rules (checks/bulk.py) ------------------------------
    def _steady(self, flow: Flow) -> IvSa | None:
        """The flow's state once its scheme is settled (the steady lane's case), else None.

        An SA whose constant still reads alike as xor and add (``alt``, ``IV = seq64``
        forever) is steady too: a packet both read at its own number leaves it undecided
        and gets delta 0 either way (``_tell``); the one that tells them apart is refused.
        """
        sa = self._sas.known(flow)
        return None if sa is None or sa.scheme is None else sa

    def admits(self, flow: Flow) -> bool:
        """An SA whose scheme is settled (``_judged``); NULL (no IV: ``observe`` only counts
        its packets); without a key, a flow whose last whole packet was clear from its
        header on (``clear_whole``): the lane takes its rows that are (``refuses``)."""
        state = flow.state
        clear = state.ctx is None and bool(state.clear_whole)
        return state.no_iv or clear or self._judged(flow) is not None

    def _judged(self, flow: Flow) -> IvSa | None:
        """The flow's SA if its IVs are judged in bulk: its scheme settled and, without a
        key, not a constant IV (``_repeat``)."""
        sa = self._steady(flow)
        if sa is None or (flow.state.ctx is None and sa.scheme is IvScheme.CONSTANT):
            return None
        return sa

    def refuses(self, rows: FlowRows) -> Mask:
        """Rows ``observe`` would judge: an IV not built from the packet's own seq64 by
        the SA's counter scheme (seqiv's xor, an additive counter, echainiv's words),
        or with CBC an IV that is the previous packet's last ciphertext block (without
        a key, for an SA that follows no counter: found at one of the places
        ``chains.chaining_keyless`` looks); of a flow whose IVs are not judged in bulk,
        every row. In a batch with rows clear from their header on (no IV: ``observe``
        counts them), every row from the first whose kind (clear or not) is not the
        first row's: the lane takes a run of one kind, the per-frame path the switch."""
        wrong = np.zeros(len(rows), np.bool_)
        if rows.flow.state.no_iv:
            return wrong  # nothing to judge
        clear = rows.no_iv()
        if clear is None:
            return self._refused(rows)
        switch = first_refused(clear != clear[0])
        wrong[switch:] = True
        if not clear[0]:
            wrong[:switch] = self._refused(rows.head(switch))
        return wrong

    def _refused(self, rows: FlowRows) -> Mask:
        """``refuses`` for rows that all have an IV."""
        wrong = np.zeros(len(rows), np.bool_)
        sa, ctx = self._judged(rows.flow), rows.flow.state.ctx
        if sa is None:
            return ~wrong  # admitted for rows clear from their header on only
        if ctx is None and sa.scheme not in _COUNTERS:
            wrong |= chains.chained_keyless(sa, rows)
        elif ctx is not None and not ctx.counter:  # CBC (RFC 3602): echainiv's
            assert isinstance(ctx, EncAuthContext)
            return chains.chained(sa, rows, ctx.iv_len) | _not_echainiv(sa, rows, ctx)
        if not sa.words and sa.const not in (_NOT_COUNTER, None):  # seqiv's or a counter's
            m = np.uint64(sa.mask)
            ivs, seq64 = rows.iv & m, rows.seq64 & m
            wrong |= _built(ivs, sa.const, sa.additive, m) != seq64
            if sa.alt is not None:  # xor and add undecided: a row only one reads decides
                wrong |= _built(ivs, sa.alt.const, sa.alt.additive, m) != seq64
        return wrong

    def columns(self, rows: FlowRows) -> BulkColumns:
        """``iv_seq_delta`` 0 for every row the lane takes, when the SA follows a counter
        (none for rows without an IV: a batch that starts with them gives none)."""
        clear = rows.no_iv()
        if rows.flow.state.no_iv or (clear is not None and clear[0]):
            return NOTHING
        sa, ctx = self._judged(rows.flow), rows.flow.state.ctx
        if sa is None:
            return NOTHING  # every row refused
        # CBC's echainiv words (``words``), else seqiv's or a counter's constant
        counter = ctx is None or ctx.counter  # without a key the IV is read as a counter's
        if sa.const in (_NOT_COUNTER, None) or bool(sa.words) == counter:
            return NOTHING
        return BulkColumns(counter=np.ones(len(rows), np.bool_))

    def commit(self, rows: FlowRows) -> None:
        """``observe`` for packets whose IV was built from their own seq64 (delta 0) and,
        with CBC, none of whose IVs is its predecessor's last block; NULL's counted, and
        rows clear from their header on (the lane takes no other row beside them)."""
        clear = rows.no_iv()
        if rows.flow.state.no_iv or clear is not None:
            assert clear is None or clear.all()  # ``refuses``: a run of one kind
            self._sas.get(rows.flow).no_iv += len(rows)
            return
        sa, ctx = self._steady(rows.flow), rows.flow.state.ctx
        assert sa is not None  # admits
        sa.packets += len(rows)
        if ctx is None and sa.scheme not in _COUNTERS:
            chains.keep_tail(sa, rows)
        elif ctx is not None and not ctx.counter:
            chains.keep_block(sa, rows, ctx.iv_len)

    def force(self, upto: int) -> None:
        """Settle, with what they have, the SAs probing since a frame up to ``upto``.

        Costs O(SAs settled): the queue is in capture order, so the loop stops
        at the first SA that started later.
        """
        probing = self._probing
        while probing:
            sa, probe = next(iter(probing.items()))
            if probe[0][0].frame > upto:
                return
            self._settle(sa)

    def _settle(self, sa: IvSa) -> None:
        probe = self._probing.pop(sa)
        if not self._probing:  # a dict keeps its largest table once emptied: not this one
            self._probing = OrderedDict()
        reading = self._read(sa, probe)
        sa.reading = reading  # and so its scheme
        sa.const = _NOT_COUNTER
        if reading.scheme in (IvScheme.SEQIV, IvScheme.COUNTER) and not sa.cbc:
            first = reading.candidates[0]
            sa.const, sa.additive = first.const, first.additive
            sa.alt = reading.candidates[1] if len(reading.candidates) > 1 else None
        elif reading.scheme is IvScheme.ECHAINIV and reading.candidates:
            sa.const = reading.candidates[0].const
        for rec, _, iv, wire in probe:
            self._judge(sa, rec, iv)
            self._repeat(sa, rec, wire)
            self._holds.release(rec.frame)

    @staticmethod
    def _read(sa: IvSa, probe: list[_Probe]) -> Reading:
        """The SA's scheme from its window (ivscheme.py; CBC: chained, then echainiv)."""
        n = len(probe)
        if n >= MIN_SCHEME and 2 * sa.chained >= n - 1 and sa.chained >= MIN_SCHEME - 1:
            return CHAINED  # the first packet has no predecessor
        if not sa.words:
            whole = [(seq64, wire) for _, seq64, _, wire in probe]
            return read_ivs([(seq64, iv) for _, seq64, iv, _ in probe], sa.mask, whole)
        samples = [(seq64, iv) for _, seq64, iv, _ in probe]
        found = echainiv.choose_multipliers(samples, sa.words) if n >= MIN_SCHEME else None
        if found is not None and followed(echainiv.score(found, samples, sa.words), n):
            return Reading(IvScheme.ECHAINIV, (Candidate(False, found),))
        whole = [(seq64, wire) for _, seq64, _, wire in probe]  # the IVs on the wire
        return read_ivs([(seq64, wire & _MASK64) for seq64, wire in whole], _MASK64, whole)

    def _judge(self, sa: IvSa, rec: PacketRecord, iv: int) -> None:
        const, seq64 = sa.const, rec.seq64
        if const is None or const == _NOT_COUNTER or seq64 is None:
            return
        seq64 &= sa.mask
        # The number the IV encodes: seqiv's IV xor c, a counter's IV - c; echainiv's words
        # times 1/multiplier (None when the words disagree: the IV encodes no number at all).
        if sa.words:
            built_from = echainiv.built_from(iv, const, sa.words)
        else:
            built_from = (iv - const) & sa.mask if sa.additive else iv ^ const  # Candidate's
            if sa.alt is not None and self._tell(sa, built_from == seq64, iv, seq64):
                built_from = seq64  # the other constant reads it at its own number
        delta = 0 if built_from is None else signed_delta(built_from, seq64, sa.mask)
        if built_from is not None and not delta:
            rec.iv_seq_delta = 0
            return
        sa.deviating += 1
        sealed = _sealed_with(rec, seq64)
        if built_from is not None and abs(signed_delta(built_from, sealed, sa.mask)) < NEARBY:
            rec.iv_seq_delta = delta
            if sa.deltas is None:
                sa.deltas = Counter()
            sa.deltas[delta] += 1
            note = f"IV built from seq {built_from} (seq{delta:+d})"
        else:
            sa.unrelated += 1  # the IV encodes no sequence number near this one
            note = "IV built from no nearby sequence number"
        rec.detail = f"{rec.detail}; {note}" if rec.detail else note
        sa.frames = with_frame(sa.frames, rec.frame)

    @staticmethod
    def _tell(sa: IvSa, fits: bool, iv: int, seq64: int) -> bool:
        """xor or add: a packet that only one of the two constants reads at its own number
        decides (every packet before it read alike). True when it switched to the other."""
        alt = sa.alt
        assert alt is not None
        other = alt.built_from(iv, sa.mask) == seq64
        if fits == other:
            return False  # both or neither: still undecided
        sa.alt = None
        if fits:
            return False
        sa.const, sa.additive = alt.const, alt.additive
        assert sa.reading is not None  # settled
        sa.reading = replace(sa.reading, scheme=alt.scheme)
        return True

    def finish(self) -> Iterator[Finding]:
        while self._probing:  # SAs with fewer packets than the window
            self._settle(next(iter(self._probing)))
        for (spi, src, dst), sa in self._sas.items(_finds):
            if sa.scheme is IvScheme.CONSTANT:
                yield constant_finding(spi, src, dst, sa)
            elif sa.cbc and sa.scheme in _COUNTERS:
                yield predictable_finding(spi, src, dst, sa)
            elif sa.deviating:
                yield deviating_finding(spi, src, dst, sa)
        for (spi, src, dst), sa in self._sas.items(_chains):
            yield chained_finding(spi, src, dst, sa)

    def schemes(self) -> dict[SaKey, IvScheme]:
        """The IV scheme of each SA it could name, by (SPI, src, dst), once ``finish``
        settled every window; an SA left out is ``IvScheme.UNKNOWN`` (too few IVs, or none
        read). Most SAs of a capture of many short-lived ones are: a dict of every SA
        would be the largest thing the run holds at its end (200,000 one-packet SAs:
        30 MB, docs/performance.md, "Many SAs, fourth step")."""
        named = self._sas.by_sa(_named)  # not sorted: items() sorts a list of every pair
        return {key: _scheme(sa) for key, sa in named}

    def no_ivs(self) -> dict[SaKey, int]:
        """Per SA by (SPI, src, dst), the packets it got with no IV to read (NULL's, or
        without a key clear from their ESP header on: ``PacketContext.clear_from_header``);
        the IV reuse check skips the same packets. SAs with none are left out."""
        return {key: sa.no_iv for key, sa in self._sas.by_sa(_no_ivs)}


def _scheme(sa: IvSa) -> IvScheme:
    """The SA's scheme: its window's reading, else ``IvScheme.NONE`` if it had packets
    with no IV to read, else ``IvScheme.UNKNOWN``."""
    if sa.scheme is not None:
        return sa.scheme
    return IvScheme.NONE if sa.no_iv else IvScheme.UNKNOWN


def _named(sa: IvSa) -> bool:
    """Does ``schemes`` name the SA (a scheme other than ``IvScheme.UNKNOWN``)?"""
    return _scheme(sa) is not IvScheme.UNKNOWN


def _no_ivs(sa: IvSa) -> bool:
    """Did the SA get packets with no IV to read (``no_ivs`` names only those)?"""
    return bool(sa.no_iv)


def _finds(sa: IvSa) -> bool:
    """Does ``finish``'s first walk report the SA (its scheme or deviations)?"""
    return bool(
        sa.scheme is IvScheme.CONSTANT or (sa.cbc and sa.scheme in _COUNTERS) or sa.deviating
    )


def _chains(sa: IvSa) -> bool:
    """Does ``finish``'s second walk report the SA (chained CBC IVs)?"""
    return bool(sa.chained)


coverage = coverage_reasons.of_ivs  # the IV reuse check's too


def _built(ivs: U64, const: int, additive: bool, mask: np.uint64) -> U64:
    """The numbers IVs encode (``Candidate.built_from``): seqiv's IV xor c, an additive
    counter's IV - c (mod 2^64, then the mask)."""
    c = np.uint64(const)
    if not additive:
        return ivs ^ c
    with np.errstate(over="ignore"):
        return (ivs - c) & mask


def _not_echainiv(sa: IvSa, rows: FlowRows, ctx: EncAuthContext) -> Mask:
    """Which rows have an IV echainiv did not build from their own seq64.

    The IVs decrypted as blocks give words that, times the SA's inverse
    multipliers (mod 2^64), must all be the packet's seq64 (checks/echainiv.py).
    """
    wrong = np.zeros(len(rows), np.bool_)
    if not sa.words or sa.const in (_NOT_COUNTER, None):
        return wrong  # not echainiv's IVs: nothing to compare with
    words = ctx.iv_words(rows.iv_bytes.tobytes())
    with np.errstate(over="ignore"):
        for i in range(sa.words):
            inverse = np.uint64((sa.const >> (64 * i)) & _MASK64)
            wrong |= words[:, i] * inverse != rows.seq64
    return wrong
