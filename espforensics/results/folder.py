"""The output folder of ``analyze_to_dir``: its files, their ``.partial`` stage, publishing.

In: the folder and ``--force``. Out: the folder made ready
(``prepare_out_dir``), the outputs renamed into place in ``OUTPUT_FILES``
order with summary.json last (``_publish``), and an earlier run's summary
read back (``load_summary``). Raises ``OutputExistsError`` for a folder it
may not use and ``InputError`` for a folder that holds no summary.json of
this version.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from espforensics.errors import (
    TRACEBACK_FILE,
    InputError,
    OutputExistsError,
)
from espforensics.results.summary import Summary

# In the order they are renamed into place: summary.json, the mark of a finished run, last.
OUTPUT_FILES = (
    "packets.parquet",
    "packets.csv",
    "sas.csv",
    "findings.csv",
    "finding_frames.csv",
    "finding_frames.parquet",
    "report.txt",
    "report.md",
    "report.html",
    "plots",
    "summary.json",
)
PARTIAL = ".partial"  # suffix of an output until the run is finished


def partial(out: Path, name: str) -> Path:
    """Where output ``name`` is written before the run is finished."""
    return out / f"{name}{PARTIAL}"


def _remove(target: Path) -> None:
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()


def default_out_dir(path: str | os.PathLike[str]) -> Path:
    """``CAPTURE.espforensics`` beside the capture."""
    return Path(f"{os.fspath(path)}.espforensics")


def prepare_out_dir(out: Path, force: bool) -> None:
    """Create ``out``; refuse an existing one unless ``force``.

    With ``force`` only the ``.partial`` files of an unfinished run and a
    bug's traceback are removed now; the earlier outputs stay until this
    run's replace them (``_publish``), so a run that stops early (a bad
    input, a bug, Ctrl-C) never leaves the folder with nothing in it.
    Nothing else a user keeps in that folder is touched.
    """
    if out.exists() and not out.is_dir():
        raise OutputExistsError(str(out), "exists and is not a folder")
    if out.exists():
        if not force:
            raise OutputExistsError(str(out), "output folder exists; use --force to overwrite it")
        for name in OUTPUT_FILES:
            _remove(partial(out, name))
        _remove(out / TRACEBACK_FILE)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputExistsError(str(out), f"cannot create output folder: {exc.strerror}") from exc


def _publish(out: Path) -> None:
    """Rename every output written into place, in ``OUTPUT_FILES`` order (summary.json last).

    An earlier run's outputs (``--force``) are replaced here, not before:
    its summary.json goes first, so a stop midway leaves no summary.json
    (an unfinished run, docs/outputs.md), and an earlier output this run
    did not write (``plots`` after ``--no-plots``) is removed.
    """
    _remove(out / "summary.json")
    for name in OUTPUT_FILES:
        if partial(out, name).exists():
            if (out / name).is_dir():  # os.replace cannot replace a folder that holds files
                shutil.rmtree(out / name)
            os.replace(partial(out, name), out / name)
        else:
            _remove(out / name)


def load_summary(folder: str | os.PathLike[str]) -> Summary:
    """The summary of an earlier ``analyze`` in ``folder``; raises ``InputError`` saying
    what ``folder`` is when it holds none (``what_folder_is``)."""
    path = Path(folder) / "summary.json"
    try:
        return Summary.from_json(json.loads(path.read_text()))
    except OSError as exc:
        raise InputError(str(folder), what_folder_is(Path(folder), exc)) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(str(path), f"not a summary.json of this version: {exc}") from exc


BATCH_MARK = "manifest.json"  # batch/manifest.py's MANIFEST: this layer cannot import it


def what_folder_is(folder: Path, exc: OSError) -> str:
    """Why ``folder`` has no summary.json to read, in the words of its user."""
    if not folder.exists():
        return "no such output folder"
    if not folder.is_dir():
        return "a file, not an output folder (espforensics analyze reads a capture)"
    if (folder / BATCH_MARK).is_file():
        return "a batch output folder whose report cannot be read"
    if any(partial(folder, name).exists() for name in OUTPUT_FILES):
        return (
            "an analysis that did not finish: no summary.json, only .partial files "
            "(run analyze again with --force)"
        )
    if (folder / "summary.json").exists():
        return f"summary.json cannot be read ({exc.strerror})"
    return "not an output folder of analyze or batch: it holds no summary.json"
