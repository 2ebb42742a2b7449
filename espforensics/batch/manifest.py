"""The batch manifest: what is done, so that a rerun skips it.

In: the batch output folder. Out: ``Manifest`` with one entry per
(capture content, keys, options, tool version), holding the capture's
result row. Each capture's entry is recorded as soon as the capture is
finished, by the process that finished it (a worker of ``batch --jobs``
included), so a batch stopped in any way (Ctrl-C, a kill, a lost machine)
keeps every capture it finished. Writers take turns under an exclusive
lock (``flock`` on ``manifest.json.lock``), each re-reading the file and
adding its entry; the file is written aside
and renamed over the old, so an interrupted write never leaves a manifest
a rerun would misread.
Raises ``InputError`` for a manifest that is not one.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from espforensics.errors import InputError
from espforensics.model.version import TOOL_VERSION

MANIFEST = "manifest.json"
LOCK = "manifest.json.lock"  # empty; held while a process writes the manifest


def entry_key(sha256: str, key_files: list[Path], options: str) -> str:
    """What makes a result reusable: the capture's bytes, the keys' bytes, options, version.

    A key argument that names no file is key text itself (tcpdump ``-E``): its own bytes.
    """
    digest = hashlib.sha256()
    for path in sorted(key_files):
        digest.update(path.read_bytes() if os.path.lexists(path) else os.fsencode(path))
        digest.update(b"\0")
    digest.update(options.encode())
    return f"{sha256}:{digest.hexdigest()[:16]}:{TOOL_VERSION}"


def read_entries(path: Path) -> dict[str, dict[str, Any]]:
    """The entries of the manifest at ``path``; none when there is no manifest yet."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        return dict(json.loads(text)["entries"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(str(path), f"not a batch manifest: {exc}") from exc


def write_manifest(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Write ``entries`` aside and rename them over ``path`` (the caller holds the lock)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps({"tool_version": TOOL_VERSION, "entries": entries}, indent=1, sort_keys=True)
    )
    os.replace(tmp, path)


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the manifest's lock: one writer at a time, across the batch's processes.

    The lock is ``flock`` on ``LOCK``, opened for writing (NFS emulates flock with a
    whole-file lock that needs it). A file system that has no locks (ENOLCK) is written
    without: two captures finished at once may then keep one entry, and the rerun
    redoes the other; it never trusts a capture that was not finished.
    """
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # a Ctrl-C while waiting raises here, as it should
        except OSError as exc:
            if exc.errno != errno.ENOLCK:
                raise
        yield
    finally:
        os.close(fd)  # releases the lock


class Manifest:
    """The entries of ``manifest.json`` in a batch output folder."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / MANIFEST
        self.entries = read_entries(self.path)

    def done(self, key: str) -> dict[str, Any] | None:
        """The stored result for ``key`` if it completed, else None (errors are redone)."""
        entry = self.entries.get(key)
        if entry is None or entry.get("status") != "done":
            return None
        return entry

    def record(self, key: str, row: dict[str, Any]) -> None:
        """Store one capture's result at once, beside what other processes stored."""
        self.entries = record_entry(self.path.parent, key, row)


def record_entry(folder: Path, key: str, row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Add one capture's entry to the folder's manifest at once; every entry it now holds."""
    row = json.loads(json.dumps(row))  # as the file holds it: tuples are lists
    path = folder / MANIFEST
    with _locked(folder):
        entries = read_entries(path)
        if entries.get(key) != row:  # else a worker recorded it already: nothing to write
            entries[key] = row
            write_manifest(path, entries)
    return entries
