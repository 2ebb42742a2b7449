"""The Linux kernel's three anti-replay windows, as pure state machines.

In: 32-bit sequence numbers as a receiver reads them from ESP headers.
Out: per window ``check`` (a ``ReplayFail`` or None), ``seqhi`` (the high
half an ESN receiver infers), ``advance`` (after the ICV verified). Raises
nothing; imports nothing of ours.

Each class follows one variant of net/xfrm/xfrm_replay.c line by line, with
u32 arithmetic (``& M32``) where the C code wraps:

- ``LegacyWindow``: ``xfrm_replay_check`` / ``xfrm_replay_advance``, a u32
  bitmap whose bit ``i`` is ``top - i``; the check caps the window at 32
  (``min_t(unsigned int, x->props.replay_window, sizeof(x->replay.bitmap) *
  8)``), the advance does not (its shift is a C shift of a u32, taken here
  as x86 does: the count modulo 32). A window of 0 turns the check off.
- ``BmpWindow``: ``xfrm_replay_check_bmp`` / ``xfrm_replay_advance_bmp``,
  the ``replay_esn`` bitmap as a ring of ``replay_window`` bits whose slot
  for ``top`` is ``(top - 1) % replay_window``.
- ``EsnWindow``: ``xfrm_replay_seqhi``, ``xfrm_replay_check_esn`` and
  ``xfrm_replay_advance_esn``: the same ring, with the high half inferred
  from the window: below the window's bottom a number is taken for the next
  epoch (``seq_hi + 1``).

The recheck xfrm_input runs after the ICV verified (``xfrm_replay_recheck``)
has no method: for a receiver that handles one packet at a time the state
has not moved since the check, so it gives what ``check`` and ``seqhi``
gave (receiver/verdict.py).
"""

from __future__ import annotations

from enum import StrEnum

M32 = 0xFFFFFFFF


class ReplayFail(StrEnum):
    """Why a replay check failed (each counts XfrmInStateSeqError in xfrm_input)."""

    ZERO = "seq_zero"  # sequence number 0 (goto err, no per-SA stat)
    TOO_OLD = "too_old"  # below the window (x->stats.replay_window++)
    REPLAY = "replay"  # its bit is set: accepted before (x->stats.replay++)


class LegacyWindow:
    """``xfrm_replay_legacy``: ``x->replay.seq``, ``x->replay.bitmap`` (u32)."""

    __slots__ = ("bitmap", "seq", "size")
    esn = False

    def __init__(self, size: int) -> None:
        self.size = size  # x->props.replay_window, as the state holds it
        self.seq = 0
        self.bitmap = 0

    def place(self, top: int) -> None:
        """Start the window at ``top`` (its low half), nothing below it accepted yet."""
        self.seq = top & M32

    def seqhi(self, seq: int) -> int:
        return 0  # xfrm_replay_seqhi: not an ESN state

    def check(self, seq: int) -> ReplayFail | None:
        if not self.size:
            return None
        if seq == 0:
            return ReplayFail.ZERO
        if seq > self.seq:
            return None
        diff = self.seq - seq
        if diff >= min(self.size, 32):
            return ReplayFail.TOO_OLD
        if self.bitmap & (1 << diff):
            return ReplayFail.REPLAY
        return None

    def advance(self, seq: int) -> None:
        if not self.size:
            return
        if seq > self.seq:
            diff = seq - self.seq
            if diff < self.size:
                self.bitmap = ((self.bitmap << (diff & 31)) | 1) & M32
            else:
                self.bitmap = 1
            self.seq = seq
        else:
            self.bitmap |= 1 << ((self.seq - seq) & 31)  # after a check: below 32

    @property
    def top(self) -> int:
        return self.seq


