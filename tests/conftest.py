"""Fixtures every test gets."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import espforensics.cli.commands
from espforensics.engine import pool, prefetch
from espforensics.engine.plain import Decoded
from espforensics.engine.plan import Opening
from espforensics.engine.prefetch import Prefetch, resolve
from espforensics.model.options import Options
from tests.support import helpers
from tests.support.helpers import CAPTURES, NO_CAPTURES, PER_FRAME, STEADY

# No Hypothesis test depends on the machine's speed: no deadline per example, and no
# health check failing a test whose data take long to draw on a loaded machine. A test's
# own @settings (its max_examples) still applies, over these.
settings.register_profile(
    "espforensics", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("espforensics")


# -- the real captures of ../shared: one marker, skipped where they are absent ----------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_captures: reads ../shared/captures (tests.support.helpers.needs_captures)"
    )
    config.addinivalue_line(
        "markers",
        "slow: takes seconds, not milliseconds (a benchmark script, worker processes, a whole"
        " capture run many times); `pytest -m 'not slow'` leaves them out",
    )
    sys.addaudithook(helpers.audit_captures)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes the ``captures`` fixture, itself or through another, is marked; a
    marked test skips where the captures are absent (before any of its fixtures)."""
    absent = not CAPTURES.is_dir()
    for item in items:
        if "captures" in getattr(item, "fixturenames", ()):
            item.add_marker(helpers.needs_captures)
        if absent and item.get_closest_marker("real_captures") is not None:
            item.add_marker(pytest.mark.skip(reason=NO_CAPTURES))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """An unmarked test is watched: if it reads the captures, it fails (helpers.audit_captures)."""
    helpers.watch_captures(None if item.get_closest_marker("real_captures") else item.nodeid)
    yield
    helpers.watch_captures(None)


@pytest.fixture(autouse=True)
def _no_periodic_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal, ``analyze`` writes a progress line once a run passes 10 s; on a loaded
    CI machine a test's run may, so a test's stderr would depend on timing. The clock stands
    still here; tests of the progress lines (tests/cli/test_progress.py) set their own."""
    monkeypatch.setattr(espforensics.cli.commands, "monotonic", lambda: 0.0)


@pytest.fixture(params=[PER_FRAME, STEADY], ids=["per-frame", "steady-batch64"])
def lane(request: pytest.FixtureRequest) -> Options:
    """The engine's two lanes: an in-process end-to-end test runs once with each
    (``Options(steady_lane=False)``, the per-frame reference, and the default, the
    steady lane); their outputs must be the same (issue 21)."""
    options: Options = request.param
    return options


@pytest.fixture(scope="session")
def captures() -> Path:
    """The real captures' folder, beside the checkout; a test that takes it, or takes a
    fixture that does, is marked ``real_captures`` and skips where it is absent."""
    return CAPTURES


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """--jobs runs whose engine waits for its workers (``pool.PATIENT``); yields
    [batches opened by a worker, by the engine itself] of those a worker's prefetch came
    for (``resolve`` took it, or refused it), so a test can assert the workers did work."""
    monkeypatch.setattr(pool, "PATIENT", True)
    counts = [0, 0]

    def counting(pre: Prefetch, opening: Opening, idents: list[bytes]) -> Decoded | None:
        found = resolve(pre, opening, idents)
        counts[found is None] += 1
        return found

    monkeypatch.setattr(prefetch, "resolve", counting)  # engine/run.py imports it when used
    yield counts
