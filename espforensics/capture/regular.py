"""Which paths may be read as a capture: regular files only.

In: a path. Out: ``check_regular(path)`` returns None for a regular file
(or a symlink to one) and raises ``CaptureError`` for anything else, with
what it is: ``not a regular file: character device`` (``/dev/zero``, a
tty), ``... FIFO``, ``... socket``, ``... block device``; for a folder
``cannot open: Is a directory``, as the system says it;
``cannot open: Too many levels of symbolic links`` for a symlink loop and
the system's reason for a path that cannot be looked at.
``not_regular(path)`` gives that reason as text (None for a regular file),
for the batch walk, which passes such a path over instead of failing.

Why: reading ``/dev/zero`` never ends (the hash of the capture spins at
100% CPU) and opening a FIFO for reading blocks until a writer comes,
forever in a batch. The check is made with ``os.stat`` before any
``open``, so neither is ever opened; ``open_source`` checks the opened
descriptor again (``fstat``), opened with ``O_NONBLOCK`` so that a path
swapped for a FIFO in between cannot block either.
"""

from __future__ import annotations

import errno
import os
import stat

from espforensics.errors import CaptureError

# st_mode file types (POSIX <sys/stat.h>) as a user names them.
_KINDS: tuple[tuple[int, str], ...] = (
    (stat.S_IFCHR, "character device"),
    (stat.S_IFBLK, "block device"),
    (stat.S_IFIFO, "FIFO"),
    (stat.S_IFSOCK, "socket"),
)


def kind_of(mode: int) -> str | None:
    """None for a regular file, else what the file is (``character device``, ``FIFO``, ...)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for kind, name in _KINDS if stat.S_IFMT(mode) == kind), "special file")


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as a capture (without opening it); None if it can."""
    try:
        mode = os.stat(path).st_mode  # follows symlinks: a link to a capture is a capture
    except OSError as exc:
        return f"cannot open: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return f"cannot open: {os.strerror(errno.EISDIR)}"
    kind = kind_of(mode)
    return None if kind is None else f"not a regular file: {kind}"


def check_regular(path: str | os.PathLike[str]) -> None:
    """Raise ``CaptureError`` unless ``path`` is a regular file (or a symlink to one)."""
    reason = not_regular(path)
    if reason is not None:
        raise CaptureError(os.fspath(path), reason)
