"""Delta debugging over an input's chunks: the smallest input that still fails alike.

In: a failing ``FuzzInput`` and a predicate (does this candidate still show
the failure class?). Out: a smaller ``FuzzInput``: whole files dropped,
then chunks (capture records and blocks, key-file lines) removed by ddmin,
the first chunk of a capture (its file header) always kept, and the
run flags (compression, tables, plots) turned off where they do not
matter. Raises nothing; stops after ``budget`` predicate calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fuzz.inputs import FuzzInput

Predicate = Callable[[FuzzInput], bool]


class _Budget:
    def __init__(self, calls: int, predicate: Predicate) -> None:
        self.left = calls
        self.predicate = predicate

    def test(self, candidate: FuzzInput) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return self.predicate(candidate)


def _lines(chunks: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """A one-chunk text file as one chunk per line, so lines can be dropped."""
    if len(chunks) == 1:
        return tuple(chunks[0].splitlines(keepends=True)) or chunks
    return chunks


def _ddmin(fuzz_input: FuzzInput, name: str, keep_first: bool, budget: _Budget) -> FuzzInput:
    files = dict(fuzz_input.files)
    chunks = list(files[name])
    fixed, rest = (chunks[:1], chunks[1:]) if keep_first else ([], chunks)
    size = max(1, len(rest) // 2)
    while rest and budget.left > 0:
        removed = False
        for start in range(0, len(rest), size):
            trial = rest[:start] + rest[start + size :]
            candidate = fuzz_input.with_files({**files, name: tuple(fixed + trial)})
            if budget.test(candidate):
                rest, removed = trial, True
                fuzz_input = candidate
                break
        if not removed:
            if size == 1:
                break
            size = max(1, size // 2)
    return fuzz_input


def minimize(fuzz_input: FuzzInput, predicate: Predicate, budget: int = 250) -> FuzzInput:
    """A smaller input for which ``predicate`` still holds."""
    calls = _Budget(budget, predicate)
    files = {name: _lines(c) if not _is_capture(name) else c for name, c in fuzz_input.files}
    fuzz_input = fuzz_input.with_files(files)
    for name in list(files)[1:]:  # whole files first
        rest = {k: v for k, v in dict(fuzz_input.files).items() if k != name}
        candidate = fuzz_input.with_files(rest)
        if calls.test(candidate):
            fuzz_input = candidate
    for candidate in (
        replace(fuzz_input, plots=False),
        replace(fuzz_input, to_dir=False, plots=False),
        replace(fuzz_input, full=False),
        replace(fuzz_input, compress=None),
    ):
        if candidate != fuzz_input and calls.test(candidate):
            fuzz_input = replace(fuzz_input, **_flags(candidate))
    for name, _ in fuzz_input.files:
        fuzz_input = _ddmin(fuzz_input, name, _is_capture(name), calls)
    return fuzz_input


def _is_capture(name: str) -> bool:
    return name.endswith((".pcap", ".pcapng"))


def _flags(fuzz_input: FuzzInput) -> dict[str, Any]:
    return {k: getattr(fuzz_input, k) for k in ("plots", "to_dir", "full", "compress")}
