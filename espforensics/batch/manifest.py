"""The batch manifest: what is done, so that a rerun skips it.

In: the batch output folder. Out: ``Manifest`` with one entry per
(capture content, keys, options, tool version), holding the capture's
result row; written atomically (a temporary file renamed over the old),
so an interrupted batch never leaves a manifest a rerun would misread.
Raises ``InputError`` for a manifest that is not one.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from espforensics.errors import InputError
from espforensics.summary import TOOL_VERSION

MANIFEST = "manifest.json"


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


class Manifest:
    """The entries of ``manifest.json`` in a batch output folder."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / MANIFEST
        self.entries: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_text())
                self.entries = dict(doc["entries"])
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(str(self.path), f"not a batch manifest: {exc}") from exc

    def done(self, key: str) -> dict[str, Any] | None:
        """The stored result for ``key`` if it completed, else None (errors are redone)."""
        entry = self.entries.get(key)
        if entry is None or entry.get("status") != "done":
            return None
        return entry

    def record(self, key: str, row: dict[str, Any]) -> None:
        """Store one capture's result and write the manifest at once."""
        self.entries[key] = row
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(
            json.dumps(
                {"tool_version": TOOL_VERSION, "entries": self.entries}, indent=1, sort_keys=True
            )
        )
        os.replace(tmp, self.path)
