"""The ``espforensics`` command line: parse options, call the library, map errors.

In: argv. Out: files in the output folder, a short summary on stdout,
progress on stderr when it is a terminal. Exit codes: 0 done, 2 usage or
input error (one line ``espforensics: error: <file>: <what>``). Nothing
imports this module; it is the only module that imports typer and rich.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from espforensics.analysis import Progress, analyze_to_dir, default_out_dir
from espforensics.errors import EspForensicsError
from espforensics.pipeline import Options
from espforensics.render.text import render_summary

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,  # never print locals: they may hold keys
    no_args_is_help=True,
    help="Offline forensic analysis of IPsec ESP captures.",
)
T = TypeVar("T")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"espforensics: error: {message}", err=True)
    return typer.Exit(2)


def _guarded(call: Callable[[], T]) -> T:
    try:
        return call()
    except EspForensicsError as exc:
        raise _fail(str(exc)) from None


def _progress(capture: Path, quiet: bool) -> tuple[Progress | None, Callable[[], None]]:
    """A progress bar on stderr for terminals; a no-op otherwise."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import Progress as Bar  # noqa: PLC0415 (only for terminals)

    try:
        total = os.path.getsize(capture)
    except OSError:
        total = None
    bar = Bar(transient=True)
    task = bar.add_task("analyzing", total=total)
    bar.start()
    return (lambda n: bar.update(task, completed=min(n, total or n))), bar.stop


@app.callback()
def main_callback() -> None:
    """Offline forensic analysis of IPsec ESP captures."""


@app.command()
def analyze(
    capture: Annotated[Path, typer.Argument(help="pcap or pcapng file, plain or compressed.")],
    sa: Annotated[
        list[Path] | None,
        typer.Option(
            "--sa", help="Key file: keys.yaml, `ip xfrm state` text or esp_sa. Repeatable."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Output folder [default: CAPTURE.espforensics].")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing output folder.")
    ] = False,
    natt_port: Annotated[
        list[int] | None,
        typer.Option(
            "--natt-port", help="UDP port carrying ESP-in-UDP. Repeatable. [default: 4500]"
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar, no summary.")
    ] = False,
) -> None:
    """Decrypt and check every ESP packet of CAPTURE; write the tables to --out."""
    options = Options(natt_ports=frozenset(natt_port or (4500,)))
    out_dir = out if out is not None else default_out_dir(capture)
    update, stop = _progress(capture, quiet)
    try:
        summary = _guarded(
            lambda: analyze_to_dir(
                capture, sa or [], out_dir, force=force, options=options, progress=update
            )
        )
    finally:
        stop()
    if not quiet:
        typer.echo(render_summary(summary), nl=False)
        typer.echo(f"  outputs: {out_dir}/")


def main() -> None:
    """Console entry point."""
    app()
