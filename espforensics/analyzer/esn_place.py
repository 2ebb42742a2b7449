"""Where a verified ESN packet sits in its SA's sequence (RFC 4303 A2.2).

In: each verified packet of an ESN SA, with the seq64 its place infers and
the one its ICV verified with (``place``); frame numbers to stop waiting at
(``force``). Out: the seq64 the packet's place implies. An SA's first
packet that verified only with a neighbour of the starting high half has no
place yet: it is held (``Holds``) and kept from the checks until the SA's
next verified packet tells a capture that starts after a wrap from a first
packet sealed with the wrong high half (primer s7); then it is returned,
``confirmed``, for the caller to hand to the checks. A packet that verified
only with a high half below the key file's ``esn_hi`` is never held: a
receiver at ``esn_hi`` drops it, so its place is where ``esn_hi`` puts it
and it is ``esn_mismatch``. Raises nothing.
"""

from __future__ import annotations

from collections import OrderedDict

from espforensics.checks.context import Receiving, SaState
from espforensics.checks.perflow import Holds
from espforensics.decode.esn import EsnTracker
from espforensics.model.enums import Verdict


def mismatch_words(placed: int, hi: int) -> str:
    """The detail of an ``esn_mismatch`` packet: the high half it verified with, and its place's."""
    return (
        f"ICV verifies only with ESN high half {hi:#x}; "
        f"its place in the sequence implies {placed >> 32:#x}"
    )


class EsnPlacement:
    """The ESN SAs whose first packet waits for its place, oldest first."""

    __slots__ = ("_holds", "_tentative")

    def __init__(self, holds: Holds) -> None:
        self._holds = holds
        # ESN SAs whose first packet verified only with a neighbour of esn_hi, by frame.
        self._tentative: OrderedDict[SaState, Receiving] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tentative)

    def place(self, pkt: Receiving, inferred: int, verified: int) -> tuple[int, Receiving | None]:
        """The seq64 ``pkt``'s place implies, and the SA's first packet if this confirms it.

        A first packet confirmed here goes to the checks before ``pkt`` does.
        """
        state, seq_lo = pkt.state, pkt.rec.seq or 0
        if state.tentative is not None:
            first = self._place_first(state, seq_lo, verified, inferred)
            return state.tracker.infer(seq_lo), first
        if verified != inferred and not state.tracker.placed:
            if state.sa is not None and verified >> 32 < state.sa.esn_hi:
                # Below the key file's high half: a receiver at esn_hi infers that one
                # and drops the packet (RFC 4303 A2.2), as it drops one sealed with
                # the next high half; its place is where esn_hi puts it.
                return inferred, None
            keyed = state.keyed()  # verified: under a key
            keyed.tentative, keyed.tentative_start = pkt, inferred
            self._tentative[state] = pkt
            self._holds.hold(pkt.rec.frame)
            return verified, None  # provisionally: the SA's next packet tells
        return inferred, None

    def _place_first(
        self, state: SaState, seq_lo: int, verified: int, inferred: int
    ) -> Receiving | None:
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
            return None
        start = state.tentative_start
        if verified != inferred and verified == EsnTracker.nearest(start, seq_lo):
            frec = first.rec
            frec.verdict, frec.seq64 = Verdict.ESN_MISMATCH, start
            frec.detail = mismatch_words(start, frec.seq_hi_verified or 0)
            state.tracker.rebase(verified)
        return self._confirm(state)

    def _confirm(self, state: SaState) -> Receiving | None:
        """Stop holding the tentative first packet of ``state``; it, for the checks."""
        first = state.tentative
        if first is None:
            return None
        state.keyed().tentative = None
        del self._tentative[state]
        self._holds.release(first.rec.frame)
        return first

    def force(self, upto: int | None) -> list[Receiving]:
        """Stop waiting for the SAs whose first packet is frame ``upto`` or older (None: all).

        Returns those first packets, oldest first, for the checks; costs
        O(SAs confirmed): the queue is in capture order.
        """
        confirmed: list[Receiving] = []
        while self._tentative:
            state, first = next(iter(self._tentative.items()))
            if upto is not None and first.rec.frame > upto:
                break
            self._confirm(state)
            confirmed.append(first)
        return confirmed
