"""Which captures a batch covers, and the key files that sit beside each.

In: the PATH arguments of ``espforensics batch`` (files, folders searched
recursively, glob patterns). Out: ``Job`` values, one per capture, in a
stable order, each with its sidecar key files and a folder name unique in
the batch; ``discover_all`` also gives the ``Skipped`` paths. Raises
``InputError`` for a PATH that names nothing. Reads the file system:
names, file types (``os.stat``), and the text of small files beside a
capture that is alone in its folder (never capture contents).

A file named explicitly is always a job, capture or not (what it is turns
out when it is read, and a bad one is reported, not skipped): a FIFO or
``/dev/zero`` named so is a row with its error, "not a regular file:
FIFO". In folders and globs, regular files named like captures are jobs:
``.pcap``, ``.pcapng``, ``.cap``, optionally followed by ``.gz``, ``.bz2``,
``.xz`` or ``.zst``; any other file so named (a FIFO, a device, a symlink
to one, a symlink loop or a dangling symlink) is ``Skipped`` with its
reason, without being opened (a FIFO would block the batch forever,
``/dev/zero`` would be read forever), and the other captures run.

Sidecar keys of ``NAME.pcap`` (or ``NAME.pcapng``, or either compressed):
``NAME.keys.yaml``, ``NAME.xfrm``, ``NAME.esp_sa`` beside it, or the same
names in a ``keys/`` folder beside it. A capture without sidecar that is
the only capture of its folder (``run1/sender.pcap`` beside
``run1/xfrm-state.txt``) takes the key files found in that folder by
content instead: every file of at most ``MAX_KEY_FILE`` bytes that
``keys.parse_sas`` reads as at least one SA. Any other file is not a key
file and is passed over.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from espforensics.capture.regular import not_regular
from espforensics.errors import InputError, KeyFileError
from espforensics.keys import parse_sas

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap")
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
SIDECAR_SUFFIXES = (".keys.yaml", ".xfrm", ".esp_sa")
_SKIP_DIRS = frozenset({"keys", ".git"})
MAX_KEY_FILE = 1 << 20  # an `ip xfrm state` of thousands of SAs; a larger file is no key file


@dataclass(frozen=True, slots=True)
class Job:
    """One capture of the batch."""

    capture: Path
    sidecars: tuple[Path, ...]
    name: str  # the capture's folder name under the batch's output, unique in the batch
    folder_keys: tuple[Path, ...] = ()  # no sidecar: key files found by content beside it


@dataclass(frozen=True, slots=True)
class Skipped:
    """A path named like a capture, in a folder or a glob, that is not a regular file."""

    path: Path
    reason: str  # "not a regular file: FIFO", "cannot open: Too many levels of symbolic links"


@dataclass(frozen=True, slots=True)
class Discovery:
    """What the PATH arguments name: the captures, and the paths passed over."""

    jobs: list[Job]
    skipped: list[Skipped]


def _resolved(path: Path) -> Path:
    """The absolute path without symlinks; for a symlink loop, the absolute path as named.

    ``Path.resolve`` raises RuntimeError on a loop in Python 3.11 (OSError in 3.13).
    """
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return Path(os.path.abspath(path))


def capture_stem(path: Path) -> str | None:
    """``NAME`` of ``NAME.pcap[.gz]`` and friends; None if not named like a capture."""
    name = path.name
    for comp in ("", *COMPRESSION_SUFFIXES):
        for suffix in CAPTURE_SUFFIXES:
            if name.endswith(suffix + comp) and len(name) > len(suffix + comp):
                return name[: -len(suffix + comp)]
    return None


def sidecars(capture: Path) -> tuple[Path, ...]:
    """The key files that belong to this capture, beside it or in ``keys/``."""
    stem = capture_stem(capture)
    if stem is None:
        return ()
    found = []
    for folder in (capture.parent, capture.parent / "keys"):
        for suffix in SIDECAR_SUFFIXES:
            candidate = folder / f"{stem}{suffix}"
            if candidate.is_file():
                found.append(candidate)
    return tuple(found)


def _is_key_file(path: Path) -> bool:
    """Does ``path`` hold at least one SA in a format ``keys`` reads?"""
    try:
        if not path.is_file() or path.stat().st_size > MAX_KEY_FILE:
            return False
        text = path.read_bytes().decode("utf-8-sig")
        return bool(parse_sas(text, str(path)))
    except (OSError, UnicodeDecodeError, KeyFileError):
        return False  # unreadable, binary, or not a key file: not one to use


def folder_keys(capture: Path) -> tuple[Path, ...]:
    """Key files found by content in the capture's folder, if it is the only capture there."""
    folder = capture.parent
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return ()
    files = [folder / n for n in names]
    others = [f for f in files if capture_stem(f) is not None and f.name != capture.name]
    if others:
        return ()
    return tuple(f for f in files if f.name != capture.name and _is_key_file(f))


