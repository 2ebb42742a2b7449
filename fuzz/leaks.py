"""The key-byte scanner: does any text or file show a key of the corpus?

In: the corpus keys (``fuzz.corpus.all_secrets``) and texts or bytes to
scan. Out: the first key fragment found (its hex, for the report; the
harness may show lab keys), or None. A leak is 8 contiguous key bytes or
more: as hex in either case, with or without ``0x``, with or without
separators between byte pairs, or raw. Raises nothing.
"""

from __future__ import annotations

import re
from functools import cache

from fuzz.corpus import all_secrets

WINDOW = 8  # key bytes that make a leak
_HEX_RUN = re.compile(rb"[0-9a-f]{%d,}" % (2 * WINDOW))
_SEPARATED = re.compile(rb"(?<=[0-9a-f]{2})[ :.\-](?=[0-9a-f]{2})")


@cache
def _hex_windows() -> frozenset[bytes]:
    """Every byte-aligned 8-byte window of every key, as lower-case hex."""
    out: set[bytes] = set()
    for key in all_secrets():
        text = key.hex().encode()
        out.update(text[i : i + 2 * WINDOW] for i in range(0, len(text) - 2 * WINDOW + 1, 2))
    return frozenset(out)


@cache
def _raw_windows() -> tuple[bytes, ...]:
    """Windows at every 8th byte: any 16 contiguous key bytes contain one."""
    out: list[bytes] = []
    for key in all_secrets():
        out += [key[i : i + WINDOW] for i in range(0, len(key) - WINDOW + 1, WINDOW)]
        out.append(key[-WINDOW:])
    return tuple(dict.fromkeys(out))


def _hex_leak(data: bytes) -> str | None:
    windows = _hex_windows()
    low = data.lower()
    for text in (low, _SEPARATED.sub(b"", low)):
        for run in _HEX_RUN.findall(text):
            for i in range(len(run) - 2 * WINDOW + 1):
                if run[i : i + 2 * WINDOW] in windows:
                    found: str = run[i : i + 2 * WINDOW].decode()
                    return found
    return None


def find_leak(data: bytes | str, raw_too: bool = True) -> str | None:
    """The key fragment ``data`` shows, as hex; None when it shows none.

    ``raw_too``: look for raw key bytes too (files and messages; rendered text
    can only show a key as hex).
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    found = _hex_leak(raw)
    if found is not None or not raw_too:
        return found
    for window in _raw_windows():
        if window in raw:
            return window.hex()
    return None
