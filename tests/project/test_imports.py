"""What importing a part of espforensics loads, and that the split modules keep their names.

Start-up is measured by benchmarks/bench_startup.py, never timed here: these
tests check which modules an import loads (``sys.modules`` of a fresh
interpreter), so a heavy library pulled in where it is not used shows as a
failing test, whatever the machine's speed.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from espforensics.cli import app
from espforensics.synth.__main__ import main as synth_main
from espforensics.synth.capture import write_scenario
from espforensics.synth.scenarios import SCENARIOS

HEAVY = (
    "numpy",
    "pandas",
    "pyarrow",
    "matplotlib",
    "dpkt",
    "cryptography",
    "yaml",
    "dask",
    "rich",
    "typer",
    "pydantic",  # typer's coercion: cli/coercion.py does the plain values without it
    "pydantic_core",
    "zstandard",  # capture/compression.py imports it for a zstd capture only
)
# What --help, --version and completion never use (start-up, issue 35): every heavy
# library but typer, which parses the line.
NOT_AT_START = tuple(name for name in HEAVY if name != "typer")


def _loaded(statement: str) -> set[str]:
    """The modules, of HEAVY and of espforensics, that ``statement`` loads in a new interpreter."""
    code = (
        f"import sys, json\n{statement}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r} + ('espforensics',))))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    return set(json.loads(res.stdout))


def test_the_package_alone_loads_no_heavy_library() -> None:
    loaded = _loaded("import espforensics, espforensics.errors")
    assert sorted(loaded) == ["espforensics", "espforensics.errors"]


def test_a_library_name_is_imported_on_first_use() -> None:
    loaded = _loaded("import espforensics\nassert espforensics.Verdict.OK == 'ok'")
    assert "espforensics.model" in loaded
    assert not {"numpy", "pandas", "espforensics.analysis"} & loaded


def _heavy(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m.split(".")[0] in NOT_AT_START}


def test_the_command_line_loads_no_analysis_and_no_heavy_library() -> None:
    """The commands are declared from typer and model/'s types; each imports its body
    (cli/commands.py, the analysis) only when it runs."""
    loaded = _loaded("import espforensics.cli")
    assert {"typer", "espforensics.cli", "espforensics.cli.options"} <= loaded  # it did happen
    assert _heavy(loaded) == set()
    analysis = {
        "espforensics.analysis",
        "espforensics.results.summary",
        "espforensics.cli.commands",
    }
    assert not analysis & loaded
    assert not {m for m in loaded if m.startswith(("espforensics.batch", "espforensics.plots"))}
    assert not {"espforensics.report.compare", "espforensics.render.compare"} & loaded


def test_the_summary_types_load_neither_the_engine_nor_the_builder() -> None:
    """A report is rendered from a Summary (``report``); the steady lane's rows only count."""
    loaded = _loaded("import espforensics.results.summary")
    assert "espforensics.results.summary" in loaded
    assert not {m for m in loaded if m.startswith("espforensics.engine")}
    assert "espforensics.results.builder" not in loaded


ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = [
    str(ROOT / "fixtures" / "example.pcap"),
    "--sa",
    str(ROOT / "fixtures" / "example.keys.yaml"),
]