class BmpWindow:
    """``xfrm_replay_bmp``: ``replay_esn->seq`` and ``bmp[]`` as one int of ``size`` bits."""

    __slots__ = ("bmp", "seq", "size")
    esn = False

    def __init__(self, size: int) -> None:
        self.size = size  # replay_esn->replay_window
        self.seq = 0
        self.bmp = 0

    def place(self, top: int) -> None:
        """Start the window at ``top`` (its low half), nothing below it accepted yet."""
        self.seq = top & M32

    def seqhi(self, seq: int) -> int:
        return 0

    def _bit(self, diff: int) -> int:
        """The ring slot of ``top - diff`` (``pos >= diff`` ... in the C code)."""
        pos = ((self.seq - 1) & M32) % self.size
        return (pos - diff) % self.size if pos >= diff else self.size - (diff - pos)

    def check(self, seq: int) -> ReplayFail | None:
        if not self.size:
            return None
        if seq == 0:
            return ReplayFail.ZERO
        if seq > self.seq:
            return None
        diff = (self.seq - seq) & M32
        if diff >= self.size:
            return ReplayFail.TOO_OLD
        if self.bmp >> self._bit(diff) & 1:
            return ReplayFail.REPLAY
        return None

    def advance(self, seq: int) -> None:
        if not self.size:
            return
        if seq > self.seq:
            self.bmp = _forward(self.bmp, self.seq, seq - self.seq, self.size)
            self.seq = seq
        else:
            self.bmp |= 1 << self._bit(self.seq - seq)

    @property
    def top(self) -> int:
        return self.seq


def _forward(bmp: int, top: int, diff: int, size: int) -> int:
    """The ring after the top moves ``diff`` up from ``top``: the slots passed over
    cleared (``for (i = 1; i < diff; i++)``, or every word), the new top's set."""
    pos = ((top - 1) & M32) % size
    if diff < size:
        for i in range(1, diff):
            bmp &= ~(1 << (pos + i) % size)
    else:
        bmp = 0
    return bmp | 1 << (pos + diff) % size


class EsnWindow:
    """``xfrm_replay_esn``: ``replay_esn->seq``, ``seq_hi`` and the ring of ``size`` bits."""

    __slots__ = ("bmp", "seq", "seq_hi", "size")
    esn = True

    def __init__(self, size: int, seq_hi: int = 0) -> None:
        self.size = size  # replay_esn->replay_window (xfrm_init_replay refuses 0)
        self.seq = 0
        self.seq_hi = seq_hi
        self.bmp = 0

    def place(self, top: int) -> None:
        """Start the window at the 64-bit ``top``, nothing below it accepted yet."""
        self.seq, self.seq_hi = top & M32, top >> 32 & M32

    def seqhi(self, seq: int) -> int:
        """``xfrm_replay_seqhi``: the high half the receiver decrypts ``seq`` with."""
        bottom = (self.seq - self.size + 1) & M32
        if self.seq >= self.size - 1:  # A. same subspace
            return (self.seq_hi + 1) & M32 if seq < bottom else self.seq_hi
        return (self.seq_hi - 1) & M32 if seq >= bottom else self.seq_hi  # B. two subspaces

    def check(self, seq: int) -> ReplayFail | None:
        size, top = self.size, self.seq
        if not size:
            return None
        bottom = (top - size + 1) & M32
        if seq == 0 and self.seq_hi == 0 and top < size - 1:
            return ReplayFail.ZERO
        diff = (top - seq) & M32
        if top >= size - 1:
            if seq > top or seq < bottom:  # A: above, or taken for the next epoch
                return None
        else:
            if top < seq < bottom:  # B
                return None
            if seq >= bottom:
                diff = (~seq + top + 1) & M32
        if diff >= size:
            return ReplayFail.TOO_OLD
        pos = ((top - 1) & M32) % size
        bit = (pos - diff) % size if pos >= diff else size - (diff - pos)
        if self.bmp >> bit & 1:
            return ReplayFail.REPLAY
        return None

    def advance(self, seq: int) -> None:
        size = self.size
        if not size:
            return
        seq_hi = self.seqhi(seq)
        wrap = _signed((seq_hi - self.seq_hi) & M32)
        pos = ((self.seq - 1) & M32) % size
        if (not wrap and seq > self.seq) or wrap > 0:
            diff = seq - self.seq if not wrap else (~self.seq + seq + 1) & M32
            self.bmp = _forward(self.bmp, self.seq, diff, size)
            self.seq = seq
            if wrap > 0:
                self.seq_hi = (self.seq_hi + 1) & M32
        else:
            diff = (self.seq - seq) & M32
            bit = (pos - diff) % size if pos >= diff else size - (diff - pos)
            self.bmp |= 1 << bit

    @property
    def top(self) -> int:
        return self.seq_hi << 32 | self.seq


def _signed(value: int) -> int:
    """A u32 read as C's ``int wrap = seq_hi - replay_esn->seq_hi``."""
    return value - (1 << 32) if value & 0x80000000 else value


Window = LegacyWindow | BmpWindow | EsnWindow
