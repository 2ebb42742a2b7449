"""The capture stays out of the process's memory, however large the file (issue 12's
flat RSS): its pages are let go as they are read, by the analysis, the digest and the
copies.

The capture reader and ``sha256_file`` map the file; a mapped page that was read
counts in the process's resident set until it is let go (``drop_pages``). Hashed
in one piece, every page of the file stayed until the end of the digest: a
520 MB capture held 650 MB of peak RSS against 160 MB. Measured here as the rise
of the process's peak resident set (VmHWM, reset through /proc/self/clear_refs)
over the call, against the size of the file it read: Linux only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.analysis.run import sha256_file
from espforensics.capture import write_pcap
from espforensics.rewrite.annotate import write_annotated
from espforensics.synth.bench import iter_bench_frames

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")
MIB = 1 << 20


def _kib(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    assert found is not None, f"no {field} in {_STATUS}"
    return int(found.group(1))


def _peak_rise(call: Callable[[], object]) -> int:
    """Bytes by which the process's peak resident set rose above its size before ``call``."""
    try:
        _CLEAR_REFS.write_text("5")  # the peak (VmHWM) starts again from the resident set
    except OSError:
        pytest.skip("no /proc/self/clear_refs: the peak resident set cannot be reset here")
    before = _kib("VmRSS")
    call()
    return (_kib("VmHWM") - before) * 1024


def test_the_digest_lets_each_piece_of_the_file_go(tmp_path: Path) -> None:
    data = bytes(range(256)) * (96 * MIB // 256)
    path = tmp_path / "capture.pcap"
    path.write_bytes(data)
    digests: list[str] = []
    rise = _peak_rise(lambda: digests.append(sha256_file(path)))
    assert digests == [hashlib.sha256(data).hexdigest()]
    assert rise < 40 * MIB  # hashed in one piece: the whole 96 MiB


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100,000 frames of the bench capture, about 130 MB."""
    capture = tmp_path_factory.mktemp("flat") / "bench.pcap"
    with capture.open("wb") as fh:
        write_pcap(fh, iter_bench_frames(100_000), linktype=1)
    assert capture.stat().st_size > 120 * MIB
    return capture


def test_an_analysis_holds_less_than_its_capture(tmp_path: Path, bench: Path) -> None:
    """Keyless, no plots: the whole run, the digest's thread and the reading of the
    frames, rises by less than the file it reads."""
    size = bench.stat().st_size
    rise = _peak_rise(lambda: analyze_to_dir(bench, None, tmp_path / "out", plots=False))
    # The file held whole: the rise is the file and more (142 MiB); let go: 72-76 MiB
    assert rise < size, f"peak RSS rose {rise / MIB:.0f} MiB reading {size / MIB:.0f}"


def test_a_copy_holds_less_than_its_capture(tmp_path: Path, bench: Path) -> None:
    """The copies read the capture again from its known record lengths
    (``known_batches``), whose batches let their pages go as the analysis's do."""
    summary = analyze_to_dir(bench, None, tmp_path / "out", plots=False)
    parquet = tmp_path / "out" / "packets.parquet"
    size = bench.stat().st_size
    with (tmp_path / "annotated.pcapng").open("wb") as out:
        rise = _peak_rise(lambda: write_annotated(bench, parquet, summary.finding_list, out))
    # Held whole: 111 MiB; let go: 19 MiB
    assert rise < size // 2, f"peak RSS rose {rise / MIB:.0f} MiB copying {size / MIB:.0f}"
