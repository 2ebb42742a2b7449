"""How many frames the engine's steady lane took, and how many of its SAs' it refused.

In: nothing (``install`` wraps ``SteadyLane.settle`` and ``apply`` in this
process, once). Out: ``take()``, the counts since the last call. The
product is not changed: the wrappers call the real methods and only count.
Raises nothing.

``taken``: rows the lane committed (``SteadyLane.apply``), after any
withdrawal of the engine. ``refused``: candidates of the SAs the lane
admitted that it left to the per-frame path (a bulk rule refused them, or
they did not verify), counted when a plan settles.
"""

from __future__ import annotations

from dataclasses import dataclass

from espforensics.engine.plan import Opening, Plan
from espforensics.engine.rows import SteadyRows
from espforensics.engine.steady import Decoded, SteadyLane
from espforensics.engine.wire import FrameBatch, WireColumns
from espforensics.model.records import PacketRecord


@dataclass(slots=True)
class LaneCount:
    """Frames the lane took, and candidates of its admitted SAs it refused."""

    taken: int = 0
    refused: int = 0


_COUNT = LaneCount()
_INSTALLED: list[bool] = []


def install() -> None:
    """Count every plan settled and every run applied in this process (idempotent)."""
    if _INSTALLED:
        return
    settle, apply = SteadyLane.settle, SteadyLane.apply

    def counting_settle(self: SteadyLane, opening: Opening, decoded: Decoded | None) -> Plan:
        plan = settle(self, opening, decoded)
        _COUNT.refused += sum(len(u.rows) - u.cut for u in plan.units)
        return plan

    def counting_apply(
        self: SteadyLane,
        batch: FrameBatch,
        wire: WireColumns,
        plan: Plan,
        rows: list[int],
        records: tuple[PacketRecord, ...],
    ) -> SteadyRows:
        _COUNT.taken += len(rows)
        return apply(self, batch, wire, plan, rows, records)

    setattr(SteadyLane, "settle", counting_settle)  # noqa: B010
    setattr(SteadyLane, "apply", counting_apply)  # noqa: B010
    _INSTALLED.append(True)


def take() -> LaneCount:
    """The counts since the last call; they start again from 0."""
    out = LaneCount(_COUNT.taken, _COUNT.refused)
    _COUNT.taken = _COUNT.refused = 0
    return out
