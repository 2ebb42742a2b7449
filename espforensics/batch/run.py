"""A batch over many captures: discover, skip what is done, run the rest, tabulate.

In: PATH arguments, global key files, the batch output folder and how to
run (local pool of ``jobs`` processes, or a Dask scheduler). Out: a
``BatchResult`` (one row per capture, sorted by name) and, in the output
folder, ``captures/NAME/`` per capture, the partitioned dataset
``packets/capture=NAME/``, ``captures.csv``/``captures.parquet``,
``report.txt``, ``report.html`` and ``manifest.json``. Raises ``InputError`` for PATHs
that name nothing and bad global key files; a bad capture is a row.
Every file is written under a ``.partial-`` name and renamed into place,
so a killed batch leaves no half-written file under a final name.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from espforensics.analysis import sha256_file
from espforensics.batch.discover import Job, Skipped, discover_all
from espforensics.batch.executor import run_dask, run_local
from espforensics.batch.manifest import MANIFEST, Manifest, entry_key
from espforensics.batch.report import render_batch_html, render_batch_report
from espforensics.batch.task import (
    PARTIAL,
    CaptureResult,
    CaptureTask,
    key_names,
    key_source,
    manifest_entry,
)
from espforensics.engine.dask_workers import check_scheduler
from espforensics.engine.workers import cap_workers, usable_cores
from espforensics.errors import TRACEBACK_FILE, CaptureError, OutputExistsError
from espforensics.keys import load_sas
from espforensics.model.enums import FindingKind, Verdict
from espforensics.tables.small import write_rows

BatchProgress = Callable[[CaptureResult, int, int], None]  # result, done so far, total


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a batch found, capture by capture."""

    rows: tuple[CaptureResult, ...]
    skipped: int  # captures whose results came from the manifest
    analyzed: int
    passed_over: tuple[Skipped, ...] = ()  # named like captures, not regular files: not read


def capture_columns() -> list[str]:
    """The columns of captures.csv, in order."""
    return (
        ["path", "name", "sha256", "status", "error", "frames", "esp_packets"]
        + [f"verdict_{v.value}" for v in Verdict]
        + [f"finding_{k.value}" for k in FindingKind]
        + ["worst", "keys", "key_source", "keyless"]
    )


def capture_row(r: CaptureResult) -> list[object]:
    """A result as a row of captures.csv."""
    return (
        [r.path, r.name, r.sha256, r.status, r.error, r.frames, r.esp_packets]
        + [r.verdicts.get(v.value, 0) for v in Verdict]
        + [r.findings.get(k.value, 0) for k in FindingKind]
        + [r.worst, ";".join(r.keys), r.key_source, r.keyless]
    )


def _prepare(out: Path) -> None:
    if out.exists() and not out.is_dir():  # as analyze's --out (results/folder.py)
        raise OutputExistsError(str(out), "exists and is not a folder")
    try:
        (out / "captures").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputExistsError(str(out), f"cannot create output folder: {exc.strerror}") from exc
    for stale in (out / "captures").glob(f"{PARTIAL}*"):  # left by an interrupted run
        shutil.rmtree(stale)
    for leftover in [
        *(out / "packets").glob(f"capture=*/{PARTIAL}*"),
        *out.glob(f"{PARTIAL}*"),
        *out.glob(f"{MANIFEST}.*.tmp"),  # a manifest written aside when the batch was killed
        out / TRACEBACK_FILE,  # of an earlier run's bug
    ]:
        if leftover.is_dir():
            shutil.rmtree(leftover)
        elif leftover.exists():
            leftover.unlink()