def _run_cli(args: list[str], tmp_path: Path) -> tuple[int, set[str]]:
    """``espforensics ARGS`` in a fresh interpreter: its exit code and the modules of
    HEAVY (dask among them) and of espforensics it had loaded when it exited."""
    listing = tmp_path / "modules.json"
    code = (
        "import sys, json\n"
        f"sys.argv = ['espforensics', *{args!r}]\n"
        "from espforensics.__main__ import main\n"
        "try:\n    main()\n    code = 0\nexcept SystemExit as exc:\n    code = exc.code\n"
        f"open({str(listing)!r}, 'w').write(json.dumps([code, sorted(sys.modules)]))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
    code, modules = json.loads(listing.read_text())
    return code, {m for m in modules if m.split(".")[0] in (*HEAVY, "espforensics")}


# Every command's --help, and what answers without a capture: --help, --version, completion.
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
NO_CAPTURE = [["--help"], ["--version"], *([c, "--help"] for c in COMMANDS), ["completion", "bash"]]


@pytest.mark.parametrize("args", NO_CAPTURE, ids=" ".join)
def test_help_version_and_completion_load_no_heavy_library(args: list[str], tmp_path: Path) -> None:
    code, loaded = _run_cli(args, tmp_path)
    assert code == 0
    assert "espforensics.cli" in loaded
    assert _heavy(loaded) == set()
    assert "espforensics.cli.commands" not in loaded


def test_every_command_has_its_help_checked() -> None:
    """COMMANDS is read from the app: a command added later is checked too."""
    assert {"analyze", "batch", "compare", "completion", "reconcile", "report"} <= set(COMMANDS)


COLLECTIONS = """
import gc, json, sys

counts = {"before": 0, "loading": 0, "after": 0}


def seen(phase, info):
    \"\"\"Count collections before, while and after cli/commands.py is imported.\"\"\"
    if phase == "start":
        body = sys.modules.get("espforensics.cli.commands")
        loading = getattr(getattr(body, "__spec__", None), "_initializing", False)
        counts["before" if body is None else "loading" if loading else "after"] += 1


gc.callbacks.append(seen)
sys.argv = ["espforensics", *ARGS]
from espforensics.__main__ import main

try:
    main()
except SystemExit as exc:
    counts["code"] = exc.code
counts["run"] = counts["after"]  # the example's run allocates too little to set one off
made = [[] for _ in range(5000)]  # once the command is done: the collector is on again
for item in made:
    item.append(made)
print(json.dumps(counts))
"""


def test_a_command_loads_the_analysis_with_the_collector_paused(tmp_path: Path) -> None:
    """Its objects live to the end: a collection among them frees nothing (cli/__init__.py,
    _importing_body); once it is loaded the collector runs again."""
    args = ["analyze", *EXAMPLE, "--no-plots", "--quiet", "--out", str(tmp_path / "out")]
    code = COLLECTIONS.replace("ARGS", repr(args))
    res = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=300
    )
    counts = json.loads(res.stdout)
    assert counts["code"] == 0
    assert counts["loading"] == 0
    assert counts["before"] > 0 and counts["after"] > counts["run"]  # on before and after: seen


BODY_FROZEN = """
import gc, json
from espforensics.cli import _importing_body

with _importing_body():
    import espforensics.cli.commands
loaded = gc.get_freeze_count()
with _importing_body():
    import espforensics.cli.commands  # loaded already: nothing new to freeze
print(json.dumps([loaded, gc.get_freeze_count(), gc.isenabled()]))
"""


def test_a_body_loaded_is_moved_out_of_the_collectors_way_once() -> None:
    """What the body's imports made lives to the end (cli/__init__.py, _importing_body):
    frozen, so that no collection of the run walks it; a second command that loads
    nothing new freezes nothing more."""
    res = subprocess.run(
        [sys.executable, "-c", BODY_FROZEN], check=True, capture_output=True, text=True
    )
    loaded, again, enabled = json.loads(res.stdout)
    assert loaded > 10_000  # the analysis, numpy, pyarrow, cryptography
    assert again == loaded
    assert enabled


FROZEN_AT_EXIT = """
import gc, json, sys

sys.argv = ["espforensics", *ARGS]
from espforensics.__main__ import main

try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps([code, gc.get_freeze_count(), len(gc.get_objects())]))
"""


@pytest.mark.parametrize("command", ["analyze", "--version"])
def test_the_process_ends_with_its_heap_frozen(command: str, tmp_path: Path) -> None:
    """The interpreter's shutdown collection walks what no ``gc.freeze`` moved out of its
    way: after a command nothing of the run is left for it (__main__.py, start-up)."""
    args = [command]
    if command == "analyze":
        args += [*EXAMPLE, "--no-plots", "--quiet", "--out", str(tmp_path / "out")]
    code = FROZEN_AT_EXIT.replace("ARGS", repr(args))
    res = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=300
    )
    exit_code, frozen, tracked = json.loads(res.stdout.splitlines()[-1])
    assert exit_code == 0
    assert frozen > 10_000  # the modules, the analysis: moved out of the collector's way
    assert tracked < 10  # what is left for the shutdown's collection to walk


