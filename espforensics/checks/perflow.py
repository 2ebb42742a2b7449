"""What a check keeps per flow, and the frames held back: ``PerFlow``, ``Holds``.

In: the ``Flow`` of each packet (checks/context.py) and the frame numbers a
check holds. Out: a check's state per flow, made on first use and listed by
(SPI, src, dst) at the end (``PerFlow``); which frames must not leave the
pipeline yet (``Holds``). Raises nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from espforensics.checks.context import Flow
from espforensics.decode.inner import ntop
from espforensics.model.records import SaKey

T = TypeVar("T")


def _named(wire: bytes, names: dict[bytes, str]) -> SaKey:
    """``flow_wire``'s (SPI, src, dst), the address texts found once in ``names``."""
    width = wire[4]
    src, dst = wire[5 : 5 + width], wire[5 + width :]
    src_text = names.get(src) or names.setdefault(src, ntop(src))
    dst_text = names.get(dst) or names.setdefault(dst, ntop(dst))
    return SaKey(int.from_bytes(wire[:4]), src_text, dst_text)


def _first(pair: tuple[SaKey, object]) -> SaKey:
    return pair[0]


_BITS = 8  # Flow.known_to stays below 256: an int Python keeps once, no object per flow
_made = threading.local()


def flow_bit() -> int:
    """A bit of ``Flow.known_to`` for one holder of per-flow state (each ``PerFlow``).

    A run makes its holders (checks/__init__.py ``make_checks``: fewer than
    ``_BITS``) one after the other in one thread, so a counter of that thread's
    takes distinct bits for them, whatever runs other threads make meanwhile.
    """
    made = getattr(_made, "count", 0)
    _made.count = made + 1
    return 1 << made % _BITS


class PerFlow(Generic[T]):
    """A check's state per flow: found by the Flow object, listed by (SPI, src, dst).

    Two flows with the same SPI and addresses (after a secrets block reloads
    the SAs) share one state, as they are one SA on the wire.

    Memory: one dict entry per state, keyed by the flow's ``wire`` (the flow
    table's own key: no object of its own); which Flow objects asked is a bit
    of the flow's ``known_to`` (``flow_bit``), not a second dict per check.
    """

    __slots__ = ("_bit", "_factory", "_states")

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._bit = flow_bit()
        self._states: dict[bytes, T] = {}

    def get(self, flow: Flow) -> T:
        """The flow's state, made on first use."""
        if flow.known_to & self._bit:
            return self._states[flow.wire]
        state = self._states.get(flow.wire)
        if state is None:
            state = self._states[flow.wire] = self._factory()
        flow.known_to |= self._bit
        return state

    def known(self, flow: Flow) -> T | None:
        """The flow's state if a packet of it was observed, else None (nothing is made)."""
        return self._states[flow.wire] if flow.known_to & self._bit else None

    def by_sa(self, where: Callable[[T], bool] | None = None) -> Iterator[tuple[SaKey, T]]:
        """Every state with its (SPI, src, dst), in the order they were made; ``where``:
        only the states it holds true of, the others not named."""
        names: dict[bytes, str] = {}  # an address's text, made once per walk
        for wire, state in self._states.items():
            if where is None or where(state):
                yield _named(wire, names), state

    def items(self, where: Callable[[T], bool] | None = None) -> list[tuple[SaKey, T]]:
        """``by_sa`` sorted by (SPI, src, dst); ``where``: only the states it holds true
        of, the others neither named nor sorted (a check's ``finish`` reports a few SAs of
        a scan's tens of thousands)."""
        return sorted(self.by_sa(where), key=_first)


class Holds:
    """Frames whose records must not leave the pipeline yet.

    A stage that fills a record's columns only after later packets arrive
    (a fragment waiting for its datagram, an SA whose IV constant is not
    settled) holds it here; records leave in capture order once nothing
    before them is held. Every holder releases what it holds by its
    ``finish``. Two holders may hold one frame (an SA's first packet waits
    for its IV constant and for its ESN place): it is counted, and leaves
    once both released it. Giving up waiting early is each holder's own
    method, which analyzer/frame.py FrameAnalyzer calls in a declared order.
    """

    __slots__ = ("_frames",)

    def __init__(self) -> None:
        self._frames: dict[int, int] = {}  # frame -> holders

    def __bool__(self) -> bool:
        return bool(self._frames)

    def __contains__(self, frame: int) -> bool:
        return frame in self._frames

    def hold(self, frame: int) -> None:
        self._frames[frame] = self._frames.get(frame, 0) + 1

    def release(self, frame: int) -> None:
        left = self._frames.pop(frame, 0) - 1
        if left > 0:
            self._frames[frame] = left
        elif not self._frames:  # a dict keeps its largest table once emptied: not this one
            self._frames = {}
