"""The ``espforensics`` command line: parse options, call the library, map errors.

In: argv. Out: files in the output folder, text on stdout, progress on
stderr when it is a terminal. Exit codes (gate.py): 0 done and clean, 1 a
finding at or above ``--fail-on``, 2 usage or input error (one line
``espforensics: error: <file>: <what>``), 3 the key file is wrong (only
``key_mismatch`` findings fail), 4 no ESP packet verified (``--unchecked``
chooses when), 70 a bug in espforensics (one
line naming the file that holds its traceback, without any value), 130
Ctrl-C. Nothing imports this module; it is the only module that imports
typer and rich.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from time import monotonic
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer.core import TyperCommand, TyperGroup

from espforensics.analysis import (
    analyze_to_dir,
    default_out_dir,
    load_summary,
    summary_of,
)
from espforensics.batch.run import BatchProgress, run_batch
from espforensics.batch.task import CaptureResult
from espforensics.compare import compare as compare_summaries
from espforensics.errors import (
    EXIT_INTERNAL,
    INTERRUPTED,
    TRACEBACK_FILE,
    EspForensicsError,
    InternalError,
    bug_report,
)
from espforensics.gate import Unchecked, exit_code, worst_code
from espforensics.model import SEVERITY_RANK, Severity
from espforensics.narrative import worst_severity
from espforensics.pipeline import Options
from espforensics.progress import DONE, READING, LineMeter, Meter, rate
from espforensics.render.compare import (
    render_comparison,
    render_comparison_json,
    render_comparison_md,
)
from espforensics.render.content import report_content
from espforensics.render.registry import RENDERERS
from espforensics.rewrite import CaptureCopies
from espforensics.summary import TOOL_VERSION, Summary
from espforensics.tables import CSV_ROWS
from espforensics.workers import cap_workers, usable_cores

if TYPE_CHECKING:  # typer vendors its own click: the help types come from there
    from typer._click import Context, HelpFormatter


class _UsageLine(ClickException):
    """A usage error as one line, like every other error (Click prints usage, hint, error)."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        typer.echo(f"espforensics: error: {self.message}", err=True)


def _one_line(exc: UsageError) -> _UsageLine:
    """``analyze: No such option: --bogus (see espforensics analyze --help)``."""
    what = exc.format_message().rstrip(".")
    if exc.ctx is None:
        return _UsageLine(what)
    path = exc.ctx.command_path
    command = exc.ctx.command.name if exc.ctx.parent is not None else None
    return _UsageLine(
        f"{command}: {what}; see {path} --help" if command else f"{what}; see {path} --help"
    )


