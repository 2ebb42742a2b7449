"""``--jobs N``: worker processes that prefetch one capture's batches ahead of the engine.

In: the capture's items (``FrameBatch`` of an uncompressed pcap or pcapng,
or of a compressed capture's decompressed copy, carry the ``Span`` their
records sit at), the SAs of the key files, the NAT-T ports
and how many workers. Out: ``Prefetcher.ahead`` hands the items on in the
same order, each batch with the ``Pending`` of its ``Prefetch``
(engine/prefetch.py), submitted up to two batches per worker ahead so
the workers open packets while the engine checks the ones before. Raises
``WorkerFailed`` (from ``Ahead.result``) when a worker died or failed: an
error naming the batch's frames, never a partial result.

Each worker reads its batch from the file itself (``Span.read``): only the
record offsets go to it, and only columns come back. The engine's own
process keeps every piece of state; what a worker computes is a pure
function of the batch's bytes and the SAs, and the engine uses it only
where its own plan agrees (``prefetch.resolve``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import forkserver
from typing import Protocol

from espforensics.capture.batch import FrameBatch, Span
from espforensics.checks import Flow, SaState
from espforensics.engine.dask_workers import dask_backend
from espforensics.engine.prefetch import KeyRing, Prefetch, prefetch
from espforensics.engine.workers import owned_worker_init
from espforensics.errors import EspForensicsError
from espforensics.keys import SaTable
from espforensics.model.records import DecryptionSecrets, Frame

# True: the engine waits for the workers to start and for every batch they were given, in
# place of opening a batch itself; tests set it, so that which batches the workers open
# does not depend on timing (the outputs never do).
PATIENT = False


class WorkerFailed(EspForensicsError):
    """A worker process died or failed on a batch: the run stops, its outputs say so."""


class Pending(Protocol):
    """A prefetch on its way (a local process pool's future, or a Dask cluster's)."""

    def done(self) -> bool: ...

    def cancel(self) -> bool:
        """True when the result will not be used (the engine does the work itself)."""
        ...

    def result(self) -> Prefetch: ...


class Backend(Protocol):
    """Where the prefetches run."""

    slots: int  # how many run at once

    def submit(self, span: Span, hints: dict[bytes, int]) -> Pending: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Ahead:
    """A batch, and the workers' prefetch of it (pending)."""

    batch: FrameBatch
    pending: Pending

    def result(self) -> Prefetch | None:
        """The prefetch, or None when no worker has started on it yet (it is then
        cancelled: the engine does the work itself rather than wait); raises
        ``WorkerFailed`` naming the batch's frames."""
        if not PATIENT and not self.pending.done() and self.pending.cancel():
            return None
        try:
            return self.pending.result()
        except Exception as exc:
            if not _lost(exc):
                raise  # a bug in a worker: the engine's own error report (exit 70)
            first, last = int(self.batch.number[0]), int(self.batch.number[-1])
            why = type(exc).__name__
            raise WorkerFailed(
                self.batch.span.path if self.batch.span else "<capture>",
                f"a --jobs worker failed on frames {first}-{last} ({why}); no result of it is used",
            ) from exc


def _lost(exc: BaseException) -> bool:
    """A worker lost (killed, its connection closed, its batch unreadable), not a bug."""
    return isinstance(exc, BrokenProcessPool | OSError | CancelledError) or (
        type(exc).__module__.split(".")[0] == "distributed"  # KilledWorker, a closed comm
    )


# What a capture hands the engine, and a batch whose prefetch is on its way.
Item = Frame | FrameBatch | DecryptionSecrets | Ahead

_RING: list[KeyRing] = []  # the worker's SAs and contexts (one per process)
_PORTS: list[frozenset[int]] = []


def _init(owner: int, table: SaTable, ports: frozenset[int]) -> None:
    """A worker's first act: die with the engine's process ``owner``, leave Ctrl-C to it
    (it stops the workers), keep the SAs."""
    owned_worker_init(owner)
    _RING.append(KeyRing(table))
    _PORTS.append(ports)


def _ready() -> None:
    """A task that returns once its worker has started."""


def _work(span: Span, hints: dict[bytes, int]) -> Prefetch:
    batch = span.read()
    try:
        return prefetch(batch, _PORTS[0], _RING[0], hints)  # columns: copies, no view
    finally:
        batch.release()


