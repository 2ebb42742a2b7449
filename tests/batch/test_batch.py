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
from tests.support import helpers

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


@pytest.mark.slow
def test_dask_gives_the_same_table(archive: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    local = tmp_path / "local"
    run_batch([str(archive)], [], local, jobs=2, plots=False)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
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


# -- keys found beside a capture, and captures without any ---------------------

REAL = helpers.CAPTURES / "linux-6.1"


def _run_folder(folder: Path, scenario: str, seed: int = 1) -> tuple[Path, int]:
    """``folder/sender.pcap`` with its `ip xfrm state` text beside it as xfrm-state.txt."""
    sc = build_scenario(scenario, seed=seed)
    paths = write_scenario(sc, folder, stem="sender")
    paths["xfrm"].rename(folder / "xfrm-state.txt")
    for role in ("keys", "esp_sa", "expected"):
        paths[role].unlink()
    (folder / "notes.txt").write_text("run 1: sender side, 2025-01-01\n")
    (folder / "ground-truth.json").write_text('{"frames": 40}\n')
    return paths["capture"], sc.verdict_counts().get("ok", 0)


def test_key_file_found_by_content_beside_a_lone_capture(tmp_path: Path) -> None:
    capture, ok = _run_folder(tmp_path / "in" / "run1", "example")
    (job,) = discover([str(tmp_path / "in")])
    assert (job.sidecars, job.folder_keys) == ((), (capture.parent / "xfrm-state.txt",))
    out = tmp_path / "batch"
    run_batch([str(tmp_path / "in")], [], out, plots=False)
    row = _table(out)["sender"]
    assert (row["status"], int(row["verdict_ok"]), ok) == ("done", 36, 36)
    assert row["keys"] == str(capture.parent / "xfrm-state.txt")
    assert (row["key_source"], row["keyless"]) == ("folder", "False")
    report = " ".join((out / "report.txt").read_text().split())
    assert "0 analyzed without keys" in report
    assert "keys found beside it: xfrm-state.txt" in report


def test_sidecar_keeps_priority_over_a_key_file_found_by_content(tmp_path: Path) -> None:
    folder = tmp_path / "run2"
    capture, _ = _run_folder(folder, "example", seed=7)  # xfrm-state.txt: other keys
    good = write_scenario(build_scenario("example", seed=1), tmp_path / "good", stem="sender")
    capture.write_bytes(good["capture"].read_bytes())
    sidecar = folder / "sender.keys.yaml"
    sidecar.write_text(good["keys"].read_text())
    (job,) = discover([str(folder)])
    assert (job.sidecars, job.folder_keys) == ((sidecar,), ())
    out = tmp_path / "batch"
    run_batch([str(folder)], [], out, plots=False)
    row = _table(out)["sender"]
    assert (int(row["verdict_ok"]), row["keys"], row["key_source"]) == (36, str(sidecar), "sidecar")


def test_folder_of_two_captures_takes_no_key_file_by_content(tmp_path: Path) -> None:
    folder = tmp_path / "run3"
    _run_folder(folder, "example")
    shutil.copyfile(folder / "sender.pcap", folder / "receiver.pcap")
    jobs = discover([str(folder)])
    assert [(j.capture.name, j.folder_keys) for j in jobs] == [
        ("receiver.pcap", ()),
        ("sender.pcap", ()),
    ]


def test_capture_without_keys_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "alone"
    capture, _ = _run_folder(folder, "example")
    (folder / "xfrm-state.txt").write_text("src 192.0.2.1 dst 192.0.2.2\n")  # no SA: no key file
    out = tmp_path / "batch"
    result = run_batch([str(capture)], [], out, plots=False)
    (r,) = result.rows
    assert (r.status, r.keys, r.key_source, r.keyless) == ("done", (), "none", True)
    row = _table(out)["sender"]
    assert (row["keys"], row["key_source"], row["keyless"]) == ("", "none", "True")
    assert (int(row["verdict_unknown_sa"]), int(row["verdict_ok"])) == (36, 0)
    report = " ".join((out / "report.txt").read_text().split())
    assert "1 analyzed without keys" in report
    assert ".pcap: 40 frames, 36 ESP packets; no keys: ESP not decrypted" in report
    with_keys = run_batch([str(capture)], [str(_keys_of("example", tmp_path))], tmp_path / "b2")
    assert (with_keys.rows[0].key_source, with_keys.rows[0].keyless) == ("--sa", False)


def _keys_of(scenario: str, tmp: Path) -> Path:
    return write_scenario(build_scenario(scenario, seed=1), tmp / "k", stem=scenario)["keys"]


@helpers.needs_captures
def test_real_run_folders_take_their_xfrm_state(tmp_path: Path) -> None:
    """capture.pcap + xfrm-state.txt per folder, as the kernel test rigs leave them."""
    names = ["tcp-transport-v4", "ip6tnl-transport-tso-off"]
    out = tmp_path / "batch"
    result = run_batch([str(REAL / n) for n in names], [], out, jobs=2, plots=False)
    assert (result.analyzed, [r.status for r in result.rows]) == (2, ["done", "done"])
    with (out / "captures.csv").open() as fh:
        table = {r["name"]: r for r in csv.DictReader(fh)}
    for name, ok in zip(names, (447, 251), strict=True):
        truth = json.loads((REAL / name / "ground-truth.json").read_text())
        row = table[f"{name}__capture.pcap"]
        assert row["keys"] == str(REAL / name / "xfrm-state.txt")
        assert (row["key_source"], row["keyless"]) == ("folder", "False")
        assert int(row["verdict_ok"]) == int(row["esp_packets"]) == truth["esp_frames"] == ok


def test_a_resumed_batch_writes_the_reports_of_a_fresh_one(tmp_path: Path) -> None:
    """A batch run on part of an archive, then resumed on all of it, writes report.txt and
    report.html byte for byte as a fresh run of the whole archive: the reused row, read back
    from manifest.json (its keys sorted by name), lists its finding kinds in the same order."""
    archive = tmp_path / "archive"
    paths = [
        str(write_scenario(build_scenario(name, seed=1), archive, stem=name)["capture"])
        for name in ("kernel-gso-v4", "sequence")
    ]
    resumed, fresh = tmp_path / "resumed", tmp_path / "fresh"
    run_batch(paths[:1], [], resumed, jobs=1, plots=False)
    again = run_batch(paths, [], resumed, jobs=1, plots=False)
    assert (again.analyzed, again.skipped) == (1, 1)
    res = runner.invoke(app, ["batch", *paths, "--out", str(fresh), "--no-plots", "-j", "1"])
    assert "taken from an earlier run" not in res.stderr
    for name in ("report.txt", "report.html"):
        assert (resumed / name).read_bytes() == (fresh / name).read_bytes(), name
    report = " ".join((fresh / "report.txt").read_text().split())
    assert "esp_misplaced 12, cleartext_leak 12" in report  # FindingKind order, as a fresh run
    assert "seq_duplicate 1, seq_gap 5, seq_reorder 1" in report
    res = runner.invoke(app, ["batch", *paths, "--out", str(fresh), "--no-plots", "-j", "1"])
    assert res.stdout == (fresh / "report.txt").read_text()  # the run's count is on stderr
    assert res.stderr.splitlines() == [
        "espforensics: 2 of 2 captures taken from an earlier run "
        "(manifest.json; --force redoes them)"
    ]
