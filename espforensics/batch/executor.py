"""Where the per-capture tasks run: a local process pool, or a Dask cluster.

In: ``CaptureTask`` values and a callback. Out: each ``CaptureResult``
handed to the callback as it completes (any order; the caller sorts).
Raises ``InputError`` when the Dask scheduler cannot be reached. The only
module that imports concurrent.futures' process pool and dask.

Workers of a Dask cluster must see the captures and the output folder at
the same paths (a shared file system); results travel back as small rows.

Local workers die with the batch process, however it ends (a SIGKILL
included): on Linux the kernel kills them (``prctl(PR_SET_PDEATHSIG)``),
elsewhere, and as a fallback, a watchdog thread in each worker ends it
within ``WATCH_SECONDS`` of its parent's death. Without this an idle
worker waits forever on the task queue, whose write end every worker
inherited. Workers write nothing to stdout, so their stdout is
``/dev/null``: a killed batch never leaves its caller's pipe open.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed as local_completed

from espforensics.batch.task import CaptureResult, CaptureTask, run_task
from espforensics.errors import InputError

Done = Callable[[CaptureResult], None]

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


def _watch(parent: int) -> None:
    """End this worker once its parent is gone (it is then reparented: the ppid changes)."""
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os._exit(EXIT_ORPHANED)


def _worker_init(parent: int) -> None:
    """Each worker's first act: die with ``parent``; leave the caller's stdout alone."""
    _pdeathsig()
    threading.Thread(
        target=_watch, args=(parent,), name="espforensics-watchdog", daemon=True
    ).start()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # fd 1 itself: sys.stdout may be a wrapper without a descriptor
    os.close(null)


def run_local(tasks: Sequence[CaptureTask], jobs: int, done: Done) -> None:
    """Run the tasks on ``jobs`` worker processes (in this process when 1).

    Never more processes than tasks: a worker without a task to take only
    costs memory (run.py also caps ``jobs`` at the cores, workers.py).
    """
    jobs = min(jobs, len(tasks))
    if jobs <= 1:
        for task in tasks:
            done(run_task(task))
        return
    with ProcessPoolExecutor(
        max_workers=jobs, initializer=_worker_init, initargs=(os.getpid(),)
    ) as pool:
        futures = [pool.submit(run_task, task) for task in tasks]
        try:
            for future in local_completed(futures):
                done(future.result())
        except BaseException:
            for future in futures:
                future.cancel()  # Ctrl-C: start nothing new; finished work stays recorded
            raise


def run_dask(tasks: Sequence[CaptureTask], address: str, done: Done) -> None:
    """Run the tasks on an existing Dask distributed cluster."""
    try:  # imported here: dask is an optional extra, needed only with --scheduler
        from dask.distributed import Client, as_completed  # noqa: PLC0415
    except ImportError as exc:
        raise InputError(address, "--scheduler needs dask[distributed] installed") from exc
    try:
        client = Client(address, timeout="10s")  # type: ignore[no-untyped-call]
    except OSError as exc:
        raise InputError(address, f"cannot reach the Dask scheduler: {exc}") from exc
    with client:
        futures = client.map(run_task, list(tasks), pure=False)
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            done(future.result())
