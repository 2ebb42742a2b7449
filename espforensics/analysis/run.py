"""One pass of a capture through the pipeline: the rows into a sink, and the ``Summary``.

In: a capture path, SAs (an ``SaTable``, key file paths or none),
``Options`` and a sink for the rows (a table writer, or nothing). Out: the
``Summary`` and the error that stopped the reading, if any (``_run``); the
capture's SHA-256 is computed on a thread meanwhile. Raises the
``InputError`` of a key file or a capture that cannot be read at all; an
error met while reading frames is returned, so the caller writes what was
read before it raises. analysis/__init__.py builds its entry points on this.
"""

from __future__ import annotations

import hashlib
import ipaddress
import mmap
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from espforensics.analysis.progress import READING, UNPACKING, Meter
from espforensics.analyzer.collector import fewer_collections
from espforensics.analyzer.frame import Finished, FrameAnalyzer
from espforensics.capture import open_capture
from espforensics.capture.batch import CAN_DROP, drop_pages
from espforensics.capture.regular import check_regular
from espforensics.engine import Engine, RowSink, SteadyRows, deliver
from espforensics.errors import (
    CaptureError,
    EspForensicsError,
    scrub,
)
from espforensics.keys import SaTable, load_sas
from espforensics.model.options import Options
from espforensics.model.records import PacketRecord, SaKey
from espforensics.results.builder import SummaryBuilder
from espforensics.results.summary import CaptureInfo, SaMode, Summary

_HASHED = 16 << 20  # bytes hashed, then let go, at a time: a multiple of any page size
Progress = Callable[[int], None]  # called with uncompressed bytes read so far
KeyPath = str | os.PathLike[str]
# One key file path or several, as the standard library takes paths (a str is one path).
KeysArg = SaTable | KeyPath | Sequence[KeyPath] | None


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes as stored (compressed or not).

    Hashed where the file is mapped (the capture reader maps it too): 0.18 s of CPU
    for a 261 MB capture against 0.21 s through 1 MiB reads, each a copy. Each
    ``_HASHED`` bytes are let go once hashed (``drop_pages``), so that the process's
    memory stays flat however large the file: hashed in one piece, every page of the
    file stayed in it until the end (a 520 MB capture held 650 MB of peak RSS against
    160 MB). A file that cannot be mapped (empty, or on a file system without mmap),
    or a system that cannot let pages go, is read in 1 MiB pieces.
    """
    check_regular(path)  # /dev/zero would be hashed forever, a FIFO would block
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            mapped = _mapped(fh) if CAN_DROP else None
            if mapped is None:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
            else:
                with mapped:
                    _hash_mapped(digest, mapped)
    except OSError as exc:
        raise CaptureError(str(path), f"cannot open: {exc.strerror}") from exc
    return digest.hexdigest()


def _mapped(fh: BinaryIO) -> mmap.mmap | None:
    """The open file mapped read-only; None when it cannot be (empty, or a file system
    without mmap)."""
    try:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (ValueError, OSError):
        return None


def _hash_mapped(digest: hashlib._Hash, mapped: mmap.mmap) -> None:
    """``digest`` of the whole mapped file, ``_HASHED`` bytes at a time, each let go once
    hashed (hashlib releases the GIL on each piece, as on the whole)."""
    size = len(mapped)
    with memoryview(mapped) as view:
        for at in range(0, size, _HASHED):
            end = min(at + _HASHED, size)
            digest.update(view[at:end])
            drop_pages(mapped, at, end)


def _table(sas: KeysArg) -> SaTable:
    if sas is None:
        return SaTable()
    if isinstance(sas, SaTable):
        return sas
    return load_sas(sas if isinstance(sas, str | os.PathLike) else list(sas))


class Discard:
    """A ``RowSink`` that keeps nothing: a run that writes no tables."""

    def observe(self, rec: PacketRecord) -> None:
        pass

    def observe_rows(self, rows: SteadyRows) -> None:
        pass


class _Tee:
    """Hands each row to the summary's builder, then to the sink; counts the frames."""

    def __init__(self, builder: SummaryBuilder, sink: RowSink) -> None:
        self._builder, self._sink = builder, sink
        self.frames = 0

    def observe(self, rec: PacketRecord) -> None:
        self._builder.observe(rec)
        self._sink.observe(rec)
        self.frames += 1

    def observe_rows(self, rows: SteadyRows) -> None:
        self._builder.observe_rows(rows)
        self._sink.observe_rows(rows)
        self.frames += rows.rows


