"""Read /proc/net/xfrm_stat text: the kernel's XFRM counters, one per line.

In: the text (``XfrmInError                 0`` per line, as
net/xfrm/xfrm_proc.c prints it) and the file's name for messages; or the
two files of a run (``load_xfrm_stat``). Out: the counters by name, their
increase, and the ``Observed`` the summary keeps. Raises ``InputError``
naming the file and the line.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from espforensics.errors import InputError
from espforensics.receiver.prediction import Observed

_LINE = re.compile(r"(Xfrm[A-Za-z]+)\s+(\d{1,20})")


def parse_xfrm_stat(text: str, origin: str) -> dict[str, int]:
    """Every counter of the text; blank lines are skipped, anything else is refused."""
    counters: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.fullmatch(line.strip())
        if match is None:
            raise InputError(origin, f"line {number}: not a /proc/net/xfrm_stat line")
        counters[match[1]] = int(match[2])
    if not counters:
        raise InputError(origin, "no counter in it: not /proc/net/xfrm_stat text")
    return counters


def increase(before: dict[str, int], after: dict[str, int], origin: str) -> dict[str, int]:
    """``after - before`` per counter of both; a counter that went down is refused."""
    out: dict[str, int] = {}
    for name, value in after.items():
        if name not in before:
            continue
        if value < before[name]:
            raise InputError(origin, f"{name} went down from {before[name]} to {value}")
        out[name] = value - before[name]
    return out


@dataclass(frozen=True, slots=True)
class XfrmStatFiles:
    """The receiver's counters before and after a run, read from two files."""

    before: str  # the files' names, for the reports
    after: str
    deltas: dict[str, int]
    host: str | None = None  # whose they are (--xfrm-stat-host); None: the capture says


def load_xfrm_stat(before: Path, after: Path, host: str | None = None) -> XfrmStatFiles:
    """Read both files; ``InputError`` names the file that cannot be read or used."""
    counts = []
    for path in (before, after):
        try:
            text = path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not ASCII text"
            raise InputError(str(path), f"cannot read it: {why}") from None
        counts.append(parse_xfrm_stat(text, str(path)))
    if host is not None:
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            raise InputError("--xfrm-stat-host", f"{host!r} is not an IP address") from None
    return XfrmStatFiles(before.name, after.name, increase(counts[0], counts[1], str(after)), host)


def observed(files: XfrmStatFiles, hosts: Sequence[str]) -> Observed:
    """The counters as the host's: the one given, or the capture's one receiving host
    ("" when ESP goes to several and none was given)."""
    host = files.host if files.host is not None else (hosts[0] if len(hosts) == 1 else "")
    return Observed(host, dict(files.deltas), files.before, files.after)
