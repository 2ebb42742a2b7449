"""Run ``espforensics`` in a child process that stops at a chosen point, for signal tests.

``python tests/stop_at.py MODULE ATTR CONDITION ARGS...`` replaces
``MODULE.ATTR`` (e.g. ``espforensics.summary`` ``SummaryBuilder.observe``)
by a wrapper that, on the first call whose arguments make ``CONDITION``
(a Python expression over ``args``) true, writes ``reached`` to stdout
and then reads stdin, which the test never writes to. The command
therefore provably got there and cannot get further: the test sends its
signal without guessing a time. Then it runs ``espforensics ARGS...``.
Nothing in espforensics knows about it (no hook, no environment variable).

``run_until_stopped`` starts it and returns once it is stopped.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REACHED = b"reached\n"


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


def run_until_stopped(
    module: str, attr: str, condition: str, args: list[str]
) -> subprocess.Popen[bytes]:
    """Start the command in a new session; return once it waits at the stop."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), module, attr, condition, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # no timing: returns when the child writes, or exits
    if line != REACHED:
        _, err = proc.communicate(timeout=60)
        raise AssertionError(f"the command did not reach the stop: {line!r} {err!r}")
    return proc


if __name__ == "__main__":  # not when multiprocessing's forkserver imports this main module
    _install(*sys.argv[1:4])
    sys.argv = ["espforensics", *sys.argv[4:]]
    from espforensics.__main__ import main

    main()
