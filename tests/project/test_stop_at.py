"""tests/support/stop_at.py's ``stopped``, which the Ctrl-C and kill tests start their
commands with.

A command stopped there gets a Ctrl-C as from a terminal even where the suite itself
runs with SIGINT ignored (a script's background job, nohup, some CI runners); and
whatever the test does, failing included, nothing of the command is left running or
holding a pipe open for a later test to be blamed for.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import pytest

from tests.support.procs import alive
from tests.support.stop_at import stopped

# Starts a child that ignores Ctrl-C (as a worker does) and waits on the same stdin; once
# it is ready, writes "reached" and waits on stdin itself.
WAITING = """
import os, subprocess, sys
CHILD = "import os, signal; signal.signal(signal.SIGINT, signal.SIG_IGN); print(); os.read(0, 1)"
child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE)
child.stdout.readline()
try:  # "reached" written inside: the Ctrl-C that follows it lands here, never before
    os.write(1, b"reached\\n")
    os.read(0, 1)
except KeyboardInterrupt:
    os.write(2, b"interrupted\\n")
    sys.exit(130)
"""


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """This process ignores SIGINT, as a background job of a shell script does."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stopped_command_gets_ctrl_c_where_the_suite_ignores_it(sigint_ignored: None) -> None:
    with stopped([sys.executable, "-c", WAITING]) as run:
        os.killpg(run.proc.pid, signal.SIGINT)
        _, err = run.proc.communicate()
    assert (run.proc.returncode, err) == (130, b"interrupted\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_failing_test_leaves_no_process_and_no_open_pipe() -> None:
    with (
        pytest.raises(AssertionError, match="the test failed"),
        stopped([sys.executable, "-c", WAITING]) as run,
    ):
        assert len(run.below) == 1  # the child, waiting too
        raise AssertionError("the test failed")
    assert run.proc.returncode == -signal.SIGKILL
    assert not alive(run.below[0])
    assert all(p is not None and p.closed for p in (run.proc.stdin, run.proc.stdout))
    assert run.proc.stderr is not None and run.proc.stderr.closed


def test_a_command_that_ends_before_its_stop_is_an_error_naming_it() -> None:
    argv = [sys.executable, "-c", "import sys; sys.exit('no stop here')"]
    said = "did not reach the stop: b'' b'no stop here"
    with pytest.raises(AssertionError, match=said), stopped(argv):
        pass