def _fork_server() -> None:
    """Start the ``multiprocessing`` fork server (once per process) with Ctrl-C ignored, so
    that every worker forked from it ignores it from its first instruction: the engine's
    process alone answers a Ctrl-C, and stops them. A fork of this process itself would
    copy its threads' locks (the SHA-256 thread is running); the server imports the
    analyzer's modules once, and forks each worker from there."""
    multiprocessing.set_forkserver_preload(["espforensics.engine.pool"])
    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()  # only the main thread may set a signal's handler
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


class _Local:
    """Worker processes of a ``multiprocessing`` fork server on this machine."""

    def __init__(self, workers: int, table: SaTable, ports: frozenset[int]) -> None:
        context = multiprocessing.get_context("forkserver")  # started by _fork_server
        self._pool = ProcessPoolExecutor(
            workers, context, initializer=_init, initargs=(os.getpid(), table, ports)
        )
        for started in [self._pool.submit(_ready) for _ in range(workers)]:
            started.result()
        self.slots = workers

    def submit(self, span: Span, hints: dict[bytes, int]) -> Pending:
        return self._pool.submit(_work, span, hints)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class Prefetcher:
    """The workers of one capture, and the batches they work on ahead."""

    def __init__(
        self, table: SaTable, workers: int, start_at: int, scheduler: str | None = None
    ) -> None:
        """``workers`` local processes, or a Dask cluster's at ``scheduler``; ``start_at``:
        they start at the first batch of this many frames (a capture of a few frames is
        done before a process would have started)."""
        self._table, self._workers, self._start_at = table, workers, start_at
        self._scheduler = scheduler
        self._backend: Backend | None = None
        self._starting: threading.Thread | None = None
        self._failed: BaseException | None = None
        self.hints: dict[bytes, int] = {}  # per ESN SA (identity): the highest seq64 seen

    def _ready(self, ports: frozenset[int]) -> Backend | None:
        """The workers once they run; until then None (the engine opens the batches).

        The first call starts them on a thread: a worker process takes a fraction of a
        second to start, and the engine goes on with the first batches meanwhile.
        """
        if self._starting is None:
            if self._scheduler is None:
                _fork_server()
            self._starting = threading.Thread(
                target=self._start, args=(ports,), name="espforensics-workers", daemon=True
            )
            self._starting.start()
        if PATIENT or self._scheduler is not None:  # a cluster asked for: reached, or an error
            self._starting.join()
        if self._starting.is_alive():
            return None
        if isinstance(self._failed, EspForensicsError):
            raise self._failed
        if self._failed is not None:
            raise WorkerFailed("<capture>", f"--jobs workers did not start ({self._failed})")
        return self._backend

    def _start(self, ports: frozenset[int]) -> None:
        try:
            if self._scheduler is not None:
                self._backend = dask_backend(self._scheduler, self._table, ports)
            else:
                self._backend = _Local(self._workers, self._table, ports)
        except Exception as exc:  # raised on the engine's thread by _ready
            self._failed = exc

    def note(self, flows: Iterable[Flow], ident: Callable[[SaState], bytes]) -> None:
        """The ESN SAs' tops after a batch: the next batches submitted open with them."""
        for flow in flows:
            ctx = flow.state.ctx
            if ctx is not None and ctx.esn:
                self.hints[ident(flow.state)] = flow.state.tracker.top

    def ahead(self, items: Iterable[Item], ports: frozenset[int]) -> Iterator[Item]:
        """``items`` in order, a batch with a span as ``Ahead`` (its prefetch submitted)."""
        queue: deque[Item] = deque()
        try:
            for item in items:
                span = item.span if isinstance(item, FrameBatch) else None
                pool = None
                if span is not None and (self._starting or len(span.heads) >= self._start_at):
                    pool = self._ready(ports)
                if pool is not None and span is not None and isinstance(item, FrameBatch):
                    queue.append(Ahead(item, pool.submit(span, dict(self.hints))))
                else:
                    queue.append(item)
                while len(queue) > (2 * self._backend.slots if self._backend else 0):
                    yield queue.popleft()
        except Exception:  # the capture's own error: what was read before it goes first
            while queue:
                yield queue.popleft()
            raise
        while queue:
            yield queue.popleft()

    def close(self) -> None:
        if self._starting is not None:
            self._starting.join()
        if self._backend is not None:
            self._backend.close()