class _Group(TyperGroup):
    """typer's group, its usage errors (and its commands') printed as one line, exit 2."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except NoArgsIsHelpError:
            raise  # `espforensics` alone prints the help
        except UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: Context) -> object:
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise
        except UsageError as exc:
            raise _one_line(exc) from None


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    pretty_exceptions_enable=False,  # never print locals: they may hold keys
    no_args_is_help=True,
    rich_markup_mode=None,  # help texts hold [default: ...] that is not markup
    help="Offline forensic analysis of IPsec ESP captures.",
)
T = TypeVar("T")


class _Command(TyperCommand):
    """typer's help, with the metavars of docs/cli.md where typer writes its own.

    typer prints ``analyze [OPTIONS] {CAPTURE}`` and ``CAPTURE <path>``;
    this prints ``analyze [OPTIONS] CAPTURE`` and ``CAPTURE``.
    """

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [
            p.metavar for p in self.get_params(ctx) if p.param_type_name == "argument" and p.metavar
        ]

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        args, opts = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                args.append((param.metavar or record[0], record[1]))
            else:
                opts.append(record)
        for title, rows in (("Arguments", args), ("Options", opts)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class Format(StrEnum):
    """The stdout choices of render/registry.py (a test keeps the two the same)."""

    SUMMARY = "summary"
    TEXT = "text"
    MARKDOWN = "markdown"
    JSON = "json"
    KTAP = "ktap"


class CompareFormat(StrEnum):
    """compare has no short summary: its table is already short."""

    TEXT = "text"
    MARKDOWN = "markdown"
    JSON = "json"


class FailOn(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"
    NEVER = "never"


SaOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--sa",
        metavar="KEYS",
        help="Key file: keys.yaml, `ip xfrm state` text, esp_sa or tcpdump -E secrets "
        "(or tcpdump -E text itself). Repeatable.",
    ),
]
NattOption = Annotated[
    list[int] | None,
    typer.Option(
        "--natt-port",
        metavar="PORT",
        help="UDP port carrying ESP-in-UDP. Repeatable. [default: 4500]",
    ),
]
FailOnOption = Annotated[
    FailOn,
    typer.Option(
        "--fail-on",
        metavar="LEVEL",
        help="Exit 1 when a finding is at least this severe: critical, high, medium, low, "
        "info or never.",
    ),
]
UncheckedOption = Annotated[
    Unchecked,
    typer.Option(
        "--unchecked",
        metavar="POLICY",
        help="Exit 4 when no ESP packet was verified (skip), also when any went unverified "
        "(fail), or never (ignore).",
    ),
]
FORMATS_HELP = "summary, text, markdown, json or ktap"
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress, nothing on stdout.")]
NoPlotsOption = Annotated[bool, typer.Option("--no-plots", help="Do not draw the plots.")]


def _guarded(call: Callable[[], T], out: Path | None = None) -> T:
    """``call()``, its errors mapped to exit codes; a bug's traceback goes to ``out``."""
    try:
        return call()
    except EspForensicsError as exc:
        typer.echo(f"espforensics: error: {exc}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:  # typer would exit 130 without a word
        typer.echo(INTERRUPTED, err=True)
        raise typer.Exit(130) from None
    except Exception as exc:  # not the user's input: a bug, told apart from exit 1 and 2
        _report_bug(exc, out)
        raise typer.Exit(EXIT_INTERNAL) from None


def _report_bug(exc: Exception, out: Path | None) -> None:
    """One line on stderr; the traceback, without values, in ``out`` or a temporary file."""
    where = _write_traceback(exc, out)
    what = str(exc) if isinstance(exc, InternalError) else type(exc).__name__
    typer.echo(
        f"espforensics: internal error: {what} (a bug in espforensics, "
        f"please report it); traceback in {where}",
        err=True,
    )


def _write_traceback(exc: Exception, out: Path | None) -> str:
    """Write ``bug_report(exc)`` into ``out`` if it is a folder, else a temporary file."""
    text = (
        f"espforensics {TOOL_VERSION}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}\n\n{bug_report(exc)}"
    )
    if out is not None and out.is_dir():
        try:
            (out / TRACEBACK_FILE).write_text(text)
            return str(out / TRACEBACK_FILE)
        except OSError:
            pass  # a read-only or full output folder: the temporary file below
    try:
        fd, name = tempfile.mkstemp(prefix="espforensics-traceback-", suffix=".txt")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
    except OSError as err:
        return f"no file (it could not be written: {err.strerror})"
    return name


def main() -> None:
    """Run the command; a bug outside the library calls still ends in one line and exit 70."""
    try:
        app()
    except Exception as exc:  # _guarded saw none of it: a bug in this module or in typer
        _report_bug(exc, None)
        raise SystemExit(EXIT_INTERNAL) from None


def _exit_for(worst: Severity | None, fail_on: FailOn) -> None:
    """Exit 1 when the worst finding is at least as severe as --fail-on."""
    if fail_on is FailOn.NEVER or worst is None:
        return
    if SEVERITY_RANK[worst] >= SEVERITY_RANK[Severity(fail_on.value)]:
        raise typer.Exit(1)


def _threshold(fail_on: FailOn) -> Severity | None:
    return None if fail_on is FailOn.NEVER else Severity(fail_on.value)


def _exit_gate(summary: Summary, fail_on: FailOn, unchecked: Unchecked) -> None:
    """Exit with gate.py's code: 1 a finding, 3 the key file, 4 nothing verified."""
    code = exit_code(summary, _threshold(fail_on), unchecked)
    if code:
        raise typer.Exit(code)


def _show(summary: Summary, fmt: Format, fail_on: FailOn = FailOn.HIGH) -> None:
    """Print the report as ``fmt``; ``fail_on`` decides which KTAP lines are ``not ok``."""
    typer.echo(
        RENDERERS[fmt.value].render(report_content(summary, fail_on=_threshold(fail_on))), nl=False
    )


def _notice(line: str) -> None:
    """A line on stderr that is neither an error nor progress (a capped --jobs)."""
    typer.echo(f"espforensics: {line}", err=True)


def _threads(jobs: int, quiet: bool) -> int:
    """``analyze --jobs``, capped at the usable cores: more threads only wait for one."""
    workers = cap_workers(jobs, None, usable_cores())
    if workers.why and not quiet:
        _notice(workers.notice())
    return workers.count


class _BarMeter:
    """A bar on a terminal's stderr: the phase, the capture read, frames and frames/s."""

    def __init__(self, size: int | None) -> None:
        from rich.progress import (  # noqa: PLC0415 (only for terminals)
            BarColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bar  # noqa: PLC0415

        columns = ("{task.description}", "{task.fields[frames]} frames, {task.fields[rate]}")
        self._bar = Bar(
            TextColumn(columns[0]),
            BarColumn(),
            TextColumn(columns[1]),
            TimeElapsedColumn(),
            transient=True,
        )
        self._size, self._start = size, monotonic()
        self._task = self._bar.add_task(READING, total=size, frames="0", rate="")
        self._bar.start()

    def reading(self, frames: int, bytes_read: int) -> None:
        self._bar.update(
            self._task,
            completed=min(bytes_read, self._size or bytes_read),
            frames=f"{frames:,}",
            rate=rate(frames, monotonic() - self._start),
        )

    def phase(self, name: str) -> None:
        self._bar.update(self._task, description=name)
        if name == DONE:
            self.stop()

    def stop(self) -> None:
        self._bar.stop()


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


def _version(value: bool) -> None:
    if value:
        typer.echo(f"espforensics {TOOL_VERSION}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Offline forensic analysis of IPsec ESP captures."""


@app.command(cls=_Command)
def analyze(
    capture: Annotated[
        Path, typer.Argument(metavar="CAPTURE", help="pcap or pcapng file, plain or compressed.")
    ],
    sa: SaOption = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="DIR", help="Output folder [default: CAPTURE.espforensics]."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing output folder.")
    ] = False,
    natt_port: NattOption = None,
    fmt: Annotated[
        Format,
        typer.Option(
            "--format", metavar="FORMAT", help=f"What to print on stdout: {FORMATS_HELP}."
        ),
    ] = Format.SUMMARY,
    fail_on: FailOnOption = FailOn.HIGH,
    unchecked: UncheckedOption = Unchecked.SKIP,
    no_plots: NoPlotsOption = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar, nothing on stdout.")
    ] = False,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            metavar="N",
            help="Threads that decrypt this capture's packets (the checks run on one, in "
            "capture order). Outputs are identical for every value.",
        ),
    ] = 1,
    annotate: Annotated[
        Path | None,
        typer.Option(
            "--annotate",
            metavar="FILE",
            help="Also write CAPTURE as pcapng with a packet comment on each frame a "
            "verdict or finding concerns.",
        ),
    ] = None,
    decrypted: Annotated[
        Path | None,
        typer.Option(
            "--decrypted",
            metavar="FILE",
            help="Also write CAPTURE with each verified ESP packet replaced by its inner "
            "packet (pcap; pcapng if FILE ends in .pcapng).",
        ),
    ] = None,
    packets_csv: Annotated[
        bool | None,
        typer.Option(
            "--csv/--no-csv",
            help="Write packets.csv beside packets.parquet always, or never "
            f"[default: for captures of at most {CSV_ROWS:,} frames].",
        ),
    ] = None,
) -> None:
    """Decrypt and check every ESP packet of CAPTURE; write tables, plots and reports to --out."""
    options = Options(natt_ports=frozenset(natt_port or (4500,)))
    copies = CaptureCopies(annotate=annotate, decrypted=decrypted)
    out_dir = out if out is not None else default_out_dir(capture)
    meter, stop = _meter(capture, quiet)
    try:
        summary = _guarded(
            lambda: analyze_to_dir(
                capture,
                sa or [],
                out_dir,
                force=force,
                options=options,
                meter=meter,
                plots=not no_plots,
                jobs=_threads(jobs, quiet),
                copies=copies,
                packets_csv=packets_csv,
            ),
            out_dir,
        )
    finally:
        stop()
    for note in summary.key_notes:  # a key file's line skipped, policy blocks ignored
        typer.echo(f"espforensics: warning: {note}", err=True)
    if packets_csv is None and not quiet and not (out_dir / "packets.csv").exists():
        _notice(
            f"packets.csv not written: {summary.capture.frames:,} frames, more than "
            f"{CSV_ROWS:,}; packets.parquet has every row (--csv writes it anyway)"
        )
    if not quiet:
        _show(summary, fmt, fail_on)
        if fmt is Format.SUMMARY:
            typer.echo(f"  outputs: {out_dir}/")
            for name, target in copies.targets():
                typer.echo(f"  {name}: {target}")
    _exit_gate(summary, fail_on, unchecked)


