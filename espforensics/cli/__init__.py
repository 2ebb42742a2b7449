"""The ``espforensics`` command line: parse options, call the library, map errors.

In: argv. Out: files in the output folder, text on stdout, progress on
stderr when it is a terminal. Exit codes (results/gate.py): 0 done and clean, 1 a
finding at or above ``--fail-on``, 2 usage or input error (one line
``espforensics: error: <file>: <what>``), 3 the key file is wrong (only
``key_mismatch`` findings fail), 4 no ESP packet verified (``--unchecked``
chooses when), 70 a bug in espforensics (one
line naming the file that holds its traceback, without any value), 130
Ctrl-C. Nothing imports this package; it and its modules (options.py:
typer's classes and the options, errors.py: the exit of a command that
fails, analysis/progress.py: the bars, commands.py, report.py and reconcile.py: the
commands' bodies, results/expect.py: what --expect and the receiver's counters do)
are the only modules that import typer and rich.

Start-up (docs/performance.md): this module declares the commands (their
options and help) from options.py and model/'s types only, and imports a
command's body inside the command, once typer has parsed the line: so
``--help``, ``--version``, ``completion`` and every command's ``--help``
load no part of the analysis, nor numpy, pyarrow or cryptography
(tests/project/test_imports.py). The names this module offered before the bodies
moved (``_show``, ``_guarded``, ...) are still importable from here
(``__getattr__``).

The annotations are objects, not strings (no ``from __future__ import
annotations`` here): typer reads every command's parameters from them when
it runs, and strings it would evaluate, compiling each (264 of them), at
every start (docs/performance.md).
"""

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from espforensics.cli.errors import _report_bug
from espforensics.cli.options import (
    ANALYZE_EPILOG,
    BATCH_EPILOG,
    COMPARE_EPILOG,
    COMPLETION_EPILOG,
    FORMATS_HELP,
    RECONCILE_EPILOG,
    REPORT_EPILOG,
    CompareFormat,
    ExpectOption,
    FailOn,
    FailOnOption,
    Format,
    FramesOption,
    NattOption,
    NoPlotsOption,
    QuietOption,
    ReconcileFormat,
    SaOption,
    Shell,
    SpiOption,
    StatAfterOption,
    StatBeforeOption,
    StatesOption,
    StatHostOption,
    UncheckedOption,
    _Command,
    _Group,
    completion_script,
    enable_completion,
)
from espforensics.errors import EXIT_INTERNAL, INTERRUPTED
from espforensics.model.enums import Unchecked
from espforensics.model.options import CSV_ROWS

app = typer.Typer(
    cls=_Group,
    add_completion=False,
    pretty_exceptions_enable=False,  # never print locals: they may hold keys
    no_args_is_help=True,
    rich_markup_mode=None,  # help texts hold [default: ...] that is not markup
    help="Offline forensic analysis of IPsec ESP captures.",
)


def main() -> None:
    """Run the command; a bug outside the library calls still ends in one line and exit 70."""
    enable_completion()  # a shell asking for completions (espforensics completion SHELL)
    try:
        app()
    except Exception as exc:  # _guarded saw none of it: a bug in this module or in typer
        _report_bug(exc, None)
        raise SystemExit(EXIT_INTERNAL) from None


@contextmanager
def _importing_body() -> Iterator[None]:
    """Import a command's body: the collector paused, a Ctrl-C reported in one line.

    The body loads the analysis (some 130 modules of ours, numpy, pyarrow,
    cryptography): objects that all live until the process ends, so the
    hundred-odd collections their allocations set off free nothing, and took
    about 30 ms of CPU of a 0.6 s run of the example (docs/performance.md).
    For the same reason, when it loaded modules, what is alive then is moved
    out of the collector's way (``gc.freeze``): the first collection of the
    run walked every object the imports made, 11 ms, and freed none. So a
    process freezes once per body it loads, not once per command it runs.
    The collector is as the caller had it afterwards. A Ctrl-C while they
    load is one line and exit 130, as __main__.py reports it while this
    module loads (typer would exit 130 without a word).
    """
    was = gc.isenabled()
    known = len(sys.modules)
    gc.disable()
    try:
        yield
    except KeyboardInterrupt:
        typer.echo(INTERRUPTED, err=True)
        raise typer.Exit(130) from None
    finally:
        if len(sys.modules) > known:
            gc.freeze()
        if was:
            gc.enable()


def _version(value: bool) -> None:
    if value:
        from espforensics.model.version import TOOL_VERSION  # noqa: PLC0415 (metadata: 15 ms)

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


