"""Fixtures every test gets."""

from __future__ import annotations

import pytest

import espforensics.cli


@pytest.fixture(autouse=True)
def _no_periodic_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal, ``analyze`` writes a progress line once a run passes 10 s; on a loaded
    CI machine a test's run may, so a test's stderr would depend on timing. The clock stands
    still here; tests of the progress lines (tests/test_progress.py) set their own."""
    monkeypatch.setattr(espforensics.cli, "monotonic", lambda: 0.0)
