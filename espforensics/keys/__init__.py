"""Key material: load security associations from the files people have.

In: paths of key files, or their text. Out: ``SecurityAssociation`` values
and one ``SaTable`` holding them all. Raises ``KeyFileError`` (file, entry
and problem; never the key) for a file that cannot be read, is empty, is
of no known format, or has a bad or duplicate entry.

The format of a file is found from its content, never its name, by the
detectors of ``FORMATS`` tried in order:

- ``keys.yaml`` (the project's own; a top-level ``sas:`` key),
- ``ip xfrm state`` / ``ip -s xfrm state`` output (a ``src A dst B`` line),
- Wireshark's ``esp_sa`` table, also written by strongSwan's save-keys
  plugin (only ``#`` comments and lines of quoted fields).

``docs/keys.md`` documents every format and message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

from espforensics.errors import KeyFileError
from espforensics.keys.sa import SaTable, Secret, SecurityAssociation
from espforensics.keys.wireshark import is_esp_sa, parse_esp_sa
from espforensics.keys.xfrm_text import is_xfrm_text, parse_xfrm_text
from espforensics.keys.yaml_file import is_keys_yaml, parse_keys_yaml

__all__ = [
    "FORMATS",
    "KeyFormat",
    "SaTable",
    "Secret",
    "SecurityAssociation",
    "load_sas",
    "parse_esp_sa",
    "parse_sas",
]


class KeyFormat(NamedTuple):
    """One key-file format: its name, a content detector and its parser."""

    name: str
    detect: Callable[[str], bool]
    parse: Callable[[str, str], list[SecurityAssociation]]


# The one registry of formats, tried in this order.
FORMATS: tuple[KeyFormat, ...] = (
    KeyFormat("keys.yaml", is_keys_yaml, parse_keys_yaml),
    KeyFormat("ip xfrm state", is_xfrm_text, parse_xfrm_text),
    KeyFormat("esp_sa", is_esp_sa, parse_esp_sa),
)


def load_sas(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> SaTable:
    """Read every file, detect its format by content, merge all SAs into one table.

    ``paths``: one path (a ``str`` is one path, not its characters) or several.
    """
    table = SaTable()
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    for path in paths:
        name = os.fspath(path)
        for sa in parse_sas(_read(name), name):
            table.add(sa)  # raises KeyFileError naming both entries of a duplicate
    return table


def parse_sas(text: str, origin: str) -> list[SecurityAssociation]:
    """The SAs in ``text``, whatever its format; ``origin`` names it in messages."""
    if not text.strip():
        raise KeyFileError(origin, "file is empty")
    for key_format in FORMATS:
        if key_format.detect(text):
            sas = key_format.parse(text, origin)
            if not sas:
                raise KeyFileError(origin, f"no ESP SA in this {key_format.name} file")
            return sas
    raise KeyFileError(origin, "not a keys.yaml, `ip xfrm state` output or Wireshark esp_sa file")


def _read(path: str) -> str:
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise KeyFileError(path, f"cannot open: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        where = exc.start + 1
    # Raised outside the handler: a chained UnicodeDecodeError holds the whole file.
    raise KeyFileError(path, f"not UTF-8 text (byte {where})")
