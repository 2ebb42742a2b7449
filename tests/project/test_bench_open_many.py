"""benchmarks/bench_open_many.py still runs (one round, a tiny CBC capture; no figure checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CBC = ("--algorithm", "cbc", "--ivs", "linux")  # cbc(aes) + hmac(sha256), echainiv
ROUND = ("1", str(ROOT), str(ROOT))  # one round, this tree as A and as B


@pytest.mark.slow
def test_bench_open_many_prints_both_trees(tmp_path: Path) -> None:
    cap = tmp_path / "cbc.pcap"
    subprocess.run(
        [sys.executable, "-m", "espforensics.synth", "bench", "600", str(cap), *CBC],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    keys = tmp_path / "cbc.keys.yaml"
    script = ROOT / "benchmarks" / "bench_open_many.py"
    res = subprocess.run(
        [
            sys.executable,
            str(script),
            str(cap),
            str(keys),
            *ROUND,
            "--decrypted",
            str(tmp_path / "d.pcap"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    assert "round 1 A: process " in res.stdout
    assert "round 1 B: process " in res.stdout
    assert "(B/A " in res.stdout.splitlines()[-1]
    assert (tmp_path / "d.pcap").stat().st_size > 0
