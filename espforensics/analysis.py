"""The library entry points: analyze a capture in memory or into a folder.

In: a capture path, SAs (an ``SaTable``, or key file paths) and
``Options``. Out: ``analyze`` returns an ``Analysis`` (``.packets`` a
pandas DataFrame, ``.summary`` a ``Summary``); ``analyze_to_dir`` streams
the tables into a folder and returns the ``Summary``. Raises
``InputError`` subclasses: ``CaptureError`` (after writing everything read
before the damage), ``KeyFileError``, ``OutputExistsError``,
``OutputError`` (a file system refused an output). A bug met
while the frames are read is raised too, after everything read before it
is written, with ``summary.json`` saying so.

``analyze_to_dir`` writes each output as ``NAME.partial`` and renames them
all into place only at the end, ``summary.json`` last: a run that is
killed or interrupted leaves no file under a final name.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from espforensics.capture import open_capture
from espforensics.capture.regular import check_regular
from espforensics.checks.iv_derivation import IvDerivationCheck
from espforensics.engine import Engine, Row
from espforensics.errors import (
    TRACEBACK_FILE,
    CaptureError,
    EspForensicsError,
    InputError,
    OutputError,
    OutputExistsError,
    scrub,
)
from espforensics.keys import SaTable, load_sas
from espforensics.model import PacketRecord
from espforensics.pipeline import FrameAnalyzer, Options, fewer_collections
from espforensics.progress import COPIES, DONE, PLOTS, REPORTS, TABLES, Meter
from espforensics.render.content import report_content
from espforensics.render.registry import FILE_RENDERERS
from espforensics.rewrite import CaptureCopies, check_targets, publish_copies, write_copies
from espforensics.small_tables import write_findings_csv, write_sas_csv
from espforensics.summary import CaptureInfo, Summary, SummaryBuilder
from espforensics.tables import (
    CSV_ROWS,
    PacketTableWriter,
    RowGroups,
    packets_frame,
)

if TYPE_CHECKING:  # pandas and pyarrow are imported by tables.py only (house style rule 6)
    import pandas as pd
    import pyarrow as pa

Progress = Callable[[int], None]  # called with uncompressed bytes read so far
KeyPath = str | os.PathLike[str]
# One key file path or several, as the standard library takes paths (a str is one path).
KeysArg = SaTable | KeyPath | Sequence[KeyPath] | None


@dataclass(frozen=True, slots=True)
class Analysis:
    """The result of ``analyze``: the packets table and its summary."""

    packets: pd.DataFrame
    summary: Summary


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes as stored (compressed or not)."""
    check_regular(path)  # /dev/zero would be hashed forever, a FIFO would block
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise CaptureError(str(path), f"cannot open: {exc.strerror}") from exc
    return digest.hexdigest()


def _table(sas: KeysArg) -> SaTable:
    if sas is None:
        return SaTable()
    if isinstance(sas, SaTable):
        return sas
    return load_sas(sas if isinstance(sas, str | os.PathLike) else list(sas))


def _stream(
    path: str | os.PathLike[str],
    engine: Engine,
    progress: Progress | None,
    meter: Meter | None = None,
) -> Iterator[Row]:
    with open_capture(path) as capture:
        frames = shown = 0
        for row in engine.iter_rows(capture):
            frames += 1 if isinstance(row, PacketRecord) else row.rows
            if frames - shown >= 4096:
                shown = frames
                if progress is not None:
                    progress(capture.bytes_read)
                if meter is not None:
                    meter.reading(frames, capture.bytes_read)
            yield row
        if meter is not None:
            meter.reading(frames, capture.bytes_read)


def _consume(
    rows: Iterator[Row], builder: SummaryBuilder, sink: Callable[[Row], None]
) -> Exception | None:
    """Feed every row to the builder and the sink; the error that ended it, if any.

    A damaged capture or a bad secrets block (``InputError``) ends it, and
    so does a bug: either way what was read before is kept, and the caller
    raises the error once it is written down.
    """
    try:
        for row in rows:
            if isinstance(row, PacketRecord):
                builder.observe(row)
            else:
                builder.observe_rows(row)
            sink(row)
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


def capture_info(path: str | os.PathLike[str], sha256: str | None = None) -> CaptureInfo:
    """Path, SHA-256 (hashed unless the caller knows it) and size of the capture file."""
    sha = sha256 or sha256_file(path)
    return CaptureInfo(str(path), sha, os.path.getsize(path))


def _info_later(path: str | os.PathLike[str], sha256: str | None) -> Callable[[], CaptureInfo]:
    """Start hashing the capture on a thread; the call that waits for its ``CaptureInfo``.

    hashlib releases the GIL on large updates, so the digest (2 us per
    1.3 kB frame) is computed on another core while the frames are analyzed.
    """
    if sha256 is not None:
        info = capture_info(path, sha256)
        return lambda: info
    done: list[CaptureInfo | Exception] = []

    def work() -> None:
        try:
            done.append(capture_info(path))
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