def _stream(
    path: str | os.PathLike[str],
    engine: Engine,
    tee: _Tee,
    progress: Progress | None,
    meter: Meter | None = None,
) -> None:
    told = None if meter is None else _Unpacking(meter)
    with open_capture(path, engine.unpack_once, told) as capture:
        if told is not None:
            told.end()
        shown, told_at = 0, -1
        for row in engine.iter_rows(capture.batches(engine.batch_sizes())):
            deliver(row, tee)
            if tee.frames - shown >= 4096:
                shown = tee.frames
                at = capture.bytes_read if engine.done_bytes is None else engine.done_bytes
                if progress is not None and at != told_at:  # a position is told once: the
                    progress(at)  # rows of an 8,192-frame batch cross 4,096 twice
                told_at = at
                if meter is not None:  # the frames moved on, if not the position
                    meter.reading(tee.frames, at)
        if meter is not None:
            meter.reading(tee.frames, capture.bytes_read)


class _Unpacking:
    """Tells the meter how far the decompression of a compressed capture for the --jobs
    workers has got (capture/unpack.py): the ``UNPACKING`` phase, before the reading."""

    def __init__(self, meter: Meter) -> None:
        self._meter, self.said = meter, False

    def __call__(self, compressed_at: int) -> None:
        if not self.said:
            self._meter.phase(UNPACKING)
            self.said = True
        self._meter.reading(0, compressed_at)

    def end(self) -> None:
        """The capture is open: if it was decompressed, the reading begins now."""
        if self.said:
            self._meter.phase(READING)


def _consume(
    path: str | os.PathLike[str],
    engine: Engine,
    tee: _Tee,
    progress: Progress | None,
    meter: Meter | None,
) -> Exception | None:
    """Feed every row to the builder and the sink; the error that ended it, if any.

    A damaged capture or a bad secrets block (``InputError``) ends it, and
    so does a bug: either way what was read before is kept, and the caller
    raises the error once it is written down.
    """
    try:
        _stream(path, engine, tee, progress, meter)
    except Exception as exc:  # raised again by every caller, once the outputs are written
        return exc
    return None


def _stop_message(error: Exception | None) -> str | None:
    """What ``summary.json`` says stopped the reading; a bug's message may hold values."""
    if error is None:
        return None
    if isinstance(error, EspForensicsError):
        return str(error)
    if isinstance(error, OSError):
        return _cannot_write(error)
    return f"stopped by an internal error (a bug in espforensics): {type(error).__name__}"


def _cannot_write(exc: OSError) -> str:
    """Why an output could not be written (disk full, permissions), without any value."""
    return f"cannot write the outputs: {exc.strerror or scrub(str(exc))}"


def capture_info(
    path: str | os.PathLike[str], sha256: str | None = None, name: str | None = None
) -> CaptureInfo:
    """Path (``name`` when the user named it otherwise, ``-``), SHA-256 (hashed unless the
    caller knows it) and size of the capture file."""
    sha = sha256 or sha256_file(path)
    return CaptureInfo(name or str(path), sha, os.path.getsize(path))


def named(
    error: Exception | None, path: str | os.PathLike[str], name: str | None
) -> Exception | None:
    """``error`` naming the capture as the user named it (``-`` for standard input, read
    from a temporary copy) where it names the copy; any other error as it is."""
    if name is None or not isinstance(error, CaptureError) or error.path != os.fspath(path):
        return error
    renamed = type(error)(name, error.message, error.frames_read)
    renamed.__cause__ = error.__cause__
    return renamed


