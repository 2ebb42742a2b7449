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
clear bytes only, the same outputs as the per-frame path's. GMAC and NULL
(a payload in clear by design; NULL without IV) are taken with their keys
and without: without a key each of their packets is a clear inner packet
with its trailer, a leak the lane proves with its columns (and NULL's 8
bytes after the header no IV).
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
from espforensics.decode.clear import internet_checksum
from espforensics.engine.rows import SteadyRows
from espforensics.engine.steady import SteadyLane
from espforensics.engine.wire import FrameBatch
from espforensics.keys.sa import SaTable
from espforensics.model.enums import FindingKind, IvScheme, Severity
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
# Without a key a GMAC or NULL payload is clear bytes right after the IV (or the ESP
# header), then a trailer and ICV: a clear packet the leak check proves.
CLEAR_PAYLOADS = [
    pytest.param("gmac", "linux", IvScheme.SEQIV, id="gmac-seqiv"),
    pytest.param("gmac", "random", IvScheme.RANDOM, id="gmac-random"),
    pytest.param("null", "linux", IvScheme.NONE, id="null"),
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


@pytest.mark.parametrize(("algorithm", "ivs", "scheme"), PROFILES + CLEAR_PAYLOADS)
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
    if algorithm == "null":  # no IV: none shown, none judged reused
        assert set(result.packets["iv"]) == {""}
        assert result.packets["iv_reused"].isna().all()


@pytest.mark.parametrize("batch", [64, 4096])
@pytest.mark.parametrize(("algorithm", "ivs", "scheme"), PROFILES + CLEAR_PAYLOADS)
def test_each_sender_profile_lane_matches_the_reference(
    folder: Path, algorithm: str, ivs: str, scheme: IvScheme, batch: int
) -> None:
    path = capture(folder, algorithm, ivs, 3_000)
    lane = _run(path, algorithm, Options(batch_frames=batch))
    assert_same(lane, _run(path, algorithm, Options(steady_lane=False)), 3_000)


@pytest.mark.parametrize(("algorithm", "ivs", "scheme"), PROFILES + CLEAR_PAYLOADS)
def test_the_keyless_lane_takes_every_sender_profile(
    folder: Path, algorithm: str, ivs: str, scheme: IvScheme
) -> None:
    """The same captures without a key: 95% of their ESP packets the lane's, every one
    ``unknown_sa``, each SA's scheme read from the wire (8-byte IVs: CBC's look random).
    GMAC and NULL: every packet a proven leak of its TCP header, one ``high`` finding per
    SA counting all its packets; NULL's bytes after the header judged no IV."""
    path = capture(folder, algorithm, ivs, FRAMES)
    lanecount.install()
    lanecount.take()
    result = analyze(path, SaTable(()), Options())
    count = lanecount.take()
    packets = result.packets
    assert packets["verdict"].tolist() == ["unknown_sa"] * FRAMES
    assert count.taken >= SHARE * FRAMES, count
    wire = IvScheme.RANDOM if algorithm == "cbc" else scheme
    assert {sa.iv_scheme for sa in result.summary.sas} == {str(wire)}
    if algorithm not in ("gmac", "null"):
        return
    assert set(packets["leaked_fields"]) == {"TCP header"}
    assert (packets["leaked"] == 32).all()  # the bench's TCP headers carry 12 option bytes
    leaks = [f for f in result.summary.finding_list if f.kind is FindingKind.CLEARTEXT_LEAK]
    assert [f.severity for f in leaks] == [Severity.HIGH] * len(result.summary.sas)
    assert sum(f.count for f in leaks) == FRAMES
    assert packets["iv_reused"].isna().all() == (algorithm == "null")


@pytest.mark.parametrize("batch", [64, 4096])
@pytest.mark.parametrize(("algorithm", "ivs", "scheme"), PROFILES + CLEAR_PAYLOADS)
def test_each_sender_profile_keyless_lane_matches_the_reference(
    folder: Path, algorithm: str, ivs: str, scheme: IvScheme, batch: int
) -> None:
    path = capture(folder, algorithm, ivs, 3_000)
    lane = analyze(path, SaTable(()), Options(batch_frames=batch))
    assert_same(lane, analyze(path, SaTable(()), Options(steady_lane=False)), 3_000)


def _frames_taken(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The frames the lane's ``apply`` takes from now on (until ``monkeypatch.undo``)."""
    taken: list[int] = []
    apply = SteadyLane.apply

    def spy(self: SteadyLane, *args: Any) -> SteadyRows:
        rows = apply(self, *args)
        taken.extend(rows.frame.tolist())
        return rows

    monkeypatch.setattr(SteadyLane, "apply", spy)
    return taken


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
    taken = _frames_taken(monkeypatch)
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


def _v6_in_the_iv(data: bytes) -> bytes:
    """A bench frame (Ethernet, IPv4, ESP) whose IV starts an IPv6 header whose payload
    length fits the rest of the datagram, 20 bytes short of its end: no trailer follows."""
    body = 14 + 20 + 8
    plen = len(data) - body - 40 - 20
    return data[:body] + bytes([0x60, 0, 0, 0]) + plen.to_bytes(2) + data[body + 6 :]


def _v4_after_the_iv(data: bytes) -> bytes:
    """A bench frame whose bytes after the IV are an IPv4 header, its checksum sound, whose
    total length ends 10 bytes before the datagram: no trailer follows."""
    start = 14 + 20 + 8 + 8
    head = bytearray(bytes([0x45, 0]) + (len(data) - start - 10).to_bytes(2) + bytes(4))
    head += bytes([64, 17, 0, 0]) + bytes([198, 51, 100, 7, 203, 0, 113, 9])
    head[10:12] = internet_checksum(bytes(head)).to_bytes(2)
    return data[:start] + bytes(head) + data[start + 20 :]


@pytest.mark.parametrize("batch", [64, 4096])
def test_the_keyless_lane_keeps_possible_leaks(
    folder: Path, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random IVs that read as the start of a clear IP header (an IPv6 header in the IV's
    place, an IPv4 header with a sound checksum after it), no ESP trailer after: the leak
    check's "possible" rows. The keyless lane takes them with their ``leaked_hex`` and
    ``leaked_fields`` (it left each to the per-frame path, cutting its run, before) and
    leaves no row of the capture's admitted SAs to the per-frame path; the packets
    table, the summary and the findings are those of the lane off."""
    frames = list(iter_bench_frames(3_000, algorithm="gcm", ivs="random"))
    v6, v4 = (1_000, 1_001, 2_500), (1_800, 2_900)
    for n in v6:
        frames[n - 1] = frames[n - 1]._replace(data=_v6_in_the_iv(frames[n - 1].data))
    for n in v4:
        frames[n - 1] = frames[n - 1]._replace(data=_v4_after_the_iv(frames[n - 1].data))
    path = folder / f"keyless-possible-{batch}.pcap"
    write_capture(path, frames, linktypes=(1,))
    lanecount.install()
    lanecount.take()
    taken = _frames_taken(monkeypatch)
    lane = analyze(path, SaTable(()), Options(batch_frames=batch))
    monkeypatch.undo()
    count = lanecount.take()
    assert set(v6 + v4) <= set(taken)
    assert count.refused == 0, count
    table = lane.packets.set_index("frame")
    for n in v6:
        assert table.at[n, "leaked_hex"] == frames[n - 1].data[42:82].hex(" ")
        assert str(table.at[n, "leaked_fields"]).startswith("possible: IPv6 version+traffic class")
    for n in v4:
        assert table.at[n, "leaked_hex"] == frames[n - 1].data[50:70].hex(" ")
        assert str(table.at[n, "leaked_fields"]).startswith("possible: IPv4 version+IHL, TOS, ")
    leaks = [f for f in lane.summary.finding_list if f.kind is FindingKind.CLEARTEXT_LEAK]
    listed = [n for f in leaks for n in f.frames]  # one finding per SPI
    assert {f.severity for f in leaks} == {Severity.INFO} and set(v6 + v4) <= set(listed)
    marked = lane.packets["frame"][lane.packets["leaked_fields"] != ""].tolist()
    assert sorted(listed) == marked and sum(f.count for f in leaks) == len(marked)
    assert_same(lane, analyze(path, SaTable(()), Options(steady_lane=False)), 3_000)


@pytest.mark.parametrize("batch", [64, 512])  # 3,000 frames: a 4,096 batch is the first
def test_a_keyless_sa_switching_between_clear_and_encrypted_packets(
    folder: Path, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frames 1-1,000 and 2,001-3,000 sent with NULL encryption, 1,001-2,000 with AES-GCM,
    the same SAs and sequence numbers throughout, no key: the lane takes packets of each
    stretch. NULL's packets are proven leaks whose 8 bytes after the header are no IV
    (``iv_reused`` empty); GCM's are neither. The per-frame path takes the switches, and
    the outputs are those of the lane off."""
    null = list(iter_bench_frames(3_000, algorithm="null"))
    gcm = list(iter_bench_frames(3_000, algorithm="gcm"))
    frames = null[:1_000] + gcm[1_000:2_000] + null[2_000:]
    path = folder / f"keyless-switching-{batch}.pcap"
    write_capture(path, frames, linktypes=(1,))
    taken = _frames_taken(monkeypatch)
    lane = analyze(path, SaTable(()), Options(batch_frames=batch))
    monkeypatch.undo()
    stretches = [set(range(1, 1_001)), set(range(1_001, 2_001)), set(range(2_001, 3_001))]
    assert all(len(s & set(taken)) >= 500 for s in stretches)
    table = lane.packets
    clear = table["frame"].isin(stretches[0] | stretches[2])
    assert (table["leaked"].notna() == clear).all()
    assert (table["iv_reused"].isna() == clear).all()
    assert_same(lane, analyze(path, SaTable(()), Options(steady_lane=False)), 3_000)