@app.command(cls=_Command)
def report(
    folder: Annotated[
        Path, typer.Argument(metavar="DIR", help="Output folder of an earlier `analyze`.")
    ],
    fmt: Annotated[
        Format, typer.Option("--format", metavar="FORMAT", help=f"What to print: {FORMATS_HELP}.")
    ] = Format.TEXT,
    fail_on: FailOnOption = FailOn.HIGH,
    unchecked: UncheckedOption = Unchecked.SKIP,
) -> None:
    """Print the report of an earlier analysis again; exit as `analyze` did."""
    summary = _guarded(lambda: load_summary(folder))
    _show(summary, fmt, fail_on)
    _exit_gate(summary, fail_on, unchecked)


@app.command(cls=_Command)
def compare(
    before: Annotated[
        Path,
        typer.Argument(metavar="BEFORE", help="Capture or output folder: before the change."),
    ],
    after: Annotated[
        Path, typer.Argument(metavar="AFTER", help="Capture or output folder: after the change.")
    ],
    sa: SaOption = None,
    sa_before: Annotated[
        list[Path] | None,
        typer.Option("--sa-before", metavar="KEYS", help="Key file for BEFORE only. Repeatable."),
    ] = None,
    sa_after: Annotated[
        list[Path] | None,
        typer.Option("--sa-after", metavar="KEYS", help="Key file for AFTER only. Repeatable."),
    ] = None,
    natt_port: NattOption = None,
    fmt: Annotated[
        CompareFormat,
        typer.Option("--format", metavar="FORMAT", help="What to print: text, markdown or json."),
    ] = CompareFormat.TEXT,
    fail_on: FailOnOption = FailOn.NEVER,
) -> None:
    """Compare two captures (or analyses) side by side: a kernel before and after a patch."""
    options = Options(natt_ports=frozenset(natt_port or (4500,)))
    keys_before = [*(sa or []), *(sa_before or [])]
    keys_after = [*(sa or []), *(sa_after or [])]
    sides = _guarded(
        lambda: (summary_of(before, keys_before, options), summary_of(after, keys_after, options))
    )
    cmp = compare_summaries(*sides)
    renderers = {
        CompareFormat.TEXT: render_comparison,
        CompareFormat.MARKDOWN: render_comparison_md,
        CompareFormat.JSON: render_comparison_json,
    }
    typer.echo(renderers[fmt](cmp), nl=False)
    _exit_for(worst_severity(sides[1]), fail_on)


