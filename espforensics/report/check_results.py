"""The report's checks as tests: one ``CheckResult`` per check, for KTAP and every report.

In: a ``Summary`` and the ``--fail-on`` threshold. Out: ``_checks``, a
result per check of ``CHECKS`` (in the order the checks run) saying whether
a finding at or above the threshold failed it, in words from ``NOUNS``,
with its coverage line (``coverage_line``) or why it examined nothing
(``skip_reason``). Raises nothing. report/content.py puts these in the
``Report`` and re-exports every name.
"""

from __future__ import annotations

from dataclasses import dataclass

from espforensics.model.enums import SEVERITY_RANK, FindingKind, Severity
from espforensics.model.records import Finding
from espforensics.report import narrative
from espforensics.results.coverage import CheckCoverage
from espforensics.results.summary import Summary


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check as a test: a KTAP result line and the diagnostic lines before it."""

    name: str  # "esp_placement"
    ok: bool
    directive: str  # "" or "ERROR" (a damaged capture: the check saw only part of it)
    data: str  # diagnostic data of the result line, "12 ESP headers misplaced"
    notes: tuple[str, ...]  # one line per finding kind of the check
    coverage: str = ""  # "esp_placement: examined 122 of 447 ESP packets (...)"; "" for all
    skip: str = ""  # the reason, when the check examined no ESP packet (KTAP SKIP)
    examined: str = ""  # ``coverage`` without the check's name: "examined 122 of 447 ..."


# The checks as tests (KTAP), in the order they run (checks/__init__.py), with
# the finding kinds each makes and, per kind, what its count counts.
CHECKS: tuple[tuple[str, tuple[FindingKind, ...]], ...] = (
    ("esp_placement", (FindingKind.ESP_MISPLACED,)),
    ("cleartext_leak", (FindingKind.CLEARTEXT_LEAK,)),
    ("iv_reuse", (FindingKind.IV_REUSE, FindingKind.SHARED_KEY)),
    ("iv_derivation", (FindingKind.IV_DERIVATION,)),
    (
        "sequence",
        (
            FindingKind.SEQ_DUPLICATE,
            FindingKind.SEQ_GAP,
            FindingKind.SEQ_REORDER,
            FindingKind.ESN_WRAP,
            # the SPI beside the sequence number: the same clear header (checks/reserved_spi.py)
            FindingKind.RESERVED_SPI,
        ),
    ),
    ("esn_mismatch", (FindingKind.ESN_MISMATCH,)),
    # keys: the keying, and what it let the run check (no_integrity: checks/integrity.py)
    (
        "keys",
        (
            FindingKind.KEY_MISMATCH,
            FindingKind.UNSUPPORTED,
            FindingKind.NO_INTEGRITY,
            FindingKind.HMAC_KEY_SIZE,
        ),
    ),
    ("inner_checksum", (FindingKind.INNER_CHECKSUM, FindingKind.NEXT_HEADER_MISMATCH)),
)
NOUNS: dict[FindingKind, tuple[str, str]] = {
    FindingKind.ESP_MISPLACED: ("ESP header misplaced", "ESP headers misplaced"),
    FindingKind.CLEARTEXT_LEAK: (
        "packet with inner header bytes in clear",
        "packets with inner header bytes in clear",
    ),
    FindingKind.IV_REUSE: ("IV reused", "IVs reused"),
    FindingKind.SHARED_KEY: ("SA sharing one key", "SAs sharing one key"),
    FindingKind.IV_DERIVATION: (
        "IV not built from its sequence number",
        "IVs not built from their sequence number",
    ),
    FindingKind.SEQ_DUPLICATE: ("sequence number repeated", "sequence numbers repeated"),
    FindingKind.SEQ_GAP: ("sequence number missing", "sequence numbers missing"),
    FindingKind.SEQ_REORDER: ("packet reordered", "packets reordered"),
    FindingKind.ESN_WRAP: ("ESN wrap", "ESN wraps"),
    FindingKind.ESN_MISMATCH: (
        "packet with the wrong ESN high half",
        "packets with the wrong ESN high half",
    ),
    FindingKind.KEY_MISMATCH: (
        "packet not verifying with its key",
        "packets not verifying with their key",
    ),
    FindingKind.UNSUPPORTED: (
        "packet of an algorithm not decrypted",
        "packets of an algorithm not decrypted",
    ),
    # what their count counts: the SAs with such a key
    FindingKind.HMAC_KEY_SIZE: (
        "SA with an HMAC key not of its RFC's length",
        "SAs with an HMAC key not of its RFC's length",
    ),
    FindingKind.NO_INTEGRITY: (
        "packet decrypted without an ICV check",
        "packets decrypted without an ICV check",
    ),
    FindingKind.RESERVED_SPI: (
        "packet with a reserved SPI",
        "packets with a reserved SPI",
    ),
    FindingKind.INNER_CHECKSUM: (
        "packet whose inner checksum does not verify",
        "packets whose inner checksum does not verify",
    ),
    FindingKind.NEXT_HEADER_MISMATCH: (
        "packet whose payload is not what its next header names",
        "packets whose payload is not what their next header names",
    ),
}


def _failing(f: Finding, fail_on: Severity | None) -> bool:
    return fail_on is not None and SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on]


def _phrase(kind: FindingKind, findings: list[Finding]) -> str:
    """'12 ESP headers misplaced', '9 IVs reused' (distinct IVs, as summary.reused_ivs)."""
    if kind is FindingKind.IV_REUSE:
        n = sum(1 if f.frames else f.count for f in findings)
    else:
        n = sum(f.count for f in findings)
    one, many = NOUNS[kind]
    return f"{n} {one if n == 1 else many}"


def _checks(
    summary: Summary,
    fail_on: Severity | None,
    finding_groups: tuple[narrative.FindingGroup, ...] | None = None,
) -> tuple[CheckResult, ...]:
    """``finding_groups``: the summary's, when the caller made them (report/content.py)."""
    made = narrative.finding_groups(summary) if finding_groups is None else finding_groups
    groups = {g.kind: g for g in made}
    by_kind: dict[FindingKind, list[Finding]] = {}
    for f in summary.finding_list:
        if _failing(f, fail_on):
            by_kind.setdefault(f.kind, []).append(f)
    damaged = bool(summary.error)
    coverage = {c.name: c for c in summary.coverage}
    out = []
    for name, kinds in CHECKS:
        failing = [_phrase(k, by_kind[k]) for k in kinds if k in by_kind]
        data = "; ".join((["the capture is damaged"] if damaged else []) + failing)
        notes = tuple(
            f"{name}: {narrative.group_line(groups[k])}: {groups[k].detail}"
            for k in kinds
            if k in groups
        )
        cov = coverage.get(name)
        examined = examined_text(cov) if cov is not None else ""
        out.append(
            CheckResult(
                name,
                not failing and not damaged,
                "ERROR" if damaged else "",
                data,
                notes,
                f"{name}: {examined}" if examined else "",
                skip_reason(cov) if cov is not None else "",
                examined,
            )
        )
    return tuple(out)


