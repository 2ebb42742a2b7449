"""typer, shaped to the house style: one-line usage errors, docs/cli.md's metavars, the options.

In: nothing but typer and model/'s types. Out: ``_Group`` and ``_Command``
(typer's group and command classes, a usage error printed as
``espforensics: error: ...`` and exit 2, help with the metavars docs/cli.md
uses), the choices of ``--format`` (analyze's and report's, compare's,
reconcile's) and ``--fail-on``, the options several commands share and
those of ``--expect`` and the receiver's counters, the help's epilogs (exit
codes) and the shell completion scripts (``completion_script``;
``enable_completion`` makes a run answer them). Raises ``_UsageLine`` (a
``ClickException``) for a usage error. cli/__init__.py builds the commands from
these and re-exports every name; like cli/__init__.py, this module loads no part of
the analysis, so ``--help``, ``--version`` and ``completion`` start fast
(docs/performance.md, start-up).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer._completion_classes import completion_init
from typer._completion_shared import get_completion_script
from typer.core import TyperCommand, TyperGroup

from espforensics.model.enums import Unchecked
from espforensics.model.options import Selection

if TYPE_CHECKING:  # typer vendors its own click: the help types come from there
    from typer._click import Context, HelpFormatter, Parameter


def lightened(params: list[Parameter]) -> list[Parameter]:
    """``params`` with cli/coercion.py's plain coercion, where this typer has its hooks.

    The hooks are typer 0.29's (``typer._coercion``); a typer without them (0.26 to
    0.28, which build no pydantic adapters) keeps its own coercion.
    """
    try:
        from espforensics.cli.coercion import lightened as plain_first  # noqa: PLC0415
    except ImportError:
        return params
    return plain_first(params)


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

    def get_params(self, ctx: Context) -> list[Parameter]:
        return lightened(super().get_params(ctx))  # --version, --help: cli/coercion.py

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


class _Command(TyperCommand):
    """typer's help, with the metavars of docs/cli.md where typer writes its own.

    typer prints ``analyze [OPTIONS] {CAPTURE}`` and ``CAPTURE <path>``;
    this prints ``analyze [OPTIONS] CAPTURE`` and ``CAPTURE``. Its parameters are
    coerced without pydantic where the value is plain (cli/coercion.py).
    """

    def get_params(self, ctx: Context) -> list[Parameter]:
        return lightened(super().get_params(ctx))

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
    PACKETS = "packets"


class CompareFormat(StrEnum):
    """compare has no short summary: its table is already short."""

    TEXT = "text"
    MARKDOWN = "markdown"
    JSON = "json"


class ReconcileFormat(StrEnum):
    """What ``reconcile`` prints on stdout."""

    SUMMARY = "summary"
    TEXT = "text"
    JSON = "json"


class FailOn(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"
    NEVER = "never"


# str, not Path: a value may be tcpdump -E text itself, which pathlib would rewrite ("//" -> "/")
SaOption = Annotated[
    list[str] | None,
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
        min=1,
        max=65535,
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


def _spis(values: list[str] | None) -> list[str] | None:
    """``--spi``: each an SPI, hex (0x1001) or decimal (4097), of 32 bits."""
    for value in values or ():
        try:
            spi = int(value, 0)
        except ValueError:
            raise typer.BadParameter(f"{value!r} is not an SPI (0x1001 or 4097)") from None
        if not 0 <= spi < 1 << 32:
            raise typer.BadParameter(f"{value} is not a 32-bit SPI")
    return values


_LAST_FRAME = (1 << 63) - 1  # "A-": to the end of the capture


def _span(value: str) -> tuple[int, int]:
    """``--frames``' value as (first, last): A-B, A- (to the end) or A, frames from 1."""
    first, dash, last = value.partition("-")
    try:
        span = (int(first), (int(last) if last else _LAST_FRAME) if dash else int(first))
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not A-B, A- or A (frame numbers)") from None
    if not 1 <= span[0] <= span[1]:
        raise typer.BadParameter(f"{value!r}: frames count from 1, and A <= B")
    return span


def _frames(value: str | None) -> str | None:
    """``--frames``, checked while typer parses the line (a usage error names the option)."""
    if value is not None:
        _span(value)
    return value


def selection(spis: list[str] | None, frames: str | None) -> Selection:
    """What ``--spi`` and ``--frames`` select (both checked by their callbacks)."""
    span = None if frames is None else _span(frames)
    return Selection(frozenset(int(v, 0) for v in spis or ()), span)


