"""A test that reads ../shared/captures skips where they are absent, or fails where it
does not say so (tests/support/helpers.py: ``needs_captures``, ``audit_captures``).

A few tests in a folder of their own are run by pytest in a child process with this
suite's conftest as a plugin: the one that reads the captures unmarked must fail, with or
without them beside the checkout (before the guard it passed where they were present and
errored on a fresh clone); the ones that say so pass or skip with ``NO_CAPTURES``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import CAPTURES, NO_CAPTURES, ROOT

CASES = """
import pytest
from pathlib import Path
from tests.support.helpers import CAPTURES, capture_params, needs_captures, real_capture

README = CAPTURES / "README.md"


def test_unmarked():
    try:
        README.read_text()
    except OSError:  # a test that hides its failure to read is still caught
        pass


def test_unmarked_command():
    import subprocess
    subprocess.run(["cat", str(README)], capture_output=True)


@needs_captures
def test_marked():
    assert README.read_text()


def test_fixture(captures: Path):
    assert (captures / "README.md").read_text()


@pytest.fixture
def readme(captures: Path) -> str:
    return (captures / "README.md").read_text()


def test_fixture_of_a_fixture(readme: str):
    assert readme


def test_real_capture():
    assert real_capture("linux-6.1/esn-wrap-v4").pcap.read_bytes()


@pytest.mark.parametrize("name", capture_params("linux-6.1")[:1])
def test_params(name: str):
    assert (CAPTURES / name / "capture.pcap").read_bytes()


def test_no_captures_read():
    assert CAPTURES.name == "captures"
"""
SAY_SO = [
    "test_marked",
    "test_fixture",
    "test_fixture_of_a_fixture",
    "test_real_capture",
    "test_params",
]


@pytest.mark.slow
def test_a_test_reading_the_captures_unmarked_fails_and_a_marked_one_skips(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_cases.py").write_text(CASES)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plugins = ["-p", "tests.conftest", "-p", "no:cacheprovider", "-p", "no:randomly"]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *plugins,
            "-rA",
            "--rootdir",
            str(tmp_path),
            "test_cases.py",
        ],
        check=False,  # its tests fail on purpose: the exit code is asserted below
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = res.stdout.splitlines()
    failed = sorted(line.split()[1] for line in lines if line.startswith("FAILED "))
    assert failed == ["test_cases.py::test_unmarked", "test_cases.py::test_unmarked_command"]
    for name in ("test_unmarked", "test_unmarked_command"):
        assert f"test_cases.py::{name} reads {CAPTURES}/README.md without " in res.stdout
    assert "PASSED test_cases.py::test_no_captures_read" in lines
    if CAPTURES.is_dir():
        passed = [line for line in lines if line.startswith("PASSED ")]
        assert len(passed) == len(SAY_SO) + 1, res.stdout
    else:
        skipped = [line for line in lines if line.startswith("SKIPPED [")]
        assert sum(int(line[9 : line.index("]")]) for line in skipped) == len(SAY_SO), res.stdout
        assert all(line.endswith(NO_CAPTURES) for line in skipped), res.stdout
    assert res.returncode == 1, res.stdout + res.stderr
