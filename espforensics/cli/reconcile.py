"""``espforensics reconcile SENDER RECEIVER``: the command around reconcile/run.py.

cli/__init__.py declares the command and its options (its help) and imports this
module only when the command runs: it loads the analysis.

In: two capture paths, the key files (optional: the receiver model's
verdicts, from the analysis's pass over the receiver capture, in the same
reading as the join), the output folder
(``-``: none, only printed), ``--force``, ``--format``, the ESP-in-UDP
ports. Out: DIR/reconcile.csv,
reconcile.parquet, report.txt and summary.json (reconcile/out.py), and on
stdout the summary lines, report.txt or summary.json; exit 0, or 2 for a
capture or key file it cannot read or a folder it may not use or write
(one line).
Raises only ``typer.Exit``.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import typer

from espforensics.analysis.run import sha256_file
from espforensics.cli.errors import _guarded
from espforensics.cli.options import ReconcileFormat
from espforensics.errors import InputError
from espforensics.keys import load_sas
from espforensics.reconcile.out import (
    CaptureFile,
    FolderWriter,
    report_lines,
    summary_dict,
    summary_lines,
)
from espforensics.reconcile.run import Reconciled, Reconciliation
from espforensics.results.folder import prepare_out_dir

STDOUT_ONLY = "-"


def reconcile_command(
    sender: Path,
    receiver: Path,
    out: Path | None,
    sa: list[str] | None,
    force: bool,
    fmt: ReconcileFormat,
    natt_port: list[int] | None,
    quiet: bool,
) -> None:
    """``espforensics reconcile`` with its options' values (cli/__init__.py declares it)."""
    printed_only = out is not None and str(out) == STDOUT_ONLY
    folder = None if printed_only else (out or receiver.with_name(receiver.name + ".reconcile"))
    ports = frozenset(natt_port or (4500,))
    result, files = _guarded(lambda: _run(sender, receiver, folder, force, ports, sa or []))
    if quiet:
        return
    if fmt is ReconcileFormat.JSON:
        typer.echo(json.dumps(summary_dict(result, *files), indent=2))
    elif fmt is ReconcileFormat.TEXT:
        typer.echo("\n".join(report_lines(result, *files)))
    else:
        for line in summary_lines(result):
            typer.echo(line)
        if folder is not None:
            typer.echo(f"  outputs: {folder}/")


def _run(
    sender: Path,
    receiver: Path,
    folder: Path | None,
    force: bool,
    ports: frozenset[int],
    keys: list[str],
) -> tuple[Reconciled, tuple[CaptureFile, CaptureFile]]:
    if folder is not None and folder.exists() and not force:  # before a capture is read
        prepare_out_dir(folder, force)  # raises: exists, or not a folder
    for path in (sender, receiver):
        if path.is_dir():
            raise InputError(str(path), "a folder, not a capture")
    table = load_sas(keys) if keys else None
    job = Reconciliation(sender, receiver, ports, table)  # opens both: a bad one raises
    writer = None
    made = folder is not None and not folder.exists()
    try:
        if folder is not None:
            prepare_out_dir(folder, force)
            writer = FolderWriter(folder)
        result = job.run(None if writer is None else writer.write)
    except BaseException:  # a capture damaged further on, Ctrl-C: nothing half-written
        job.close()
        if writer is not None:
            writer.abort()
        if made and folder is not None:
            with contextlib.suppress(OSError):
                folder.rmdir()  # made by this run, and empty again
        raise
    files = (
        CaptureFile(str(sender), sha256_file(sender), result.sender_esp + result.sender_other,
                    result.sender_esp),
        CaptureFile(str(receiver), sha256_file(receiver),
                    result.receiver_esp + result.receiver_other, result.receiver_esp),
    )  # fmt: skip
    if writer is not None:
        writer.finish(result, files)
    return result, files
