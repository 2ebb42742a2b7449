"""The ``espforensics`` command and ``python -m espforensics``.

Light on purpose: the command line (typer; cli/__init__.py then imports the
analysis, numpy, pyarrow, cryptography, only inside the command that runs)
is imported inside ``main``, so a Ctrl-C while it loads is reported like
any other, in one line and exit 130. A bug anywhere in a
command is one line and exit 70 (``cli.main``). A worker process of
``batch --jobs`` imports this module again, and needs none of them.
"""

import sys


def main() -> None:
    """Console entry point (a Ctrl-C during a command is reported by ``cli._guarded``)."""
    try:
        from espforensics.cli import main as run  # noqa: PLC0415
    except KeyboardInterrupt:
        from espforensics.errors import INTERRUPTED  # noqa: PLC0415

        print(INTERRUPTED, file=sys.stderr)
        raise SystemExit(130) from None
    run()


if __name__ == "__main__":  # not when a worker process of batch --jobs imports it
    main()