def _modes(table: SaTable, builder: SummaryBuilder) -> dict[tuple[int, str, str], str]:
    """The mode each seen SA's key file states, by (spi, src, dst)."""
    modes: dict[tuple[int, str, str], str] = {}
    if not any(sa.mode for sa in table):  # keyless, or no key file says: skip the lookups
        return modes
    for spi, src, dst in builder.sa_keys():
        sa = table.lookup(spi, ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed)
        if sa is not None and sa.mode:
            modes[(spi, src, dst)] = sa.mode
    return modes


def _iv_schemes(analyzer: FrameAnalyzer) -> dict[tuple[int, str, str], str]:
    """Each SA's IV scheme as the IV derivation check named it, by (spi, src, dst)."""
    for check in analyzer.checks:
        if isinstance(check, IvDerivationCheck):
            return {key: str(scheme) for key, scheme in check.schemes().items()}
    return {}


def _run(
    path: str | os.PathLike[str],
    sas: KeysArg,
    options: Options | None,
    sink: Callable[[Row], None],
    progress: Progress | None = None,
    sha256: str | None = None,
    jobs: int = 1,
    meter: Meter | None = None,
) -> tuple[Summary, Exception | None]:
    """Stream the capture through the pipeline into ``sink``; the summary and the error, if any."""
    check_regular(path)  # before the hashing thread starts: it would never end on /dev/zero
    table = _table(sas)
    info = _info_later(path, sha256)
    builder = SummaryBuilder()
    options = options or Options()
    analyzer = FrameAnalyzer(table, options, str(path))
    engine = Engine(analyzer, options, jobs)
    try:
        with fewer_collections():
            error = _consume(_stream(path, engine, progress, meter), builder, sink)
    finally:
        engine.close()
    message = _stop_message(error)
    schemes = _iv_schemes(analyzer)
    summary = builder.finish(
        info(),
        analyzer.findings,
        _modes(analyzer.sas, builder),
        message,
        iv_schemes=schemes,
        unused_sas=analyzer.unused_sas,
        key_notes=tuple(analyzer.sas.notes),
    )
    return summary, error


def summarize(
    path: str | os.PathLike[str], sas: KeysArg = None, options: Options | None = None
) -> Summary:
    """Only the summary of a capture (no tables); raise ``CaptureError`` if it is damaged."""
    summary, error = _run(path, sas, options, lambda rec: None)
    if error is not None:
        raise error
    return summary


def analyze(
    path: str | os.PathLike[str], sas: KeysArg = None, options: Options | None = None
) -> Analysis:
    """Analyze a capture in memory; raise ``CaptureError`` if it is damaged."""
    tables: list[pa.Table] = []
    groups = RowGroups(tables.append)
    summary, error = _run(path, sas, options, groups.write_rows)
    if error is not None:
        raise error
    groups.flush()
    return Analysis(packets_frame(tables), summary)


# In the order they are renamed into place: summary.json, the mark of a finished run, last.
OUTPUT_FILES = (
    "packets.parquet",
    "packets.csv",
    "sas.csv",
    "findings.csv",
    "report.txt",
    "report.md",
    "report.html",
    "plots",
    "summary.json",
)
PARTIAL = ".partial"  # suffix of an output until the run is finished


def partial(out: Path, name: str) -> Path:
    """Where output ``name`` is written before the run is finished."""
    return out / f"{name}{PARTIAL}"


def _remove(target: Path) -> None:
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()


def default_out_dir(path: str | os.PathLike[str]) -> Path:
    """``CAPTURE.espforensics`` beside the capture."""
    return Path(f"{os.fspath(path)}.espforensics")


def prepare_out_dir(out: Path, force: bool) -> None:
    """Create ``out``; refuse an existing one unless ``force``.

    With ``force`` only the ``.partial`` files of an unfinished run and a
    bug's traceback are removed now; the earlier outputs stay until this
    run's replace them (``_publish``), so a run that stops early (a bad
    input, a bug, Ctrl-C) never leaves the folder with nothing in it.
    Nothing else a user keeps in that folder is touched.
    """
    if out.exists() and not out.is_dir():
        raise OutputExistsError(str(out), "exists and is not a folder")
    if out.exists():
        if not force:
            raise OutputExistsError(str(out), "output folder exists; use --force to overwrite it")
        for name in OUTPUT_FILES:
            _remove(partial(out, name))
        _remove(out / TRACEBACK_FILE)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputExistsError(str(out), f"cannot create output folder: {exc.strerror}") from exc


def _draw(out: Path, summary: Summary) -> Summary:
    # Imported here: matplotlib costs 36 MB of RSS, needed only once the tables are on disk.
    from espforensics.plotdata import plot_frames  # noqa: PLC0415
    from espforensics.plots import PlotData, write_plots  # noqa: PLC0415

    frames = plot_frames(partial(out, "packets.parquet"), summary)
    return replace(summary, plots=write_plots(PlotData(**frames), partial(out, "plots")))


def _write_reports(out: Path, summary: Summary) -> None:
    """The small outputs, under their ``.partial`` names."""
    write_findings_csv(partial(out, "findings.csv"), summary.finding_list)
    write_sas_csv(partial(out, "sas.csv"), summary)
    report = report_content(summary, images=_plot_images(out, summary))
    for renderer in FILE_RENDERERS:  # report.txt, report.md, summary.json, report.html
        partial(out, renderer.file).write_text(renderer.render(report), encoding="utf-8")


