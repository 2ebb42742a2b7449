"""The GC threshold raised while analyses run, and restored (analyzer/collector.py)."""

from __future__ import annotations

import gc

import pytest

from espforensics.analyzer.collector import fewer_collections


def test_fewer_collections_restores_the_gc_settings() -> None:
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold() == (50_000, *before[1:])
    assert gc.get_threshold() == before
    with pytest.raises(ValueError), fewer_collections():
        raise ValueError
    assert gc.get_threshold() == before


def test_fewer_collections_nested_on_threads_restores_once_all_end() -> None:
    before = gc.get_threshold()
    first, second = fewer_collections(), fewer_collections()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first analysis ends while the second runs
    assert gc.get_threshold()[0] == 50_000
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before
