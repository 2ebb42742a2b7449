"""The layers of the package (docs/architecture.md, "Layers"): no module imports upward.

``LAYERS`` lists espforensics' packages from the bottom up, as the data flows: values,
input, per-packet analysis, the columnar engine, results, what a report says, the
formats and files, the library's run, the front ends. A module may import from its own
package or from a package of a lower layer, never from one of its own layer nor above
(the imports read as tests/project/test_import_cycles.py reads them: every one that runs, deferred
ones included, ``if TYPE_CHECKING:`` left out). The package's doors, ``espforensics``
(the public API's lazy map) and ``espforensics.__main__``, sit above every layer.
"""

from __future__ import annotations

from tests.project.test_import_cycles import ROOT, import_graph

LAYERS: tuple[tuple[str, ...], ...] = (
    ("model", "errors"),  # values only; the one exception tree
    ("bounded",),  # per-SA containers whose memory stays bounded
    ("capture", "decode"),  # records from files; pure decoders of the bytes
    ("keys",),  # key files
    ("crypto",),  # a context per SA
    ("receiver",),  # the Linux receiver's replay window and counters
    ("checks",),  # one module per check, its per-packet and bulk rules side by side
    ("analyzer",),  # the per-frame path, the receiver's steps in one declared order
    ("engine",),  # batches, wire columns, the steady lane, --jobs
    ("results",),  # the summary and what it is built from
    ("report",),  # what a report says, built once
    ("tables",),  # packets.parquet/csv and the small tables
    ("plots", "render", "rewrite"),  # figures; formats; the decrypted and annotated copies
    ("analysis", "reconcile", "synth"),  # the library's runs; the test-capture builder
    ("batch",),  # many captures
    ("cli",),  # the command line, the only typer importer
)
DOORS = frozenset({"espforensics", "espforensics.__main__"})


def layer_of() -> dict[str, int]:
    return {unit: n for n, units in enumerate(LAYERS) for unit in units}


def unit(module: str) -> str:
    """The package (or top-level module) of ours ``module`` belongs to."""
    return module.split(".")[1]


def upward(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """Every import of a module from another package of its own layer or of a higher one."""
    found = []
    for module, targets in sorted(graph.items()):
        if not module.startswith("espforensics.") or module in DOORS:
            continue
        here = unit(module)
        for target in sorted(targets):
            if target == "espforensics" or not target.startswith("espforensics."):
                continue
            there = unit(target)
            if there != here and layers[there] >= layers[here]:
                found.append(
                    f"{module} (layer {layers[here]}) imports {target} (layer {layers[there]})"
                )
    return found


def test_no_module_imports_from_its_layer_or_above() -> None:
    assert upward(import_graph(), layer_of()) == []


def test_every_package_has_a_layer() -> None:
    ours = {
        p.stem if p.is_file() else p.name
        for p in (ROOT / "espforensics").iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").exists())
        and p.stem not in ("__init__", "__main__")
    }
    assert ours - set(layer_of()) == set()
    assert set(layer_of()) - ours == set()


def test_an_upward_import_is_found() -> None:
    layers = {"model": 0, "checks": 1, "engine": 2, "report": 2}
    graph = {
        "espforensics.model.records": {"espforensics.checks.sequence"},  # upward
        "espforensics.engine.run": {"espforensics.checks", "espforensics.engine.plan"},
        "espforensics.report.facts": {"espforensics.engine.run"},  # same layer
        "espforensics.__main__": {"espforensics.report.facts"},  # a door
    }
    assert upward(graph, layers) == [
        "espforensics.model.records (layer 0) imports espforensics.checks.sequence (layer 1)",
        "espforensics.report.facts (layer 2) imports espforensics.engine.run (layer 2)",
    ]
