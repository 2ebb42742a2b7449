"""Every sender's IVs reach the steady lane (issue 35), and the lane's outputs stay the reference's.

The benchmark traffic (espforensics/synth/bench.py) sealed with each IV
profile a sender may have (primer s9: Linux seqiv, ``IV = seq64``, an
additive counter, random IVs; CBC with echainiv or random IVs) is a clean
capture: every packet follows its SA's scheme. The steady lane must take
at least 95% of its ESP packets (the rest: the first batches, and each
SA's first 64 packets, held while the IV derivation check reads its
scheme), counted by fuzz/lanecount.py; and lane on or off, the packets
table, the summary and the findings are the same. Without keys too (the
keyless lane): at least 95% of the packets of every profile read by their
clear bytes only, the same outputs as the per-frame path's.
"""

from __future__ import annotations

import hashlib
import mmap
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from espforensics.analysis import Analysis, analyze
from espforensics.decode import digest
from espforensics.engine.rows import SteadyRows
from espforensics.engine.steady import SteadyLane
from espforensics.engine.wire import FrameBatch
from espforensics.keys.sa import SaTable
from espforensics.model.enums import IvScheme
from espforensics.model.options import Options
from espforensics.synth.bench import bench_sas, iter_bench_frames
from espforensics.synth.capture import write_capture
from fuzz import lanecount
from tests.engine.test_equivalence import assert_same

