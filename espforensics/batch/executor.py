"""Where the per-capture tasks run: a local process pool, or a Dask cluster.

In: ``CaptureTask`` values and a callback. Out: each ``CaptureResult``
handed to the callback as it completes (any order; the caller sorts).
Raises ``InputError`` when the Dask scheduler cannot be reached
(``engine.dask_workers.dask_client``, which ``analyze --scheduler`` uses too).

Workers of a Dask cluster must see the captures and the output folder at
the same paths (a shared file system); results travel back as small rows.

Local workers die with the batch process, however it ends (a SIGKILL
included), and write nothing to stdout: ``workers.worker_init``.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed as local_completed

from espforensics.batch.task import CaptureResult, CaptureTask, run_task
from espforensics.engine.dask_workers import dask_client
from espforensics.engine.workers import worker_init

Done = Callable[[CaptureResult], None]


def run_local(tasks: Sequence[CaptureTask], jobs: int, done: Done) -> None:
    """Run the tasks on ``jobs`` worker processes (in this process when 1).

    Never more processes than tasks: a worker without a task to take only
    costs memory (run.py also caps ``jobs`` at the cores, engine/workers.py).
    A Ctrl-C (to this process, or to its process group as a terminal sends
    it) ends the workers at once, their unfinished captures with them: each
    capture a worker finished is in the manifest already (task.py).
    """
    jobs = min(jobs, len(tasks))
    if jobs <= 1:
        for task in tasks:
            done(run_task(task))
        return
    pool = ProcessPoolExecutor(
        max_workers=jobs, initializer=_batch_worker_init, initargs=(os.getpid(),)
    )
    try:
        futures = [pool.submit(run_task, task) for task in tasks]
        for future in local_completed(futures):
            done(future.result())
    except BaseException:  # Ctrl-C, or a bug: waiting for the running captures could take hours
        _stop(pool)
        raise
    pool.shutdown()


def _batch_worker_init(parent: int) -> None:
    """A batch worker ignores Ctrl-C: the batch process hears it too and ends its workers,
    so that a worker is never stopped half-way through recording a capture it finished."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker_init(parent)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers now (SIGTERM), start nothing new, and reap them; then let the
    pool's manager thread end before this process does (bounded: ``_MANAGER_ENDS``).

    At exit, concurrent.futures wakes every manager thread still registered through its
    pipe, without the lock the thread closes that pipe under: a thread still ending
    then made the interpreter print "Exception ignored ... Bad file descriptor" and a
    traceback after the interrupted line (1 batch in some hundreds, under load)."""
    processes = list((pool._processes or {}).values())  # no public handle
    # nor for this (typeshed calls it a _ThreadWakeup): shutdown(wait=False) drops it
    manager: threading.Thread | None = getattr(pool, "_executor_manager_thread", None)
    for process in processes:
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join()
    if manager is not None:
        manager.join(_MANAGER_ENDS)


_MANAGER_ENDS = 10.0  # seconds: its workers are gone, it ends at once


def run_dask(tasks: Sequence[CaptureTask], address: str, done: Done) -> None:
    """Run the tasks on an existing Dask distributed cluster."""
    client = dask_client(address)
    from dask.distributed import as_completed  # noqa: PLC0415 (installed: dask_client said so)

    with client:
        futures = client.map(run_task, list(tasks), pure=False)
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            done(future.result())
