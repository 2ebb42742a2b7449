"""What the options that hold a run to what a test expects do: ``--expect`` and the
receiver's counters (``--xfrm-stat-before``, ``--xfrm-stat-after``, ``--xfrm-stat-host``,
``--xfrm-state-stats``; declared in cli/options.py, which loads none of this).

In: the options' values. Out: the parsed assertions and counters before the
run (a bad one: exit 2 in one line, before any frame is read), and after it
the assertions' lines and exit code (0 all hold, 1 one fails, 2 one the run
cannot answer). Raises only ``typer.Exit``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from espforensics.cli.errors import _guarded
from espforensics.cli.options import Format
from espforensics.results.gate import EXIT_FINDING, EXIT_USAGE

if TYPE_CHECKING:  # each imported by the option that uses it: a run without them loads none
    from espforensics.receiver.xfrm_stat import XfrmStatFiles
    from espforensics.results.expect import Assertion, Checked
    from espforensics.results.summary import Summary


def assertions(text: str | None) -> tuple[Assertion, ...]:
    """``--expect`` parsed, or exit 2 naming the assertion it cannot read."""
    if text is None:
        return ()
    from espforensics.results.expect import parse_expect  # noqa: PLC0415  # --expect

    return _guarded(lambda: parse_expect(text))


def xfrm_stat(
    before: Path | None, after: Path | None, host: str | None, states: Path | None = None
) -> XfrmStatFiles | None:
    """The receiver's counters, read before the run; exit 2 for a bad or missing file."""
    if before is None and after is None and states is None:
        if host is not None:
            _usage("--xfrm-stat-host needs --xfrm-stat-before and --xfrm-stat-after")
        return None
    if (before is None) != (after is None):
        _usage("--xfrm-stat-before and --xfrm-stat-after go together")
    from espforensics.receiver.xfrm_stat import load_xfrm_stat  # noqa: PLC0415  # --xfrm-stat-*

    return _guarded(lambda: load_xfrm_stat(before, after, host, states))


def _usage(message: str) -> None:
    typer.echo(f"espforensics: error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def check(summary: Summary, expected: tuple[Assertion, ...], fmt: Format, quiet: bool) -> int:
    """Print the assertions' results (KTAP with ``--format ktap``); their exit code."""
    from espforensics.render.ktap import format_expect_ktap  # noqa: PLC0415  # --expect
    from espforensics.results.expect import evaluate  # noqa: PLC0415

    checked: tuple[Checked, ...] = _guarded(lambda: evaluate(expected, summary))
    if fmt is Format.KTAP:
        if not quiet:
            typer.echo(format_expect_ktap(summary, checked), nl=False)
    elif not quiet and fmt is not Format.JSON:
        typer.echo("expect:")
        for c in checked:
            word = "ok" if c.holds else "FAILED"
            typer.echo(f"  {word} {c.assertion.text} (got {c.value})")
    if summary.error:
        return EXIT_USAGE
    return 0 if all(c.holds for c in checked) else EXIT_FINDING


def settle(
    summary: Summary,
    expected: tuple[Assertion, ...],
    fmt: Format,
    quiet: bool,
    gate: Callable[[], None],
) -> None:
    """End the command: with ``--expect`` the assertions decide the exit code (``check``),
    else ``gate`` does (the findings' gate, results/gate.py)."""
    if not expected:
        gate()
        return
    code = check(summary, expected, fmt, quiet)
    if code:
        raise typer.Exit(code)
