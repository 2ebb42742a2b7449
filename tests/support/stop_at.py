"""Run ``espforensics`` in a child process that stops at a chosen point, for signal tests.

``python tests/support/stop_at.py MODULE ATTR CONDITION ARGS...`` replaces
``MODULE.ATTR`` (e.g. ``espforensics.results.builder`` ``SummaryBuilder.observe``)
by a wrapper that, on the first call whose arguments make ``CONDITION``
(a Python expression over ``args``) true, writes ``reached`` to stdout
and then reads stdin, which the test never writes to. The command
therefore provably got there and cannot get further: the test sends its
signal without guessing a time. Then it runs ``espforensics ARGS...``.
Nothing in espforensics knows about it (no hook, no environment variable).

``stopped`` starts any such command (this one, or a script that writes
``reached`` the same way) and yields once it is stopped; ``run_until_stopped``
starts this one. Whatever the test does then, failing included, the command
leaves nothing behind when the ``with`` block ends: its process group and the
processes that were below it at the stop are killed, its pipes closed and its
exit status collected (a pipe left open was reported by the next test).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REACHED = b"reached\n"
# A shell without job control (a script, CI, nohup) starts a background command with
# SIGINT ignored, an ignored signal stays ignored across exec, and Python then installs
# no KeyboardInterrupt handler: a Ctrl-C test of a suite run that way saw its command go
# on (exit 0). The command is started as a terminal's shell starts it, SIGINT at default.
AS_FROM_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def _install(module: str, attr: str, condition: str) -> None:
    owner: Any = importlib.import_module(module)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    stopped = [False]

    def stop_here(*args: Any, **kwargs: Any) -> Any:
        if not stopped[0] and eval(condition, {"args": args}):
            stopped[0] = True
            os.write(1, REACHED)
            os.read(0, 1)  # blocks until a signal ends the process
        return original(*args, **kwargs)

    setattr(owner, name, stop_here)


@dataclass(frozen=True, slots=True)
class Stopped:
    """A command waiting at its stop: its process, and the processes below it there."""

    proc: subprocess.Popen[bytes]
    below: list[int]


@contextlib.contextmanager
def stopped(argv: list[str], env: Mapping[str, str] | None = None) -> Iterator[Stopped]:
    """Start ``argv`` in a new session, as from a terminal; yield once it has written
    ``reached``."""
    from tests.support.procs import descendants, wait_gone  # not when run as a script

    proc = subprocess.Popen(
        [sys.executable, "-c", AS_FROM_A_TERMINAL, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env,
    )
    below: list[int] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # no timing: returns when the child writes, or exits
        if line != REACHED:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            raise AssertionError(f"the command did not reach the stop: {line!r} {err!r}")
        below = descendants(proc.pid)
        yield Stopped(proc, below)
    finally:
        _end(proc, below, wait_gone)


def _end(proc: subprocess.Popen[bytes], below: list[int], wait_gone: Any) -> None:
    """Kill what is left of ``proc`` (its group, the processes once below it), wait
    until those have ended, close its pipes and collect its status. Killing what has
    ended is a no-op: the status of ``proc`` is not collected before this, so its pid
    (the group's id) is not reused. A SIGKILL is delivered when the process is next
    scheduled, not when ``kill`` returns: without the wait, a loaded machine showed the
    child still running just after."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_gone(below, 120.0)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None and not pipe.closed:
            with contextlib.suppress(OSError):  # stdin: the child is gone (EPIPE)
                pipe.close()
    proc.wait()


def run_until_stopped(
    module: str, attr: str, condition: str, args: list[str]
) -> contextlib.AbstractContextManager[Stopped]:
    """``stopped`` for ``espforensics ARGS`` stopped where ``CONDITION`` first holds."""
    return stopped([sys.executable, str(Path(__file__)), module, attr, condition, *args])


if __name__ == "__main__":  # not when multiprocessing's forkserver imports this main module
    _install(*sys.argv[1:4])
    sys.argv = ["espforensics", *sys.argv[4:]]
    from espforensics.__main__ import main

    main()
