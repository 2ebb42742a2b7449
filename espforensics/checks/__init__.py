"""The forensic checks: one module each, one explicit registry.

In: every ESP packet as a ``PacketContext``, in capture order. Out: each
check fills its own columns of the record in ``observe`` and yields its
``Finding`` rows in ``finish``. Raises nothing.

What the receiver does to a packet before any check looks at it (the ESP
header found where it really is, decryption, ESN state, the plaintext
decoded) is done by then (analyzer/receive.py, in its declared order), so
no check changes what another reads of the packet: the receiver check reads
the sequence check's ``seq_anomaly`` of the same record (``OBSERVE_READS``),
and ``FINISH_READS`` names what a ``finish`` reads of another check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from espforensics.checks import (
    checksum,
    esn_mismatch,
    iv_derivation,
    iv_reuse,
    keys,
    leaks,
    placement,
    receiver,
    sequence,
)
from espforensics.checks.bulk import BulkCheck, PlainRule, Plaintexts
from espforensics.checks.checksum import InnerChecksumCheck
from espforensics.checks.context import Flow, KeyedSaState, PacketContext, SaState
from espforensics.checks.coverage import Seen
from espforensics.checks.esn_mismatch import EsnMismatchCheck
from espforensics.checks.integrity import IntegrityCheck
from espforensics.checks.iv_derivation import IvDerivationCheck
from espforensics.checks.iv_reuse import IvReuseCheck
from espforensics.checks.keys import KeyCheck
from espforensics.checks.leaks import LeakCheck
from espforensics.checks.perflow import Holds
from espforensics.checks.placement import PlacementCheck
from espforensics.checks.receiver import ReceiverCheck
from espforensics.checks.reserved_spi import ReservedSpiCheck
from espforensics.checks.sequence import SequenceCheck
from espforensics.keys.sa import SaTable
from espforensics.model.records import Finding


class Check(Protocol):
    """A stage over the packet stream with explicit, bounded state."""

    name: str

    def observe(self, pkt: PacketContext) -> None: ...

    def finish(self) -> Iterator[Finding]: ...


@dataclass(frozen=True, slots=True)
class Checks:
    """Every check of a run by its name, and ``order``, the order they run in.

    What reads one check's results after the run (its IV schemes, the receiver's
    prediction, the unused SAs) names it, rather than searching the checks for its
    type; the analyzer runs ``order`` (tests run them in others).
    """

    placement: PlacementCheck
    leaks: LeakCheck
    iv_reuse: IvReuseCheck
    iv_derivation: IvDerivationCheck
    sequence: SequenceCheck
    reserved_spi: ReservedSpiCheck
    receiver: ReceiverCheck
    esn_mismatch: EsnMismatchCheck
    keys: KeyCheck
    integrity: IntegrityCheck
    inner_checksum: InnerChecksumCheck
    order: tuple[Check, ...]


def make_checks(sas: SaTable, holds: Holds) -> Checks:
    """Every check, in the order they run."""
    named = (
        PlacementCheck(sas),
        LeakCheck(),
        IvReuseCheck(sas),
        IvDerivationCheck(holds),
        SequenceCheck(),
        ReservedSpiCheck(),
        ReceiverCheck(sas),  # reads the sequence check's seq_anomaly (OBSERVE_READS)
        EsnMismatchCheck(),
        KeyCheck(sas),
        IntegrityCheck(),
        InnerChecksumCheck(),
    )
    return Checks(*named, order=named)


# The checks with bulk rules for the engine's steady lane (checks/bulk.py): the
# lane takes a packet only as the plain case of every check, and commits it to these.
BULK: tuple[type[BulkCheck], ...] = (
    PlacementCheck,
    LeakCheck,
    IvReuseCheck,
    IvDerivationCheck,
    SequenceCheck,
    ReservedSpiCheck,
    ReceiverCheck,
    KeyCheck,
)


def bulk_checks(checks: tuple[object, ...]) -> tuple[BulkCheck, ...]:
    """The checks of a run that have bulk rules, in the order they run."""
    return tuple(c for c in checks if isinstance(c, BULK))


# The checks' rules over the plaintexts the lane opened (checks/bulk.py, ``Plaintexts``):
# functions of the batch's plaintexts alone, so a worker process runs them too.
PLAIN: tuple[Callable[[Plaintexts], PlainRule], ...] = (
    leaks.plaintexts,
    checksum.plaintexts,
    receiver.plaintexts,
)


# What each check examined (the KTAP names of report/content.py), in the order
# they run: each module's ``coverage(seen)`` says None (examined) or why not.
COVERAGE: tuple[tuple[str, Callable[[Seen], str | None]], ...] = (
    ("esp_placement", placement.coverage),
    ("cleartext_leak", leaks.coverage),
    ("iv_reuse", iv_reuse.coverage),
    ("iv_derivation", iv_derivation.coverage),
    ("sequence", sequence.coverage),
    ("esn_mismatch", esn_mismatch.coverage),
    ("keys", keys.coverage),
    ("inner_checksum", checksum.coverage),
)

# What a check's ``observe`` reads of a record that another check fills, by check name:
# each reader must come after what it reads in ``make_checks``. The receiver model counts
# the duplicates and reorders the sequence check marks in ``seq_anomaly``. Nothing else a
# check reads of a packet is written by a check: the receiver's steps (analyzer/receive.py)
# have done their work before any check sees it (tests/analyzer/test_check_order.py runs them in
# other orders, these kept).
OBSERVE_READS: dict[str, tuple[str, ...]] = {"receiver": ("sequence",)}
# What a check's ``finish`` reads that another check writes, by check name: each reader
# must come after what it reads in ``make_checks`` (tests/analyzer/test_check_order.py asserts it).
# esn_mismatch words each event by its record's ``iv_seq_delta``, which iv_derivation
# fills when it settles the SA's IV constant: at the latest in its own ``finish``.
FINISH_READS: dict[str, tuple[str, ...]] = {"esn_mismatch": ("iv_derivation",)}
# The checks with no line of their own in the coverage and KTAP tables: integrity reports
# under keys, reserved_spi under sequence (the same clear header); the receiver model
# makes no findings (its predicted counters are in the summary's ``receivers``, and
# ``--expect`` asserts them).
NO_LINE = ("integrity", "reserved_spi", "receiver")

__all__ = [
    "BULK",
    "COVERAGE",
    "FINISH_READS",
    "OBSERVE_READS",
    "Check",
    "Checks",
    "Flow",
    "Holds",
    "KeyedSaState",
    "PacketContext",
    "SaState",
    "bulk_checks",
    "make_checks",
]
