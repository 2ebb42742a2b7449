"""The benchmark scripts still run (tiny sizes; the figures are not checked here).

Speed is measured by benchmarks/, never asserted by tests; these only keep
the scripts from rotting as the code changes under them (the IV tracker
benchmark once broke silently when PacketContext changed).
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(script: str, *args: str) -> str:
    res = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.slow
def test_bench_speed_prints_every_figure(tmp_path: Path) -> None:
    # Two stand-ins for tshark (no real tshark, no chroot needed): a Python
    # script that prints a version line and reads nothing.
    fake = tmp_path / "fake_tshark.py"
    fake.write_text(
        'import sys\nif "--version" in sys.argv:\n    print("TShark (fake) " + sys.argv[1])\n'
    )
    work = tmp_path / "work"
    out = _run(
        "bench_speed.py",
        "--sizes",
        "3000,6000",
        "--workdir",
        str(work),
        "--tshark",
        shlex.join([sys.executable, str(fake), "4.0.99"]),
        "--tshark",
        shlex.join([sys.executable, str(fake), "4.4.99"]),
        "--repeat",
        "1",
        "--large-from",  # 6,000 frames take the path of the 5,000,000-frame captures
        "6000",
    )
    for needle in (
        "machine: ",
        "generated 3,000 frames in",
        "analyze ",
        "+ plots",
        "--jobs 2",
        "floor",
        "analyze/floor",
        "TShark (fake) 4.0.99",
        "TShark (fake) 4.4.99",
        "frames/s (default dissection)",
        "frames/s (--disable-protocol tcp)",
        "analyze/tshark (fastest run: ",
        "generated 6,000 frames in",
        "6,000 frames (8 MB), one run (analyze only",
        "deleted bench-6000.pcap",
        "RSS at 6,000",
        "targets, from this run",
        "analyze/fastest tshark",
        "jobs-2/jobs-1",
        "plots overhead",
        "peak RSS (no plots)",
    ):
        assert needle in out, out
    assert (work / "bench-3000.pcap").exists() and not (work / "bench-6000.pcap").exists()
    assert not list(work.glob("*partial*"))


@pytest.mark.slow
@pytest.mark.parametrize(("algorithm", "tshark_runs"), [("cbc", True), ("chacha20", False)])
def test_bench_speed_per_algorithm(tmp_path: Path, algorithm: str, tshark_runs: bool) -> None:
    """cbc: tshark is measured (Wireshark decrypts CBC + HMAC); chacha20: it is not (4.0 and
    4.4 have no ChaCha20 in esp_sa). Each algorithm's captures go to a folder of its own."""
    fake = tmp_path / "fake_tshark.py"
    fake.write_text('import sys\nif "--version" in sys.argv:\n    print("TShark (fake) 9.9")\n')
    work = tmp_path / "work"
    out = _run(
        "bench_speed.py",
        *("--sizes", "2000", "--workdir", str(work), "--repeat", "1"),
        *("--algorithm", algorithm, "--tshark", shlex.join([sys.executable, str(fake)])),
    )
    assert "generated 2,000 frames in" in out and "analyze/floor" in out, out
    assert ("TShark (fake) 9.9" in out) is tshark_runs, out
    assert ("tshark: not run" in out) is not tshark_runs, out
    assert (work / algorithm / "bench-2000.pcap").exists()
    keys = (work / algorithm / "bench-2000.keys.yaml").read_text()
    assert ("enc: cbc(aes)" in keys and "auth: hmac(sha256)" in keys) is (algorithm == "cbc")


