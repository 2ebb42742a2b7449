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
from espforensics.render.content import report_content
from espforensics.render.registry import FILE_RENDERERS
from espforensics.rewrite import CaptureCopies, check_targets, publish_copies, write_copies
from espforensics.summary import CaptureInfo, Summary, SummaryBuilder
from espforensics.tables import (
    PacketTableWriter,
    RowGroups,
    packets_frame,
    plot_frames,
    write_findings_csv,
    write_sas_csv,
)

if TYPE_CHECKING:  # pandas and pyarrow are imported by tables.py only (house style rule 6)
    import pandas as pd
    import pyarrow as pa

Progress = Callable[[int], None]  # called with uncompressed bytes read so far
KeysArg = SaTable | Sequence[str | os.PathLike[str]] | None


@dataclass(frozen=True, slots=True)
class Analysis:
    """The result of ``analyze``: the packets table and its summary."""

    packets: pd.DataFrame
    summary: Summary


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes as stored (compressed or not)."""
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
    return load_sas(list(sas))


def _stream(
    path: str | os.PathLike[str], engine: Engine, progress: Progress | None
) -> Iterator[Row]:
    with open_capture(path) as capture:
        frames = shown = 0
        for row in engine.iter_rows(capture):
            frames += 1 if isinstance(row, PacketRecord) else row.rows
            if progress is not None and frames - shown >= 4096:
                shown = frames
                progress(capture.bytes_read)
            yield row


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
) -> tuple[Summary, Exception | None]:
    """Stream the capture through the pipeline into ``sink``; the summary and the error, if any."""
    table = _table(sas)
    info = _info_later(path, sha256)
    builder = SummaryBuilder()
    options = options or Options()
    analyzer = FrameAnalyzer(table, options, str(path))
    engine = Engine(analyzer, options, jobs)
    try:
        with fewer_collections():
            error = _consume(_stream(path, engine, progress), builder, sink)
    finally:
        engine.close()
    message = _stop_message(error)
    schemes = _iv_schemes(analyzer)
    modes = _modes(analyzer.sas, builder)
    return builder.finish(info(), analyzer.findings, modes, message, schemes), error


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

    With ``force`` only the files espforensics writes are removed (with
    the ``.partial`` ones of an unfinished run and a bug's traceback),
    never anything else a user keeps in that folder.
    """
    if out.exists() and not out.is_dir():
        raise OutputExistsError(str(out), "exists and is not a folder")
    if out.exists():
        if not force:
            raise OutputExistsError(str(out), "output folder exists; use --force to overwrite it")
        for name in OUTPUT_FILES:
            _remove(out / name)
            _remove(partial(out, name))
        _remove(out / TRACEBACK_FILE)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputExistsError(str(out), f"cannot create output folder: {exc.strerror}") from exc


def _draw(out: Path, summary: Summary) -> Summary:
    # Imported here: matplotlib costs 36 MB of RSS, needed only once the tables are on disk.
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
    """Rename every output written into place, in ``OUTPUT_FILES`` order (summary.json last)."""
    for name in OUTPUT_FILES:
        if partial(out, name).exists():
            os.replace(partial(out, name), out / name)


def analyze_to_dir(
    path: str | os.PathLike[str],
    sas: KeysArg,
    out: Path,
    *,
    force: bool = False,
    options: Options | None = None,
    progress: Progress | None = None,
    plots: bool = True,
    sha256: str | None = None,
    jobs: int = 1,
    copies: CaptureCopies | None = None,
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
    """
    table = _table(sas)
    copies = copies or CaptureCopies()
    check_targets(copies, Path(path), force)
    prepare_out_dir(out, force)
    try:
        tables = PacketTableWriter(partial(out, "packets.parquet"), partial(out, "packets.csv"))
        with tables as writer:
            summary, error = _run(path, table, options, writer.write_rows, progress, sha256, jobs)
        parquet = partial(out, "packets.parquet")
        write_copies(copies, Path(path), parquet, summary.finding_list, table, error is not None)
        if plots:
            summary = _draw(out, summary)
        _write_reports(out, summary)
        publish_copies(copies)
        _publish(out)
        if error is not None:
            raise error
    except OSError as exc:  # the capture's are CaptureError: this is an output refused
        raise OutputError(str(out), _cannot_write(exc)) from exc
    return summary


def load_summary(folder: Path) -> Summary:
    """The summary of an earlier ``analyze`` in ``folder``."""
    path = folder / "summary.json"
    try:
        return Summary.from_json(json.loads(path.read_text()))
    except OSError as exc:
        raise InputError(
            str(folder), f"not an espforensics output folder ({exc.strerror})"
        ) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(str(path), f"not a summary.json of this version: {exc}") from exc


def summary_of(path: Path, sas: KeysArg = None, options: Options | None = None) -> Summary:
    """A capture's summary, or an output folder's stored one."""
    return load_summary(path) if path.is_dir() else summarize(path, sas, options)
