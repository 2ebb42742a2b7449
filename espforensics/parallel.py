"""One capture on several processes: workers decode and decrypt, one process keeps the state.

In: the capture's path, the main process's ``FrameAnalyzer``, a number
of worker processes and, optionally, the main process's open ``Capture``
(its ``bytes_read`` then tells how far the run has got). Out:
``iter_records_parallel`` yields exactly what ``pipeline.iter_records``
yields for the same capture, record for record. Raises what
``iter_records`` raises, at the same point, ``EspForensicsError`` when a
worker process dies, and ``InternalError`` (with the worker's traceback,
without values) when a bug stops one.

The frames are numbered into batches of ``BATCH``; worker ``k`` of ``count``
decodes the batches ``b`` with ``b % count == k``. Every worker reads the
capture itself (walking records costs about 1 us per frame, sending the
bytes to it cost 8), applies the capture's Decryption Secrets Blocks where
they stand, and runs, with its own ``FrameAnalyzer`` and no checks, the
part of the pipeline that needs no state from earlier frames: link, IP,
ESP location, SA lookup, AES-GCM, trailer, inner headers. It sends each
batch's results back through its own pipe, in order; the pipe's capacity
keeps it at most one batch ahead, so memory stays bounded.

The main process reads the capture too and hands each frame, with what
the worker learnt of it, to ``FrameAnalyzer.adopt``, which owns everything
that crosses batches: reassembly (fragments are analyzed there from
scratch), the ESN high half (a worker's guess is kept only when it equals
the main process's own inference), the checks, and the order records
leave in. Packets that did not verify or have no key are analyzed there
from scratch too: the placement and leak checks need their state.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any

from espforensics.capture import Capture, open_capture
from espforensics.errors import EspForensicsError, InternalError, bug_report
from espforensics.keys import SaTable
from espforensics.model import Frame, PacketRecord
from espforensics.pipeline import (
    Decoded,
    FrameAnalyzer,
    Options,
    Records,
    fewer_collections,
    iter_records,
)

BATCH = 2048  # frames per message: pickling and pipe costs are per batch, not per frame
_END = "end"  # a worker's last message after its last batch
_FAILED = "failed"  # a worker's message when it met an error of its own


def _worker(
    path: str, sas: SaTable, options: Options, count: int, index: int, batch: int, out: Connection
) -> None:
    """Decode this worker's batches of the capture and send them to the main process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process reports a Ctrl-C, once
    try:
        for results in _decode_batches(path, sas, options, count, index, batch):
            out.send(results)
        out.send(_END)
    except BrokenPipeError:
        pass  # the main process stopped reading (an error or Ctrl-C there): nothing to say
    except Exception as exc:  # a bug: its message may hold key bytes, so only bug_report
        with contextlib.suppress(OSError):
            out.send((_FAILED, type(exc).__name__, bug_report(exc)))
    finally:
        out.close()


def _decode_batches(
    path: str, sas: SaTable, options: Options, count: int, index: int, batch: int
) -> Iterator[list[Decoded | None]]:
    analyzer = FrameAnalyzer(sas, options, path)
    analyzer.checks = ()  # checks run in the main process, in capture order
    results: list[Decoded | None] = []
    try:
        with fewer_collections(), open_capture(path) as capture:
            for item in capture:
                if not isinstance(item, Frame):
                    analyzer.add_secrets(item)
                elif (item.number - 1) // batch % count == index:
                    results.append(analyzer.decode(item))
                    if len(results) == batch:
                        yield results
                        results = []
    except EspForensicsError:
        pass  # a damaged capture or a bad secrets block: the main process meets it at its place
    if results:
        yield results


def _start_forkserver() -> None:
    """Start the forkserver (and resource tracker) with SIGINT ignored, if not running.

    A Ctrl-C reaches the whole process group. One that came while Python was
    still starting up in the forkserver killed it with a "Fatal Python error"
    traceback on the terminal. An ignored SIGINT survives exec and Python
    leaves it ignored, so the helpers and the workers forked from the server
    never see it; the main process reports it, once.
    """
    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()  # only the main thread gets signals (or may set them)
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


class _Workers:
    """The worker processes and the batch each one is sending next."""

    def __init__(self, path: str, analyzer: FrameAnalyzer, count: int, batch: int) -> None:
        # forkserver, not fork: the main process runs threads (hasher, table writer).
        context = multiprocessing.get_context("forkserver")
        self._pipes: list[Connection] = []
        self._procs: list[Any] = []
        self._path = path
        self._ended: set[int] = set()
        _start_forkserver()
        try:
            for index in range(count):
                recv, send = context.Pipe(duplex=False)
                args = (path, analyzer.sas, analyzer.options, count, index, batch, send)
                proc = context.Process(target=_worker, args=args, daemon=True)
                proc.start()
                send.close()
                self._pipes.append(recv)
                self._procs.append(proc)
        except BaseException:  # a Ctrl-C while they start: stop those already running
            self.close()
            raise

    def batch(self, number: int) -> list[Decoded | None]:
        """The results of batch ``number`` (batches are asked for in order)."""
        index = number % len(self._pipes)
        if index in self._ended:
            return []
        pipe = self._pipes[index]
        try:
            message = pipe.recv()
        except (EOFError, OSError) as exc:
            why = f" ({exc})" if str(exc) else ""
            raise EspForensicsError(
                f"{self._path}: a worker process of --jobs died{why}; run again, or without --jobs"
            ) from exc
        if isinstance(message, list):
            return message
        if isinstance(message, tuple) and message[0] == _FAILED:
            raise InternalError(f"a worker process of --jobs failed: {message[1]}", message[2])
        self._ended.add(index)
        return []  # the worker stopped early (damaged capture): the main process decides alone

    def close(self) -> None:
        for pipe in self._pipes:
            pipe.close()
        for proc in self._procs:
            proc.join(timeout=1)
            if proc.is_alive():
                proc.terminate()
                proc.join()


def iter_records_parallel(
    path: str | os.PathLike[str],
    analyzer: FrameAnalyzer,
    workers: int,
    batch: int = BATCH,
    capture: Capture | None = None,
) -> Iterator[PacketRecord]:
    """``iter_records`` over the capture at ``path``, decoding with ``workers`` more processes.

    ``capture``: ``path`` opened already by the caller, who watches its
    ``bytes_read``; this process reads it (and the workers their own).
    """
    name = os.fspath(path)
    pool = _Workers(name, analyzer, workers, batch)
    try:
        with contextlib.ExitStack() as stack:
            reader = capture if capture is not None else stack.enter_context(open_capture(name))
            yield from iter_records(reader, analyzer, _adopter(analyzer, pool, batch))
    finally:
        pool.close()


def _adopter(analyzer: FrameAnalyzer, workers: _Workers, batch: int) -> Callable[[Frame], Records]:
    """``analyzer.process`` for frames in capture order, with the workers' results."""
    results: list[Decoded | None] = []

    def adopt(frame: Frame) -> Records:
        nonlocal results
        i = (frame.number - 1) % batch
        if i == 0:
            results = workers.batch((frame.number - 1) // batch)
        return analyzer.adopt(frame, results[i] if i < len(results) else None)

    return adopt
