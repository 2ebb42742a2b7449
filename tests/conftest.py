"""Fixtures every test gets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import espforensics.cli
from espforensics.engine import pool, run
from espforensics.engine.plain import Decoded
from espforensics.engine.plan import Opening
from espforensics.engine.prefetch import Prefetch, resolve
from espforensics.pipeline import Options
from tests.helpers import CAPTURES, NO_CAPTURES, PER_FRAME, STEADY


@pytest.fixture(autouse=True)
def _no_periodic_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal, ``analyze`` writes a progress line once a run passes 10 s; on a loaded
    CI machine a test's run may, so a test's stderr would depend on timing. The clock stands
    still here; tests of the progress lines (tests/test_progress.py) set their own."""
    monkeypatch.setattr(espforensics.cli, "monotonic", lambda: 0.0)


@pytest.fixture(params=[PER_FRAME, STEADY], ids=["per-frame", "steady-batch64"])
def lane(request: pytest.FixtureRequest) -> Options:
    """The engine's two lanes: an in-process end-to-end test runs once with each
    (``Options(steady_lane=False)``, the per-frame reference, and the default, the
    steady lane); their outputs must be the same (issue 21)."""
    options: Options = request.param
    return options


@pytest.fixture(scope="session")
def captures() -> Path:
    """The real captures' folder, beside the checkout; the test skips where it is absent."""
    if not CAPTURES.is_dir():
        pytest.skip(NO_CAPTURES)
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

    monkeypatch.setattr(run, "resolve", counting)
    yield counts
