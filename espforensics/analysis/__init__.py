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

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from espforensics.analysis.progress import COPIES, DONE, PLOTS, REPORTS, TABLES, Meter
from espforensics.analysis.run import (
    Discard,
    KeyPath,
    KeysArg,
    Progress,
    _cannot_write,
    _run,
    _table,
    capture_info,
    sha256_file,
)
from espforensics.analyzer.collector import fewer_collections
from espforensics.capture.regular import check_regular
from espforensics.errors import CaptureError, CaptureTruncated, InputError, OutputError
from espforensics.keys import SaTable
from espforensics.model.enums import Severity
from espforensics.model.options import CSV_ROWS, Options
from espforensics.render.registry import FILE_RENDERERS
from espforensics.report.content import Report, report_content
from espforensics.results.folder import (
    OUTPUT_FILES,
    PARTIAL,
    _publish,
    default_out_dir,
    load_summary,
    partial,
    prepare_out_dir,
)
from espforensics.results.summary import Summary
from espforensics.rewrite import CaptureCopies, check_targets, publish_copies, write_copies
from espforensics.tables.packets import PacketTableWriter, inner_layers, packets_frame
from espforensics.tables.rows import RowGroups
from espforensics.tables.small import write_finding_frames, write_findings_csv, write_sas_csv

if TYPE_CHECKING:  # pandas and pyarrow are imported by tables/packets.py only (house style rule 6)
    import pandas as pd
    import pyarrow as pa

    from espforensics.receiver.xfrm_stat import XfrmStatFiles  # read by cli/expect.py


@dataclass(frozen=True, slots=True)
class Analysis:
    """The result of ``analyze``: the packets table and its summary."""

    packets: pd.DataFrame
    summary: Summary


def summarize(
    path: str | os.PathLike[str],
    sas: KeysArg = None,
    options: Options | None = None,
    name: str | None = None,
) -> Summary:
    """Only the summary of a capture (no tables); raise ``CaptureError`` if it is damaged.
    ``name``: what the summary and errors call the capture when ``path`` is a copy of it."""
    summary, error = _run(path, sas, options, Discard(), name=name)
    if error is not None:
        raise error
    return summary


def analyze(
    path: str | os.PathLike[str], sas: KeysArg = None, options: Options | None = None
) -> Analysis:
    """Analyze a capture in memory; raise ``CaptureError`` if it is damaged."""
    tables: list[pa.Table] = []
    groups = RowGroups(tables.append)
    summary, error = _run(path, sas, options, groups)
    if error is not None:
        raise error
    groups.flush()
    return Analysis(packets_frame(tables), summary)


def _draw(out: Path, summary: Summary) -> Summary:
    # Imported here: matplotlib costs 36 MB of RSS, needed only once the tables are on disk.
    from espforensics.plots import PlotData, write_plots  # noqa: PLC0415
    from espforensics.plots.data import plot_frames  # noqa: PLC0415

    frames = plot_frames(partial(out, "packets.parquet"), summary)
    return replace(summary, plots=write_plots(PlotData(**frames), partial(out, "plots")))


def _write_reports(out: Path, summary: Summary, fail_on: Severity | None) -> Report:
    """The small outputs, under their ``.partial`` names; the report they say, built once."""
    write_findings_csv(partial(out, "findings.csv"), summary.finding_list)
    layers = inner_layers(partial(out, "packets.parquet")) if summary.inner_esp_packets else {}
    write_finding_frames(
        partial(out, "finding_frames.csv"),
        partial(out, "finding_frames.parquet"),
        summary.finding_list,
        layers,
    )
    write_sas_csv(partial(out, "sas.csv"), summary)
    report = report_content(summary, fail_on=fail_on, images=_plot_images(out, summary))
    for renderer in FILE_RENDERERS:  # report.txt, report.md, summary.json, report.html
        renderer.write(report, partial(out, renderer.file))
    return report


def _plot_images(out: Path, summary: Summary) -> dict[str, bytes]:
    """The PNG files of the plots drawn (still in plots.partial/), for report.html."""
    images = {}
    for plot in summary.plots:
        for name in plot.files:
            if name.endswith(".png"):
                images[name] = (partial(out, "plots") / Path(name).name).read_bytes()
    return images


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


def read_in_part(summary: Summary, error: Exception) -> bool:
    """True when ``error`` is the damage of a capture of which some was read: a frame,
    or the header of a file cut short (not a file that is no capture at all)."""
    if not isinstance(error, CaptureError) or not summary.error:
        return False
    return summary.capture.frames > 0 or isinstance(error, CaptureTruncated)


