"""``espforensics reconcile SENDER RECEIVER``: the command around reconcile.py.

In: two capture paths, the output folder, the ESP-in-UDP ports. Out:
``DIR/reconcile.csv`` and two lines on stdout (what each capture held, the
packets per fate); exit 0, or 2 for a capture it cannot read or a folder
it may not write (one line). Raises only ``typer.Exit``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from espforensics.cli_errors import _guarded
from espforensics.cli_typer import NattOption, QuietOption
from espforensics.errors import OutputError, OutputExistsError
from espforensics.reconcile import Reconciled, reconcile, summary_lines, write_reconcile_csv


def reconcile_command(
    sender: Annotated[
        Path, typer.Argument(metavar="SENDER", help="Capture taken on the sender's side.")
    ],
    receiver: Annotated[
        Path, typer.Argument(metavar="RECEIVER", help="Capture of the same run, receiver's side.")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="DIR", help="Output folder [default: RECEIVER.reconcile]."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite reconcile.csv in an existing folder.")
    ] = False,
    natt_port: NattOption = None,
    quiet: QuietOption = False,
) -> None:
    """Join two captures of one run on (SPI, sequence number) and the ESP bytes: the fate
    of every packet (delivered, lost, changed, duplicated, reordered, outer_rewritten,
    unexpected) in DIR/reconcile.csv."""
    folder = out if out is not None else receiver.with_name(receiver.name + ".reconcile")
    ports = frozenset(natt_port or (4500,))
    result: Reconciled = _guarded(lambda: _run(sender, receiver, folder, force, ports))
    if not quiet:
        for line in summary_lines(result):
            typer.echo(line)
        typer.echo(f"  outputs: {folder}/reconcile.csv")


def _run(
    sender: Path, receiver: Path, folder: Path, force: bool, ports: frozenset[int]
) -> Reconciled:
    target = folder / "reconcile.csv"
    if target.exists() and not force:
        raise OutputExistsError(str(target), "exists; use --force to overwrite it")
    result = reconcile(sender, receiver, ports)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_reconcile_csv(result, target)
    except OSError as exc:
        raise OutputError(str(folder), f"cannot write: {exc.strerror}") from exc
    return result
