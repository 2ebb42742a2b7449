"""Outer fragments waiting for their datagram, and what became of each.

In: every fragment of an ESP or ESP-in-UDP datagram with its record
(``add``), the capture's clock (``expire``). Out: the reassembled datagram
when a fragment completes one (RFC 791 s3.2, RFC 8200 s4.5); each fragment's
record says what became of its datagram. A fragment's record is held
(``Holds``) until then, so records still leave in capture order. Raises
nothing.
"""

from __future__ import annotations

from espforensics.checks.perflow import Holds
from espforensics.decode.ip import OuterIp
from espforensics.decode.reassembly import Completed, Expired, Reassembler
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord


class Fragments:
    """The reassembler and the records of the fragments it holds, by frame."""

    __slots__ = ("_holds", "_reasm", "_waiting")

    def __init__(self, holds: Holds, timeout_s: float) -> None:
        self._holds = holds
        self._reasm = Reassembler(timeout_ns=int(timeout_s * 1e9))
        self._waiting: dict[int, PacketRecord] = {}

    def __bool__(self) -> bool:
        """Is a fragment waiting for its datagram?"""
        return bool(self._waiting)

    def __contains__(self, frame: int) -> bool:
        """Is ``frame`` a fragment whose datagram is still being waited for?"""
        return frame in self._waiting

    def add(self, rec: PacketRecord, ip: OuterIp, data: bytes, ts_ns: int) -> Completed | None:
        """Add a whole captured fragment; the datagram it completes, if it does.

        A fragment that completes nothing is held with verdict ``fragment``;
        one whose datagram was given up on is a ``fragment`` that says why.
        """
        done = self._reasm.add(ip, data, rec.frame, ts_ns)
        if done is None:
            rec.verdict = Verdict.FRAGMENT
            rec.detail = "fragment; waiting for the rest of the datagram"
            self._waiting[rec.frame] = rec
            self._holds.hold(rec.frame)
            return None
        if isinstance(done, Completed):
            why = f"fragment of the datagram completed in frame {rec.frame}"
            self._settle(done.frames, why)
            return done
        rec.verdict = Verdict.FRAGMENT
        self.settle([done])
        rec.detail = f"fragment of a datagram never completed: {done.reason}"
        return None

    def expire(self, ts_ns: int) -> list[Expired]:
        """The datagrams older than the timeout at ``ts_ns``, given up (not settled yet)."""
        return self._reasm.expire(ts_ns)

    def give_up(self, frame: int, why: str) -> list[Expired]:
        """Stop waiting for the datagram of fragment ``frame`` (not settled yet)."""
        return self._reasm.expire_frame(frame, why)

    def drain(self) -> list[Expired]:
        """Every datagram still incomplete at the end of the capture (not settled yet)."""
        return self._reasm.drain()

    def settle(self, expired: list[Expired]) -> None:
        """Say in the fragments' records that their datagrams never completed; let them go."""
        for exp in expired:
            self._settle(exp.frames, f"fragment of a datagram never completed: {exp.reason}")

    def _settle(self, frames: tuple[int, ...], detail: str) -> None:
        for n in frames:
            rec = self._waiting.pop(n, None)
            if rec is not None:
                rec.detail = detail
                self._holds.release(n)
