"""The cyclic garbage collector's threshold raised while analyses run.

In: nothing; ``with fewer_collections():`` around an analysis (the frames,
the summary, the reports, the copies). Out: the threshold restored when the
last analysis of the process ends. Raises nothing of its own.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _FewerCollections:
    """Run the cyclic GC after 50,000 allocations instead of 700 while analyses run
    (the frames, the summary and the reports).

    The per-frame path makes many short-lived containers and few cycles; at
    the default threshold the collector takes a few percent of a run. A
    capture of many SAs keeps tens of objects per SA to the end: at 700, the
    summary's row per SA makes the collector walk them all again, a full
    collection of about a second for 60,000 SAs (docs/performance.md). The
    first analysis in the process sets the threshold and the last one to end
    restores the caller's (analyses may run on several threads, as on Dask).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._saved: tuple[int, int, int] = gc.get_threshold()

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if not self._running:
                self._saved = gc.get_threshold()
                gc.set_threshold(50_000, *self._saved[1:])
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    gc.set_threshold(*self._saved)


fewer_collections = _FewerCollections()
