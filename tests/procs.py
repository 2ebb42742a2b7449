"""The process table, for the tests that kill a run and check its workers went with it.

Linux only (/proc): ``stat`` gives a process's state and parent, ``alive``
whether it still runs, ``children`` and ``descendants`` the processes below one.
"""

from __future__ import annotations

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
