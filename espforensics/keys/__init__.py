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
  plugin (only ``#`` comments and lines of quoted fields),
- tcpdump's ``-E`` secrets (``spi@addr algo:secret`` or ``algo:secret``).

A line of an ``esp_sa`` or tcpdump file that cannot be read is skipped with
a warning in ``SaTable.notes`` while other lines load; the file is refused
(its first bad line's error) only when none does. ``load_sas`` also takes
tcpdump ``-E`` text in place of a path, when no such file exists.

Text given in place of a path may hold a key, whatever its notation (an
``esp_sa`` line, ``spi ... key 0x...``, a secret with a typo): a message
quotes such text only when it names an existing file or has the shape of a
path that holds no key (``argument_name``); otherwise it gives its size.

``docs/keys.md`` documents every format and message.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any, NamedTuple

from espforensics.capture.regular import kind_of
from espforensics.errors import KeyFileError
from espforensics.keys.sa import ANY_SPI, SaTable, Secret, SecurityAssociation
from espforensics.keys.validate import LoadLog, has_hex_run, reserved_notes, shown
from espforensics.keys.wireshark import parse_esp_sa
from espforensics.keys.yaml_file import parse_keys_yaml

__all__ = [
    "ANY_SPI",
    "FORMATS",
    "KeyFormat",
    "SaTable",
    "Secret",
    "SecurityAssociation",
    "argument_name",
    "load_sas",
    "parse_esp_sa",
    "parse_sas",
    "read_sas",
]


def _named(path: str) -> Any:
    """The function a ``"module:name"`` path names, its module imported on this first use
    (a run imports only the notations its key files are tried against: a shorter start-up)."""
    module, _, name = path.partition(":")
    return getattr(import_module(module), name)


class KeyFormat(NamedTuple):
    """One key-file format: its name, and where its content detector and its parser are.

    The parser takes the text, the name for messages and a ``LoadLog``: a
    format whose entries are independent lines logs a bad line there and goes on.
    """

    name: str
    detector: str  # "module:function", (text) -> bool, imported when first tried
    parser: str  # "module:function", (text, origin, log) -> list[SecurityAssociation]

    def detect(self, text: str) -> bool:
        detect: Callable[[str], bool] = _named(self.detector)
        return detect(text)

    def parse(self, text: str, origin: str, log: LoadLog) -> list[SecurityAssociation]:
        parse: Callable[[str, str, LoadLog], list[SecurityAssociation]] = _named(self.parser)
        return parse(text, origin, log)


def _yaml(text: str, origin: str, log: LoadLog) -> list[SecurityAssociation]:
    return parse_keys_yaml(text, origin)  # one document: an error in it stops it


# The one registry of formats, tried in this order.
FORMATS: tuple[KeyFormat, ...] = (
    KeyFormat("keys.yaml", "espforensics.keys.yaml_file:is_keys_yaml", "espforensics.keys:_yaml"),
    KeyFormat(
        "ip xfrm state",
        "espforensics.keys.xfrm_text:is_xfrm_text",
        "espforensics.keys.xfrm_text:parse_xfrm_text",
    ),
    KeyFormat(
        "esp_sa",
        "espforensics.keys.wireshark:is_esp_sa",
        "espforensics.keys.wireshark:parse_esp_sa",
    ),
    KeyFormat(
        "tcpdump -E",
        "espforensics.keys.tcpdump:is_tcpdump_secrets",
        "espforensics.keys.tcpdump:parse_tcpdump_secrets",
    ),
)
TCPDUMP = FORMATS[-1]  # also the notation of a secret given in place of a path
ARGUMENT_ORIGIN = "--sa (tcpdump -E text)"  # names a secret given in place of a path
# A name that may be quoted although no file has it: path characters only (no blank, no
# ":", "@", "," or "=" of a key notation or base64) and no run of hex digits (a key's).
_PATH_LIKE = re.compile(r"[\w./~+-]+")


def load_sas(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> SaTable:
    """Read every file, detect its format by content, merge all SAs into one table.

    ``paths``: one path (a ``str`` is one path, not its characters) or several.

    A path that names no file but reads as tcpdump ``-E`` text is that text
    (named ``--sa (tcpdump -E text)`` in messages, never quoted: it holds a key).
    """
    table = SaTable()
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    for path in paths:
        name = os.fspath(path)
        if os.path.lexists(name) or _path_like(name):
            sas, log = read_sas(_read(name), name)  # a missing path-like name: cannot open
        elif _looks_like_secrets(name):
            sas, log = _argument(name)  # never named by its text: it may hold a key
        else:
            why = "no such file, nor key text espforensics reads in place of a path"
            raise KeyFileError(_described(name), why)
        for sa in sas:
            table.add(sa)  # raises KeyFileError naming both entries of a duplicate
        table.notes.extend(warnings(log))
    return table


def argument_name(path: str | os.PathLike[str]) -> str:
    """How messages and tables name a key argument: its path when a file (or link) of
    that name exists or it has a path's shape without a run of hex digits; else by its
    notation (``ARGUMENT_ORIGIN``) or its size, never its text: it may hold a key."""
    name = os.fspath(path)
    if os.path.lexists(name) or _path_like(name):
        return name
    return ARGUMENT_ORIGIN if _looks_like_secrets(name) else _described(name)


def _path_like(text: str) -> bool:
    """A missing name that may be quoted: a path's characters, no run of hex digits."""
    return bool(_PATH_LIKE.fullmatch(text)) and not has_hex_run(text)


def _described(text: str) -> str:
    """``--sa (61 characters)``, ``--sa (70 characters on 2 lines)``; quoted only as
    ``shown`` quotes a value of a key file (``--sa 'keys:v2.yaml'``)."""
    lines = len(text.splitlines())
    if lines > 1:
        return f"--sa ({len(text)} characters on {lines} lines)"
    return f"--sa {shown(text)}"


def _looks_like_secrets(text: str) -> bool:
    from espforensics.keys.tcpdump import looks_like_secrets  # noqa: PLC0415 (only if asked)

    return looks_like_secrets(text)


def _argument(text: str) -> tuple[list[SecurityAssociation], LoadLog]:
    """The SAs of tcpdump ``-E`` text given in place of a path (``ARGUMENT_ORIGIN``)."""
    if not TCPDUMP.detect(text):  # "name:rest" of no cipher tcpdump knows: a path?
        why = "no such file, nor tcpdump -E text of a cipher espforensics knows"
        raise KeyFileError(_described(text), why)
    log = LoadLog()
    sas = TCPDUMP.parse(text, ARGUMENT_ORIGIN, log)
    if log.errors:  # one argument, typed by hand: every item of it must read
        raise log.errors[0]
    return sas, log


def parse_sas(text: str, origin: str) -> list[SecurityAssociation]:
    """The SAs in ``text``, whatever its format; ``origin`` names it in messages.

    Strict: any line that cannot be read raises its ``KeyFileError``.
    """
    sas, log = read_sas(text, origin)
    if log.errors:
        raise log.errors[0]
    return sas


def read_sas(text: str, origin: str) -> tuple[list[SecurityAssociation], LoadLog]:
    """The SAs in ``text``, and what reading it skipped (``LoadLog``).

    Raises ``KeyFileError`` when the text is empty, of no known format, or
    gives no SA (the first bad line's error when there was one).
    """
    if not text.strip():
        raise KeyFileError(origin, "file is empty")
    for key_format in FORMATS:
        if key_format.detect(text):
            log = LoadLog()
            sas = key_format.parse(text, origin, log)
            if not sas and log.errors:
                raise log.errors[0]
            if not sas:
                raise KeyFileError(origin, f"no ESP SA in this {key_format.name} file")
            log.notes.extend(reserved_notes(sas))
            return sas, log
    raise KeyFileError(
        origin, "not a keys.yaml, `ip xfrm state` output, Wireshark esp_sa or tcpdump -E file"
    )


def warnings(log: LoadLog) -> list[str]:
    """The warning lines of a load: its notes, then each skipped line ("FILE: line N: ...")."""
    return [
        *log.notes,
        *(f"{e.path}: {e.message} (skipped; the other lines loaded)" for e in log.errors),
    ]


# A key file larger than this is no key file (a gateway's esp_sa of 100,000 SAs is
# about 20 MB); reading stops here, so /dev/zero-like inputs end.
MAX_KEY_FILE = 64 << 20


def _read(path: str) -> str:
    """The file's bytes as text. A FIFO is read (``--sa <(ip xfrm state)`` is one);
    a device is refused before it is opened (``/dev/zero`` never ends)."""
    kind = _device(path)
    if kind is not None:
        raise KeyFileError(path, f"not a regular file: {kind}")
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_KEY_FILE + 1)
    except OSError as exc:
        raise KeyFileError(path, f"cannot open: {exc.strerror or exc}") from None
    if len(data) > MAX_KEY_FILE:
        raise KeyFileError(path, f"larger than {MAX_KEY_FILE >> 20} MiB: not a key file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        where = exc.start + 1
    # Raised outside the handler: a chained UnicodeDecodeError holds the whole file.
    raise KeyFileError(path, f"not UTF-8 text (byte {where})")


def _device(path: str) -> str | None:
    """What ``path`` is when it is a device or socket (not read as keys); else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # open() says why
    if stat.S_ISDIR(mode):
        return None  # open() says "Is a directory"
    kind = kind_of(mode)
    return None if kind in (None, "FIFO") else kind
