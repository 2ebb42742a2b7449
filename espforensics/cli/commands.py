"""The bodies of the commands cli/__init__.py declares: analyze, compare and batch (report's is
cli/report.py, which these share the report and the exit with).

In: a command's option values, as typer parsed them for cli/__init__.py's declaration.
Out: the command's outputs, its lines on stdout and stderr, and its exit
(cli/__init__.py's docstring lists the codes). Raises only ``typer.Exit`` and typer's
usage error. cli/__init__.py imports this module inside each command, once typer has
parsed the line: it loads the analysis (numpy, pyarrow, cryptography: most of
a run's start-up), which ``--help``, ``--version`` and ``completion`` never
need (docs/performance.md, start-up).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from time import monotonic

import typer

from espforensics.analysis import (
    analyze_to_dir,
    default_out_dir,
    summary_of,
)
from espforensics.analysis.progress import LineMeter, Meter
from espforensics.capture.spool import STDIN, Spooled
from espforensics.cli.errors import _guarded
from espforensics.cli.expect import assertions, settle, xfrm_stat
from espforensics.cli.options import CompareFormat, FailOn, Format, selection
from espforensics.cli.progress import _BarMeter, _batch_progress
from espforensics.cli.report import _batch_exit, _exit_gate, _show, _threshold, _usage
from espforensics.engine.workers import cap_workers, usable_cores
from espforensics.errors import EspForensicsError
from espforensics.model.enums import SEVERITY_RANK, Severity, Unchecked
from espforensics.model.options import CSV_ROWS, Options
from espforensics.report.content import Report
from espforensics.report.narrative import worst_severity
from espforensics.results.summary import Summary
from espforensics.rewrite import CaptureCopies


def analyze_command(
    *,
    capture: Path,
    sa: list[str] | None,
    out: Path | None,
    force: bool,
    natt_port: list[int] | None,
    fmt: Format,
    fail_on: FailOn,
    unchecked: Unchecked,
    no_plots: bool,
    quiet: bool,
    jobs: int,
    annotate: Path | None,
    decrypted: Path | None,
    scheduler: str | None,
    packets_csv: bool | None,
    expect: str | None,
    xfrm_stat_before: Path | None,
    xfrm_stat_after: Path | None,
    xfrm_stat_host: str | None,
    xfrm_state_stats: Path | None,
    spi: list[str] | None,
    frames: str | None,
) -> None:
    """``espforensics analyze``: analyze CAPTURE into its output folder, print, exit."""
    expected = assertions(expect)
    stat = xfrm_stat(xfrm_stat_before, xfrm_stat_after, xfrm_stat_host, xfrm_state_stats)
    if scheduler is not None:  # before stdin is read or a line printed: whatever the size
        from espforensics.engine.dask_workers import check_scheduler  # noqa: PLC0415  # --scheduler only

        _guarded(lambda: check_scheduler(scheduler))
    options = Options(natt_ports=frozenset(natt_port or (4500,)), select=selection(spi, frames))
    copies = CaptureCopies(annotate=annotate, decrypted=decrypted)
    printed_only = out is not None and str(out) == STDIN
    damaged: list[Summary] = []  # what was read of a damaged capture, its files written
    reports: list[Report] = []  # the report its files say, printed as they say it
    with ExitStack() as stack:
        path, name = _capture_path(capture, stack)
        if printed_only:  # a folder of our own, removed with the copy of stdin, if any
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="espforensics-"))
            out_dir = Path(folder) / "out"
        else:
            out_dir = out if out is not None else _default_out(capture)
        _streamed_notice(path, jobs, scheduler, quiet)
        meter, stop = _meter(path, quiet)
        try:
            summary = _guarded(
                lambda: analyze_to_dir(
                    path,
                    sa or [],
                    out_dir,
                    force=force,
                    options=options,
                    meter=meter,
                    plots=not (no_plots or printed_only),
                    jobs=_threads(jobs, quiet),
                    copies=copies,
                    packets_csv=False if printed_only else packets_csv,
                    scheduler=scheduler,
                    name=name,
                    damaged=damaged.append,
                    fail_on=_threshold(fail_on),
                    report=reports.append,
                    xfrm_stat=stat,
                ),
                None if printed_only else out_dir,
                stop,
                _interrupted_analysis(name or str(capture), printed_only),
            )
        except typer.Exit:  # the error is on stderr; a damaged capture's report still follows
            if not damaged:
                raise
            summary = damaged[0]
        for note in summary.key_notes:  # a key file's line skipped, policy blocks ignored
            typer.echo(f"espforensics: warning: {note}", err=True)
        csv_left_out = not (out_dir / "packets.csv").exists()
        if packets_csv is None and not quiet and not printed_only and csv_left_out:
            _notice(
                f"packets.csv not written: {summary.capture.frames:,} frames, more than "
                f"{CSV_ROWS:,}; packets.parquet has every row (--csv writes it anyway)"
            )
        # before a folder of --out - is removed: a view may read its tables
        if not quiet and not (expected and fmt is Format.KTAP):
            _show(summary, fmt, fail_on, out_dir, reports[0] if reports else None)
            if fmt is Format.SUMMARY:
                if not printed_only:
                    typer.echo(f"  outputs: {out_dir}/")
                for what, target in copies.targets():
                    typer.echo(f"  {what}: {target}")
    if damaged:  # an input error, whatever was found in what was read
        raise typer.Exit(2)
    settle(summary, expected, fmt, quiet, lambda: _exit_gate(summary, fail_on, unchecked))


def _exit_for(worst: Severity | None, fail_on: FailOn) -> None:
    """Exit 1 when the worst finding is at least as severe as --fail-on."""
    if fail_on is FailOn.NEVER or worst is None:
        return
    if SEVERITY_RANK[worst] >= SEVERITY_RANK[Severity(fail_on.value)]:
        raise typer.Exit(1)


def _notice(line: str) -> None:
    """A line on stderr that is neither an error nor progress (a capped --jobs)."""
    typer.echo(f"espforensics: {line}", err=True)


def _threads(jobs: int, quiet: bool) -> int:
    """``analyze --jobs``, capped at the usable cores: more processes only wait for one."""
    workers = cap_workers(jobs, None, usable_cores())
    if workers.why and not quiet:
        _notice(workers.notice())
    return workers.count


def _streamed_notice(capture: Path, jobs: int, scheduler: str | None, quiet: bool) -> None:
    """One line when --jobs or --scheduler asks for workers and CAPTURE is compressed: it
    is decompressed once for local workers (capture/unpack.py); a cluster's workers
    cannot take its batches, read as a stream (engine/pool.py)."""
    if quiet or (jobs <= 1 and scheduler is None):
        return
    from espforensics.capture import open_capture  # noqa: PLC0415 (numpy: only when asked)

    try:
        with open_capture(capture) as found:
            kind = f"{found.compression}-compressed" if found.compression else found.format
            if not found.compression:  # pcap or pcapng: the workers read its batches
                return
    except EspForensicsError:  # the run itself says what is wrong with the file
        return
    if scheduler is None:  # decompressed once for the workers (capture/unpack.py)
        _notice(
            f"{capture}: {kind}, decompressed once to a temporary file for the workers "
            f"(if that fails, read as a stream: --jobs {jobs} decrypts on threads)"
        )
        return
    _notice(
        f"{capture}: {kind}, read as a stream: no worker takes its batches "
        "(--scheduler is not used)"
    )


def _meter(capture: Path, quiet: bool) -> tuple[Meter | None, Callable[[], None]]:
    """Progress on stderr: a bar on a terminal, else a line every 10 s (CI logs keep it)."""
    if quiet:
        return None, lambda: None
    try:
        size: int | None = os.path.getsize(capture)
    except OSError:
        size = None
    if not sys.stderr.isatty():
        line = LineMeter(lambda text: typer.echo(text, err=True), monotonic, size)
        return line, lambda: None
    bar = _BarMeter(size)
    return bar, bar.stop


def _default_out(capture: Path) -> Path:
    """``CAPTURE.espforensics`` beside the capture; ``stdin.espforensics`` here for ``-``."""
    return Path("stdin.espforensics") if str(capture) == STDIN else default_out_dir(capture)


def _capture_path(capture: Path, stack: ExitStack) -> tuple[Path, str | None]:
    """The file to read and the name the outputs give it: ``-`` is standard input, copied
    once to a temporary file that ``stack`` removes (capture/spool.py)."""
    if str(capture) != STDIN:
        return capture, None
    spooled = _guarded(lambda: Spooled(sys.stdin.buffer))
    stack.callback(spooled.close)
    return Path(spooled.path), STDIN


def _interrupted_analysis(capture: str, printed_only: bool) -> str:
    """What a Ctrl-C of ``analyze`` stopped, and what it left."""
    left = "nothing was written" if printed_only else "no output was published"
    return f"espforensics: interrupted: the analysis of {capture} stopped; {left}"


def compare_command(
    *,
    before: Path,
    after: Path,
    sa: list[str] | None,
    sa_before: list[str] | None,
    sa_after: list[str] | None,
    natt_port: list[int] | None,
    fmt: CompareFormat,
    fail_on: FailOn,
) -> None:
    """``espforensics compare``: the two sides' summaries, compared and printed."""
    # Imported here, as in batch: a run of analyze (start-up, docs/performance.md) needs neither.
    from espforensics.render.compare import (  # noqa: PLC0415
        render_comparison,
        render_comparison_json,
        render_comparison_md,
    )
    from espforensics.report.compare import compare as compare_summaries  # noqa: PLC0415

    options = Options(natt_ports=frozenset(natt_port or (4500,)))
    keys_before = [*(sa or []), *(sa_before or [])]
    keys_after = [*(sa or []), *(sa_after or [])]
    if str(before) == str(after) == STDIN:
        _usage("standard input (-) can be BEFORE or AFTER, not both")
    with ExitStack() as stack:
        (first, first_name), (then, then_name) = (_capture_path(p, stack) for p in (before, after))
        sides = _guarded(
            lambda: (
                summary_of(first, keys_before, options, first_name),
                summary_of(then, keys_after, options, then_name),
            )
        )
    cmp = compare_summaries(*sides, names=(str(before), str(after)))  # as typed
    renderers = {
        CompareFormat.TEXT: render_comparison,
        CompareFormat.MARKDOWN: render_comparison_md,
        CompareFormat.JSON: render_comparison_json,
    }
    typer.echo(renderers[fmt](cmp), nl=False)
    _exit_for(worst_severity(sides[1]), fail_on)