def test_the_collector_is_as_the_caller_had_it_once_the_body_is_loaded() -> None:
    from espforensics.cli import _importing_body

    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            with _importing_body():
                assert not gc.isenabled()
            assert gc.isenabled() is enabled
    finally:
        gc.enable()


def test_the_command_line_and_the_tables_load_no_pandas() -> None:
    """packets.parquet's pandas metadata is built from its schema (tables.pandas_metadata)."""
    loaded = _loaded("import espforensics.cli, espforensics.tables.packets")
    assert {"pyarrow", "espforensics.tables.packets"} <= loaded  # the import did happen
    assert "pandas" not in loaded


def test_analyze_without_plots_loads_no_pandas(tmp_path: Path) -> None:
    """Nor does pyarrow load it for us: its ``pa.array`` imports pandas on first use
    (apache/arrow#34994), so the packets table is built from buffers (tables/arrow.py).
    The capture copies, which read packets.parquet back, load none either."""
    out = tmp_path / "out"
    copies = ["--annotate", str(tmp_path / "a.pcapng"), "--decrypted", str(tmp_path / "d.pcap")]
    args = ["analyze", *EXAMPLE, "--no-plots", "--quiet", "--out", str(out), *copies]
    code, loaded = _run_cli(args, tmp_path)
    assert code == 0
    assert (out / "packets.parquet").is_file() and (out / "packets.csv").is_file()
    assert (tmp_path / "a.pcapng").is_file() and (tmp_path / "d.pcap").is_file()
    assert {"numpy", "pyarrow", "pyarrow.parquet", "typer"} <= loaded  # what a run needs
    assert "pandas" not in loaded
    assert not {m for m in loaded if m.split(".")[0] == "matplotlib"}
    assert {"espforensics.rewrite.annotate", "espforensics.rewrite.decrypted"} <= loaded


@pytest.mark.slow
def test_a_run_that_draws_its_plots_loads_no_pandas(tmp_path: Path) -> None:
    """The plots draw small numpy tables (plots/table.py) read from packets.parquet's
    buffers: a default run, plots drawn, imports neither pandas (0.25 s) nor
    pyarrow.compute."""
    out = tmp_path / "out"
    code, loaded = _run_cli(["analyze", *EXAMPLE, "--quiet", "--out", str(out)], tmp_path)
    assert code == 0
    assert (out / "plots" / "verdicts.png").is_file()  # the plots were drawn
    assert {"matplotlib", "espforensics.plots.data"} <= loaded
    assert not {m for m in loaded if m.split(".")[0] == "pandas"}
    assert "pyarrow.compute" not in loaded


@pytest.mark.slow
def test_report_loads_neither_pyarrow_nor_the_engine(tmp_path: Path) -> None:
    """``report`` renders an analysis's summary.json again: no table is read or written,
    no capture analyzed (cli/report.py, not cli/commands.py)."""
    out = tmp_path / "out"
    code, _ = _run_cli(["analyze", *EXAMPLE, "--no-plots", "--quiet", "--out", str(out)], tmp_path)
    assert code == 0
    code, loaded = _run_cli(["report", str(out)], tmp_path)
    assert code == 0
    assert {"espforensics.render.text", "espforensics.results.summary"} <= loaded  # it did run
    assert not {m for m in loaded if m.split(".")[0] in ("pyarrow", "pandas", "matplotlib", "dask")}
    analysis = ("espforensics.engine", "espforensics.tables.packets", "espforensics.analysis.run")
    assert not {m for m in loaded if m.startswith(analysis)}
    assert not {"espforensics.analysis", "espforensics.cli.commands"} & loaded


