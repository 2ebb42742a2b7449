"""Run ``espforensics batch`` in a child interrupted right after one chosen capture is done.

``python tests/support/interrupt_at.py NAME HOW STOPPED ARGS...`` wraps
``espforensics.batch.task.run_task`` (before the batch's pool starts, so a
forked worker runs the wrapper too). When the task for capture NAME has
returned its result, the process that ran it writes its pid to the file
STOPPED, then interrupts the batch as HOW says: ``group`` sends SIGINT to
the batch's process group (what a terminal's Ctrl-C does), ``batch`` to
the batch process alone, ``kill`` sends it SIGKILL. A worker then waits
until it is ended (it never hands NAME's result back): whatever the
batch keeps of NAME, it kept before the batch process heard of it. In the
batch process itself (``--jobs 1``) the signal acts at once.

The test knows which capture was finished when the batch was stopped, and
which process to see gone, without guessing a time. Nothing in
espforensics knows about it (no hook, no environment variable).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from pathlib import Path

SIGNALS = {"group": signal.SIGINT, "batch": signal.SIGINT, "kill": signal.SIGKILL}


def _install(name: str, how: str, stopped: str) -> None:
    from espforensics.batch import task as module
    from espforensics.batch.task import CaptureResult, CaptureTask

    original = module.run_task
    batch = os.getpid()

    @functools.wraps(original)  # pickled by name: a worker finds this wrapper under it
    def run_task(task: CaptureTask) -> CaptureResult:
        result = original(task)
        if task.name == name:
            Path(stopped).write_text(str(os.getpid()))
            if how == "group":
                os.killpg(os.getpgid(batch), SIGNALS[how])
            else:
                os.kill(batch, SIGNALS[how])
            while os.getpid() != batch:  # a worker: ended by the batch, or with it
                signal.pause()
        return result

    module.run_task = run_task


if __name__ == "__main__":
    # A Ctrl-C acts here as in a terminal's job, however the tests were started: a
    # shell's background job (`pytest &`, nohup) starts with SIGINT ignored, and an
    # ignored SIGINT is inherited, so the batch would never hear it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _install(*sys.argv[1:4])
    sys.argv = ["espforensics", *sys.argv[4:]]
    from espforensics.__main__ import main

    main()