def _both(first: Progress, then: Progress | None) -> Progress:
    """Tell ``first``, then ``then`` (if any), how many bytes of the capture were read."""
    if then is None:
        return first

    def told(at: int) -> None:
        first(at)
        then(at)

    return told


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
    scheduler: str | None = None,
    name: str | None = None,
    damaged: Callable[[Summary], None] | None = None,
    xfrm_stat: XfrmStatFiles | None = None,
    fail_on: Severity | None = Severity.HIGH,
    report: Callable[[Report], None] | None = None,
) -> Summary:
    """Analyze a capture into ``out``; every file is written even if the capture is damaged.

    The files are renamed from ``NAME.partial`` into place once all are
    written (summary.json last). A bug met while reading the frames is
    raised after the same files are written, summary.json naming it; one
    met later leaves the ``.partial`` files it stopped.

    ``sha256``: the capture's digest when the caller has it already (a batch
    hashes every capture to decide what to skip), so the file is read once less.
    ``jobs``: processes; ``jobs - 1`` workers parse, decrypt and decode an
    capture's batches ahead (a compressed one decompressed once to a temporary file),
    ``scheduler``: a Dask scheduler whose workers do it instead
    (engine/pool.py). The outputs are the same for every value.
    ``copies``: the annotated and decrypted captures to write too (rewrite/),
    from a second pass over the capture; staged and renamed like the rest.
    ``packets_csv``: write packets.csv (True), not (False), or only for a
    capture of at most ``CSV_ROWS`` frames (None); packets.parquet always.
    ``meter``: told the frames read and each phase after (analysis/progress.py).
    ``name``: what the outputs and errors call the capture when ``path`` is a copy of
    it (``-``: standard input, capture/spool.py).
    ``damaged``: told the summary of what was read of a damaged capture (``read_in_part``),
    once every file is written, before its ``CaptureError`` is raised: the command line
    prints it as for a whole capture.
    ``xfrm_stat``: the receiver's /proc/net/xfrm_stat before and after the run,
    which the reports compare with the receiver model's prediction.
    ``report``: told the report the files were rendered from, once they are written (and
    before a damaged capture's ``CaptureError`` is raised): a caller printing it too
    renders that one rather than building it again. ``fail_on``: the ``--fail-on``
    threshold its checks are failed at (only the KTAP result lines read it).
    """
    check_regular(path)  # refused before the output folder is touched
    stage = meter.phase if meter is not None else lambda name: None
    table = _table(sas)
    out = Path(out)
    copies = copies or CaptureCopies()
    check_targets(copies, Path(path), force)
    if scheduler is not None:  # reached now, though a small capture's run may not ask it
        from espforensics.engine.dask_workers import check_scheduler  # noqa: PLC0415  # --scheduler only

        check_scheduler(scheduler)
    prepare_out_dir(out, force)
    try:
        csv_rows = {True: None, False: 0, None: CSV_ROWS}[packets_csv]
        size = os.path.getsize(path)  # with the bytes read, projects the frames (tables/packets.py)
        tables = PacketTableWriter(
            partial(out, "packets.parquet"), partial(out, "packets.csv"), csv_rows, size
        )
        with tables as writer:
            told = _both(writer.reached, progress)
            summary, error = _run(
                path, table, options, writer, told, sha256, jobs, meter, scheduler, name
            )
            stage(TABLES)  # the last row groups are written as the block ends
        if xfrm_stat is not None:
            from espforensics.receiver.xfrm_stat import observed  # noqa: PLC0415  # --xfrm-stat-*

            hosts = [h.dst for h in summary.receivers]
            summary = replace(summary, observed=observed(xfrm_stat, hosts))
        parquet = partial(out, "packets.parquet")
        if copies.targets():
            stage(COPIES)
        with fewer_collections():  # the copies make a few objects a frame, and keep none
            error = _write_copies(copies, Path(path), parquet, summary, table, error)
        if plots:
            stage(PLOTS)
            summary = _draw(out, summary)
        stage(REPORTS)
        with fewer_collections():  # a row per SA: tens of thousands of objects for a scan
            built = _write_reports(out, summary, fail_on)
        publish_copies(copies)
        _publish(out)
        stage(DONE)
        if report is not None:
            report(built)
        if error is not None:
            if damaged is not None and read_in_part(summary, error):
                damaged(summary)
            raise error
    except OSError as exc:  # the capture's are CaptureError: this is an output refused
        raise OutputError(str(out), _cannot_write(exc)) from exc
    return summary


def summary_of(
    path: str | os.PathLike[str],
    sas: KeysArg = None,
    options: Options | None = None,
    name: str | None = None,
) -> Summary:
    """A capture's summary, or an output folder's stored one (``name``: as ``summarize``)."""
    return load_summary(path) if Path(path).is_dir() else summarize(path, sas, options, name)


__all__ = [  # the library's runs and what their callers need (espforensics/__init__.py maps here)
    "OUTPUT_FILES",
    "PARTIAL",
    "Analysis",
    "KeyPath",
    "KeysArg",
    "Progress",
    "analyze",
    "analyze_to_dir",
    "capture_info",
    "default_out_dir",
    "load_summary",
    "partial",
    "prepare_out_dir",
    "read_in_part",
    "sha256_file",
    "summarize",
    "summary_of",
]
