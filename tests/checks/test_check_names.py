"""One name per check (issue 21): the check's ``name``, the coverage and KTAP tables,
docs/checks.md's headings and the finding kinds agree.

The output names (KTAP lines, ``summary.json``'s ``coverage``, the finding
kinds) are a public format; the code and the docs take theirs. The checks
without a line of their own (``checks.NO_LINE``) are integrity, whose
``no_integrity`` findings report under ``keys`` (docs/checks.md "integrity"),
reserved_spi, whose findings report under ``sequence`` (the same clear
header), and the receiver model, which makes no findings (docs/receiver.md).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import espforensics.checks as checks_package
from espforensics.checks import COVERAGE, NO_LINE
from espforensics.model.enums import FindingKind
from espforensics.report.check_results import CHECKS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checks.md"
# checks that report under another's line (report/content.py CHECKS): check -> that line
UNDER = {"integrity": "keys", "reserved_spi": "sequence"}


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
    assert set(UNDER) <= set(NO_LINE)  # a check with findings and no line reports under one


def test_each_finding_kind_belongs_to_one_check() -> None:
    kinds = [k for _, ks in CHECKS for k in ks]
    assert sorted(kinds) == sorted(FindingKind)


def test_docs_head_each_check_with_its_name_and_kinds() -> None:
    headings = re.findall(r"^## (\S+?):? .*?\((.*)\)$", DOCS.read_text(), re.MULTILINE)
    documented: dict[str, set[str]] = {}  # keys has three sections
    for name, kinds in headings:
        documented.setdefault(name, set()).update(re.findall(r"`(\w+)`", kinds))
    assert documented["integrity"] == {FindingKind.NO_INTEGRITY.value}
    assert documented["reserved_spi"] == {FindingKind.RESERVED_SPI.value}
    for name, kinds in CHECKS:
        under = (documented[u] for u, line in UNDER.items() if line == name)
        heads = documented[name].union(*under)
        assert {k.value for k in kinds} <= heads, name