SpiOption = Annotated[
    list[str] | None,
    typer.Option(
        "--spi",
        metavar="SPI",
        callback=_spis,
        help="Analyze only the ESP packets of this SPI (0x1001 or 4097); repeatable. Every "
        "other frame is still a row, verdict not_selected.",
    ),
]
FramesOption = Annotated[
    str | None,
    typer.Option(
        "--frames",
        metavar="RANGE",
        callback=_frames,
        help="Analyze only frames RANGE: A-B, A- (from A to the end) or A (one frame). Every other "
        "frame is still a row, verdict not_selected.",
    ),
]
# analyze's and report's (cli/expect.py does what they ask)
ExpectOption = Annotated[
    str | None,
    typer.Option(
        "--expect",
        metavar="ASSERTIONS",
        help='Exit 1 unless every assertion holds, e.g. "esp_misplaced=0,verified>=100,'
        'XfrmInStateProtoError=0": finding kinds, esp_packets, verified, proven, frames, '
        "verdicts.NAME, predicted XfrmIn* counters (@HOST), receiver.NAME; "
        "with --format ktap one KTAP line each.",
    ),
]
StatBeforeOption = Annotated[
    Path | None,
    typer.Option(
        "--xfrm-stat-before",
        metavar="FILE",
        help="The receiver's /proc/net/xfrm_stat before the capture (with --xfrm-stat-after): "
        "the reports compare it with the predicted counters.",
    ),
]
StatAfterOption = Annotated[
    Path | None,
    typer.Option(
        "--xfrm-stat-after",
        metavar="FILE",
        help="The receiver's /proc/net/xfrm_stat after the capture.",
    ),
]
StatesOption = Annotated[
    Path | None,
    typer.Option(
        "--xfrm-state-stats",
        metavar="FILE",
        help="The receiver's `ip -s xfrm state` after the capture: each state's stats "
        "(replay-window, replay, failed) beside the receiver model's counts.",
    ),
]
StatHostOption = Annotated[
    str | None,
    typer.Option(
        "--xfrm-stat-host",
        metavar="ADDRESS",
        help="Whose counters the --xfrm-stat files are [default: the one address the "
        "capture sends ESP to].",
    ),
]

FORMATS_HELP = "summary, text, markdown, json, ktap or packets (a line per ESP packet)"
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress, nothing on stdout.")]
NoPlotsOption = Annotated[bool, typer.Option("--no-plots", help="Do not draw the plots.")]


class Shell(StrEnum):
    """The shells ``espforensics completion`` writes a script for."""

    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"


PROG = "espforensics"  # the console script the completion scripts call
COMPLETE_VAR = "_ESPFORENSICS_COMPLETE"  # click's variable: _{PROG}_COMPLETE


def completion_script(shell: Shell) -> str:
    """The script that makes ``shell`` complete espforensics's commands, options and their
    choices: it runs ``espforensics`` with ``COMPLETE_VAR`` set, which answers instead of
    running a command (``enable_completion``). Nothing is installed or detected."""
    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell.value)


def enable_completion() -> None:
    """Let a run with ``COMPLETE_VAR`` set answer with typer's completion classes (those
    ``completion_script``'s scripts talk to), as typer does when it adds its options."""
    completion_init()


# The help's last paragraphs. \b keeps a paragraph's lines as written (click rewraps others).
EXIT_CODES = """\b
Exit codes:
  0    done; no finding at or above --fail-on
  1    a finding at or above --fail-on
  2    usage or input error (one line: espforensics: error: ...)
  3    the key file is wrong: only key_mismatch findings fail
  4    no ESP packet verified (--unchecked skip; fail: any unverified)
  70   a bug in espforensics (one line naming its traceback file)
  130  interrupted (Ctrl-C)"""
DOCS = "Documentation: docs/cli.md (commands), docs/outputs.md (files, columns)."
ANALYZE_EPILOG = f"""\b
Writes to --out: packets.parquet (packets.csv up to the --csv bound),
sas.csv, findings.csv, finding_frames.csv/.parquet, report.txt,
report.md, report.html, summary.json and plots/ (docs/outputs.md).

{EXIT_CODES}

{DOCS}"""
REPORT_EPILOG = f"""DIR is the output folder of analyze (summary.json) or of batch
(manifest.json: its report.txt, with --format text or summary).

{EXIT_CODES}

{DOCS}"""
COMPARE_EPILOG = f"""Each side is a capture (analyzed in memory, with its key files) or the
output folder of an earlier analyze.

\b
Exit codes: 0 done (and nothing on AFTER at or above --fail-on, default
never); 1 a finding of AFTER at or above --fail-on; 2 usage or input
error; 70 a bug; 130 Ctrl-C.

{DOCS}"""
BATCH_EPILOG = f"""\b
Writes to --out: captures/NAME/ (analyze's outputs per capture), the
packets/ dataset, captures.csv/.parquet, report.txt, report.html and
manifest.json (for resuming; docs/batch.md).

\b
Exit codes: 2 when a capture could not be analyzed (or a usage or input
error), else the worst of the captures' exits: 0 none at or above
--fail-on, 1 a finding at or above it, 3 a wrong key file, 4 nothing
verified (--unchecked); 70 a bug in espforensics; 130 Ctrl-C.

{DOCS}"""
RECONCILE_EPILOG = f"""\b
Writes to --out: reconcile.csv and reconcile.parquet, one row per ESP
packet of either capture (fate, direction, spi, seq64, sender_frame,
receiver_frame, delay_ns, detail, receiver_verdict: with --sa, the
receiver model's verdict of the receiver's copy, outer_changes: each outer
header field changed on the way), written as decided while both captures
are read once, side by side; report.txt; summary.json
(the packets per fate and per SA, the clock offset estimated from the
packets, each capture's path, sha256 and frames). --out - writes no
folder. Prints the packets per fate and the clocks; --format text prints
report.txt, json summary.json (docs/receiver.md).

\b
Exit codes: 0 done; 2 a capture or key file it cannot read, an output
folder that exists (without --force) or cannot be written, or a usage
error; 70 a bug; 130 Ctrl-C.

{DOCS}"""
COMPLETION_EPILOG = """\b
Install (or source the output in the shell's startup file):
  bash: espforensics completion bash > ~/.local/share/bash-completion/completions/espforensics
  zsh:  espforensics completion zsh > ~/.zfunc/_espforensics (a folder on $fpath)
  fish: espforensics completion fish > ~/.config/fish/completions/espforensics.fish

\b
Exit codes: 0 printed; 2 a shell not among bash, zsh, fish."""
