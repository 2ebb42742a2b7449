"""``espforensics report``, and what it shares with analyze and batch: print a summary's
report, exit as the gate says.

In: an output folder (or a ``Summary`` and the options). Out: the report on
stdout in the format asked for, and the exit: ``typer.Exit`` with results/gate.py's
code (1 a finding, 3 the key file, 4 nothing verified), 2 for input or
usage. Raises only ``typer.Exit`` and typer's usage error. It loads the
summary, the renderers and the gate, not the analysis (no pyarrow, no
engine): ``report`` starts without them (docs/performance.md, start-up).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import typer
from typer._click.exceptions import UsageError  # typer vendors its own click
from typer._click.globals import get_current_context

from espforensics.cli.errors import _guarded
from espforensics.cli.expect import assertions, settle
from espforensics.cli.options import FailOn, Format
from espforensics.model.enums import Severity, Unchecked
from espforensics.render.registry import FOLDER_VIEWS, RENDERERS
from espforensics.report.content import Report, report_content
from espforensics.results.folder import load_summary
from espforensics.results.gate import exit_code, worst_code
from espforensics.results.summary import Summary


def report_command(
    folder: Path, fmt: Format, fail_on: FailOn, unchecked: Unchecked, expect: str | None
) -> None:
    """``espforensics report``: print an analysis's (or a batch's) report again, exit as it did."""
    from espforensics.batch.report import is_batch_folder  # noqa: PLC0415 (as in batch)

    expected = assertions(expect)
    if is_batch_folder(folder):
        if expected:
            _usage("--expect asserts one capture's analysis: report DIR/captures/NAME")
        _report_batch(folder, fmt, fail_on, unchecked)
        return
    summary = _guarded(lambda: load_summary(folder))
    if not (expected and fmt is Format.KTAP):
        _show(summary, fmt, fail_on, folder)
    settle(summary, expected, fmt, False, lambda: _exit_gate(summary, fail_on, unchecked))


BATCH_FORMATS = (Format.TEXT, Format.SUMMARY)  # a batch has report.txt, and no summary.json


def _report_batch(folder: Path, fmt: Format, fail_on: FailOn, unchecked: Unchecked) -> None:
    """``report`` of a batch output folder: its report.txt, and the exit of ``batch``."""
    from espforensics.batch.report import load_batch  # noqa: PLC0415

    stored = _guarded(lambda: load_batch(folder))
    if fmt not in BATCH_FORMATS:
        typer.echo(
            f"espforensics: error: {folder}: a batch output folder: --format {fmt.value} "
            f"is one capture's (report {folder}/captures/NAME); a batch's report is text",
            err=True,
        )
        raise typer.Exit(2)
    typer.echo(stored.report, nl=False)
    _batch_exit(folder, stored.done, stored.errors, fail_on, unchecked)


def _batch_exit(
    out: Path, done: Iterable[str], errors: int, fail_on: FailOn, unchecked: Unchecked
) -> None:
    """Exit as ``batch``: 2 when a capture was not analyzed, else the worst capture's code."""
    if errors:
        raise typer.Exit(2)
    summaries = _guarded(lambda: [load_summary(out / "captures" / name) for name in done])
    code = worst_code(exit_code(s, _threshold(fail_on), unchecked) for s in summaries)
    if code:
        raise typer.Exit(code)


def _threshold(fail_on: FailOn) -> Severity | None:
    return None if fail_on is FailOn.NEVER else Severity(fail_on.value)


def _exit_gate(summary: Summary, fail_on: FailOn, unchecked: Unchecked) -> None:
    """Exit with results/gate.py's code: 1 a finding, 3 the key file, 4 nothing verified."""
    code = exit_code(summary, _threshold(fail_on), unchecked)
    if code:
        raise typer.Exit(code)


def _show(
    summary: Summary, fmt: Format, fail_on: FailOn, folder: Path, report: Report | None = None
) -> None:
    """Print the report as ``fmt``; ``fail_on`` decides which KTAP lines are ``not ok``; a
    view of the tables (``packets``) reads them in ``folder``, the analysis's outputs.
    ``report``: the run's, built at ``fail_on`` when its files were written (analyze);
    without it (``report`` of a folder) it is built here, once."""
    view = FOLDER_VIEWS.get(fmt.value)
    if view is not None:
        _guarded(lambda: _echo_each(view.pieces(folder, summary.finding_list)))
        return
    if report is None:
        report = report_content(summary, fail_on=_threshold(fail_on))
    typer.echo(RENDERERS[fmt.value].render(report), nl=False)


def _echo_each(pieces: Iterable[str]) -> None:
    """Print text as it is made (a view of a large table is never held whole)."""
    for piece in pieces:
        typer.echo(piece, nl=False)


def _usage(what: str) -> None:
    """A usage error found once typer parsed the line: one line, exit 2, as typer's own."""
    raise UsageError(what, get_current_context())
