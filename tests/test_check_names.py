"""One name per check (issue 21): the check's ``name``, the coverage and KTAP tables,
docs/checks.md's headings and the finding kinds agree.

The output names (KTAP lines, ``summary.json``'s ``coverage``, the finding
kinds) are a public format; the code and the docs take theirs. The one
checks without a line of their own are integrity (its ``no_integrity``
findings report under ``keys``, docs/checks.md "integrity") and the receiver
model, which makes no findings (docs/receiver.md): ``checks.NO_LINE``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import espforensics.checks as checks_package
from espforensics.checks import COVERAGE, NO_LINE
from espforensics.model import FindingKind
from espforensics.render.content import CHECKS

DOCS = Path(__file__).resolve().parents[1] / "docs" / "checks.md"
UNDER_KEYS = "integrity"  # reports under the keys line (render/content.py CHECKS)


def _check_names() -> set[str]:
    """The ``name`` of every check class of the checks package."""
    names = set()
    for info in pkgutil.iter_modules(checks_package.__path__):
        module = importlib.import_module(f"espforensics.checks.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            name = getattr(cls, "name", None)
            if cls.__module__ == module.__name__ and hasattr(cls, "finish"):
                assert isinstance(name, str), cls
                names.add(name)
    return names


def test_the_coverage_and_ktap_tables_name_the_checks_alike() -> None:
    assert [name for name, _ in COVERAGE] == [name for name, _ in CHECKS]


def test_each_check_goes_by_its_output_name() -> None:
    names = _check_names()
    assert names - set(NO_LINE) == {name for name, _ in COVERAGE}
    assert set(NO_LINE) <= names


def test_each_finding_kind_belongs_to_one_check() -> None:
    kinds = [k for _, ks in CHECKS for k in ks]
    assert sorted(kinds) == sorted(FindingKind)


def test_docs_head_each_check_with_its_name_and_kinds() -> None:
    headings = re.findall(r"^## (\S+?):? .*?\((.*)\)$", DOCS.read_text(), re.MULTILINE)
    documented: dict[str, set[str]] = {}  # keys has three sections
    for name, kinds in headings:
        documented.setdefault(name, set()).update(re.findall(r"`(\w+)`", kinds))
    assert documented[UNDER_KEYS] == {FindingKind.NO_INTEGRITY.value}
    for name, kinds in CHECKS:
        heads = documented[name] | (documented[UNDER_KEYS] if name == "keys" else set())
        assert {k.value for k in kinds} <= heads, name
