"""The receiver model's results: per receiving host and per receiving state.

In: made by the receiver check (checks/receiver.py) at the end of a run.
Out: frozen values the summary keeps and summary.json stores: per
destination address the predicted increase of each /proc/net/xfrm_stat
counter the model covers (``COUNTERS``, zeros included) and the frames
that make it up; per (SPI, destination) the window assumed and what it did.
Raises nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from espforensics.bounded.frames import Frames


@dataclass(frozen=True, slots=True)
class ReceiverHost:
    """One destination address: its predicted counters and the frames behind each."""

    dst: str
    counters: dict[str, int]  # every name of verdict.COUNTERS
    frames: dict[str, Frames] = field(default_factory=dict)  # counter -> its frames
    unchecked: int = 0  # packets taken as accepted whose ICV could not be checked
    # (counter, cause, packets): "XfrmInStateProtoError", "misplaced ESP headers", 94
    causes: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ReceiverSa:
    """One receiving state (SPI, destination): its window and what it did."""

    spi: int
    dst: str
    window: str  # ReplayConfig.describe(), or "no state" when the key file has none
    verdicts: dict[str, int]  # receiver verdict -> packets
    # How far below the highest verified sequence number a packet that was no replay
    # arrived, at most; the smallest window that accepts all of them is one more.
    reorder_depth: int = 0

    @property
    def min_window(self) -> int:
        """The smallest replay window that would have accepted every packet not a replay."""
        return self.reorder_depth + 1


@dataclass(frozen=True, slots=True)
class Observed:
    """A receiver's /proc/net/xfrm_stat before and after the capture: every counter's
    increase (after - before), for the host ``host``."""

    host: str
    deltas: dict[str, int]
    before: str = ""  # the files they came from, for the reports ("": not given)
    after: str = ""
    # ``ip -s xfrm state``'s per-SA ``stats:`` (x->stats): (spi, dst, replay_window,
    # replay, failed), and the file they came from
    sa_stats: tuple[tuple[int, str, int, int, int], ...] = ()
    states: str = ""