def test_bench_speed_refuses_a_size_the_disk_cannot_hold(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_speed.py"),
            *("--sizes", str(10**13), "--workdir", str(tmp_path), "--no-tshark"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1 and "not enough disk" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_bench_iv_tracker_counts_one_run_for_counter_ivs() -> None:
    out = _run("bench_iv_tracker.py", "--counter", "20000", "--random", "5000")
    assert "counter  IVs:      20,000 packets" in out and "runs 1 |" in out, out


def test_bench_u64set_prints_each_count() -> None:
    out = _run("bench_u64set.py", "--values", "3000,9000", "--batch", "700", "--repeat", "1")
    for n in ("3,000", "9,000"):
        assert f"{n} values in batches of 700: probes " in out, out
    assert out.count("bytes a value held") == 2, out


def test_bench_batch_runs(tmp_path: Path) -> None:
    out = _run("bench_batch.py", "--captures", "3", "--frames", "200", "--workdir", str(tmp_path))
    assert "--jobs 1:" in out and "--jobs 2:" in out, out


def test_bench_sas_prints_both_runs_and_the_ratio(tmp_path: Path) -> None:
    out = _run("bench_sas.py", "--cases", "400:300", "--workdir", str(tmp_path))
    assert "2 SPIs:" in out and "300 SPIs:" in out and "peak RSS" in out, out
    assert "time ratio many/one:" in out and "memory per SA:" in out, out


def test_bench_sas_stray_spis_run_has_its_one_packet_sas(tmp_path: Path) -> None:
    # every 100th of 400 frames an SPI of its own: the bulk transfer's 2 SAs and 4 strays
    out = _run("bench_sas.py", "--cases", "400:300", "--workdir", str(tmp_path), "--stray", "100")
    line = next(x for x in out.splitlines() if "every 100th frame an SPI of its own:" in x)
    assert "      6 SAs" in line and "time ratio to 2 SPIs:" in line, out


def test_bench_iv_constant_prints_every_window() -> None:
    out = _run("bench_iv_constant.py", "--trials", "20")
    for n in (16, 32, 64):
        assert f"window {n:2d}: true constant in" in out, out


@pytest.mark.slow
def test_bench_formats_prints_every_format_and_the_copy() -> None:
    fixtures = BENCH.parent / "fixtures"
    out = _run(
        "bench_formats.py",
        str(fixtures / "example.pcap"),
        str(fixtures / "example.keys.yaml"),
        "--rounds",
        "1",
    )
    lines = out.splitlines()
    assert lines[0] == "40 frames, best of 1 rounds, the formats taking turns"
    assert [line.split()[0] for line in lines[2:5]] == ["pcap", "pcapng", "pcapng.gz"]
    assert lines[2].count(" x") == 2 and " x1.00 " in lines[2]
    assert lines[5].startswith("the copy --jobs makes of the .gz: ")


def test_bench_tables_writes_the_table_both_ways(tmp_path: Path) -> None:
    from espforensics.analysis import analyze_to_dir

    root = BENCH.parent / "fixtures"
    analyze_to_dir(root / "example.pcap", root / "example.keys.yaml", tmp_path / "o", plots=False)
    out = _run("bench_tables.py", str(tmp_path / "o" / "packets.parquet"), "--rounds", "1")
    assert out.splitlines()[0] == "40 rows in 1 row groups of 8,192"
    assert "text columns but iv" in out and "csv of 40 rows" in out


@pytest.mark.slow
def test_bench_profiles_prints_every_profile_keyed_and_keyless(tmp_path: Path) -> None:
    """One line per sender profile, its ratios against the (fake) tshark named by TSHARK."""
    fake = tmp_path / "fake_tshark.py"
    fake.write_text('import sys\nif "--version" in sys.argv:\n    print("TShark (fake) 4.4.9")\n')
    res = subprocess.run(
        [
            *(sys.executable, str(BENCH / "bench_profiles.py")),
            *("--frames", "300", "--repeat", "1", "--workdir", str(tmp_path / "work")),
            *("--profiles", "gcm-seq,cbc-random,gmac-linux,null"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TSHARK": shlex.join([sys.executable, str(fake)])},
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "TShark (fake) 4.4.9" in lines[0], res.stdout
    assert "300 frames per profile, fastest of 1 rounds, one run:" in lines, res.stdout
    rows = {line.split()[0]: line.split()[1:] for line in lines[-5:-1]}
    assert set(rows) == {"gcm-seq", "cbc-random", "gmac-linux", "null"}, res.stdout
    # the peaks' range under the table, the largest named, against issue 12's bound
    mbs = {
        f"{n} {kind}": float(cells[7 + k])
        for n, cells in rows.items()
        for k, kind in enumerate(("keyed", "keyless"))
    }
    said = re.fullmatch(
        r"peak RSS: (\d+)-(\d+) MB \(most: (.+)\); the bound, 250 MB at 2,000,000 frames: "
        r"every run within it",
        lines[-1],
    )
    assert said is not None, res.stdout
    low, high, most = float(said[1]), float(said[2]), said[3]
    assert (low, high) == (min(mbs.values()), max(mbs.values())) == (low, mbs[most]), res.stdout
    # tshark has no GMAC: no keyed ratio, every other figure (the floor verified its ICVs)
    gmac = rows.pop("gmac-linux")
    assert (gmac[1], gmac[5]) == ("-", "0") and "-" not in gmac[2:], res.stdout
    assert all(len(cells) == 9 and "-" not in cells for cells in rows.values()), res.stdout
    assert all(float(cells[7]) > 0 and float(cells[8]) > 0 for cells in rows.values())  # MB
    assert sorted(p.name for p in (tmp_path / "work").glob("*.pcap")) == [
        "cbc-random-300.pcap",
        "gcm-seq-300.pcap",
        "gmac-linux-300.pcap",
        "null-300.pcap",
    ]


@pytest.mark.slow
def test_bench_profiles_measures_another_checkout_beside_this_one(tmp_path: Path) -> None:
    """``--before TREE``: the other checkout's keyed and keyless runs in the same rounds,
    a line per profile with its frames/s and this tree's speed over it (run against
    itself here: a ratio, not a figure, is what the test can hold)."""
    root = str(BENCH.parent)
    args = ("--frames", "300", "--repeat", "1", "--profiles", "null,gcm-seq", "--no-tshark")
    out = _run("bench_profiles.py", *args, "--before", root, "--workdir", str(tmp_path))
    lines = out.splitlines()
    at = lines.index(f"before: {root}, in the same rounds:")
    assert lines[at + 1].split() == [
        *("profile", "keyed", "fr/s", "x", "before", "keyless", "fr/s", "x", "before"),
        *("MB", "keyed", "keyless"),
    ], out
    rows = {line.split()[0]: line.split()[1:] for line in lines[at + 2 :]}
    assert set(rows) == {"null", "gcm-seq"}, out
    assert all(len(cells) == 6 and float(cells[1]) > 0 for cells in rows.values()), out
    assert all(float(cells[3]) > 0 and float(cells[5]) > 0 for cells in rows.values()), out


def test_bench_profiles_refuses_a_before_that_is_no_checkout(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(BENCH / "bench_profiles.py"), "--before", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and not res.stdout, res
    said = res.stderr.splitlines()[-1]
    assert said.endswith(f"--before {tmp_path}: no espforensics package there"), said
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_bench_copies_prints_every_case_both_trees_and_the_shares(tmp_path: Path) -> None:
    """Run against itself as the before tree: the copies of both trees are identical."""
    root = str(BENCH.parent)
    args = ("--frames", "300", "--profiles", "gcm", "--repeat", "1", "--before", root)
    out = _run("bench_copies.py", *args, "--workdir", str(tmp_path))
    for case in ("no plots", "+ decrypted", "+ annotate", "+ both", "+ plots"):
        assert out.count(f"    {case} ") == 2, out
    assert out.count("of the run with both") == 2 and out.count("of the default run") == 2, out
    assert "decrypted.pcap: identical" in out and "annotated.pcapng: identical" in out, out


@pytest.mark.slow
def test_bench_copies_plots_alone_on_the_bundled_example(tmp_path: Path) -> None:
    """``--cases plots``: the default run against --no-plots only, fastest and median,
    and the plots' files compared between the trees."""
    root = str(BENCH.parent)
    args = ("--profiles", "example", "--cases", "plots", "--repeat", "1", "--before", root)
    out = _run("bench_copies.py", *args, "--workdir", str(tmp_path))
    assert out.startswith("example: 40 frames"), out
    for case in ("no plots", "+ plots"):
        assert out.count(f"    {case} ") == 2, out
    assert "+ decrypted" not in out and "one run with both" not in out, out
    assert out.count("of the default run") == 2 and out.count("by the medians") == 2, out
    assert "plots/: identical in both trees" in out, out


def test_bench_sa_memory_counts_keyless_and_keyed_runs() -> None:
    for extra, kind in (((), "keyless"), (("--keyed", "--peak"), "keyed")):
        out = _run("bench_sa_memory.py", "--few", "20", "--many", "40", *extra)
        assert f"{kind} one-packet SAs" in out and "40 SAs:" in out, out
        assert "memory per SA:" in out, out


def test_one_packet_sas_each_verify_under_their_own_key(tmp_path: Path) -> None:
    from espforensics.analysis import analyze_to_dir
    from espforensics.capture.writer import write_pcap
    from espforensics.keys import SaTable
    from espforensics.synth.bench import one_packet_sas

    frames, sas = one_packet_sas(5)
    capture = tmp_path / "sas.pcap"
    with capture.open("wb") as fh:
        write_pcap(fh, iter(frames), linktype=1)
    summary = analyze_to_dir(capture, SaTable(sas), tmp_path / "out", plots=False)
    assert [(s.spi, s.packets, s.verdicts) for s in summary.sas] == [
        (0x20001 + 2 * i, 1, {"ok": 1}) for i in range(5)
    ]
    assert len({sa.key.reveal() for sa in sas}) == 10  # each SA its own key


def test_bench_split_names_every_stage_of_a_keyless_null_run(tmp_path: Path) -> None:
    """Each stage once, with its seconds where the run reached it, "never" where not: the
    bundled example's 40 frames, keyed, go per frame and reach few; a keyless NULL
    capture past the lane's first batches reaches every one (each packet a clear one to
    prove)."""
    from espforensics.capture.writer import write_pcap
    from espforensics.synth.bench import iter_bench_frames

    example = Path(__file__).resolve().parents[2] / "fixtures"
    out = _run("bench_split.py", str(example / "example.pcap"), str(example / "example.keys.yaml"))
    lines = out.splitlines()
    assert lines[0].startswith("example.pcap: 40 frames, ") and lines[0].endswith(" s in all")
    stages = [line.split()[-1] for line in lines[1:]]
    assert len(set(stages)) == len(stages) >= 8, out
    assert "   never  clear_rows" in lines, out
    capture = tmp_path / "null.pcap"
    with capture.open("wb") as fh:
        write_pcap(fh, iter_bench_frames(600, algorithm="null"), linktype=1)
    lines = _run("bench_split.py", str(capture)).splitlines()
    assert lines[0].startswith("null.pcap: 600 frames, "), lines
    timed = [line.split()[-1] for line in lines[1:] if line.split()[1] == "s"]
    assert sorted(timed) == sorted(stages), lines
    missing = subprocess.run(
        [sys.executable, str(BENCH / "bench_split.py"), str(tmp_path / "none.pcap")],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and missing.stdout == "", missing
    assert missing.stderr.splitlines() == [
        f"bench_split.py: error: {tmp_path / 'none.pcap'}: cannot open: No such file or directory"
    ], missing.stderr


def test_bench_profiles_names_the_runs_above_the_memory_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The line under the table lists every run whose peak RSS is above issue 12's bound
    (the keyless NULL and GMAC runs at 2,000,000 frames, session 31)."""
    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module("bench_profiles")
    peak = {
        ("gcm-linux", "keyed"): 192.0,
        ("gcm-linux", "keyless"): 182.0,
        ("null", "keyed"): 189.0,
        ("null", "keyless"): 345.0,
        ("gmac-linux", "keyed"): 193.0,
        ("gmac-linux", "keyless"): 351.0,
    }
    assert bench.memory_line(["gcm-linux", "null", "gmac-linux"], peak) == (
        "peak RSS: 182-351 MB (most: gmac-linux keyless); the bound, 250 MB at 2,000,000 "
        "frames: exceeded by null keyless 345 MB, gmac-linux keyless 351 MB"
    )
