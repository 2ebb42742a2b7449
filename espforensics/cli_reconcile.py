"""``espforensics reconcile SENDER RECEIVER``: the command around reconcile.py.

cli.py declares the command and its options (its help) and imports this
module only when the command runs: it loads the analysis.

In: two capture paths, the key files (optional: the receiver model's
verdicts, from ``analyze`` of the receiver capture), the output folder
(``-``: none, only printed), ``--force``, ``--format``, the ESP-in-UDP
ports. Out: DIR/reconcile.csv,
reconcile.parquet, report.txt and summary.json (reconcile_out.py), and on
stdout the summary lines, report.txt or summary.json; exit 0, or 2 for a
capture or key file it cannot read or a folder it may not use or write
(one line).
Raises only ``typer.Exit``.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from espforensics.analysis import analyze
from espforensics.analysis_outdir import prepare_out_dir
from espforensics.analysis_run import sha256_file
from espforensics.cli_errors import _guarded
from espforensics.cli_typer import ReconcileFormat
from espforensics.errors import InputError
from espforensics.pipeline import Options
from espforensics.reconcile import Reconciled, reconcile
from espforensics.reconcile_out import (
    CaptureFile,
    Verdicts,
    report_lines,
    summary_dict,
    summary_lines,
    write_folder,
)

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
    """``espforensics reconcile`` with its options' values (cli.py declares the command)."""
    printed_only = out is not None and str(out) == STDOUT_ONLY
    folder = None if printed_only else (out or receiver.with_name(receiver.name + ".reconcile"))
    ports = frozenset(natt_port or (4500,))
    result, files, verdicts = _guarded(
        lambda: _run(sender, receiver, folder, force, ports, sa or [])
    )
    if quiet:
        return
    if fmt is ReconcileFormat.JSON:
        typer.echo(json.dumps(summary_dict(result, *files, verdicts), indent=2))
    elif fmt is ReconcileFormat.TEXT:
        typer.echo("\n".join(report_lines(result, *files, verdicts)))
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
) -> tuple[Reconciled, tuple[CaptureFile, CaptureFile], Verdicts | None]:
    if folder is not None and folder.exists() and not force:  # before a capture is read
        prepare_out_dir(folder, force)  # raises: exists, or not a folder
    for path in (sender, receiver):
        if path.is_dir():
            raise InputError(str(path), "a folder, not a capture")
    result = reconcile(sender, receiver, ports)
    verdicts = receiver_verdicts(receiver, keys, ports) if keys else None
    files = (
        CaptureFile(str(sender), sha256_file(sender), result.sender_esp + result.sender_other,
                    result.sender_esp),
        CaptureFile(str(receiver), sha256_file(receiver),
                    result.receiver_esp + result.receiver_other, result.receiver_esp),
    )  # fmt: skip
    if folder is not None:
        prepare_out_dir(folder, force)
        write_folder(result, folder, files, verdicts)
    return result, files, verdicts


def receiver_verdicts(receiver: Path, keys: list[str], ports: frozenset[int]) -> Verdicts:
    """The receiver model's verdict (analyze's ``receiver`` column) of each frame of the
    receiver's capture, its outermost ESP packet's: what the receiver did with it."""
    packets = analyze(receiver, keys, Options(natt_ports=ports)).packets
    outer = packets[packets["layer"] == packets.groupby("frame")["layer"].transform("min")]
    return dict(zip(outer["frame"].tolist(), outer["receiver"].tolist(), strict=True))