# What analyze --no-plots on the example never uses, and so must not import (start-up,
# issue 21): other commands, other options, other key notations, other libraries.
NOT_IN_A_RUN = (
    "dpkt",  # decode/clear.py sums RFC 1071 itself
    "pydantic",  # typer's TypeAdapters: the options' values are plain (cli/coercion.py)
    "pydantic_core",
    "zstandard",  # an uncompressed capture
    "pyarrow.compute",  # packets.csv's seconds are divided in numpy (tables.ns_to_seconds)
    "pandas",
    "matplotlib",
    "dask",
    "espforensics.plots",
    "espforensics.plots.data",
    "espforensics.report.compare",
    "espforensics.render.compare",
    "espforensics.batch",
    "espforensics.synth",
    "espforensics.rewrite.annotate",  # --annotate
    "espforensics.rewrite.decrypted",  # --decrypted
    "espforensics.keys.xfrm_text",  # the key file is a keys.yaml
    "espforensics.keys.tcpdump",
    "espforensics.engine.pool",  # --jobs and --scheduler: worker processes, multiprocessing
    "espforensics.engine.prefetch",
    "espforensics.engine.dask_workers",
    "espforensics.results.expect",  # --expect, --format ktap
    "espforensics.render.ktap",
    "espforensics.receiver.xfrm_stat",  # --xfrm-stat-before/-after, --xfrm-state-stats
)


