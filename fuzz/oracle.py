"""Run one fuzz input through the library entry points and judge the outcome.

In: a ``FuzzInput`` and a scratch folder (on /dev/shm when there is one).
Out: a ``Verdict``: the outcome (``ok``; ``input_error``, our
``InputError``, expected; ``internal_error``, any other exception or a
broken invariant) and the failures, each named by its class: the
exception's type and the innermost frame of espforensics it passed
through, or the invariant that broke. Raises nothing but ``BaseException``
subclasses that are not ``Exception`` (KeyboardInterrupt, the runner's
time-out).

Invariants: rows == frames (counted by ``fuzz.walker``) for every capture
that reads, and for a damaged one the rows written before the damage;
no key byte of the corpus in any output text, file or error message; the
engine's steady lane (on, in small batches) gives ``analyze`` the per-frame
path's packets table and summary.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pyarrow.parquet as pq

from espforensics.analysis import Analysis, KeysArg, analyze, analyze_to_dir, summarize
from espforensics.batch.run import run_batch
from espforensics.capture import open_capture, open_compressed_writer
from espforensics.errors import CaptureError, InputError
from espforensics.keys import SaTable, load_sas
from espforensics.model.options import Options
from espforensics.model.records import Frame
from espforensics.render.compare import (
    render_comparison,
    render_comparison_json,
    render_comparison_md,
)
from espforensics.render.json import format_json
from espforensics.render.markdown import format_markdown
from espforensics.render.text import format_summary, format_text
from espforensics.report.compare import compare
from espforensics.report.content import Report, report_content
from espforensics.results.summary import Summary
from espforensics.rewrite import CaptureCopies
from fuzz import lanecount
from fuzz.corpus import seed_named
from fuzz.inputs import FuzzInput
from fuzz.leaks import find_leak
from fuzz.walker import Walk, walk

OK, INPUT_ERROR, INTERNAL_ERROR = "ok", "input_error", "internal_error"
_CAPTURE_SUFFIXES = (".pcap", ".pcapng")
Render = Callable[[Report], str]
Compression = Literal["gzip", "bzip2", "xz", "zstd"]
# File suffix -> the product's compression name (its writers compress for us).
_COMPRESSIONS: dict[str, Compression] = {"gz": "gzip", "bz2": "bzip2", "xz": "xz", "zst": "zstd"}
_OURS = os.sep + "espforensics" + os.sep
# The steady lane on, in batches small enough that it takes packets of a fuzz input's short
# captures (at the default 4096 frames a batch it never would); the per-frame path is the
# reference a full input's analyze() is compared with (the outputs are the same either way).
LANE = Options(batch_frames=16)
PER_FRAME = Options(steady_lane=False)


@dataclass(frozen=True, slots=True)
class Failure:
    """One broken expectation: its class (for grouping) and what was seen."""

    cls: str
    detail: str


@dataclass(slots=True)
class Verdict:
    """The outcome of one input and its failures."""

    outcome: str = OK
    failures: list[Failure] = field(default_factory=list)
    lane_taken: int = 0  # frames the steady lane took (every lane-on call of the input)
    lane_refused: int = 0  # candidates of SAs it admitted that it left to the per-frame path

    def input_error(self) -> None:
        if self.outcome == OK:
            self.outcome = INPUT_ERROR

    def fail(self, cls: str, detail: str) -> None:
        self.outcome = INTERNAL_ERROR
        self.failures.append(Failure(cls, detail[:300]))


def innermost(exc: BaseException) -> str:
    """``espforensics/module.py:function`` of the innermost frame of ours in the traceback."""
    ours = "no frame of espforensics"
    tb = exc.__traceback__
    while tb is not None:  # walked by hand: traceback.extract_tb reads every source line
        code = tb.tb_frame.f_code
        if _OURS in code.co_filename:
            ours = f"{code.co_filename[code.co_filename.rindex(_OURS) + 1 :]}:{code.co_name}"
        tb = tb.tb_next
    return ours


def failure_class(exc: BaseException) -> str:
    """``TypeName in espforensics/module.py:function``: the innermost frame of ours."""
    return f"{type(exc).__name__} in {innermost(exc)}"


class Oracle:
    """Runs inputs in one scratch folder; no state is kept from one input to the next."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.inputs = scratch / "in"
        self.out = scratch / "out"
        self.written: list[Path] = []
        self.inputs.mkdir(parents=True, exist_ok=True)
        lanecount.install()

    def run(self, fuzz_input: FuzzInput) -> Verdict:
        """Judge one input."""
        verdict = Verdict()
        lanecount.take()  # what an input before this one left uncounted (an interrupted run)
        walks = self._materialize(fuzz_input)
        try:
            if fuzz_input.kind == "batch":
                self._batch(verdict, walks)
            elif fuzz_input.kind == "compare":
                self._compare_pair(verdict, walks)
            else:
                self._single(verdict, fuzz_input, walks)
        except Exception as exc:  # an error of the harness itself is a failure too
            verdict.fail(f"harness: {failure_class(exc)}", repr(exc))
        lane = lanecount.take()
        verdict.lane_taken, verdict.lane_refused = lane.taken, lane.refused
        return verdict

    def _materialize(self, fuzz_input: FuzzInput) -> dict[Path, Walk]:
        """Write the input's files; the walk of every capture among them."""
        for old in self.written:  # cheaper than a new folder per input
            old.unlink(missing_ok=True)
        self.written = []
        walks = {}
        for name, chunks in fuzz_input.files:
            data = b"".join(chunks)
            path = self.inputs / name
            if name.endswith(_CAPTURE_SUFFIXES) and fuzz_input.compress:
                path = path.with_name(f"{name}.{fuzz_input.compress}")
                with open_compressed_writer(str(path), _COMPRESSIONS[fuzz_input.compress]) as out:
                    out.write(data)
            else:
                path.write_bytes(data)
            self.written.append(path)
            if name.endswith(_CAPTURE_SUFFIXES):
                walks[path] = walk(data)
        return walks

    def _keys(self) -> list[Path]:
        return sorted(p for p in self.written if not _is_capture(p))

    def _single(self, verdict: Verdict, fuzz_input: FuzzInput, walks: dict[Path, Walk]) -> None:
        keys: KeysArg = self._keys()
        if fuzz_input.table:
            keys = SaTable(seed_named(fuzz_input.seed).sas)
        elif fuzz_input.kind not in ("pcap", "pcapng", "steady") and not self._load(
            verdict, self._keys()
        ):
            return
        for capture, walked in walks.items():
            if fuzz_input.full:
                summary = self._analyze(verdict, capture, keys, walked)
            else:
                summary = self._summarize(verdict, capture, keys, walked)
            if fuzz_input.to_dir:
                self._to_dir(verdict, capture, keys, walked, fuzz_input.plots)
            if summary is not None and fuzz_input.full:
                self._compare(verdict, summary, summary)  # and through summary.json

    def _load(self, verdict: Verdict, keys: list[Path]) -> bool:
        """load_sas on the key files; True when they loaded."""
        try:
            table = load_sas(keys)
        except InputError as exc:
            verdict.input_error()
            _scan_error(verdict, exc)
            return False
        except Exception as exc:
            verdict.fail(failure_class(exc), f"load_sas: {exc!r}"[:300])
            return False
        _scan(verdict, "repr of the loaded SAs", repr(list(table)))
        return True

    def _analyze(
        self, verdict: Verdict, capture: Path, keys: KeysArg, walked: Walk
    ) -> Summary | None:
        """analyze(): rows == frames when it reads; the summary when it does."""
        try:
            result = analyze(capture, keys, LANE)
        except InputError as exc:
            verdict.input_error()
            _scan_error(verdict, exc)
            _check_capture_error(verdict, exc, walked)
            return None
        except Exception as exc:
            verdict.fail(failure_class(exc), f"analyze: {exc!r}")
            return None
        rows = len(result.packets)
        if not walked.complete:
            verdict.fail("invariant: analyze read a capture the walker finds damaged", str(rows))
        elif rows != walked.frames or result.summary.capture.frames != rows:
            detail = f"{rows} rows, {result.summary.capture.frames} in summary"
            verdict.fail("invariant: analyze rows != frames", f"{detail}, {walked.frames} frames")
        self._same_per_frame(verdict, capture, keys, result)
        self._render(verdict, result.summary)
        for name in result.packets.columns:  # the text columns (hex, details) only
            column = result.packets[name]
            if column.dtype == object or str(column.dtype).startswith("string"):
                _scan(verdict, f"packets column {name}", "\n".join(map(str, column)))
        return result.summary

    def _same_per_frame(
        self, verdict: Verdict, capture: Path, keys: KeysArg, result: Analysis
    ) -> None:
        """The per-frame path's packets table and summary are the steady lane's."""
        try:
            reference = analyze(capture, keys, PER_FRAME)
        except Exception as exc:
            verdict.fail("invariant: the per-frame path raised where the lane did not", repr(exc))
            return
        if not result.packets.equals(reference.packets):
            verdict.fail("invariant: the steady lane's packets differ", str(capture.name))
        elif result.summary.to_json() != reference.summary.to_json():
            verdict.fail("invariant: the steady lane's summary differs", str(capture.name))

    def _summarize(
        self, verdict: Verdict, capture: Path, keys: KeysArg, walked: Walk
    ) -> Summary | None:
        """summarize(): one record (row) per frame, counted by the summary's verdicts."""
        try:
            summary = summarize(capture, keys, LANE)
        except InputError as exc:
            verdict.input_error()
            _scan_error(verdict, exc)
            _check_capture_error(verdict, exc, walked)
            return None
        except Exception as exc:
            verdict.fail(failure_class(exc), f"summarize: {exc!r}")
            return None
        rows = sum(summary.verdicts.values())
        if not walked.complete:
            verdict.fail("invariant: summarize read a capture the walker finds damaged", str(rows))
        elif rows != walked.frames or summary.capture.frames != rows:
            detail = f"{rows} records, {summary.capture.frames} in summary"
            verdict.fail("invariant: summarize rows != frames", f"{detail}, {walked.frames} frames")
        self._render(verdict, summary, (format_text,))
        return summary

    def _render(
        self, verdict: Verdict, summary: Summary, renders: tuple[Render, ...] | None = None
    ) -> None:
        try:
            report = report_content(summary)  # once, as a run builds it for every format
        except Exception as exc:
            verdict.fail(failure_class(exc), f"report_content: {exc!r}")
            return
        for render in renders or (format_summary, format_text, format_markdown, format_json):
            try:
                text = render(report)
            except Exception as exc:
                verdict.fail(failure_class(exc), f"{render.__name__}: {exc!r}")
                continue
            _scan(verdict, render.__name__, text)

    def _compare(self, verdict: Verdict, before: Summary, after: Summary) -> None:
        try:
            again = Summary.from_json(json.loads(format_json(report_content(after))))
            cmp = compare(before, again)
            renders = (render_comparison, render_comparison_md, render_comparison_json)
            texts = [render(cmp) for render in renders]
        except Exception as exc:
            verdict.fail(failure_class(exc), f"compare: {exc!r}")
            return
        for text in texts:
            _scan(verdict, "comparison", text)

    def _to_dir(
        self, verdict: Verdict, capture: Path, keys: KeysArg, walked: Walk, plots: bool
    ) -> None:
        """analyze_to_dir(): the rows written match the frames before any damage."""
        error: InputError | None = None
        copies = CaptureCopies(
            annotate=self.scratch / "copy.annotated.pcapng",
            decrypted=self.scratch / "copy.decrypted.pcapng",
        )
        try:
            analyze_to_dir(
                capture, keys, self.out, force=True, options=LANE, plots=plots, copies=copies
            )
        except InputError as exc:
            error = exc
            verdict.input_error()
            _scan_error(verdict, exc)
        except Exception as exc:
            verdict.fail(failure_class(exc), f"analyze_to_dir: {exc!r}")
            return
        _scan_dir(verdict, self.out)
        table = self.out / "packets.csv"
        if not table.exists() or (
            error is not None
            and not isinstance(error, CaptureError)
            and "decryption secrets block" not in str(error)
        ):
            return  # a bad key file stops before any table is written
        rows = _csv_rows(table)
        if error is None or isinstance(error, CaptureError):
            expected = {walked.frames}
        else:  # a bad DSB: every frame before it is still written
            expected = {before for before, _, _ in walked.dsbs}
        if rows not in expected:
            why = f"{rows} rows written, expected {sorted(expected)}; error {error}"
            verdict.fail("invariant: analyze_to_dir rows != frames read", why)
        if error is None:  # each copy holds every frame, in capture order
            for option, target in copies.targets():
                with open_capture(target) as copy:
                    got = [item.number for item in copy if isinstance(item, Frame)]
                if got != list(range(1, rows + 1)):
                    why = f"{len(got)} frames in the copy, {rows} rows"
                    verdict.fail(f"invariant: --{option} frames != rows", why)

    def _compare_pair(self, verdict: Verdict, walks: dict[Path, Walk]) -> None:
        """summarize() both captures with their sidecar keys, then compare them."""
        summaries = []
        for capture, walked in walks.items():
            try:
                summary = summarize(capture, _sidecars(capture), LANE)
            except InputError as exc:
                verdict.input_error()
                _scan_error(verdict, exc)
                _check_capture_error(verdict, exc, walked)
                continue
            except Exception as exc:
                verdict.fail(failure_class(exc), f"summarize: {exc!r}")
                continue
            if walked.complete and summary.capture.frames != walked.frames:
                why = f"{summary.capture.frames} in summary, {walked.frames} frames"
                verdict.fail("invariant: summarize frames != frames", why)
            self._render(verdict, summary)
            summaries.append(summary)
        if len(summaries) == 2:
            self._compare(verdict, summaries[0], summaries[1])

    def _batch(self, verdict: Verdict, walks: dict[Path, Walk]) -> None:
        """run_batch() over the folder: one row per capture, frames as walked."""
        shutil.rmtree(self.out, ignore_errors=True)
        try:
            result = run_batch([str(self.inputs)], [], self.out, jobs=1, force=True, plots=False)
        except InputError as exc:
            verdict.input_error()
            _scan_error(verdict, exc)
            return
        except Exception as exc:
            verdict.fail(failure_class(exc), f"run_batch: {exc!r}")
            return
        by_path = {str(p): w for p, w in walks.items()}
        if len(result.rows) != len(walks):
            verdict.fail("invariant: batch rows != captures", f"{len(result.rows)} != {len(walks)}")
        for row in result.rows:
            walked = by_path.get(row.path)
            if row.status != "done":
                verdict.input_error()
                _scan(verdict, "a batch row's error", row.error, raw=True)
            elif walked is not None and (not walked.complete or row.frames != walked.frames):
                why = f"{row.name}: {row.frames} frames, walker {walked.frames}/{walked.complete}"
                verdict.fail("invariant: batch frames != frames", why)
        _scan_dir(verdict, self.out)


