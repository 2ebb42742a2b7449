"""espforensics batch: an archive of generated captures, resumed, on a pool and on Dask."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from espforensics.batch.discover import capture_stem, discover, sidecars
from espforensics.batch.run import run_batch
from espforensics.cli import app
from espforensics.errors import InputError
from espforensics.synth import build_scenario, write_scenario

runner = CliRunner()
# (scenario, compression, where): 21 captures, plain and compressed, some in sub-folders.
ARCHIVE = [
    ("example", None, ""),
    ("ipv4-transport-tcp", "gzip", ""),
    ("ipv6-tunnel", "bzip2", ""),
    ("inner-protocols", "xz", ""),
    ("outer-headers", "zstd", ""),
    ("natt", None, "site-a/"),
    ("pcapng-dsb", None, "site-a/"),
    ("link-all", "gzip", "site-a/"),
    ("link-vlan", None, "site-b/"),
    ("link-sll2", None, "site-b/"),
    ("fragments-v4", None, "site-b/"),
    ("fragments-v6", "xz", ""),
    ("corrupt-icv", None, ""),
    ("unknown-spi", None, ""),
    ("snaplen", None, ""),
    ("bad-trailer", None, ""),
    ("kernel-gso-v4", "gzip", ""),
    ("kernel-gso-v6", None, "site-b/"),
    ("esn-wrap", None, ""),
    ("sequence", None, ""),
    ("shared-key", None, ""),
]


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("archive")
    for name, compression, where in ARCHIVE:
        sc = build_scenario(name, seed=1)
        paths = write_scenario(sc, root / where, stem=name, compression=compression)  # type: ignore[arg-type]
        for role in ("xfrm", "esp_sa", "expected"):
            paths[role].unlink()  # keys.yaml stays beside each capture as its sidecar
    cut = write_scenario(build_scenario("ipv4-transport-tcp", seed=2), root, stem="cut")["capture"]
    cut.write_bytes(cut.read_bytes()[:-40])  # truncated inside its last record
    (root / "notes.pcap").write_text("not a capture at all\n")
    return root


def _expected_rows(archive: Path) -> dict[str, tuple[str, int, int, int]]:
    """(status, frames, ok, esp_misplaced) per capture, from the scenarios' truth."""
    rows = {}
    for name, _compression, _where in ARCHIVE:
        sc = build_scenario(name, seed=1)
        counts = sc.verdict_counts()
        rows[name] = ("done", len(sc.frames), counts.get("ok", 0), counts.get("esp_misplaced", 0))
    rows["cut"] = ("error", 97, 95, 0)
    rows["notes"] = ("error", 0, 0, 0)
    return rows


def _table(out: Path) -> dict[str, dict[str, str]]:
    with (out / "captures.csv").open() as fh:
        return {capture_stem(Path(r["path"])) or "": r for r in csv.DictReader(fh)}


