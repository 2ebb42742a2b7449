"""What a Linux receiver does with one ESP packet, and which counter that moves.

In: the packet as the receiver reads it (SPI and 32-bit sequence number at
the place the ESP header belongs), whether its ICV verifies and with which
ESN high half it was sealed. Out: ``RxVerdict`` per packet from
``RxState.receive``; ``COUNTER`` names the /proc/net/xfrm_stat counter each
drop increments. Raises nothing.

The order is net/xfrm/xfrm_input.c's ``xfrm_input``: ``xfrm_state_lookup``
by destination and SPI (none: ``XfrmInNoStates``); the replay check
(``xfrm_replay_check``, fails: ``XfrmInStateSeqError``); the high half
inferred (``xfrm_replay_seqhi``); ``x->type->input`` decrypts and verifies
(esp_input: a failed ICV, or a trailer whose pad length leaves no payload,
``esp_remove_trailer``: ``XfrmInStateProtoError``); the recheck
(``xfrm_replay_recheck``: with one packet at a time, the check's answer
again); then ``xfrm_replay_advance``.
"""

from __future__ import annotations

from enum import Enum, StrEnum

from espforensics.model.enums import Verdict
from espforensics.receiver.config import ReplayConfig
from espforensics.receiver.replay import ReplayFail

NO_STATES = "XfrmInNoStates"
PROTO_ERROR = "XfrmInStateProtoError"
SEQ_ERROR = "XfrmInStateSeqError"
COUNTERS = (NO_STATES, PROTO_ERROR, SEQ_ERROR)  # what the prediction covers, zeros included


class RxVerdict(StrEnum):
    """The receiver's verdict; the value is written to the ``receiver`` column."""

    ACCEPT = "accept"
    REPLAY = "replay"  # accepted before, inside the window
    TOO_OLD = "too_old"  # below the window
    SEQ_ZERO = "seq_zero"  # sequence number 0, which no sender sends
    ICV_FAIL = "icv_fail"  # the ICV fails at the place the ESP header belongs
    # The ICV fails only because the receiver decrypts with another ESN high half than
    # the packet was sealed with: below the window (taken for the next epoch), or sealed
    # with a high half its place rules out.
    ICV_FAIL_SEQHI = "icv_fail_seqhi"
    BAD_TRAILER = "bad_trailer"  # the pad length leaves no payload (esp_remove_trailer)
    NO_STATE = "no_state"  # no state for its SPI and destination
    # Its ICV could not be checked here (no usable key, an algorithm not verified, cut
    # by the snap length): taken as accepted, and counted apart.
    UNCHECKED = "unchecked"


COUNTER: dict[RxVerdict, str] = {
    RxVerdict.REPLAY: SEQ_ERROR,
    RxVerdict.TOO_OLD: SEQ_ERROR,
    RxVerdict.SEQ_ZERO: SEQ_ERROR,
    RxVerdict.ICV_FAIL: PROTO_ERROR,
    RxVerdict.ICV_FAIL_SEQHI: PROTO_ERROR,
    RxVerdict.BAD_TRAILER: PROTO_ERROR,
    RxVerdict.NO_STATE: NO_STATES,
}
_SEQ_FAIL = {
    ReplayFail.ZERO: RxVerdict.SEQ_ZERO,
    ReplayFail.TOO_OLD: RxVerdict.TOO_OLD,
    ReplayFail.REPLAY: RxVerdict.REPLAY,
}


class Icv(Enum):
    """What the analysis proved of a packet's ICV at the ESP header's own place."""

    VERIFIES = 1  # with the high half ``sent_hi`` (ESN), and its trailer leaves a payload
    FAILS = 2
    NO_PAYLOAD = 3  # verifies, but the pad length leaves no payload
    UNKNOWN = 4


class RxState:
    """One receiving state (destination, SPI): its window and what it did."""

    __slots__ = ("config", "window")

    def __init__(self, config: ReplayConfig, first: int | None = None) -> None:
        """A state whose window starts empty at 0, as a new state's does; or, given the
        64-bit number of the first packet it receives, just below that packet."""
        self.config = config
        self.window = config.make()
        if first is not None:
            self.window.place(max(first, 1) - 1)

    def receive(self, seq: int, icv: Icv, sent_hi: int = 0) -> RxVerdict:
        """xfrm_input's steps for one packet; the window advances when it is accepted."""
        window = self.window
        fail = window.check(seq)
        if fail is not None:
            return _SEQ_FAIL[fail]
        if icv is Icv.FAILS:
            return RxVerdict.ICV_FAIL
        if window.esn and icv is not Icv.UNKNOWN and window.seqhi(seq) != sent_hi:
            return RxVerdict.ICV_FAIL_SEQHI
        if icv is Icv.NO_PAYLOAD:
            return RxVerdict.BAD_TRAILER
        window.advance(seq)  # the recheck, state unchanged since the check, passes
        return RxVerdict.ACCEPT if icv is Icv.VERIFIES else RxVerdict.UNCHECKED


_CAUSES = {
    RxVerdict.REPLAY: "replays inside the window",
    RxVerdict.TOO_OLD: "packets below the window",
    RxVerdict.SEQ_ZERO: "packets with sequence number 0",
    RxVerdict.ICV_FAIL: "ICV failures",
    RxVerdict.ICV_FAIL_SEQHI: "packets below the ESN window, taken for the next epoch",
    RxVerdict.BAD_TRAILER: "pad lengths leaving no payload",
    RxVerdict.NO_STATE: "packets of SPIs with no state in the key file",
}


def cause(verdict: RxVerdict, analysis: Verdict) -> str:
    """Why a drop happened, as a plural noun for "94 misplaced ESP headers": the
    receiver's verdict, made precise by what the analysis proved of the packet."""
    if verdict is RxVerdict.ICV_FAIL and analysis is Verdict.ESP_MISPLACED:
        return "misplaced ESP headers"
    if verdict is RxVerdict.ICV_FAIL_SEQHI and analysis is Verdict.ESN_MISMATCH:
        return "packets sealed with another ESN high half than their place implies"
    return _CAUSES.get(verdict, str(verdict))