@pytest.mark.slow
def test_analyze_without_plots_imports_only_what_the_run_uses(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, loaded = _run_cli(
        ["analyze", *EXAMPLE, "--no-plots", "--quiet", "--out", str(out)], tmp_path
    )
    assert code == 0
    assert (out / "summary.json").is_file() and (out / "report.html").is_file()
    assert {"espforensics.rewrite", "espforensics.keys.yaml_file"} <= loaded  # imported
    unused = {m for m in loaded if any(m == n or m.startswith(n + ".") for n in NOT_IN_A_RUN)}
    assert unused == set()


@pytest.mark.slow
def test_a_run_the_steady_lane_takes_imports_no_pyarrow_compute(tmp_path: Path) -> None:
    """The packets table of the lane's runs is built from buffers (tables/arrow.py ``pick``,
    ``hex_rows``): pyarrow.compute's import, 0.04 s, is not a cost of a clean capture."""
    capture = tmp_path / "clean.pcap"
    assert synth_main(["bench", "3000", str(capture), "--algorithm", "gcm", "--ivs", "seq"]) == 0
    out = tmp_path / "out"
    args = ["analyze", str(capture), "--sa", str(tmp_path / "clean.keys.yaml"), "--no-plots"]
    code, loaded = _run_cli([*args, "--quiet", "--out", str(out)], tmp_path)
    assert code == 0
    assert "pyarrow.compute" not in loaded


@pytest.mark.parametrize(
    ("key_file", "notation"),
    [
        ("example.keys.yaml", "espforensics.keys.yaml_file"),
        ("example.xfrm-state.txt", "espforensics.keys.xfrm_text"),
        ("example.esp_sa", "espforensics.keys.wireshark"),
    ],
)
def test_a_key_file_imports_the_notations_tried_up_to_its_own(key_file: str, notation: str) -> None:
    """keys.FORMATS names each detector and parser by its import path, resolved when a
    file is tried against it: tried in order, the later notations are never imported."""
    path = ROOT / "fixtures" / key_file
    loaded = _loaded(f"from espforensics.keys import load_sas\nassert load_sas({str(path)!r})")
    order = [
        "espforensics.keys.yaml_file",
        "espforensics.keys.xfrm_text",
        "espforensics.keys.wireshark",
        "espforensics.keys.tcpdump",
    ]
    tried = order[: order.index(notation) + 1]
    later = set(order) - set(tried) - {"espforensics.keys.wireshark"}  # keys re-exports it
    assert set(tried) <= loaded
    assert not later & loaded


@pytest.mark.slow
def test_analyze_with_plots_draws_on_agg_without_pyplot(tmp_path: Path) -> None:
    """The plots are drawn on Agg's canvas directly: pyplot (whose first figure picks a
    backend, probing the GUI ones) is never imported, nor any GUI backend."""
    out = tmp_path / "out"
    code, loaded = _run_cli(["analyze", *EXAMPLE, "--quiet", "--out", str(out)], tmp_path)
    assert code == 0
    assert (out / "plots" / "verdicts.png").is_file()
    backends = {m for m in loaded if m.startswith("matplotlib.backends.backend_")}
    assert backends == {
        "matplotlib.backends.backend_agg",
        "matplotlib.backends.backend_mixed",
        "matplotlib.backends.backend_svg",
    }
    assert "matplotlib.pyplot" not in loaded


def test_every_key_format_names_a_detector_and_a_parser_that_exist() -> None:
    from espforensics.keys import FORMATS

    for key_format in FORMATS:
        for path in (key_format.detector, key_format.parser):
            module, _, name = path.partition(":")
            assert callable(getattr(importlib.import_module(module), name)), path
    tcpdump = FORMATS[-1]
    assert tcpdump.name == "tcpdump -E"
    assert tcpdump.detect("0x1000@192.0.2.1 aes128-cbc-hmac96:0x00112233445566778899aabbccddeeff")


def test_the_output_files_end_with_the_summary() -> None:
    from espforensics.results import folder

    assert folder.OUTPUT_FILES[-1] == "summary.json"  # renamed into place last


def test_a_run_with_findings_loads_no_pandas(tmp_path: Path) -> None:
    """finding_frames.csv and .parquet are built from buffers too (tables/small.py): a
    run whose findings name frames loads no pandas either."""
    paths = write_scenario(SCENARIOS["iv-reuse"](1), tmp_path, stem="reuse")
    out = tmp_path / "out"
    args = ["analyze", str(paths["capture"]), "--sa", str(paths["keys"]), "--no-plots"]
    code, loaded = _run_cli([*args, "--quiet", "--fail-on", "never", "--out", str(out)], tmp_path)
    assert code == 0
    rows = (out / "finding_frames.csv").read_text().splitlines()
    assert rows[0] == "finding,frame,layer" and len(rows) > 1  # findings that name frames
    assert "pandas" not in loaded


def test_the_commands_annotations_are_objects_typer_need_not_evaluate() -> None:
    """typer reads each command's parameters from its annotations at every start; strings
    (``from __future__ import annotations``) it would compile and evaluate, each time."""
    group = typer.main.get_command(app)
    commands = group.commands.values()  # type: ignore[attr-defined]
    callbacks = [group.callback, *(c.callback for c in commands)]
    for callback in callbacks:
        assert callback is not None
        wrapped = inspect.unwrap(callback)
        strings = [k for k, v in inspect.get_annotations(wrapped).items() if isinstance(v, str)]
        assert strings == [], wrapped.__name__


BLAS_THREADS = """
import json, os, sys

sys.argv = ["espforensics", "--version"]
from espforensics.__main__ import main

try:
    main()
except SystemExit:
    pass
print(json.dumps(os.environ.get("OPENBLAS_NUM_THREADS")))
"""


@pytest.mark.parametrize(("given", "seen"), [(None, "1"), ("3", "3")])
def test_the_command_starts_numpy_without_blas_threads(given: str | None, seen: str) -> None:
    """numpy's OpenBLAS would start a thread per core that spin at import (__main__.py):
    the command asks for none, unless the environment says otherwise."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    res = subprocess.run(
        [sys.executable, "-c", BLAS_THREADS], env=env, check=True, capture_output=True, text=True
    )
    assert json.loads(res.stdout.splitlines()[-1]) == seen


def test_the_library_leaves_the_blas_threads_alone() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    code = "import os, espforensics.analysis; print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    assert res.stdout.strip() == "None"


def test_batch_with_its_default_out_folder_loads_no_pydantic(tmp_path: Path) -> None:
    """A default value is coerced too: batch's ``--out`` (a Path) takes typer's own path
    check, without pydantic (cli/coercion.py)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "example.pcap").write_bytes(
        (ROOT / "fixtures" / "example.pcap").read_bytes()
    )
    args = ["batch", "in", *EXAMPLE[1:], "--no-plots", "--quiet", "--jobs", "1"]
    code = (
        "import sys, json\n"
        f"sys.argv = ['espforensics', *{args!r}]\n"
        "from espforensics.__main__ import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "print(json.dumps([code, sorted(m for m in sys.modules if m.startswith('pydantic'))]))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, check=True, capture_output=True, text=True
    )
    exit_code, loaded = json.loads(res.stdout.splitlines()[-1])
    assert exit_code == 0
    assert (tmp_path / "espforensics-batch" / "captures.csv").is_file()
    assert loaded == []
