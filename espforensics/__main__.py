"""The ``espforensics`` command and ``python -m espforensics``.

Light on purpose: the command line (typer; cli/__init__.py then imports the
analysis, numpy, pyarrow, cryptography, only inside the command that runs)
is imported inside ``main``, so a Ctrl-C while it loads is reported like
any other, in one line and exit 130. A bug anywhere in a
command is one line and exit 70 (``cli.main``). A worker process of
``batch --jobs`` imports this module again, and needs none of them.

When the command is done the process ends: every object then alive is
handed to ``gc.freeze`` first, so that the interpreter's shutdown does not
walk the whole heap (numpy, pyarrow, the analysis: about 70 ms of CPU
after a run of the bundled example, docs/performance.md) to find cycles
among objects that die with the process anyway. Objects are still freed
as the modules are cleared; only cycles left at that moment are not
collected. The outputs are complete and renamed into place before.

The command sets ``OPENBLAS_NUM_THREADS`` to 1 unless the environment
already sets it: numpy's OpenBLAS otherwise starts a thread per core as
numpy is imported, and they spin for about 60 ms of CPU, a fifth of a run
of the bundled example, though espforensics does no linear algebra. Its
worker processes inherit it. The library (``import espforensics``) leaves
the environment alone.
"""

import gc
import os
import sys


def main() -> None:
    """Console entry point (a Ctrl-C during a command is reported by ``cli._guarded``)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: no BLAS threads
    try:
        from espforensics.cli import main as run  # noqa: PLC0415
    except KeyboardInterrupt:
        from espforensics.errors import INTERRUPTED  # noqa: PLC0415

        print(INTERRUPTED, file=sys.stderr)
        raise SystemExit(130) from None
    try:
        run()
    finally:
        gc.freeze()  # the process ends now: its shutdown walks none of what is alive


if __name__ == "__main__":  # not when a worker process of batch --jobs imports it
    main()