def _walk(folder: Path) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".espforensics"))
        found += [Path(root) / f for f in sorted(files) if capture_stem(Path(f)) is not None]
    return found


def _expand(arg: str) -> list[Path]:
    """The paths ARG names: itself (even a FIFO or a symlink loop), a folder's, a glob's."""
    path = Path(arg)
    if path.is_dir():
        return _walk(path)
    if _named(arg):  # a job whatever it is (a symlink loop does not "exist")
        return [path]
    if glob.has_magic(arg):
        matches = sorted(Path(m) for m in glob.glob(arg, recursive=True))
        files = [m for m in matches if not m.is_dir() and capture_stem(m) is not None]
        dirs = [f for m in matches if m.is_dir() for f in _walk(m)]
        if files or dirs:
            return files + dirs
    if arg == "-":  # tcpdump's and analyze's name for standard input
        raise InputError(
            arg,
            "batch reads files, folders and patterns, not standard input; "
            "analyze - reads one capture from it",
        )
    raise InputError(arg, "no such file or folder, and no capture matches it as a pattern")


def _named(arg: str) -> bool:
    """Does ARG name one file itself (not a folder, not a pattern)?"""
    return not os.path.isdir(arg) and os.path.lexists(arg)


def _sorted_out(paths: list[Path]) -> tuple[list[Path], list[Skipped]]:
    """The regular files among ``paths``, and the others with their reason."""
    kept: list[Path] = []
    skipped: list[Skipped] = []
    for path in paths:
        reason = not_regular(path)  # os.stat only: never opened
        if reason is None:
            kept.append(path)
        else:
            skipped.append(Skipped(path, reason))
    return kept, skipped


def _names(captures: list[Path]) -> list[str]:
    """Folder names: the path below the inputs' common folder, made safe and unique."""
    parents = [str(_resolved(c).parent) for c in captures]
    root = os.path.commonpath(parents) if parents else ""
    names, seen = [], set()
    for capture in captures:
        rel = os.path.relpath(_resolved(capture), root)
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", rel.replace(os.sep, "__"))
        base, n = name, 2
        while name in seen:
            name, n = f"{base}.{n}", n + 1
        seen.add(name)
        names.append(name)
    return names


def discover(paths: Sequence[str]) -> list[Job]:
    """Every capture the PATH arguments name, once each, in a stable order."""
    return discover_all(paths).jobs


def discover_all(paths: Sequence[str]) -> Discovery:
    """The captures the PATH arguments name, and the paths named like one that are not files."""
    captures: list[Path] = []
    skipped: list[Skipped] = []
    seen: set[Path] = set()
    for arg in paths:
        found = _expand(arg)
        kept, passed = (found, []) if _named(arg) else _sorted_out(found)
        skipped += [s for s in passed if s not in skipped]
        for path in kept:
            key = _resolved(path)
            if key not in seen:
                seen.add(key)
                captures.append(path)
    jobs = []
    for capture, name in zip(captures, _names(captures), strict=True):
        own = sidecars(capture)
        jobs.append(Job(capture, own, name, () if own else folder_keys(capture)))
    return Discovery(jobs, skipped)