def _info_later(
    path: str | os.PathLike[str], sha256: str | None, name: str | None = None
) -> Callable[[], CaptureInfo]:
    """Start hashing the capture on a thread; the call that waits for its ``CaptureInfo``.

    hashlib releases the GIL on large updates, so the digest (2 us per
    1.3 kB frame) is computed on another core while the frames are analyzed.
    """
    if sha256 is not None:
        info = capture_info(path, sha256, name)
        return lambda: info
    done: list[CaptureInfo | Exception] = []

    def work() -> None:
        try:
            done.append(capture_info(path, name=name))
        except Exception as exc:  # re-raised on the analyzing thread by wait()
            done.append(exc)

    # A daemon thread: after a Ctrl-C or an error the process exits without waiting
    # for the rest of a large file to be hashed (a pool's threads are joined at exit).
    thread = threading.Thread(target=work, name="espforensics-sha256", daemon=True)
    thread.start()

    def wait() -> CaptureInfo:
        thread.join()
        if isinstance(done[0], Exception):
            raise done[0]
        return done[0]

    return wait


def _modes(table: SaTable, builder: SummaryBuilder) -> dict[SaKey, SaMode]:
    """The mode each seen SA's key file states (one of keys/validate.py MODES), by
    (spi, src, dst)."""
    modes: dict[SaKey, SaMode] = {}
    if not any(sa.mode for sa in table):  # keyless, or no key file says: skip the lookups
        return modes
    for key in builder.sa_keys():
        src, dst = ipaddress.ip_address(key.src).packed, ipaddress.ip_address(key.dst).packed
        sa = table.lookup(key.spi, src, dst)
        if sa is not None and sa.mode:
            modes[key] = SaMode(sa.mode)
    return modes


def _run(
    path: str | os.PathLike[str],
    sas: KeysArg,
    options: Options | None,
    sink: RowSink,
    progress: Progress | None = None,
    sha256: str | None = None,
    jobs: int = 1,
    meter: Meter | None = None,
    scheduler: str | None = None,
    name: str | None = None,
) -> tuple[Summary, Exception | None]:
    """Stream the capture through the pipeline into ``sink``; the summary and the error, if
    any. ``name``: what the user called the capture when ``path`` is a copy of it (``-``)."""
    check_regular(path)  # before the hashing thread starts: it would never end on /dev/zero
    table = _table(sas)
    info = _info_later(path, sha256, name)
    builder = SummaryBuilder()
    with fewer_collections():
        error, ends = _analyze(
            path, table, options or Options(), builder, sink, jobs, scheduler, progress, meter, name
        )
        # The checks' per-SA state is gone (the analyzer with it) before the summary's rows
        # are made: a capture of many SAs holds one or the other at its peak, not both.
        done = ends.checks
        summary = builder.finish(
            info(),
            done.findings,
            ends.modes,
            _stop_message(error),
            iv_schemes={key: scheme.value for key, scheme in done.iv_schemes.items()},
            no_ivs=done.no_ivs,
            receivers=done.receivers,
            unused_sas=done.unused_sas,
            key_notes=ends.key_notes,
        )
    return summary, error


@dataclass(frozen=True, slots=True)
class _Ends:
    """What the summary takes from the analyzer once every frame is read."""

    checks: Finished
    modes: dict[SaKey, SaMode]
    key_notes: tuple[str, ...]


def _analyze(
    path: str | os.PathLike[str],
    table: SaTable,
    options: Options,
    builder: SummaryBuilder,
    sink: RowSink,
    jobs: int,
    scheduler: str | None,
    progress: Progress | None,
    meter: Meter | None,
    name: str | None,
) -> tuple[Exception | None, _Ends]:
    """Stream the capture into the builder and the sink: the error that stopped the
    reading, if any, and what the summary takes from the analyzer, which is dropped on
    return."""
    analyzer = FrameAnalyzer(table, options, name or str(path))
    engine = Engine(analyzer, options, jobs, scheduler)
    try:
        read = _consume(path, engine, _Tee(builder, sink), progress, meter)
        return named(read, path, name), _Ends(
            analyzer.finished(), _modes(analyzer.sas, builder), tuple(analyzer.sas.notes)
        )
    finally:
        engine.close()
