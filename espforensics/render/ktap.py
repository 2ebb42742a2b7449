"""KTAP rendering: the checks as the kernel selftests' test results.

In: a ``Report`` (report/content.py). Out: KTAP version 1 text
(Documentation/dev-tools/ktap.rst): the version line, the plan ``1..N``,
then per check its diagnostic lines and one result line, ``ok 1
esp_placement`` or ``not ok 3 iv_reuse # 9 IVs reused``; what the capture
is and the likely causes as diagnostic lines. A check is ``not ok`` when
it made a finding at or above ``--fail-on`` (``Report.checks``), so the
result lines agree with the exit code; a damaged capture makes every line
``not ok ... # ERROR``. As kselftest does (tools/testing/selftests/
kselftest.h): a check that examined no ESP packet is ``ok N name # SKIP
reason``, one that examined part of them says how many in a diagnostic
line before its result, and the document ends with ``# Totals: pass:P
fail:F xfail:0 xpass:0 skip:S error:E``. The lead (a damaged capture's
damage first, then what was checked, what is wrong) follows the capture's
name. ASCII, one line per line. Raises nothing. ``format_expect_ktap``
gives ``--expect``'s assertions the same form (results/expect.py), one result line
each.
"""

from __future__ import annotations

from pathlib import PurePath

from espforensics.render.text import ascii_only
from espforensics.report.content import CheckResult, Report
from espforensics.results.expect import Checked
from espforensics.results.summary import Summary


def _line(text: str) -> str:
    """One KTAP line: ASCII, no line break inside."""
    return ascii_only(" ".join(text.split()))


def _diagnostic(text: str) -> str:
    return _line(f"# {text}")


def format_ktap(report: Report) -> str:
    """The KTAP document: plan first, one result line per check."""
    h = report.header
    lines = ["KTAP version 1", f"1..{len(report.checks)}"]
    lines.append(_diagnostic(f"{h.title}: {h.name}, sha256 {h.sha256}"))
    lines.append(
        _diagnostic(
            f"{h.frames} frames, {h.esp_packets} ESP packets{h.esp_more} in {h.sa_count} SAs; "
            f"verdicts: {h.verdicts}"
        )
    )
    lines[3:3] = [_diagnostic(s) for s in report.lead]  # the damage, if any, first
    lines += [_diagnostic(s) for s in report.verdict]
    totals = dict.fromkeys(("pass", "fail", "skip", "error"), 0)
    for number, check in enumerate(report.checks, 1):
        lines += [_diagnostic(note) for note in check.notes]
        if check.coverage and not check.skip:
            lines.append(_diagnostic(check.coverage))
        lines.append(_line(_result(number, check)))
        totals[_outcome(check)] += 1
    for cause in report.causes:
        lines.append(_diagnostic(f"likely cause: {cause.title} ({cause.id})"))
        lines += [_diagnostic(f"  matched: {e}") for e in cause.evidence]
    lines.append(
        f"# Totals: pass:{totals['pass']} fail:{totals['fail']} xfail:0 xpass:0 "
        f"skip:{totals['skip']} error:{totals['error']}"
    )
    return "\n".join(lines) + "\n"


def _outcome(check: CheckResult) -> str:
    """kselftest's counter for the check: an ERROR (damaged capture) is an error, not a fail."""
    if check.directive == "ERROR":
        return "error"
    if not check.ok:
        return "fail"
    return "skip" if check.skip else "pass"


def _result(number: int, check: CheckResult) -> str:
    """``ok 1 esp_placement``, ``not ok 3 iv_reuse # 9 IVs reused``, ``ok 7 keys # SKIP ...``."""
    result = f"{'ok' if check.ok else 'not ok'} {number} {check.name}"
    if check.ok and check.skip:
        return f"{result} # SKIP {check.skip}"
    tail = " ".join(x for x in (check.directive, check.data) if x)
    return f"{result} # {tail}" if tail else result


def format_expect_ktap(summary: Summary, checked: tuple[Checked, ...]) -> str:
    """``--expect`` as KTAP: one result line per assertion, in the order given.

    ``ok 1 esp_misplaced=0 # esp_misplaced is 0`` or ``not ok 2 iv_reuse=0 #
    iv_reuse is 9``; a damaged capture makes every line ``not ok ... # ERROR``.
    """
    cap = summary.capture
    lines = ["KTAP version 1", f"1..{len(checked)}"]
    lines.append(
        _diagnostic(f"espforensics --expect: {PurePath(cap.path).name}, sha256 {cap.sha256}")
    )
    if summary.error:
        lines.append(_diagnostic(summary.error))
    passed = 0
    for number, c in enumerate(checked, 1):
        a = c.assertion
        shown = f"{a.name}@{a.host}" if a.host else a.name
        if summary.error:
            lines.append(_line(f"not ok {number} {a.text} # ERROR"))
            continue
        passed += c.holds
        result = "ok" if c.holds else "not ok"
        lines.append(_line(f"{result} {number} {a.text} # {shown} is {c.value}"))
    failed = len(checked) - passed if not summary.error else 0
    errors = len(checked) if summary.error else 0
    lines.append(f"# Totals: pass:{passed} fail:{failed} xfail:0 xpass:0 skip:0 error:{errors}")
    return "\n".join(lines) + "\n"
