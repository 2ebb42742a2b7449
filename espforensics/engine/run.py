"""The engine's loop: capture items in batches, rows out in capture order.

In: the items of an open capture (``FrameBatch``, a pcapng's
``DecryptionSecrets`` between them, ``Frame`` that no column holds), a
``FrameAnalyzer`` (the stateful
per-frame path and the checks' state), ``Options``, ``jobs`` and a Dask
scheduler, if any. Out: ``iter_rows`` yields ``PacketRecord`` (a frame of
the per-frame path) and ``SteadyRows`` (a run of frames of the steady
lane, with the frames between them that carry no ESP), together one row
per frame, in capture order. Raises ``KeyFileError`` for a bad
Decryption Secrets Block and ``WorkerFailed`` for a lost worker, and
lets the capture's own errors through, after yielding every row it could
(the held records included).

Per batch (64 frames, doubling to ``Options.batch_frames``; a Decryption
Secrets Block ends a batch: the SAs it loads apply from the next frame on):
1. wire.parse: the common layouts' fields, as arrays (stateless);
2. steady.prepare / decode / settle: which packets the steady lane takes,
   opened and decoded by a worker process ahead (``jobs - 1`` of them, or
   a Dask cluster's: engine/pool.py, taken only where ``prefetch.resolve``
   agrees) or here, by ``jobs`` threads, the caller's among them (AES-GCM
   releases the GIL); meanwhile the caller hands the previous batch's rows
   on (the summary and the tables take them then);
3. in capture order: a frame the lane does not take goes through
   ``FrameAnalyzer.process``; the lane's frames between two of those are
   committed to the checks in bulk. While records are held, a run of the
   lane's waits in line behind them as one item (``FrameAnalyzer.queue``,
   which gives up a hold where a bound inside the run would); while a
   fragment or an ESN first packet is held, every frame goes through
   ``process`` (docs/architecture.md, "The steady lane beside held records").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np

from espforensics.analyzer.frame import FrameAnalyzer, Run
from espforensics.checks import SaState
from espforensics.crypto import sa_identity
from espforensics.engine.rows import RowSink, SteadyRows
from espforensics.engine.steady import OpenJob, Plan, SteadyLane
from espforensics.engine.wire import FrameBatch, WireColumns, parse
from espforensics.errors import InputError
from espforensics.model.options import Options
from espforensics.model.records import DecryptionSecrets, Frame, PacketRecord

if TYPE_CHECKING:  # the workers (--jobs, --scheduler) are imported when a run has them
    from espforensics.engine.pool import Ahead, Item

Row = PacketRecord | SteadyRows
_MIN_SHARE = 64  # packets a thread gets at the least: below it, one thread opens them all
FIRST_BATCH = 64  # frames of the first batch (batch_sizes)
# Frames of a steady run at the least for it to wait in line behind held records: a run's
# fixed cost (its commit, its packets table: about 1 ms) is that of some 15 frames per
# frame, so a shorter one goes per frame then, as every frame did before runs could wait
# (docs/performance.md, "The lane beside held records").
MIN_QUEUED = 16


class _Opener:
    """Opens a batch's packets on ``threads`` threads (the caller's among them), in order."""

    def __init__(self, pool: ThreadPoolExecutor | None, threads: int) -> None:
        self._pool, self._threads = pool, threads

    def submit(self, jobs: Sequence[OpenJob]) -> Callable[[], list[list[bytes | None]]]:
        """Start opening ``jobs``; the call that finishes (on the caller's thread) and returns."""
        total = sum(len(job.sealed) for job in jobs)
        if self._pool is None or total < 2 * _MIN_SHARE:
            return lambda: [job.open() for job in jobs]
        share = max(_MIN_SHARE, -(-total // self._threads))
        parts: list[OpenJob] = []
        counts: list[int] = []  # parts per job
        for job in jobs:
            cuts = job.split(share)
            parts.extend(cuts)
            counts.append(len(cuts))
        futures = [self._pool.submit(part.open) for part in parts[1:]]

        def finish() -> list[list[bytes | None]]:
            done = [parts[0].open(), *(f.result() for f in futures)]
            out, at = [], 0
            for k in counts:
                out.append([p for part in done[at : at + k] for p in part])
                at += k
            return out

        return finish


def batch_sizes(largest: int) -> Iterator[int]:
    """FIRST_BATCH frames, then twice as many each time up to ``largest``. A batch's plan
    is made at its start, before its frames prove an SA's key: a first batch all goes the
    per-frame path, and a small one costs little."""
    size = min(FIRST_BATCH, largest)
    while size < largest:
        yield size
        size *= 2
    yield from repeat(largest)


def deliver(row: Row, sink: RowSink) -> None:
    """Hand one of ``iter_rows``'s rows to ``sink``: a record to ``observe``, a steady run to
    ``observe_rows``. The one place the two kinds of row are told apart."""
    if isinstance(row, SteadyRows):
        sink.observe_rows(row)
    else:
        sink.observe(row)


def _end_of(batch: FrameBatch) -> int | None:
    """Where the batch's last record ends in the file, when it was read from one."""
    return None if batch.span is None else batch.span.file_at + batch.span.nbytes


def iter_records(items: Iterable[Item], analyzer: FrameAnalyzer) -> Iterator[PacketRecord]:
    """The per-frame path alone over ``items``: one record per frame, in capture order."""
    engine = Engine(analyzer, Options(steady_lane=False))
    for row in engine.iter_rows(items):
        assert isinstance(row, PacketRecord)  # without the steady lane every row is a record
        yield row


class Engine:
    """Runs a capture's items through the analyzer, batch by batch."""

    def __init__(
        self,
        analyzer: FrameAnalyzer,
        options: Options,
        jobs: int = 1,
        scheduler: str | None = None,
    ) -> None:
        """``jobs``: processes (``jobs - 1`` workers; threads for what they cannot read);
        ``scheduler``: a Dask scheduler whose workers prefetch instead (engine/pool.py)."""
        self._an = analyzer
        # Without the steady lane nothing is gained by batching: each frame goes at once.
        self._size = max(1, options.batch_frames) if options.steady_lane else 1
        self._lane = SteadyLane(analyzer) if options.steady_lane else None
        self._pool = (
            ThreadPoolExecutor(jobs, thread_name_prefix="espforensics-open") if jobs > 1 else None
        )
        self._open = _Opener(self._pool, jobs)
        self._held: list[Row] = []  # the last batch's rows: yielded while the next one decrypts
        self._held_end: int | None = None  # where their records end in the file, if known
        # Where the records of the rows yielded so far end in the file (None: not known, a
        # compressed capture). The reader's own position runs ahead by the batches in flight.
        self.done_bytes: int | None = None
        # --jobs: worker processes open the batches of a file ahead (engine/pool.py);
        # this process is one of the ``jobs``, so ``jobs - 1`` of them
        on = (jobs > 1 or scheduler is not None) and self._lane is not None
        self._ahead = None
        if on:  # multiprocessing, Dask: none of it loaded by a run without workers
            from espforensics.engine.pool import Prefetcher  # noqa: PLC0415

            self._ahead = Prefetcher(analyzer.sas, jobs - 1, self._size, scheduler)
        # A compressed capture is decompressed once, for local workers to read it in spans
        # (capture/unpack.py); a cluster's workers may not see this machine's files.
        self.unpack_once = on and scheduler is None
        self._idents: dict[SaState, bytes] = {}
        # The rows of the lane's runs waiting in line behind held records, oldest first:
        # each run's leave where the analyzer releases its ``Run``.
        self._runs: deque[tuple[Row, ...]] = deque()

    def batch_sizes(self) -> Iterator[int]:
        """How many frames each batch should hold, for a capture reader (``batch_sizes``)."""
        return batch_sizes(self._size)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        if self._ahead is not None:
            self._ahead.close()

    def iter_rows(self, items: Iterable[Item]) -> Iterator[Row]:
        """One row per frame of ``items``; ``analyzer.findings`` is complete at the end."""
        batch: list[Frame] = []
        sizes = self.batch_sizes()
        size, append = next(sizes), batch.append  # the hot loop: one pass per frame
        if self._ahead is not None:
            items = self._ahead.ahead(items, self._an.natt_ports)
        try:
            for item in items:
                if isinstance(item, Frame):
                    append(item)
                    if len(batch) >= size:
                        yield from self._frames(batch)
                        batch = []
                        size, append = next(sizes), batch.append
                    continue
                yield from self._frames(batch)
                batch = []
                append = batch.append
                if isinstance(item, FrameBatch):
                    yield from self._batch(item)
                elif isinstance(item, DecryptionSecrets):
                    self._an.add_secrets(item)
                else:  # an Ahead: only from self._ahead
                    yield from self._batch(item.batch, item)
        except InputError:  # a damaged capture or a bad secrets block
            yield from self._frames(batch)
            yield from self._release()
            yield from self._rows(self._an.finish())  # what was read, held records too
            raise
        yield from self._frames(batch)
        yield from self._release()
        yield from self._rows(self._an.finish())

    def _rows(self, released: Iterable[PacketRecord | Run]) -> Iterator[Row]:
        """The analyzer's released records, each of its ``Run`` the lane's run it stands for."""
        for item in released:
            if isinstance(item, Run):
                if not item.part:  # a later part of a run leaves with its first
                    yield from self._runs.popleft()
            else:
                yield item

    def _release(self) -> list[Row]:
        held, self._held = self._held, []
        if self._held_end is not None:
            self.done_bytes, self._held_end = self._held_end, None
        return held

    def _lane_on(self) -> bool:
        """Whether the steady lane may take anything now: SAs with a key, or in a run with
        no key at all every SA (engine/steady.py)."""
        sas = self._an.sas
        return self._lane is not None and (sas.has_usable_key() or not len(sas))

    def _frames(self, frames: list[Frame]) -> Iterator[Row]:
        """A batch of frames read one by one (a pcapng's past 2^63 ns, a test's)."""
        if not frames:
            return
        if self._lane_on():
            try:
                batch = FrameBatch.of(tuple(frames))
            except OverflowError:  # a timestamp past 2^63 ns (year 2262): the per-frame path
                pass
            else:
                yield from self._batch(batch)
                return
        yield from self._release()
        for frame in frames:
            yield from self._rows(self._an.process(frame))

    def _batch(self, batch: FrameBatch, ahead: Ahead | None = None) -> Iterator[Row]:
        lane = self._lane
        if lane is None or not self._lane_on():
            yield from self._release()
            for frame in batch.frames():
                yield from self._rows(self._an.process(frame))
            self.done_bytes = _end_of(batch) or self.done_bytes
            batch.release()
            return
        ports = self._an.natt_ports
        pre = None if ahead is None else ahead.result()
        if pre is not None and pre.ports != ports:  # parsed with other NAT-T ports
            pre = None
        wire = parse(batch, ports) if pre is None else pre.wire
        opening = lane.prepare(batch, wire)
        decoded = None
        if pre is not None and opening.parts:
            from espforensics.engine.prefetch import resolve  # noqa: PLC0415  # with workers

            decoded = resolve(pre, opening, [self._ident(f.state) for f in opening.plan.flows])
        if decoded is None:
            opened = self._open.submit(opening.jobs)
            yield from self._release()  # the consumer takes them while the pool decrypts
            decoded = lane.decode(opening, batch, opened())
        else:
            yield from self._release()
        plan = lane.settle(opening, decoded)
        self._held = list(self._segments(lane, batch, wire, plan))
        self._held_end = _end_of(batch)
        batch.release()  # its rows hold copies of what they need
        if self._ahead is not None:
            self._ahead.note(plan.flows, self._ident)

    def _ident(self, state: SaState) -> bytes:
        """The identity of the SA of ``state`` (``crypto.sa_identity``), computed once; b""
        without a key (the lane opens none of its packets)."""
        if state.sa is None:
            return b""
        ident = self._idents.get(state)
        if ident is None:
            ident = self._idents[state] = sa_identity(state.sa)
        return ident

    def _segments(
        self, lane: SteadyLane, batch: FrameBatch, wire: WireColumns, plan: Plan
    ) -> Iterator[Row]:
        """The batch in capture order: the lane's runs in bulk, the other frames one by one.

        While records are held, a run of ``MIN_QUEUED`` frames or more waits in line
        behind them (``FrameAnalyzer.queue`` gives up a hold where a bound inside it
        would); a shorter one goes through ``process``, and so does every frame while a
        fragment or an ESN first packet is held (``may_queue``).
        """
        an = self._an
        inert = wire.inert
        free = plan.taken | inert  # may go without the per-frame path
        i, n = 0, len(batch)
        while i < n:
            if free[i]:
                j = n if free[i:].all() else i + int(np.argmin(free[i:]))
                if not an.busy or (j - i >= MIN_QUEUED and an.may_queue()):
                    yield from self._run(lane, batch, wire, plan, i, j)
                    i = j
                    continue
            an.touched.clear()
            yield from self._rows(an.process(batch.frame(i)))
            own = plan.unit_of_row(i)
            for state in an.touched:
                unit = plan.unit_of.get(state)
                if unit is not None and own is not unit:
                    plan.invalidate(unit, i)  # the plan did not count on this frame
                    free = plan.taken | inert
            for unit in lane.sharing(plan, i, an.touched):  # through a scope they share
                if own is not unit:
                    plan.invalidate(unit, i)
                    free = plan.taken | inert
            if own is not None and lane.resume(plan, own, batch, wire, i):
                free = plan.taken | inert  # its SAs' rest, planned again
            i += 1

    def _run(
        self, lane: SteadyLane, batch: FrameBatch, wire: WireColumns, plan: Plan, i: int, j: int
    ) -> Iterator[Row]:
        """Frames ``i`` to ``j`` (excluded), each the lane's or without ESP; behind the held
        records in line, if any (``FrameAnalyzer.queue``)."""
        mine = plan.taken[i:j]
        rows = (np.flatnonzero(mine) + i).tolist()
        frame, own = batch.frame, self._an.records
        others = (np.flatnonzero(~mine) + i).tolist()  # inert: no ESP, one record each
        records = tuple(rec for r in others for rec in own(frame(r)))
        if not self._an.busy:
            if rows:
                yield lane.apply(batch, wire, plan, rows, records)
            else:
                yield from records
            return
        self._runs.append((lane.apply(batch, wire, plan, rows, records),) if rows else records)
        run = Run(frame(i).number, len(rows) + len(records))
        yield from self._rows(self._an.queue(run, frame(j - 1).ts_ns))