def _check_capture_error(verdict: Verdict, exc: InputError, walked: Walk) -> None:
    """A CaptureError comes after exactly the frames the walker read, on a damaged file."""
    if not isinstance(exc, CaptureError) or not walked.capture:
        return
    if walked.complete:
        verdict.fail("invariant: capture error on a file the walker reads", str(exc))
    elif exc.frames_read != walked.frames:
        why = f"frames_read {exc.frames_read}, walker {walked.frames}: {exc}"
        verdict.fail("invariant: frames read before the damage != walker", why)


def _is_capture(path: Path) -> bool:
    return any(s in path.suffixes for s in _CAPTURE_SUFFIXES)


def _sidecars(capture: Path) -> list[Path]:
    stem = capture.name.split(".")[0]
    return sorted(
        p for p in capture.parent.iterdir() if p.name.startswith(stem + ".") and not _is_capture(p)
    )


def _scan_error(verdict: Verdict, exc: InputError) -> None:
    """An error message must not quote a key, whatever field the key was put in."""
    _scan(verdict, f"an error message raised in {innermost(exc)}", str(exc), raw=True)


def _scan(verdict: Verdict, where: str, text: str | bytes, raw: bool = False) -> None:
    leak = find_leak(text, raw_too=raw or isinstance(text, bytes))
    if leak is not None:
        verdict.fail(f"invariant: key bytes in {where}", f"{leak} in {text[:200]!r}")


def _scan_dir(verdict: Verdict, folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            _scan(verdict, "an output file", _readable(path))


def _readable(path: Path) -> str | bytes:
    """What a reader of the file gets: a Parquet file's values and metadata as text (its
    pages are compressed: Snappy's bytes once put a tag byte after 15 hex digits of an IV
    and showed 8 "key bytes" no value holds), any other file's bytes."""
    if path.suffix != ".parquet":
        return path.read_bytes()
    try:
        table = pq.read_table(path)
    except (OSError, ValueError):  # not whole: its bytes, as for any other file
        return path.read_bytes()
    meta = repr(table.schema.metadata)
    return "\n".join([meta, *("\n".join(map(str, c.to_pylist())) for c in table.columns)])


def _csv_rows(path: Path) -> int:
    with path.open(newline="") as fh:
        return max(0, sum(1 for _ in csv.reader(fh)) - 1)