def _plot_images(out: Path, summary: Summary) -> dict[str, bytes]:
    """The PNG files of the plots drawn (still in plots.partial/), for report.html."""
    images = {}
    for plot in summary.plots:
        for name in plot.files:
            if name.endswith(".png"):
                images[name] = (partial(out, "plots") / Path(name).name).read_bytes()
    return images


def _publish(out: Path) -> None:
    """Rename every output written into place, in ``OUTPUT_FILES`` order (summary.json last).

    An earlier run's outputs (``--force``) are replaced here, not before:
    its summary.json goes first, so a stop midway leaves no summary.json
    (an unfinished run, docs/outputs.md), and an earlier output this run
    did not write (``plots`` after ``--no-plots``) is removed.
    """
    _remove(out / "summary.json")
    for name in OUTPUT_FILES:
        if partial(out, name).exists():
            if (out / name).is_dir():  # os.replace cannot replace a folder that holds files
                shutil.rmtree(out / name)
            os.replace(partial(out, name), out / name)
        else:
            _remove(out / name)


def _write_copies(
    copies: CaptureCopies,
    path: Path,
    parquet: Path,
    summary: Summary,
    table: SaTable,
    error: Exception | None,
) -> Exception | None:
    """Write the copies; the error to raise once every output is written, if any.

    A copy that cannot be written (its file system refuses it, or the
    capture changed since the analysis) is left out, and the analysis's
    own outputs are still written and published: a run never stops with
    only ``.partial`` files where an earlier run's outputs were.
    """
    try:
        write_copies(copies, path, parquet, summary.finding_list, table, error is not None)
    except InputError as exc:  # the copy's .partial file is already discarded
        return error or exc
    return error


def analyze_to_dir(
    path: str | os.PathLike[str],
    sas: KeysArg,
    out: str | os.PathLike[str],
    *,
    force: bool = False,
    options: Options | None = None,
    progress: Progress | None = None,
    plots: bool = True,
    sha256: str | None = None,
    jobs: int = 1,
    copies: CaptureCopies | None = None,
    packets_csv: bool | None = None,
    meter: Meter | None = None,
) -> Summary:
    """Analyze a capture into ``out``; every file is written even if the capture is damaged.

    The files are renamed from ``NAME.partial`` into place once all are
    written (summary.json last). A bug met while reading the frames is
    raised after the same files are written, summary.json naming it; one
    met later leaves the ``.partial`` files it stopped.

    ``sha256``: the capture's digest when the caller has it already (a batch
    hashes every capture to decide what to skip), so the file is read once less.
    ``jobs``: threads that decrypt the steady lane's packets (engine/run.py).
    The outputs are the same for every value.
    ``copies``: the annotated and decrypted captures to write too (rewrite/),
    from a second pass over the capture; staged and renamed like the rest.
    ``packets_csv``: write packets.csv (True), not (False), or only for a
    capture of at most ``CSV_ROWS`` frames (None); packets.parquet always.
    ``meter``: told the frames read and each phase after (progress.py).
    """
    check_regular(path)  # refused before the output folder is touched
    stage = meter.phase if meter is not None else lambda name: None
    table = _table(sas)
    out = Path(out)
    copies = copies or CaptureCopies()
    check_targets(copies, Path(path), force)
    prepare_out_dir(out, force)
    try:
        csv_rows = {True: None, False: 0, None: CSV_ROWS}[packets_csv]
        tables = PacketTableWriter(
            partial(out, "packets.parquet"), partial(out, "packets.csv"), csv_rows
        )
        with tables as writer:
            summary, error = _run(
                path, table, options, writer.write_rows, progress, sha256, jobs, meter
            )
            stage(TABLES)  # the last row groups are written as the block ends
        parquet = partial(out, "packets.parquet")
        if copies.targets():
            stage(COPIES)
        error = _write_copies(copies, Path(path), parquet, summary, table, error)
        if plots:
            stage(PLOTS)
            summary = _draw(out, summary)
        stage(REPORTS)
        _write_reports(out, summary)
        publish_copies(copies)
        _publish(out)
        stage(DONE)
        if error is not None:
            raise error
    except OSError as exc:  # the capture's are CaptureError: this is an output refused
        raise OutputError(str(out), _cannot_write(exc)) from exc
    return summary


def load_summary(folder: str | os.PathLike[str]) -> Summary:
    """The summary of an earlier ``analyze`` in ``folder``."""
    path = Path(folder) / "summary.json"
    try:
        return Summary.from_json(json.loads(path.read_text()))
    except OSError as exc:
        raise InputError(
            str(folder), f"not an espforensics output folder ({exc.strerror})"
        ) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(str(path), f"not a summary.json of this version: {exc}") from exc


def summary_of(
    path: str | os.PathLike[str], sas: KeysArg = None, options: Options | None = None
) -> Summary:
    """A capture's summary, or an output folder's stored one."""
    return load_summary(path) if Path(path).is_dir() else summarize(path, sas, options)
