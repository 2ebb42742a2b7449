"""Extended sequence numbers: the high 32 bits the wire does not carry.

In: the low 32 bits of each packet's sequence number, per SA. Out: the
inferred 64-bit value, and on request the other candidates to try when the
ICV fails. Raises nothing.

RFC 4303 s2.2.1 and appendix A2.2: the receiver keeps the highest
sequence number seen and takes the high half that puts the new low half
closest to it: a packet just past a wrap gets hi + 1, a late one from
before the wrap keeps hi - 1 relative to the new top. Only packets that
verify (or, without a key, that are seen) move the top.

A packet whose ICV verifies only with another high half than the one its
place implies (``placed`` is True) is a sender fault, not a correction
of the inference: the caller must not ``commit`` it (primer s7).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_LOW = 1 << 32
_HALF = 1 << 31
_TOP = 1 << 64  # RFC 4303 s2.2.1: the sequence number is 64 bits; no high half beyond


class EsnTracker:
    """Per-SA state of RFC 4303 appendix A: the highest seq64 seen."""

    __slots__ = ("_start_hi", "_top")

    def __init__(self, esn_hi: int = 0) -> None:
        self._start_hi = esn_hi << 32  # high half of the first packet (Wireshark's "ESN High Bits")
        self._top: int | None = None

    def infer(self, seq_lo: int) -> int:
        """The 64-bit sequence number closest to the highest seen."""
        top = self._top
        if top is None:
            return self._start_hi | seq_lo
        return self.nearest(top, seq_lo)

    @staticmethod
    def nearest(top: int, seq_lo: int) -> int:
        """The 64-bit number with low half ``seq_lo`` closest to ``top`` (A2.2)."""
        cand = (top & ~0xFFFFFFFF) | seq_lo
        if cand - top > _HALF and cand >= _LOW:
            cand -= _LOW
        elif top - cand > _HALF and cand + _LOW < _TOP:  # no high half past 2^64
            cand += _LOW
        return cand

    @staticmethod
    def nearest_run(top: int, seq_lo: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64] | None:
        """Every packet's seq64 in the top's high half, when A2.2 gives these very values
        whichever of them came first: ``nearest`` from every running top (``top``, then
        the highest so far). None near a wrap, where only one by one places them.

        One high half, and no value or top more than 2^31 from another: ``nearest``
        then never moves a packet to a neighbouring half.
        """
        cand = seq_lo | np.uint64(top & ~0xFFFFFFFF)
        high, low = int(cand.max()), int(cand.min())
        if max(high, top) - low > _HALF or high - top > _HALF:
            return None
        return cand

    @property
    def top(self) -> int:
        """The highest seq64 committed (-1 before the first)."""
        return -1 if self._top is None else self._top

    @property
    def placed(self) -> bool:
        """True once a packet has been committed: the high half then follows from the place."""
        return self._top is not None

    def rebase(self, seq64: int) -> None:
        """Make ``seq64`` the highest seen: the packet that placed the SA was the wrong one."""
        self._top = seq64

    def commit(self, seq64: int) -> None:
        """Record a packet whose seq64 is proven (verified or keyless)."""
        if self._top is None or seq64 > self._top:
            self._top = seq64

    @staticmethod
    def alternatives(seq64: int) -> tuple[int, ...]:
        """Other high halves worth a try when the ICV fails (A2.3), within 64 bits."""
        alts = [seq64 + _LOW] if seq64 + _LOW < _TOP else []
        if seq64 >= _LOW:
            alts.append(seq64 - _LOW)
        return tuple(alts)
