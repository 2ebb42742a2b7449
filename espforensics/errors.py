"""The one exception tree of espforensics.

Nothing here imports anything of ours. Every error that reaches a user is
an ``EspForensicsError``; the CLI catches that base once and prints
``espforensics: error: <file>: <what is wrong>`` with exit code 2.
Foreign exceptions are wrapped where the foreign library is called
(``raise CaptureError(...) from exc``)::

    EspForensicsError
    +-- InputError                 bad input named by a file; exit code 2
    |   +-- CaptureError           not a capture, unsupported format/link
    |   |   +-- CaptureTruncated   the file ends inside a record
    |   +-- KeyFileError           a key file (or DSB) that cannot be used
    |   +-- OutputExistsError      output folder exists and --force not given
    |   +-- OutputError            an output file cannot be written (disk full, ...)
    +-- MalformedPacket            a decoder could not parse bytes
        +-- Truncated              ... because the bytes ended too early

``MalformedPacket`` never reaches the CLI: the pipeline turns it into a
packet record with verdict ``undecodable`` or ``truncated``.

Any other exception is a bug in espforensics, not the user's input: the
CLI exits 70 (``EX_SOFTWARE`` of sysexits.h) and writes ``bug_report``
to a file. ``InternalError`` carries such a report from another process
(a worker of ``--jobs``); it is outside the tree on purpose::

    InternalError                  a bug met in a worker process; exit code 70

``bug_report`` holds exception types, ``module:line in function`` frames
and messages scrubbed of anything that could be key bytes; never a frame's
locals, never a value's repr.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator


class EspForensicsError(Exception):
    """Base of every error raised by espforensics."""


class InputError(EspForensicsError):
    """An input file cannot be used. ``path`` names it in the message."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class CaptureError(InputError):
    """The capture file is not readable as pcap/pcapng or is damaged."""

    def __init__(self, path: str, message: str, frames_read: int = 0) -> None:
        super().__init__(path, message)
        self.frames_read = frames_read


class CaptureTruncated(CaptureError):
    """The capture ends in the middle of a record (or block)."""


class KeyFileError(InputError):
    """A key file, or an entry in it, cannot be used."""


class OutputExistsError(InputError):
    """The output folder exists already and overwriting was not allowed."""


class OutputError(InputError):
    """The file system refused an output file (no space, no permission); ``path``: the folder."""


class MalformedPacket(EspForensicsError):
    """A decoder found bytes it cannot parse; the message says which field."""


class Truncated(MalformedPacket):
    """The bytes ended before the field the decoder needed."""


# What a Ctrl-C prints (exit 130): a batch run resumes where it stopped.
INTERRUPTED = "espforensics: interrupted (a batch resumes where it stopped)"


EXIT_INTERNAL = 70  # sysexits.h EX_SOFTWARE: "an internal software error has been detected"
TRACEBACK_FILE = "espforensics-traceback.txt"


class InternalError(Exception):
    """A bug met in another process; ``report`` is that process's ``bug_report``."""

    def __init__(self, what: str, report: str) -> None:
        super().__init__(what, report)  # both in args: the exception pickles across processes
        self.what = what
        self.report = report

    def __str__(self) -> str:
        return self.what


# What might spell key bytes in a message: bytes reprs, \x escapes, long hex or
# decimal runs, base64-like runs, and any character that is not printable ASCII.
_SECRETISH = re.compile(
    r"""b(['"])(?:\\.|(?!\1).)*\1|\\x[0-9a-fA-F]{2}|[0-9a-fA-F]{8,}|\d{10,}"""
    r"""|[A-Za-z0-9+/]{20,}={0,2}|[^\x20-\x7e]"""
)
_MESSAGE_MAX = 200
_REMOTE_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def scrub(message: str) -> str:
    """``message`` with every run that could hold key bytes replaced, and cut short."""
    clean = _SECRETISH.sub("<left out>", message)
    return clean if len(clean) <= _MESSAGE_MAX else clean[:_MESSAGE_MAX] + "..."


def _module_of(filename: str) -> str:
    """The dotted module name of a source file, from the longest ``sys.path`` entry."""
    path = os.path.abspath(filename)
    roots = sorted((os.path.abspath(p) for p in sys.path if p), key=len, reverse=True)
    for root in roots:
        if path.startswith(root + os.sep):
            return os.path.splitext(os.path.relpath(path, root))[0].replace(os.sep, ".")
    return os.path.basename(filename)


def _frames(exc: BaseException) -> Iterator[str]:
    tb = exc.__traceback__
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__") or _module_of(tb.tb_frame.f_code.co_filename)
        yield f"  {module}:{tb.tb_lineno} in {tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and those it was raised from or during, oldest first, as Python shows them."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return chain[::-1]


def _describe(exc: BaseException) -> list[str]:
    if type(exc).__name__ == "_RemoteTraceback":  # concurrent.futures: the worker's text
        frames = _REMOTE_FRAME.findall(str(exc))
        lines = [f"  {_module_of(f)}:{n} in {fn}" for f, n, fn in frames]
        return ["In the worker process:", *lines]
    name = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
    message = scrub(str(exc))
    lines = ["Traceback (most recent call last; values left out):", *_frames(exc)]
    lines.append(f"{name}: {message}" if message else name)
    if isinstance(exc, InternalError):
        lines += ["In the worker process:", exc.report]
    return lines


def bug_report(exc: BaseException) -> str:
    """A traceback of ``exc`` and its chain without values: types, frames, scrubbed messages."""
    parts = ["\n".join(_describe(e)) for e in _chain(exc)]
    return "\n\nwhich led to\n\n".join(parts) + "\n"