def batch_command(
    *,
    paths: list[str],
    sa: list[str] | None,
    out: Path,
    jobs: int | None,
    force: bool,
    scheduler: str | None,
    natt_port: list[int] | None,
    fail_on: FailOn,
    unchecked: Unchecked,
    no_plots: bool,
    quiet: bool,
) -> None:
    """``espforensics batch``: analyze many captures, print report.txt, exit as the worst."""
    from espforensics.batch.run import run_batch  # noqa: PLC0415 (as in compare)

    update, stop = _batch_progress(quiet)
    try:
        result = _guarded(
            lambda: run_batch(
                paths,
                [str(p) for p in sa or []],
                out,
                jobs=jobs,
                force=force,
                scheduler=scheduler,
                natt_ports=tuple(natt_port or (4500,)),
                plots=not no_plots,
                progress=update,
                notice=None if quiet else _notice,
            ),
            out,
        )
    finally:
        stop()
    for skip in result.passed_over:  # one line each, even with --quiet: a capture not read
        typer.echo(f"espforensics: skipped: {skip.path}: {skip.reason}", err=True)
    if not quiet:
        typer.echo((out / "report.txt").read_text(), nl=False)
        if result.skipped:  # the run's, not the archive's: report.txt is the same either way
            _notice(
                f"{result.skipped} of {len(result.rows)} captures taken from an earlier run "
                f"(manifest.json; --force redoes them)"
            )
    errors = sum(r.status == "error" for r in result.rows)
    _batch_exit(out, [r.name for r in result.rows], errors, fail_on, unchecked)