@app.command(cls=_Command)
def batch(
    paths: Annotated[
        list[str],
        typer.Argument(metavar="PATH...", help="Capture files, folders (recursive) or globs."),
    ],
    sa: SaOption = None,
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Batch output folder.")] = Path(
        "espforensics-batch"
    ),
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            metavar="N",
            help="Worker processes, at most one per capture and core [default: one per core].",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Redo captures already done.")] = False,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler", metavar="ADDRESS", help="Dask scheduler address, e.g. tcp://h:8786."
        ),
    ] = None,
    natt_port: NattOption = None,
    fail_on: FailOnOption = FailOn.HIGH,
    unchecked: UncheckedOption = Unchecked.SKIP,
    no_plots: NoPlotsOption = False,
    quiet: QuietOption = False,
) -> None:
    """Analyze many captures in one pass, resumably; one row per capture in captures.csv."""
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
    if any(r.status == "error" for r in result.rows):
        raise typer.Exit(2)
    summaries = _guarded(lambda: [load_summary(out / "captures" / r.name) for r in result.rows])
    code = worst_code(exit_code(s, _threshold(fail_on), unchecked) for s in summaries)
    if code:
        raise typer.Exit(code)


def _batch_progress(quiet: bool) -> tuple[BatchProgress | None, Callable[[], None]]:
    """A bar over captures (with the frames done so far) on a terminal's stderr."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import Progress as Bar  # noqa: PLC0415 (only for terminals)

    bar = Bar(transient=True)
    task = bar.add_task("captures", total=None)
    frames = [0]
    bar.start()

    def update(result: CaptureResult, done: int, total: int) -> None:
        frames[0] += result.frames
        bar.update(
            task, completed=done, total=total, description=f"captures ({frames[0]:,} frames)"
        )

    return update, bar.stop