@app.command(cls=_Command, epilog=ANALYZE_EPILOG)
def analyze(
    capture: Annotated[
        Path,
        typer.Argument(
            metavar="CAPTURE",
            help="pcap or pcapng file, plain or compressed; - reads standard input "
            "(copied once to a temporary file).",
        ),
    ],
    sa: SaOption = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Output folder [default: CAPTURE.espforensics; stdin.espforensics for -]; "
            "- writes no folder, only prints.",
        ),
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
            help="Processes for this capture: N - 1 workers parse, decrypt and decode its "
            "batches ahead (a compressed capture is decompressed once to a temporary file "
            "first); the checks run in one, in capture order. Outputs are identical for "
            "every value.",
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
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            metavar="ADDRESS",
            help="Dask scheduler address, e.g. tcp://h:8786: its workers parse, decrypt and "
            "decode the batches of CAPTURE (an uncompressed pcap or pcapng at the same path "
            "on them).",
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
    expect: ExpectOption = None,
    xfrm_stat_before: StatBeforeOption = None,
    xfrm_stat_after: StatAfterOption = None,
    xfrm_stat_host: StatHostOption = None,
    xfrm_state_stats: StatesOption = None,
    spi: SpiOption = None,
    frames: FramesOption = None,
) -> None:
    """Decrypt and check every ESP packet of CAPTURE; write tables, plots and reports to --out."""
    with _importing_body():  # the analysis: numpy, pyarrow, cryptography
        from espforensics.cli.commands import analyze_command  # noqa: PLC0415

    analyze_command(
        capture=capture,
        sa=sa,
        out=out,
        force=force,
        natt_port=natt_port,
        fmt=fmt,
        fail_on=fail_on,
        unchecked=unchecked,
        no_plots=no_plots,
        quiet=quiet,
        jobs=jobs,
        annotate=annotate,
        decrypted=decrypted,
        scheduler=scheduler,
        packets_csv=packets_csv,
        expect=expect,
        xfrm_stat_before=xfrm_stat_before,
        xfrm_stat_after=xfrm_stat_after,
        xfrm_stat_host=xfrm_stat_host,
        xfrm_state_stats=xfrm_state_stats,
        spi=spi,
        frames=frames,
    )


@app.command(cls=_Command, epilog=REPORT_EPILOG)
def report(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="DIR", help="Output folder of an earlier `analyze`, or of a `batch`."
        ),
    ],
    fmt: Annotated[
        Format, typer.Option("--format", metavar="FORMAT", help=f"What to print: {FORMATS_HELP}.")
    ] = Format.TEXT,
    fail_on: FailOnOption = FailOn.HIGH,
    unchecked: UncheckedOption = Unchecked.SKIP,
    expect: ExpectOption = None,
) -> None:
    """Print the report of an earlier analysis (or batch) again; exit as it did."""
    with _importing_body():  # the summary and the renderers: numpy, cryptography
        from espforensics.cli.report import report_command  # noqa: PLC0415

    report_command(folder, fmt, fail_on, unchecked, expect)


@app.command(cls=_Command, epilog=COMPARE_EPILOG)
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
        list[str] | None,
        typer.Option("--sa-before", metavar="KEYS", help="Key file for BEFORE only. Repeatable."),
    ] = None,
    sa_after: Annotated[
        list[str] | None,
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
    with _importing_body():  # the analysis: numpy, pyarrow, cryptography
        from espforensics.cli.commands import compare_command  # noqa: PLC0415

    compare_command(
        before=before,
        after=after,
        sa=sa,
        sa_before=sa_before,
        sa_after=sa_after,
        natt_port=natt_port,
        fmt=fmt,
        fail_on=fail_on,
    )


@app.command(cls=_Command, name="reconcile", epilog=RECONCILE_EPILOG)
def reconcile(
    sender: Annotated[
        Path, typer.Argument(metavar="SENDER", help="Capture taken on the sender's side.")
    ],
    receiver: Annotated[
        Path, typer.Argument(metavar="RECEIVER", help="Capture of the same run, receiver's side.")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Output folder [default: RECEIVER.reconcile]; - writes no folder, only prints.",
        ),
    ] = None,
    sa: SaOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing output folder.")
    ] = False,
    fmt: Annotated[
        ReconcileFormat,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="What to print on stdout: summary, text (report.txt) or json (summary.json).",
        ),
    ] = ReconcileFormat.SUMMARY,
    natt_port: NattOption = None,
    quiet: QuietOption = False,
) -> None:
    """Join two captures of one run on (SPI, sequence number) and the ESP bytes: the fate
    of every packet (delivered, lost, changed, duplicated, reordered, outer_rewritten,
    unexpected) in DIR/reconcile.csv."""
    with _importing_body():  # the analysis: numpy, pyarrow, cryptography
        from espforensics.cli.reconcile import reconcile_command  # noqa: PLC0415

    reconcile_command(sender, receiver, out, sa, force, fmt, natt_port, quiet)


@app.command(cls=_Command, epilog=BATCH_EPILOG)
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
    with _importing_body():  # the analysis: numpy, pyarrow, cryptography
        from espforensics.cli.commands import batch_command  # noqa: PLC0415

    batch_command(
        paths=paths,
        sa=sa,
        out=out,
        jobs=jobs,
        force=force,
        scheduler=scheduler,
        natt_port=natt_port,
        fail_on=fail_on,
        unchecked=unchecked,
        no_plots=no_plots,
        quiet=quiet,
    )


@app.command(cls=_Command, epilog=COMPLETION_EPILOG)
def completion(
    shell: Annotated[Shell, typer.Argument(metavar="SHELL", help="bash, zsh or fish.")],
) -> None:
    """Print the script that makes SHELL complete espforensics's commands and options."""
    typer.echo(completion_script(shell))


__all__ = [  # defined in cli/options.py, imported from here by tests and users
    "FORMATS_HELP",
    "CompareFormat",
    "FailOn",
    "FailOnOption",
    "Format",
    "NattOption",
    "NoPlotsOption",
    "QuietOption",
    "SaOption",
    "UncheckedOption",
]
