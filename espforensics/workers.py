"""How many workers to start: what was asked, capped at the work there is and the cores.

In: the ``--jobs`` asked for, the pieces of work (captures of a batch; None
when unknown, as for the threads of one capture) and the cores this process
may run on. Out: a ``Workers`` value (how many, and why fewer than asked).
Raises nothing.

``batch --jobs 10000`` once started 5,321 processes for 8 captures: a
worker without a capture to take, or beyond the cores, only costs memory
(a process imports pandas and pyarrow, ~100 MB) and never finishes sooner.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask or cgroup), at least 1."""
    count = getattr(os, "process_cpu_count", None)  # Python 3.13
    if count is not None:
        return int(count() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class Workers:
    """The workers to start; ``why`` says why fewer than asked ("" when not capped)."""

    count: int
    asked: int
    why: str = ""

    def notice(self, option: str = "--jobs") -> str:
        """One line for stderr, e.g. ``--jobs 10000 capped at 8: 8 captures to analyze``."""
        return f"{option} {self.asked} capped at {self.count}: {self.why}" if self.why else ""


def cap_workers(asked: int, work: int | None, cores: int, unit: str = "captures") -> Workers:
    """At most one worker per piece of ``work`` (when known) and per core; at least one."""
    limits = [(cores, f"{cores} {'core' if cores == 1 else 'cores'} usable")]
    if work is not None:
        limits.insert(0, (work, f"{work} {unit} to analyze"))
    count = max(1, min([asked, *(n for n, _ in limits)]))
    if count >= asked:
        return Workers(asked, asked)
    why = " and ".join(text for n, text in limits if max(1, n) == count)
    return Workers(count, asked, why)
