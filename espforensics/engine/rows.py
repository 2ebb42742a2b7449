"""What the steady lane hands on: a run of a batch's frames, as columns.

In: made by ``SteadyLane.apply`` (engine/steady.py). Out: read by the
summary (``SummaryBuilder.observe_rows``) and the tables
(``tables.steady_table``). ``RowSink`` is what takes the engine's rows: a
record by ``observe``, a steady run by ``observe_rows`` (engine/run.py
``deliver`` calls the right one). Raises nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from espforensics.checks import Flow
from espforensics.checks.bulk import Leaks
from espforensics.engine.wire import I64, Mask
from espforensics.model.arrays import Strs
from espforensics.model.records import PacketRecord

U64 = npt.NDArray[np.uint64]


@dataclass(frozen=True, slots=True)
class SteadyRows:
    """A run of a batch's frames in capture order: the lane's as columns, the others as records.

    The lane's packets are ``ok`` ones, or without a key ``unknown_sa`` ones (``keyed``).

    ``records`` are the frames of the run that carry no ESP (processed per
    frame; they touch no state); the rest are the lane's, one array entry
    each. The two interleave by frame number.
    """

    records: tuple[PacketRecord, ...]
    flows: tuple[Flow, ...]  # the lane's flows; ``flow`` indexes this
    frame: I64
    ts_ns: I64
    caplen: I64
    wirelen: I64
    flow: I64
    ip_version: I64
    carriers: I64  # the ``carriers`` column, an index of engine/wire.py's ``CARRIERS``
    udp: Mask
    udp_sport: I64
    udp_dport: I64
    spi: I64
    seq: I64
    seq64: U64
    esn: Mask  # seq_hi_verified is set (ESN SAs)
    iv: npt.NDArray[np.uint8]  # rows of 16 bytes: the IV and what follows
    iv_len: I64  # the IV's bytes at the start of its row: 16 (CBC), 8, or 0 (NULL)
    esp_offset: I64
    esp_len: I64
    keyed: Mask  # opened and verified (``ok``); else a packet of a run without keys
    # (``unknown_sa``), whose columns from the plaintext are -1 or ""
    pad_len: I64
    next_header: I64
    payload_len: I64
    inner_proto: Strs
    inner_src: Strs
    inner_dst: Strs
    inner_sport: I64  # -1: empty
    inner_dport: I64
    inner_checksum: Strs  # ok, none or not_checked: the lane takes no packet of another
    checksum_detail: Strs  # a not_checked packet's reason (its detail), else ""
    tfc_len: I64  # -1: empty
    counter: Mask  # iv_seq_delta is 0 (else empty: the SA's IVs follow no counter)
    clear: Mask  # keyless, clear from its ESP header on: no IV (iv_reused empty)
    leaks: Leaks | None  # the rows with leak columns (keyless leaks), else None: all empty
    algorithm: tuple[str, ...]  # per flow

    @property
    def rows(self) -> int:
        return len(self.frame) + len(self.records)

    def leaked(self) -> Mask | None:
        """Per lane row: inner bytes proven in clear (``leaked`` set); None: no such row."""
        leaks = self.leaks
        if leaks is None or not leaks.leaked.any():
            return None
        out = np.zeros(len(self.frame), np.bool_)
        out[leaks.at] = leaks.leaked > 0
        return out


class RowSink(Protocol):
    """What takes the engine's rows in capture order, one method per kind of row."""

    def observe(self, rec: PacketRecord) -> None:
        """One frame (or one ESP layer of it) from the per-frame path."""
        ...

    def observe_rows(self, rows: SteadyRows) -> None:
        """A run of frames from the steady lane."""
        ...
