"""Exit codes a CI gate can trust: what a run proved, as one number.

In: a ``Summary``, the ``--fail-on`` threshold and the ``--unchecked``
policy. Out: ``exit_code(...)``, one of the codes below; ``worst_code``
combines the codes of many captures (``batch``). Raises nothing; pure.

    0  done, clean: no finding at or above --fail-on, and what was checked
       satisfies --unchecked
    1  a finding about the capture at or above --fail-on
    2  usage or input error (the CLI's, never returned here)
    3  fix your key file: every finding at or above --fail-on is a
       ``key_mismatch`` (the key doctor, checks/keys.py); a wrong key file is
       not a kernel fault
    4  nothing verified: no ESP packet was verified or decrypted with a key
       (also a capture without ESP); kselftest's KSFT_SKIP is 4
       (tools/testing/selftests/kselftest.h)

A run that could be more than one says the most important:
2 > 1 > 3 > 4 > 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from espforensics.model.enums import SEVERITY_RANK, FindingKind, Severity, Unchecked
from espforensics.results.coverage import tally
from espforensics.results.summary import Summary

EXIT_CLEAN = 0
EXIT_FINDING = 1
EXIT_USAGE = 2
EXIT_KEY_FILE = 3
EXIT_UNCHECKED = 4
PRECEDENCE = (EXIT_USAGE, EXIT_FINDING, EXIT_KEY_FILE, EXIT_UNCHECKED, EXIT_CLEAN)
KEY_FILE_KINDS = frozenset({FindingKind.KEY_MISMATCH})  # faults of the key file, not the capture


def exit_code(
    summary: Summary, fail_on: Severity | None, unchecked: Unchecked = Unchecked.SKIP
) -> int:
    """The exit code of one analysis; ``fail_on`` None: no finding fails (``never``).

    A damaged capture (``summary.error``) is an input error: 2, as ``analyze`` exited.
    """
    if summary.error:
        return EXIT_USAGE
    failing = (
        {
            f.kind
            for f in summary.finding_list
            if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on]
        }
        if fail_on is not None
        else set()
    )
    if failing - KEY_FILE_KINDS:
        return EXIT_FINDING
    if failing:
        return EXIT_KEY_FILE
    if unchecked is Unchecked.IGNORE:
        return EXIT_CLEAN
    proven = tally(summary.sas, summary.esp_layers).proven
    if not proven or (unchecked is Unchecked.FAIL and proven < summary.esp_layers):
        return EXIT_UNCHECKED
    return EXIT_CLEAN


def worst_code(codes: Iterable[int]) -> int:
    """The code that matters most among many (``PRECEDENCE``); 0 for none."""
    rank = {code: i for i, code in enumerate(PRECEDENCE)}
    return min(codes, key=lambda c: rank.get(c, -1), default=EXIT_CLEAN)
