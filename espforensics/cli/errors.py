"""How a command ends when it cannot finish: exit 2, 130 or 70, in one line on stderr.

In: a library call. Out: its value (``_guarded``), or ``typer.Exit`` with 2
for the user's input (``EspForensicsError``), 130 for Ctrl-C and 70 for a
bug, whose traceback, without any value, goes into the output folder or a
temporary file (``_report_bug``). Raises only ``typer.Exit``.
"""

from __future__ import annotations

import os
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from espforensics.errors import (
    EXIT_INTERNAL,
    INTERRUPTED,
    TRACEBACK_FILE,
    EspForensicsError,
    InternalError,
    bug_report,
)

T = TypeVar("T")


def _guarded(
    call: Callable[[], T],
    out: Path | None = None,
    before: Callable[[], None] = lambda: None,
    interrupted: str = INTERRUPTED,
) -> T:
    """``call()``, its errors mapped to exit codes; a bug's traceback goes to ``out``.

    ``before`` runs once ``call`` has ended, whatever ended it, and before any line is
    printed (it clears a progress bar, so the line starts on its own);
    ``interrupted`` is the line a Ctrl-C prints: what it stopped.
    """
    try:
        value = call()
    except EspForensicsError as exc:
        before()
        typer.echo(f"espforensics: error: {exc}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:  # typer would exit 130 without a word
        before()
        typer.echo(interrupted, err=True)
        raise typer.Exit(130) from None
    except Exception as exc:  # not the user's input: a bug, told apart from exit 1 and 2
        before()
        _report_bug(exc, out)
        raise typer.Exit(EXIT_INTERNAL) from None
    before()
    return value


def _report_bug(exc: Exception, out: Path | None) -> None:
    """One line on stderr; the traceback, without values, in ``out`` or a temporary file."""
    where = _write_traceback(exc, out)
    what = str(exc) if isinstance(exc, InternalError) else type(exc).__name__
    typer.echo(
        f"espforensics: internal error: {what} (a bug in espforensics, "
        f"please report it); traceback in {where}",
        err=True,
    )


def _write_traceback(exc: Exception, out: Path | None) -> str:
    """Write ``bug_report(exc)`` into ``out`` if it is a folder, else a temporary file."""
    from espforensics.model.version import TOOL_VERSION  # noqa: PLC0415 (metadata: 15 ms, for a bug)

    text = (
        f"espforensics {TOOL_VERSION}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}\n\n{bug_report(exc)}"
    )
    if out is not None and out.is_dir():
        try:
            (out / TRACEBACK_FILE).write_text(text)
            return str(out / TRACEBACK_FILE)
        except OSError:
            pass  # a read-only or full output folder: the temporary file below
    try:
        fd, name = tempfile.mkstemp(prefix="espforensics-traceback-", suffix=".txt")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    except OSError as err:
        return f"no file (it could not be written: {err.strerror})"
    return name
