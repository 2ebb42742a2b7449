"""typer, shaped to the house style: one-line usage errors, docs/cli.md's metavars, the options.

In: nothing but typer. Out: ``_Group`` and ``_Command`` (typer's group and
command classes, a usage error printed as ``espforensics: error: ...`` and
exit 2, help with the metavars docs/cli.md uses), the choices of
``--format`` and ``--fail-on``, and the options several commands share.
Raises ``_UsageLine`` (a ``ClickException``) for a usage error. cli.py
builds the commands from these and re-exports every name.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer.core import TyperCommand, TyperGroup

from espforensics.gate import Unchecked

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
    PACKETS = "packets"


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
FORMATS_HELP = "summary, text, markdown, json, ktap or packets (a line per ESP packet)"
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress, nothing on stdout.")]
NoPlotsOption = Annotated[bool, typer.Option("--no-plots", help="Do not draw the plots.")]