def coverage_line(c: CheckCoverage) -> str:
    """ "iv_reuse: examined 122 of 447 ESP packets (325 without a key)"; "" for all, with a key."""
    examined = examined_text(c)
    return f"{c.name}: {examined}" if examined else ""


def examined_text(c: CheckCoverage) -> str:
    """ "examined 122 of 447 ESP packets (325 without a key)"; "" for all, with a key.

    Packets examined by their clear bytes only are said so, and why: without a
    key, or cut by the capture (a snap length) before their ICV.
    """
    if c.examined == c.esp_packets and not c.keyless:
        return ""
    whys = ", ".join(f"{n} {why}" for why, n in c.skipped.items())
    head = (
        f"examined all {c.esp_packets} ESP packets"
        if c.examined == c.esp_packets
        else f"examined {c.examined} of {c.esp_packets} ESP packets ({whys})"
    )
    if c.keyless:
        them = "all" if c.keyless == c.examined else f"{c.keyless}"
        head += f"; {them} of them {_clear_only(c)}"
    return head


def _clear_only(c: CheckCoverage) -> str:
    """Why ``keyless`` packets were examined by their clear bytes only: no key, or the
    capture cut them before their ICV (``cut``: with a key, unused)."""
    if not c.cut:
        return "without a key, by their clear bytes only"
    if c.cut == c.keyless:
        return "by their clear bytes only, cut by the capture before their ICV"
    return (
        f"by their clear bytes only ({c.keyless - c.cut} without a key, "
        f"{c.cut} cut by the capture before their ICV)"
    )


def skip_reason(c: CheckCoverage) -> str:
    """Why the check examined nothing ("" when it examined a packet)."""
    if c.examined:
        return ""
    if not c.esp_packets:
        return "no ESP packet in the capture"
    whys = ", ".join(f"{n} {why}" for why, n in c.skipped.items())
    return f"examined none of {c.esp_packets} ESP packets: {whys}"