FRAMES = 10_000  # each SA's 64-packet window and the first batches stay under 5%
SHARE = 0.95
PROFILES = [
    pytest.param("gcm", "linux", IvScheme.SEQIV, id="gcm-seqiv"),
    pytest.param("gcm", "seq", IvScheme.SEQIV, id="gcm-iv-seq"),
    pytest.param("gcm", "counter", IvScheme.COUNTER, id="gcm-counter"),
    pytest.param("gcm", "random", IvScheme.RANDOM, id="gcm-random"),
    pytest.param("chacha20", "counter", IvScheme.COUNTER, id="chacha20-counter"),
    pytest.param("cbc", "linux", IvScheme.ECHAINIV, id="cbc-echainiv"),
    pytest.param("cbc", "random", IvScheme.RANDOM, id="cbc-random"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("profiles")


@cache
def capture(folder: Path, algorithm: str, ivs: str, frames: int) -> Path:
    path = folder / f"{algorithm}-{ivs}-{frames}.pcap"
    write_capture(path, iter_bench_frames(frames, algorithm=algorithm, ivs=ivs), linktypes=(1,))
    return path


def _run(path: Path, algorithm: str, options: Options) -> Analysis:
    return analyze(path, SaTable(bench_sas(1, algorithm)), options)


@pytest.mark.parametrize(("algorithm", "ivs", "scheme"), PROFILES)
def test_the_lane_takes_every_sender_profile(
    folder: Path, algorithm: str, ivs: str, scheme: IvScheme
) -> None:
    """A clean capture of each profile: 95% of its ESP packets the lane's, all of them
    ``ok`` with their SA's scheme named, and no finding."""
    path = capture(folder, algorithm, ivs, FRAMES)
    lanecount.install()
    lanecount.take()
    result = _run(path, algorithm, Options())
    count = lanecount.take()
    assert result.packets["verdict"].tolist() == ["ok"] * FRAMES  # every frame is ESP
    assert count.taken >= SHARE * FRAMES, count
    assert count.refused == 0
    assert {sa.iv_scheme for sa in result.summary.sas} == {str(scheme)}
    assert result.summary.finding_list == ()


@pytest.mark.parametrize("batch", [64, 4096])
@pytest.mark.parametrize(("algorithm", "ivs", "scheme"), PROFILES)
def test_each_sender_profile_lane_matches_the_reference(
    folder: Path, algorithm: str, ivs: str, scheme: IvScheme, batch: int
) -> None:
    path = capture(folder, algorithm, ivs, 3_000)
    lane = _run(path, algorithm, Options(batch_frames=batch))
    assert_same(lane, _run(path, algorithm, Options(steady_lane=False)), 3_000)


@pytest.mark.parametrize(("algorithm", "ivs", "scheme"), PROFILES)
def test_the_keyless_lane_takes_every_sender_profile(
    folder: Path, algorithm: str, ivs: str, scheme: IvScheme
) -> None:
    """The same captures without a key: 95% of their ESP packets the lane's, every one
    ``unknown_sa``, each SA's scheme read from the wire (8-byte IVs: CBC's look random)."""
    path = capture(folder, algorithm, ivs, FRAMES)
    lanecount.install()
    lanecount.take()
    result = analyze(path, SaTable(()), Options())
    count = lanecount.take()
    assert result.packets["verdict"].tolist() == ["unknown_sa"] * FRAMES
    assert count.taken >= SHARE * FRAMES, count
    wire = IvScheme.RANDOM if algorithm == "cbc" else scheme
    assert {sa.iv_scheme for sa in result.summary.sas} == {str(wire)}


@pytest.mark.parametrize("batch", [64, 4096])
@pytest.mark.parametrize(("algorithm", "ivs", "scheme"), PROFILES)
def test_each_sender_profile_keyless_lane_matches_the_reference(
    folder: Path, algorithm: str, ivs: str, scheme: IvScheme, batch: int
) -> None:
    path = capture(folder, algorithm, ivs, 3_000)
    lane = analyze(path, SaTable(()), Options(batch_frames=batch))
    assert_same(lane, analyze(path, SaTable(()), Options(steady_lane=False)), 3_000)


@pytest.mark.parametrize("batch", [64, 4096])
def test_a_copy_of_a_keyless_lane_packet_is_told_by_its_digest(
    folder: Path, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After 3,000 frames the keyless lane took, a byte-identical copy of frame 2,000 and
    a copy of frame 2,001 with its last byte changed: the per-frame path compares each
    with the digest the lane kept of its number (``esp_digests`` against ``esp_digest``),
    and finds one identical and one different, as it does with the lane off."""
    frames = list(iter_bench_frames(3_000))
    same, changed = frames[1_999], frames[2_000]
    last = bytes([changed.data[-1] ^ 0x01])
    frames += [
        same._replace(number=3_001),
        changed._replace(number=3_002, data=changed.data[:-1] + last),
    ]
    path = folder / f"keyless-copies-{batch}.pcap"
    write_capture(path, frames, linktypes=(1,))
    taken: list[int] = []
    apply = SteadyLane.apply

    def spy(self: SteadyLane, *args: Any) -> SteadyRows:
        rows = apply(self, *args)
        taken.extend(rows.frame.tolist())
        return rows

    monkeypatch.setattr(SteadyLane, "apply", spy)
    lane = analyze(path, SaTable(()), Options(batch_frames=batch))
    monkeypatch.undo()
    assert {2_000, 2_001} <= set(taken) and not {3_001, 3_002} & set(taken)
    anomalies = lane.packets["seq_anomaly"].tolist()
    assert anomalies[-2:] == ["duplicate-identical", "duplicate"]
    assert anomalies[:-2] == [""] * 3_000
    assert_same(lane, analyze(path, SaTable(()), Options(steady_lane=False)), 3_002)


def test_the_keyless_lane_hashes_no_packet_no_repeat_reads(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A packet's digest tells a copy from another packet of its number or IV, and is
    read only when a later packet repeats one: the keyless lane's packets of a mapped
    capture are hashed then (decode/digest.py ``RowDigests``), a batch in a buffer of
    its own (the file's last bytes) as the lane takes it. In a clean capture of 3,000
    frames the hashes are the per-frame path's packets and the last batch's, not every
    packet's (the copies test above: a repeat still finds the lane's digest)."""
    path = capture(folder, "gcm", "linux", 3_000)
    hashes: list[int] = []
    real = hashlib.sha256

    def counted(data: bytes) -> Any:
        hashes.append(len(data))
        return real(data)

    taken: list[int] = []
    made = [0]  # lane rows hashed as taken: a batch not in the mapped file
    apply = SteadyLane.apply

    def spy(self: SteadyLane, batch: FrameBatch, *args: Any) -> SteadyRows:
        rows = apply(self, batch, *args)
        taken.extend(rows.frame.tolist())
        made[0] += 0 if isinstance(batch.buf, mmap.mmap) else len(rows.frame)
        return rows

    monkeypatch.setattr(digest, "sha256", counted)  # what esp_digest and esp_digests call
    monkeypatch.setattr(SteadyLane, "apply", spy)
    lane = analyze(path, SaTable(()), Options(batch_frames=64))
    monkeypatch.undo()
    assert len(taken) > 2_500 and 0 < made[0] <= 64
    assert len(hashes) == (3_000 - len(taken)) + made[0]
    assert_same(lane, analyze(path, SaTable(()), Options(steady_lane=False)), 3_000)
