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
    sa_stats: tuple[tuple[int, str, int, int, int], ...] = ()  # parse_state_stats
    states: str = ""  # the ``ip -s xfrm state`` file's name


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not ASCII text"
        raise InputError(str(path), f"cannot read it: {why}") from None


def load_xfrm_stat(
    before: Path | None, after: Path | None, host: str | None = None, states: Path | None = None
) -> XfrmStatFiles:
    """Read the files given (both counter files, or none; the states' stats, or not);
    ``InputError`` names the file that cannot be read or used."""
    counts = [parse_xfrm_stat(_read(p), str(p)) for p in (before, after) if p is not None]
    increases = increase(counts[0], counts[1], str(after)) if len(counts) == 2 else {}
    stats = parse_state_stats(_read(states), str(states)) if states is not None else ()
    if host is not None:
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            raise InputError("--xfrm-stat-host", f"{host!r} is not an IP address") from None
    return XfrmStatFiles(
        before.name if before is not None else "",
        after.name if after is not None else "",
        increases,
        host,
        stats,
        states.name if states is not None else "",
    )


def observed(files: XfrmStatFiles, hosts: Sequence[str]) -> Observed:
    """The counters as the host's: the one given, or the capture's one receiving host
    ("" when ESP goes to several and none was given)."""
    host = files.host if files.host is not None else (hosts[0] if len(hosts) == 1 else "")
    return Observed(
        host, dict(files.deltas), files.before, files.after, files.sa_stats, files.states
    )


_SRC = re.compile(r"src (\S+) dst (\S+)")
_SPI = re.compile(r"proto (\S+) spi (0x[0-9a-fA-F]+)")
_STATS = re.compile(r"replay-window (\d+) replay (\d+) failed (\d+)")


def parse_state_stats(text: str, origin: str) -> tuple[tuple[int, str, int, int, int], ...]:
    """Per ESP state of ``ip -s xfrm state`` text, its ``stats:`` line (ip/ipxfrm.c
    ``xfrm_stats_print``): (spi, dst, replay-window, replay, failed). Other lines are
    skipped; a text with no such line is refused (not ``ip -s`` output)."""
    found: list[tuple[int, str, int, int, int]] = []
    dst, spi = "", None
    for line in text.splitlines():
        head = _SRC.fullmatch(line.rstrip())
        if head is not None:
            dst, spi = _address(head[2]), None
            continue
        proto = _SPI.match(line.strip())
        if proto is not None:
            spi = int(proto[2], 16) if proto[1] == "esp" else None
            continue
        stats = _STATS.fullmatch(line.strip())
        if stats is not None and spi is not None and dst:
            found.append((spi, dst, int(stats[1]), int(stats[2]), int(stats[3])))
    if not found:
        raise InputError(origin, "no `stats:` line of an ESP state: not `ip -s xfrm state` output")
    return tuple(found)


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return ""
