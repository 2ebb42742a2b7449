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
    +-- MalformedPacket            a decoder could not parse bytes
        +-- Truncated              ... because the bytes ended too early

``MalformedPacket`` never reaches the CLI: the pipeline turns it into a
packet record with verdict ``undecodable`` or ``truncated``.
"""

from __future__ import annotations


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


class MalformedPacket(EspForensicsError):
    """A decoder found bytes it cannot parse; the message says which field."""


class Truncated(MalformedPacket):
    """The bytes ended before the field the decoder needed."""


# What a Ctrl-C prints (exit 130): a batch run resumes where it stopped.
INTERRUPTED = "espforensics: interrupted (a batch resumes where it stopped)"
