"""Copies of the capture written after the analysis: annotated and decrypted.

In: ``CaptureCopies`` (which files to write), the capture, the analysis's
packets.parquet, its findings and the SAs. Out: each file written as
``FILE.partial`` by ``write_copies`` and renamed into place by
``publish_copies`` (the caller does it with its other outputs, so a run
that stops leaves no file under a final name). ``check_targets`` refuses,
before the analysis starts, a target it would have to refuse at the end.
Raises ``OutputError`` naming the file (exists without ``force``, folder
missing, the file system refused it, a pcap asked to hold two link types,
a frame the format cannot hold: ``capture.writer.Unwritable``);
``CaptureError`` when the capture is damaged and ``KeyFileError`` for a bad
Decryption Secrets Block, after writing what was read before it.

The registry of copies is ``WRITERS``: one entry per option, each a
``Copier``: the copy written alone (capture, packets table, findings, SAs,
stream) -> frames written, and its ``BatchCopy`` (onepass.py), with which
several copies of a pcap are written in one pass over it and its table;
each writes a batch of frames at a time from the table's columns (bulk.py,
annotate.py), beside its per-frame reference (decrypted.py's
``write_decrypted_frames``, ``write_annotated(batch=0)``).
Neither copy holds key bytes: no Decryption Secrets Block is copied.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from espforensics.capture.aside import Aside
from espforensics.capture.writer import Unwritable, Writable
from espforensics.errors import CaptureError, EspForensicsError, KeyFileError, OutputError
from espforensics.keys import SaTable
from espforensics.model.records import Finding

if TYPE_CHECKING:
    from espforensics.rewrite.onepass import BatchCopy

PARTIAL = ".partial"

Writer = Callable[[Path, Path, Sequence[Finding], SaTable, Path, Writable], int]
Batched = Callable[[Path, Sequence[Finding], SaTable, Path, Writable], "BatchCopy"]


def _annotate(
    capture: Path,
    parquet: Path,
    findings: Sequence[Finding],
    sas: SaTable,
    target: Path,
    out: Writable,
) -> int:
    del sas, target  # the comments need no key
    from espforensics.rewrite.annotate import write_annotated  # noqa: PLC0415 (only if asked)

    return write_annotated(capture, parquet, findings, out)


def _annotate_batches(
    capture: Path, findings: Sequence[Finding], sas: SaTable, target: Path, out: Writable
) -> BatchCopy:
    del capture, sas, target
    from espforensics.rewrite.annotate import AnnotatedCopy  # noqa: PLC0415 (only if asked)

    return AnnotatedCopy(findings, out)


def _decrypted(
    capture: Path,
    parquet: Path,
    findings: Sequence[Finding],
    sas: SaTable,
    target: Path,
    out: Writable,
) -> int:
    del findings
    from espforensics.rewrite.bulk import write_decrypted  # noqa: PLC0415 (only if asked)

    return write_decrypted(capture, parquet, sas, target, out)


def _decrypted_batches(
    capture: Path, findings: Sequence[Finding], sas: SaTable, target: Path, out: Writable
) -> BatchCopy:
    del findings
    from espforensics.rewrite.bulk import DecryptedCopy  # noqa: PLC0415 (only if asked)

    return DecryptedCopy(capture, sas, target, out)


@dataclass(frozen=True, slots=True)
class Copier:
    """One copy: written alone (``alone``), or beside others in one pass over a pcap
    (``batched``: its ``BatchCopy``, rewrite/onepass.py)."""

    alone: Writer
    batched: Batched


# The one registry: option name (a field of CaptureCopies) -> its writers, in the order
# the copies are written (and their errors raised).
WRITERS: dict[str, Copier] = {
    "annotate": Copier(_annotate, _annotate_batches),
    "decrypted": Copier(_decrypted, _decrypted_batches),
}


@dataclass(frozen=True, slots=True)
class CaptureCopies:
    """Where to write each copy of the capture (None: not asked for)."""

    annotate: Path | None = None  # pcapng with packet comments
    decrypted: Path | None = None  # pcap (pcapng when the name ends in .pcapng)

    def targets(self) -> list[tuple[str, Path]]:
        """(option, path) of each copy asked for, in ``WRITERS`` order."""
        asked = ((f.name, getattr(self, f.name)) for f in fields(self))
        return [(name, Path(path)) for name, path in asked if path is not None]


def partial_path(target: Path) -> Path:
    """Where ``target`` is written until the run is finished."""
    return target.with_name(target.name + PARTIAL)


def check_targets(copies: CaptureCopies, capture: Path, force: bool) -> None:
    """Refuse now what could not be written at the end."""
    seen: set[Path] = set()
    for _, target in copies.targets():
        resolved = target.resolve()
        if resolved == Path(capture).resolve():
            raise OutputError(str(target), "is the capture being analyzed")
        if resolved in seen:
            raise OutputError(str(target), "given for two outputs")
        seen.add(resolved)
        if target.is_dir():
            raise OutputError(str(target), "is a folder")
        if target.exists() and not force:
            raise OutputError(str(target), "exists; use --force to overwrite it")
        if not target.parent.is_dir():
            raise OutputError(str(target), "cannot write: its folder does not exist")


def write_copies(
    copies: CaptureCopies,
    capture: Path,
    parquet: Path,
    findings: Sequence[Finding],
    sas: SaTable,
    damaged: bool = False,
) -> None:
    """Write every copy asked for under its ``.partial`` name.

    ``damaged``: the analysis stopped at a damaged capture or a bad
    Decryption Secrets Block (and raises that error itself); each copy
    then ends at the same frame, where its own read of the capture stops
    with the same error. A capture found damaged only now (changed since
    the analysis) raises here.

    Several copies of a pcap are written in one pass over it and its table
    (rewrite/onepass.py), each ending as it would written alone, one after
    another in ``WRITERS`` order: the first that fails raises, and the
    copies after it are discarded (they would not have been written);
    those before it are kept; each copy's file is written on a thread of
    its own (capture/aside.py's ``Aside``). One copy, or a pcapng capture
    (whose annotated copy is copied block by block), is written alone, on
    this thread.
    """
    targets = copies.targets()
    ended = _one_pass(targets, capture, parquet, findings, sas) if len(targets) > 1 else None
    for k, (name, target) in enumerate(targets):
        try:
            with _settled(target, damaged):
                if ended is None:
                    with open(partial_path(target), "wb") as out:
                        WRITERS[name].alone(capture, parquet, findings, sas, target, out)
                elif (failed := ended[k]) is not None:
                    raise failed
        except BaseException:
            for _, later in targets[k + 1 :] if ended is not None else ():
                _discard(partial_path(later))
            raise


@contextlib.contextmanager
def _settled(target: Path, damaged: bool) -> Iterator[None]:
    """A copy's error as the user sees it: its ``.partial`` file discarded, the error
    naming it; a damaged capture's error is the analysis's own (``damaged``)."""
    partial = partial_path(target)
    try:
        try:
            yield
        except (CaptureError, KeyFileError):
            if not damaged:
                raise
    except OSError as exc:
        _discard(partial)
        raise OutputError(str(target), f"cannot write: {exc.strerror or exc}") from exc
    except Unwritable as exc:  # a frame its format cannot hold
        _discard(partial)
        raise OutputError(str(target), str(exc)) from exc
    except EspForensicsError:
        _discard(partial)
        raise


def _one_pass(
    targets: list[tuple[str, Path]],
    capture: Path,
    parquet: Path,
    findings: Sequence[Finding],
    sas: SaTable,
) -> list[Exception | None] | None:
    """Write the copies in one pass over a pcap: how each ended (None: written); None
    when the capture is not a pcap (or cannot be opened: each copy says so alone)."""
    from espforensics.capture import open_capture  # noqa: PLC0415 (only if asked)
    from espforensics.rewrite.bulk import BATCH  # noqa: PLC0415
    from espforensics.rewrite.onepass import copy_batches  # noqa: PLC0415

    try:
        with open_capture(capture) as cap:
            if cap.format != "pcap":
                return None
    except CaptureError:
        return None
    ended: list[Exception | None] = [None] * len(targets)
    outs: list[BinaryIO] = []
    asides: list[Aside] = []
    try:
        batched: list[BatchCopy] = []
        for k, (name, target) in enumerate(targets):
            try:
                outs.append(open(partial_path(target), "wb"))  # noqa: SIM115 (closed below)
                asides.append(Aside(outs[-1]))
                batched.append(WRITERS[name].batched(capture, findings, sas, target, asides[-1]))
            except OSError as exc:  # this copy and those after it: not written
                ended[k:] = [exc] * (len(targets) - k)
                break
        if batched:
            ended[: len(batched)] = copy_batches(capture, parquet, batched, BATCH)
    finally:
        for k, stream in enumerate(asides):
            try:
                stream.close()
            except Exception as exc:  # a write refused: the copy's error, whatever ended it
                ended[k] = exc
        for k, out in enumerate(outs):
            try:
                out.close()
            except OSError as exc:  # its last bytes refused: the copy's error too
                ended[k] = exc
    return ended


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):  # never written, or already gone: nothing to undo
        path.unlink()


def publish_copies(copies: CaptureCopies) -> None:
    """Rename each copy's ``.partial`` file into place."""
    for name, target in copies.targets():
        del name
        partial = partial_path(target)
        if partial.exists():
            try:
                os.replace(partial, target)
            except OSError as exc:
                raise OutputError(str(target), f"cannot write: {exc.strerror or exc}") from exc
