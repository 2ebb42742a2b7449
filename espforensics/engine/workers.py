"""How many workers to start: what was asked, capped at the work there is and the cores.

In: the ``--jobs`` asked for, the pieces of work (captures of a batch; None
when unknown, as for the threads of one capture) and the cores this process
may run on. Out: a ``Workers`` value (how many, and why fewer than asked),
and ``worker_init``, every worker process's first act (it dies with its
parent). Raises nothing.

``batch --jobs 10000`` once started 5,321 processes for 8 captures: a
worker without a capture to take, or beyond the cores, only costs memory
(a process imports pandas and pyarrow, ~100 MB) and never finishes sooner.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask or cgroup), at least 1."""
    count = getattr(os, "process_cpu_count", None)  # Python 3.13
    if count is not None:
        return int(count() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class Workers:
    """The workers to start; ``why`` says why fewer than asked ("" when not capped)."""

    count: int
    asked: int
    why: str = ""

    def notice(self, option: str = "--jobs") -> str:
        """One line for stderr, e.g. ``--jobs 10000 capped at 8: 8 captures to analyze``."""
        return f"{option} {self.asked} capped at {self.count}: {self.why}" if self.why else ""


def cap_workers(asked: int, work: int | None, cores: int) -> Workers:
    """At most one worker per piece of ``work`` (when known) and per core; at least one."""
    limits = [(cores, f"{cores} {'core' if cores == 1 else 'cores'} usable")]
    if work is not None:
        limits.insert(0, (work, f"{work} captures to analyze"))
    count = max(1, min([asked, *(n for n, _ in limits)]))
    if count >= asked:
        return Workers(asked, asked)
    why = " and ".join(text for n, text in limits if max(1, n) == count)
    return Workers(count, asked, why)


# -- worker processes: they die with their parent ------------------------------------
#
# A worker dies with the process that started it, however that one ends (a SIGKILL
# included): on Linux the kernel kills it (``prctl(PR_SET_PDEATHSIG)``), elsewhere, and as
# a fallback, a watchdog thread ends it within ``WATCH_SECONDS`` of its parent's death.
# Without this an idle worker waits forever on the task queue, whose write end every
# worker inherited. Workers write nothing to stdout, so their stdout is ``/dev/null``: a
# killed run never leaves its caller's pipe open.

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: the signal a process gets when its parent dies
WATCH_SECONDS = 0.5  # how often a worker's watchdog looks for its parent
EXIT_ORPHANED = 75  # sysexits.h EX_TEMPFAIL: the batch resumes the capture on its next run


def _pdeathsig() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (prctl(2)).

    The "parent" is the thread that forked the worker: ``run_local``'s
    caller, which outlives the pool (the pool is shut down before it
    returns). Elsewhere, or if libc refuses, the watchdog alone does it.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc prctl: the watchdog still ends the worker
        return


def watch_parent(parent: int) -> None:
    """End this worker once its parent is gone (it is then reparented: the ppid changes)."""
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os._exit(EXIT_ORPHANED)


def worker_init(parent: int) -> None:
    """Each worker's first act: die with ``parent``; leave the caller's stdout alone."""
    _pdeathsig()
    threading.Thread(
        target=watch_parent, args=(parent,), name="espforensics-watchdog", daemon=True
    ).start()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # fd 1 itself: sys.stdout may be a wrapper without a descriptor
    os.close(null)


def watch_owner(owner: int) -> None:
    """End this worker once ``owner`` (the process it works for, which is not its parent
    when a fork server started it) has ended: at once where Linux gives a pidfd (readable
    when the process exits, reaped or not), else within WATCH_SECONDS."""
    try:
        fd = os.pidfd_open(owner)
    except (AttributeError, OSError):  # no pidfd: poll the process table
        while _exists(owner):
            time.sleep(WATCH_SECONDS)
        os._exit(EXIT_ORPHANED)
    select.select([fd], [], [])
    os._exit(EXIT_ORPHANED)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user: it is there
        return True
    return True


def owned_worker_init(owner: int) -> None:
    """A fork server's worker's first act: die with ``owner``, ignore Ctrl-C (``owner``
    stops its workers), leave the caller's stdout alone."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:  # a Ctrl-C as the worker starts: it goes, without a word
        os._exit(EXIT_ORPHANED)
    threading.Thread(
        target=watch_owner, args=(owner,), name="espforensics-watchdog", daemon=True
    ).start()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