def test_batch_table_failures_and_resume(archive: Path, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    first = run_batch([str(archive)], [], out, jobs=2, plots=False)
    assert (first.analyzed, first.skipped) == (23, 0)
    table = _table(out)
    got = {
        k: (r["status"], int(r["frames"]), int(r["verdict_ok"]), int(r["verdict_esp_misplaced"]))
        for k, r in table.items()
    }
    assert got == _expected_rows(archive)
    assert "capture ends inside frame 98: read 97 complete frames" in table["cut"]["error"]
    assert "not a pcap or pcapng file" in table["notes"]["error"]
    assert int(table["kernel-gso-v4"]["finding_esp_misplaced"]) == 12
    assert table["kernel-gso-v4"]["worst"] == "critical"
    assert int(table["sequence"]["finding_seq_gap"]) == 5

    # the partitioned dataset holds every frame of every capture
    dataset = pq.read_table(out / "packets", columns=["frame", "capture"]).to_pandas()
    per_capture = dataset.groupby("capture", observed=True).size().to_dict()
    assert sum(per_capture.values()) == sum(v[1] for v in _expected_rows(archive).values())

    second = run_batch([str(archive)], [], out, jobs=2, plots=False)
    assert (second.analyzed, second.skipped) == (2, 21)  # only the two failures are redone
    assert _table(out) == table
    report = (out / "report.txt").read_text()
    assert report.index("Not analyzed") < report.index("With findings") < report.index("Clean:")
    forced = run_batch([str(archive)], [], out, jobs=1, plots=False, force=True)
    assert (forced.analyzed, forced.skipped) == (23, 0)


def test_interrupted_capture_is_not_trusted(archive: Path, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    run_batch([str(archive / "example.pcap")], [], out, plots=False)
    # An interrupted run leaves a partial folder and no manifest entry for it.
    partial = out / "captures" / ".partial-sequence.pcap"
    partial.mkdir()
    (partial / "packets.csv").write_text("half")
    again = run_batch(
        [str(archive / "example.pcap"), str(archive / "sequence.pcap")], [], out, plots=False
    )
    assert (again.analyzed, again.skipped) == (1, 1)
    assert not partial.exists()
    assert (out / "captures" / "sequence.pcap" / "summary.json").exists()


def test_sidecar_wins_over_global_keys(archive: Path, tmp_path: Path) -> None:
    other = build_scenario("example", seed=7)  # same SPIs, other keys
    global_keys = tmp_path / "global.keys.yaml"
    global_keys.write_text(write_scenario(other, tmp_path / "o", stem="x")["keys"].read_text())
    out = tmp_path / "batch"
    run_batch([str(archive / "example.pcap")], [str(global_keys)], out, plots=False)
    assert _table(out)["example"]["verdict_ok"] == "36"


def test_discovery_and_sidecars(archive: Path) -> None:
    jobs = discover([str(archive)])
    assert len(jobs) == 23
    example = next(j for j in jobs if j.capture.name == "example.pcap")
    assert example.sidecars == (archive / "example.keys.yaml",)
    assert capture_stem(Path("a.pcapng.zst")) == "a" and capture_stem(Path("a.txt")) is None
    assert sidecars(archive / "notes.pcap") == ()
    assert len(discover([str(archive / "site-*")])) == 7
    with pytest.raises(InputError, match="no such file or folder"):
        discover([str(archive / "nothing-*.pcap")])


def test_cli_exit_codes(archive: Path, tmp_path: Path) -> None:
    clean = runner.invoke(
        app,
        [
            "batch",
            str(archive / "example.pcap"),
            "--out",
            str(tmp_path / "a"),
            "--no-plots",
            "--jobs",
            "1",
        ],
    )
    assert clean.exit_code == 0, clean.stderr
    flagged = runner.invoke(
        app,
        [
            "batch",
            str(archive / "site-b" / "kernel-gso-v6.pcap"),
            "--out",
            str(tmp_path / "b"),
            "--no-plots",
            "-q",
        ],
    )
    assert flagged.exit_code == 1
    broken = runner.invoke(
        app,
        ["batch", str(archive / "notes.pcap"), "--out", str(tmp_path / "c"), "--no-plots", "-q"],
    )
    assert broken.exit_code == 2
    missing = runner.invoke(app, ["batch", str(tmp_path / "nope"), "--out", str(tmp_path / "d")])
    assert missing.exit_code == 2 and missing.stderr.startswith("espforensics: error: ")


def test_dask_gives_the_same_table(archive: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    local = tmp_path / "local"
    run_batch([str(archive)], [], local, jobs=2, plots=False)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        remote = tmp_path / "dask"
        result = run_batch(
            [str(archive)], [], remote, scheduler=cluster.scheduler_address, plots=False
        )
    assert result.analyzed == 23
    assert (remote / "captures.csv").read_text() == (local / "captures.csv").read_text()
    for name in ("kernel-gso-v4.pcap.gz", "sequence.pcap"):
        a = json.loads((local / "captures" / name / "summary.json").read_text())
        b = json.loads((remote / "captures" / name / "summary.json").read_text())
        assert a == b
    shutil.rmtree(remote)
