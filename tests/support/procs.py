"""The process table, for the tests that kill a run and check its workers went with it.

Linux only (/proc, pidfds): ``stat`` gives a process's state and parent, ``alive``
whether it still runs, ``children`` and ``descendants`` the processes below one,
``wait_gone`` waits for some to end.
"""

from __future__ import annotations

import os
import select
import time
from pathlib import Path


def stat(pid: int) -> tuple[str, int]:
    """(state, parent pid) of a process; ("X", 0) once it is gone."""
    try:
        text = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return "X", 0
    fields = text[text.rindex(")") + 2 :].split()  # after "PID (comm) "
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    return stat(pid)[0] not in ("X", "Z")  # a zombie has run its last instruction


def _parents() -> dict[int, int]:
    return {
        int(e.name): stat(int(e.name))[1]
        for e in Path("/proc").iterdir()
        if e.name.isdigit() and alive(int(e.name))
    }


def children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid``."""
    return [p for p, parent in _parents().items() if parent == pid]


def descendants(pid: int) -> list[int]:
    """Live processes below ``pid`` (its children, theirs, ...)."""
    parents = _parents()
    found, todo = [], [pid]
    while todo:
        above = todo.pop()
        below = [p for p, parent in parents.items() if parent == above]
        found += below
        todo += below
    return found


def wait_gone(pids: list[int], bound: float) -> list[int]:
    """Wait until every process of ``pids`` has ended, for at most ``bound`` seconds; those
    still running then. Each is watched through a pidfd, readable the moment it exits: no
    poll interval, and the bound is only a limit (a loaded machine takes longer)."""
    poller, watched = select.poll(), {}
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:  # gone already
            continue
        watched[fd] = pid
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + bound
    try:
        while watched and (left := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(left * 1000):
                poller.unregister(fd)
                os.close(fd)
                del watched[fd]
    finally:
        for fd in watched:
            os.close(fd)
    return [pid for pid in pids if alive(pid)]
