"""Assertions a selftest runs against an analysis: ``--expect "esp_misplaced=0,verified>=100"``.

In: the assertion text (``parse_expect``) and a ``Summary`` (``evaluate``).
Out: ``Assertion`` values, then one ``Checked`` per assertion (its value and
whether it holds). Raises ``ExpectError`` (a usage error, exit 2) for text
it cannot read and for an assertion the summary cannot answer. Pure.

An assertion is ``NAME OP NUMBER``, OP one of ``= == != < <= > >=``, and
the names are:

- a finding kind (``esp_misplaced``, ``iv_reuse``, ...): the packets (or
  values) its findings concern, as summary.json's ``findings``;
- what the keys proved: ``esp_packets`` (every ESP layer), ``verified``
  (ICV verified), ``proven`` (verified or decrypted), ``frames``;
- ``verdicts.NAME``: the ESP packets of one verdict (``verdicts.ok``);
- a predicted /proc/net/xfrm_stat counter (``XfrmInStateProtoError``):
  summed over the receiving hosts, or of one with ``@HOST``
  (``XfrmInStateSeqError@198.51.100.2``); it needs a key file;
- ``receiver.NAME``: the packets of one ``receiver`` verdict
  (``receiver.replay``), over every receiving state; it needs a key file.
"""

from __future__ import annotations

import ipaddress
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from espforensics.errors import EspForensicsError
from espforensics.model.enums import FindingKind, Verdict
from espforensics.receiver.verdict import COUNTERS, RxVerdict
from espforensics.results.coverage import tally
from espforensics.results.summary import Summary

_OPS: dict[str, Callable[[int, int], bool]] = {
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_TERM = re.compile(
    r"\s*([A-Za-z_][A-Za-z0-9_.]*)(?:@([0-9A-Fa-f:.]+))?\s*(==|!=|<=|>=|=|<|>)\s*(\d{1,18})\s*"
)
_COVERAGE = ("esp_packets", "verified", "proven", "frames")
_KINDS = frozenset(k.value for k in FindingKind)
_VERDICTS = frozenset(v.value for v in Verdict)
_RECEIVER = frozenset(v.value for v in RxVerdict)
NAMES_HELP = (
    "a finding kind, esp_packets, verified, proven, frames, verdicts.NAME, "
    "an XfrmIn* counter (optionally @HOST) or receiver.NAME"
)


class ExpectError(EspForensicsError):
    """An assertion that cannot be read or answered: a usage error (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"--expect: {message}")


@dataclass(frozen=True, slots=True)
class Assertion:
    """One ``NAME OP NUMBER``, as written (``text``)."""

    text: str
    name: str
    host: str | None
    op: str
    number: int


@dataclass(frozen=True, slots=True)
class Checked:
    """An assertion and what the run gave: ``value``, and whether it ``holds``."""

    assertion: Assertion
    value: int
    holds: bool


def parse_expect(text: str) -> tuple[Assertion, ...]:
    """The comma-separated assertions of ``text``; ``ExpectError`` names the bad one."""
    out = []
    for part in text.split(","):
        match = _TERM.fullmatch(part)
        if match is None:
            raise ExpectError(f"{part.strip()!r} is not NAME OP NUMBER (OP: = != < <= > >=)")
        name, host, op, number = match.groups()
        if not _known(name) or (host is not None and name not in COUNTERS):
            shown = f"{name}@{host}" if host else name
            raise ExpectError(f"{part.strip()!r}: unknown name {shown!r}; known: {NAMES_HELP}")
        out.append(Assertion(part.strip(), name, _address(host, part), op, int(number)))
    return tuple(out)


def _address(host: str | None, part: str) -> str | None:
    """``@HOST`` as the tables write addresses (``FD00:A::2`` is ``fd00:a::2``)."""
    if host is None:
        return None
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        raise ExpectError(f"{part.strip()!r}: {host!r} is not an IP address") from None


def _known(name: str) -> bool:
    group, _, rest = name.partition(".")
    if rest:
        return (group == "verdicts" and rest in _VERDICTS) or (
            group == "receiver" and rest in _RECEIVER
        )
    return name in _KINDS or name in _COVERAGE or name in COUNTERS


def evaluate(assertions: tuple[Assertion, ...], summary: Summary) -> tuple[Checked, ...]:
    """Each assertion against the run; ``ExpectError`` if the run cannot answer one."""
    return tuple(_check(a, summary) for a in assertions)


def _check(a: Assertion, summary: Summary) -> Checked:
    value = _value(a, summary)
    return Checked(a, value, _OPS[a.op](value, a.number))


def _value(a: Assertion, summary: Summary) -> int:
    name = a.name
    if name in _KINDS:
        return summary.findings.get(name, 0)
    if name.startswith("verdicts."):
        return summary.verdicts.get(name.partition(".")[2], 0)
    if name in _COVERAGE:
        if name == "frames":
            return summary.capture.frames
        counted = tally(summary.sas, summary.esp_layers)
        return {"esp_packets": counted.esp_packets, "verified": counted.verified}.get(
            name, counted.proven
        )
    if not summary.receivers and not summary.receiver_sas:
        raise ExpectError(f"{a.text!r}: no receiver prediction without a key file (--sa)")
    if name.startswith("receiver."):
        verdict = name.partition(".")[2]
        return sum(sa.verdicts.get(verdict, 0) for sa in summary.receiver_sas)
    hosts = [h for h in summary.receivers if a.host is None or h.dst == a.host]
    if a.host is not None and not hosts:
        known = ", ".join(h.dst for h in summary.receivers)
        raise ExpectError(f"{a.text!r}: no ESP to {a.host} in the capture (hosts: {known})")
    return sum(h.counters.get(name, 0) for h in hosts)
