"""One capture of a batch, as a task a worker process (or a Dask worker) runs.

In: a ``CaptureTask`` (plain, picklable values only). Out: a
``CaptureResult``, the capture's row of ``captures.csv``; the capture's
outputs in ``OUT/captures/NAME/`` and its packets in the batch's
partitioned dataset ``OUT/packets/capture=NAME/``. Raises nothing for a
bad capture or a bad sidecar key file (the result records the error);
lets other errors through.

Outputs are written to ``OUT/captures/.partial-NAME`` and renamed into
place only when the capture is finished, so an interrupted batch never
leaves a folder that looks complete; the dataset's file is staged as
``.partial-packets.parquet`` and renamed the same way.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from espforensics.analysis import analyze_to_dir, load_summary
from espforensics.batch.manifest import record_entry
from espforensics.errors import InputError
from espforensics.keys import SaTable, argument_name, load_sas
from espforensics.model.options import Options
from espforensics.report.narrative import worst_severity
from espforensics.results.summary import Summary

PARTIAL = ".partial-"


@dataclass(frozen=True, slots=True)
class CaptureTask:
    """Everything a worker needs to analyze one capture."""

    capture: str
    name: str
    out: str  # the batch's output folder
    sha256: str
    global_keys: tuple[str, ...] = ()
    sidecars: tuple[str, ...] = ()  # the capture's own key files
    natt_ports: tuple[int, ...] = (4500,)
    plots: bool = True
    sidecars_from: str = "sidecar"  # or "folder": found by content beside the capture
    manifest_key: str = ""  # the capture's manifest entry, recorded as soon as it is done


@dataclass(frozen=True, slots=True)
class CaptureResult:
    """One row of captures.csv."""

    path: str
    name: str
    sha256: str
    status: str  # "done" or "error"
    error: str = ""
    frames: int = 0
    esp_packets: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    findings: dict[str, int] = field(default_factory=dict)
    worst: str = ""  # the most severe finding's severity, "" if none
    keys: tuple[str, ...] = ()
    key_source: str = ""  # "sidecar", "folder", "--sa", joined with "+", or "none"
    keyless: bool = False  # analyzed without any SA: no key file, none in the capture


def keys_for(task: CaptureTask) -> SaTable:
    """Sidecar SAs, plus the --sa SAs whose SPI no sidecar of this capture defines."""
    own = load_sas(list(task.sidecars)) if task.sidecars else SaTable()
    spis = {sa.spi for sa in own}
    if task.global_keys:
        for sa in load_sas(list(task.global_keys)):
            if sa.spi not in spis:  # a sidecar wins for its own capture
                own.add(sa)
    return own


def key_names(task: CaptureTask) -> tuple[str, ...]:
    """The key files of a capture for captures.csv: paths, and key text only by its kind."""
    return task.sidecars + tuple(argument_name(k) for k in task.global_keys)


def key_source(task: CaptureTask) -> str:
    """Where the capture's key files came from, for captures.csv."""
    sources = ([task.sidecars_from] if task.sidecars else []) + (
        ["--sa"] if task.global_keys else []
    )
    return "+".join(sources) or "none"


def _keyless(task: CaptureTask, summary: Summary | None) -> bool:
    """No key file, and no SA the capture brought itself (pcapng decryption secrets)."""
    if task.sidecars or task.global_keys:
        return False
    return summary is None or not any(sa.algorithm for sa in summary.sas)


def _result(task: CaptureTask, summary: Summary | None, error: str) -> CaptureResult:
    worst = worst_severity(summary) if summary is not None else None
    return CaptureResult(
        path=task.capture,
        name=task.name,
        sha256=task.sha256,
        status="error" if error else "done",
        error=error,
        frames=summary.capture.frames if summary else 0,
        esp_packets=summary.esp_packets if summary else 0,
        verdicts=dict(summary.verdicts) if summary else {},
        findings=dict(summary.findings) if summary else {},
        worst=worst.value if worst is not None else "",
        keys=key_names(task),
        key_source=key_source(task),
        keyless=_keyless(task, summary),
    )


def _publish(out: Path, partial: Path, name: str) -> Path:
    """Move a finished capture's folder into place and link its packets into the dataset."""
    final = out / "captures" / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)
    part = out / "packets" / f"capture={name}"
    if part.exists():
        shutil.rmtree(part)
    table = final / "packets.parquet"
    if table.exists():
        part.mkdir(parents=True)
        # Linked or copied under a hidden name (dataset readers skip those), then renamed:
        # a batch killed during the copy leaves no half file in the dataset.
        staged = part / f"{PARTIAL}packets.parquet"
        try:
            os.link(table, staged)
        except OSError:  # another file system: copy instead
            shutil.copyfile(table, staged)
        os.replace(staged, part / "packets.parquet")
    return final


def run_task(task: CaptureTask) -> CaptureResult:
    """Analyze one capture into the batch; record, never raise, its input errors."""
    out = Path(task.out)
    partial = out / "captures" / f"{PARTIAL}{task.name}"
    if partial.exists():
        shutil.rmtree(partial)
    options = Options(natt_ports=frozenset(task.natt_ports))
    summary: Summary | None = None
    error = ""
    try:
        summary = analyze_to_dir(
            task.capture,
            keys_for(task),
            partial,
            options=options,
            plots=task.plots,
            sha256=task.sha256 or None,
        )
    except InputError as exc:
        error = str(exc)
        if (partial / "summary.json").exists():
            summary = load_summary(partial)
    if partial.exists():
        _publish(out, partial, task.name)
    result = _result(task, summary, error)
    if task.manifest_key:  # here, not when the batch process hears of it: a Ctrl-C or a
        # kill between the two would lose the capture (docs/batch.md, "Resuming")
        record_entry(out, task.manifest_key, manifest_entry(result))
    return result


def manifest_entry(result: CaptureResult) -> dict[str, Any]:
    """A finished capture's entry in manifest.json."""
    return {"status": result.status, "name": result.name, "result": asdict(result)}