def _write_tables(out: Path, batch: BatchResult) -> None:
    """captures.csv/.parquet, report.txt and report.html, each written aside and renamed."""
    staged = out / f"{PARTIAL}captures"  # write_rows adds .csv and .parquet
    write_rows(staged, capture_columns(), [capture_row(r) for r in batch.rows])
    report = out / f"{PARTIAL}report.txt"
    report.write_text(render_batch_report(batch.rows))
    html = out / f"{PARTIAL}report.html"
    html.write_text(render_batch_html(batch.rows), encoding="utf-8")
    for ext in (".csv", ".parquet"):
        os.replace(staged.with_suffix(ext), (out / "captures").with_suffix(ext))
    os.replace(report, out / "report.txt")
    os.replace(html, out / "report.html")


def _plan(
    jobs: list[Job], out: Path, manifest: Manifest, base: CaptureTask, force: bool
) -> tuple[list[CaptureTask], list[CaptureResult], dict[str, str]]:
    """Tasks to run, results to reuse, and each task's manifest key."""
    tasks, reused, keys = [], [], {}
    options = f"natt={sorted(base.natt_ports)};plots={base.plots}"
    for job in jobs:
        own = job.sidecars or job.folder_keys
        key_files = [*own, *(Path(k) for k in base.global_keys)]
        task = replace(
            base,
            capture=str(job.capture),
            name=job.name,
            sidecars=tuple(str(s) for s in own),
            sidecars_from="sidecar" if job.sidecars else "folder",
        )
        try:
            sha = sha256_file(job.capture)
        except CaptureError as exc:
            reused.append(
                CaptureResult(
                    task.capture, job.name, "", "error", str(exc),
                    keys=key_names(task), key_source=key_source(task),
                    keyless=not key_files,
                )
            )  # fmt: skip
            continue
        key = entry_key(sha, key_files, options)
        entry = None if force else manifest.done(key)
        if (
            entry is not None
            and entry["name"] == job.name
            and (out / "captures" / job.name).is_dir()
        ):
            reused.append(_from_json(entry["result"]))
            continue
        keys[job.name] = key
        tasks.append(replace(task, sha256=sha, manifest_key=key))
    return tasks, reused, keys


def _from_json(d: dict[str, object]) -> CaptureResult:
    return CaptureResult(**{**d, "keys": tuple(d["keys"])})  # type: ignore[arg-type]


def run_batch(
    paths: Sequence[str],
    sas: Sequence[str],
    out: Path,
    *,
    jobs: int | None = 1,
    force: bool = False,
    scheduler: str | None = None,
    natt_ports: tuple[int, ...] = (4500,),
    plots: bool = True,
    progress: BatchProgress | None = None,
    notice: Callable[[str], None] | None = None,
) -> BatchResult:
    """Analyze every capture PATHs name into ``out``; resume what an earlier run did.

    ``jobs``: worker processes, None for one per usable core; never more than
    the captures to analyze or the cores (``notice`` is told when ``jobs`` was
    capped: engine/workers.py).
    """
    discovery = discover_all(paths)
    found = discovery.jobs
    if sas:
        load_sas(list(sas))  # a bad global key file stops the batch before it starts
    if scheduler:
        check_scheduler(scheduler)  # so does a scheduler not reached, even with nothing to do
    _prepare(out)
    manifest = Manifest(out)
    base = CaptureTask("", "", str(out), "", tuple(str(s) for s in sas), (), natt_ports, plots)
    tasks, reused, keys = _plan(found, out, manifest, base, force)
    results: list[CaptureResult] = []

    def done(result: CaptureResult) -> None:
        results.append(result)
        manifest.record(keys[result.name], manifest_entry(result))  # a worker's: no write
        if progress is not None:
            progress(result, len(results), len(tasks))

    if scheduler:
        run_dask(tasks, scheduler, done)
    else:
        workers = cap_workers(jobs or usable_cores(), len(tasks), usable_cores())
        if notice is not None and jobs is not None and workers.why:
            notice(workers.notice())
        run_local(tasks, workers.count, done)
    rows = tuple(sorted([*reused, *results], key=lambda r: r.name))
    batch = BatchResult(
        rows,
        len(reused) - sum(1 for r in reused if not r.sha256),
        len(results),
        tuple(discovery.skipped),
    )
    _write_tables(out, batch)
    return batch
