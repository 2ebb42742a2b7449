"""``analyze --scheduler ADDRESS``: a Dask cluster's workers prefetch one capture's batches.

In: the scheduler's address, the SAs of the key files and the NAT-T ports.
Out: ``check_scheduler`` (the scheduler reached, before a run starts) and
``dask_backend``, a ``pool.Backend`` whose ``submit`` runs ``prefetch``
(engine/prefetch.py) on the cluster: each task reads its batch from the
capture at the same path (the file must be on storage the workers share),
the SAs are sent to each worker once (``Client.scatter``). Raises
``InputError`` naming the address when dask is not installed or the
scheduler cannot be reached.

The engine's process keeps every piece of state and takes the cluster's
results only where its own plan agrees (``prefetch.resolve``), as with
local workers: the outputs are the same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from espforensics.capture.batch import Span
from espforensics.engine.prefetch import KeyRing, Prefetch, prefetch
from espforensics.errors import InputError
from espforensics.keys import SaTable

if TYPE_CHECKING:
    from espforensics.engine.pool import Backend

_RINGS: dict[int, tuple[SaTable, KeyRing]] = {}  # a worker's contexts, per scattered table


def _work_on(
    span: Span, table: SaTable, ports: frozenset[int], hints: dict[bytes, int]
) -> Prefetch:
    """A cluster task: the prefetch of one batch (contexts built once per worker)."""
    held = _RINGS.get(id(table))
    if held is None or held[0] is not table:
        held = _RINGS[id(table)] = (table, KeyRing(table))
    batch = span.read()
    try:
        return prefetch(batch, ports, held[1], hints)
    finally:
        batch.release()


class _Pending:
    """A cluster future: cancelling it only drops its result (a task may be running)."""

    def __init__(self, future: Any) -> None:
        self._future = future

    def done(self) -> bool:
        return bool(self._future.done())

    def cancel(self) -> bool:
        self._future.cancel()
        return True

    def result(self) -> Prefetch:
        found: Prefetch = self._future.result()
        return found


class _Cluster:
    def __init__(self, client: Any, table: SaTable, ports: frozenset[int]) -> None:
        self._client, self._ports = client, ports
        self._table = client.scatter(table, broadcast=True)
        self.slots = max(1, sum(client.nthreads().values()))

    def submit(self, span: Span, hints: dict[bytes, int]) -> _Pending:
        task = self._client.submit(_work_on, span, self._table, self._ports, hints, pure=False)
        return _Pending(task)

    def close(self) -> None:
        self._client.close()


CONNECT_TIMEOUT = "10s"  # how long a client tries to reach the scheduler (dask's notation)


def dask_client(address: str) -> Any:
    """A client of the Dask scheduler at ``address`` (``batch`` and ``analyze``'s
    ``--scheduler``); raises ``InputError`` naming it when dask is not installed or the
    scheduler cannot be reached."""
    try:  # imported here: dask is an optional extra, needed only with --scheduler
        from dask.distributed import Client  # noqa: PLC0415
    except ImportError as exc:
        why = "--scheduler needs dask, which is not installed: pip install 'espforensics[dask]'"
        raise InputError(address, why) from exc
    try:
        return Client(address, timeout=CONNECT_TIMEOUT)  # type: ignore[no-untyped-call]
    except OSError as exc:
        raise InputError(address, f"cannot reach the Dask scheduler: {exc}") from exc
    except ValueError as exc:  # "missing port number", "unknown address scheme 'udp'"
        raise InputError(address, f"not a Dask scheduler address: {exc}") from exc


def check_scheduler(address: str) -> None:
    """Reach the scheduler at ``address`` once, before a run touches any output: the
    workers of a small capture may never be asked for, and ``--scheduler`` is checked
    whatever the capture's size. Raises as ``dask_client``."""
    dask_client(address).close()


def dask_backend(address: str, table: SaTable, ports: frozenset[int]) -> Backend:
    """The cluster at ``address`` as the workers of one capture."""
    return _Cluster(dask_client(address), table, ports)
