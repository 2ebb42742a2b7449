"""Run a block of inputs in one process and tally what happened.

In: the campaign seed, the kinds schedule, a range of indices, a scratch
folder and a per-input time-out. Out: a ``Tally``: inputs tried and
outcomes per kind, and per failure class its count and first example.
Deterministic: input ``i`` is the same whatever block or process runs it.
Raises nothing but KeyboardInterrupt.
"""

from __future__ import annotations

import gc
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from fuzz.corpus import all_secrets
from fuzz.inputs import FuzzInput, make_input
from fuzz.oracle import INTERNAL_ERROR, Oracle, Verdict
from fuzz.seeds import seeds

# Kinds per 24 inputs: captures and key files most, compare and batch (slow) least.
# steady: a long run analyzed twice (both lanes), about as slow as a batch input.
WEIGHTS = {
    "pcap": 6,
    "pcapng": 6,
    "yaml": 3,
    "xfrm": 3,
    "esp_sa": 3,
    "compare": 2,
    "batch": 1,
    "steady": 1,
}


def schedule(kinds: Sequence[str]) -> list[str]:
    """The kinds in the order inputs cycle through them."""
    slots = [k for k in WEIGHTS for _ in range(WEIGHTS[k]) if k in kinds]
    out: list[str] = []
    while slots:  # interleave: pcap, pcapng, yaml, ... rather than six pcaps in a row
        for k in dict.fromkeys(slots):
            slots.remove(k)
            out.append(k)
    return out


class Hang(BaseException):
    """An input ran past the time-out (a BaseException: no ``except Exception`` eats it)."""


@dataclass(frozen=True, slots=True)
class Example:
    """The first input that showed a failure class."""

    kind: str
    index: int
    detail: str


@dataclass(slots=True)
class Tally:
    """What a block (or the whole campaign) saw."""

    tried: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, outcome)
    failures: Counter[str] = field(default_factory=Counter)
    examples: dict[str, Example] = field(default_factory=dict)
    # Bugs of the harness itself (a mutator that raised): counted, the campaign goes on.
    harness: Counter[str] = field(default_factory=Counter)
    # Per kind: frames the steady lane took, candidates it refused, inputs it took any of.
    lane_taken: Counter[str] = field(default_factory=Counter)
    lane_refused: Counter[str] = field(default_factory=Counter)
    lane_inputs: Counter[str] = field(default_factory=Counter)

    def add(self, fuzz_input: FuzzInput, verdict: Verdict) -> None:
        self.tried[fuzz_input.kind] += 1
        self.outcomes[(fuzz_input.kind, verdict.outcome)] += 1
        self.lane_taken[fuzz_input.kind] += verdict.lane_taken
        self.lane_refused[fuzz_input.kind] += verdict.lane_refused
        self.lane_inputs[fuzz_input.kind] += verdict.lane_taken > 0
        for failure in {f.cls: f for f in verdict.failures}.values():
            self.failures[failure.cls] += 1
            if failure.cls not in self.examples:
                example = Example(fuzz_input.kind, fuzz_input.index, failure.detail)
                self.examples[failure.cls] = example

    def merge(self, other: Tally) -> None:
        self.tried.update(other.tried)
        self.outcomes.update(other.outcomes)
        self.failures.update(other.failures)
        self.harness.update(other.harness)
        self.lane_taken.update(other.lane_taken)
        self.lane_refused.update(other.lane_refused)
        self.lane_inputs.update(other.lane_inputs)
        for cls, example in other.examples.items():
            mine = self.examples.get(cls)
            if mine is None or example.index < mine.index:
                self.examples[cls] = example

    @property
    def internal_errors(self) -> int:
        return sum(n for (_, outcome), n in self.outcomes.items() if outcome == INTERNAL_ERROR)


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang


def judge(oracle: Oracle, fuzz_input: FuzzInput, timeout: float) -> Verdict:
    """The oracle's verdict, or a ``hang`` failure past ``timeout`` seconds (0: none)."""
    if timeout:
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return oracle.run(fuzz_input)
    except Hang:
        verdict = Verdict()
        verdict.fail(f"hang: over {timeout:g} s", f"{fuzz_input.kind} #{fuzz_input.index}")
        return verdict
    finally:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, 0)


def prepare_process(memory_mib: int) -> None:
    """Build the seeds, cap the address space, and make the collector cheap.

    The cap turns a runaway allocation into a MemoryError (a failure
    class) rather than the machine's OOM killer. Freezing the seeds keeps
    the collector from walking them on every analysis (measured: 3x faster).
    """
    if memory_mib:
        import resource  # noqa: PLC0415

        limit = memory_mib << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _alarm)
    seeds()
    all_secrets()
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(0.0005)  # the capture hashing thread starts without a 5 ms wait


def _last_frame(exc: BaseException) -> str:
    """``file:line function`` of the frame that raised."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "?"
    code = tb.tb_frame.f_code
    return f"{Path(code.co_filename).name}:{tb.tb_lineno} {code.co_name}"


def run_block(
    campaign: int, kinds: Sequence[str], indices: range, scratch: Path, timeout: float
) -> Tally:
    """Judge the inputs ``indices`` of the campaign."""
    order = schedule(kinds)
    oracle = Oracle(scratch)
    tally = Tally()
    for index in indices:
        try:
            fuzz_input = make_input(campaign, index, order[index % len(order)])
        except Exception as exc:  # the harness's own bug must not end a long campaign
            tally.harness[f"{type(exc).__name__} at {_last_frame(exc)}"] += 1
            continue
        tally.add(fuzz_input, judge(oracle, fuzz_input, timeout))
    return tally
