"""The steady lane beside held records (issue 35): a stray SA does not stop the bulk.

A new SA's first packets are held by the IV derivation check until its
scheme settles (64 packets, or ``MAX_BEHIND_CHECK`` records waiting behind
them). While they are held, the lane's runs of the other SAs wait in line
behind them as one item each (engine/run.py ``_run``, ``FrameAnalyzer.queue``)
instead of going through the per-frame path, cut where a bound would give
up a hold. The bulk capture with a one-packet SPI every 100th frame
(synth/bench.py ``with_stray_spis``, benchmarks/bench_sas.py ``--stray``):
the lane takes at least 95% of the bulk SAs' packets, keyed and keyless,
and every output is the per-frame path's. With the bounds lowered, a bound
fires inside what would be a lane run: it fires at the same frame, with the
same records waiting, as in the per-frame path.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from espforensics.analysis import Analysis, analyze
from espforensics.analyzer import frame
from espforensics.analyzer.frame import FrameAnalyzer, Released, Run
from espforensics.keys.sa import SaTable
from espforensics.model.options import Options
from espforensics.model.records import Frame
from espforensics.synth.bench import bench_sas, iter_bench_frames, with_stray_spis
from espforensics.synth.capture import write_capture
from fuzz import lanecount
from tests.engine.test_equivalence import assert_same

FRAMES = 10_000
STRAY = 100  # every 100th frame an SPI of its own: 100 one-packet SAs
SHARE = 0.95


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stray")


@cache
def capture(folder: Path, frames: int, stray: int) -> Path:
    path = folder / f"stray-{frames}-{stray}.pcap"
    write_capture(path, with_stray_spis(iter_bench_frames(frames), stray), linktypes=(1,))
    return path


def _sas(keyed: bool) -> SaTable:
    return SaTable(bench_sas(1) if keyed else ())


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
def test_stray_spis_leave_the_bulk_to_the_lane(folder: Path, keyed: bool) -> None:
    """100 one-packet SAs amid 9,900 packets of the bulk transfer's 2 SAs: the lane takes
    at least 95% of those 9,900, and the outputs are the per-frame path's."""
    path = capture(folder, FRAMES, STRAY)
    lanecount.install()
    lanecount.take()
    lane = analyze(path, _sas(keyed), Options())
    count = lanecount.take()
    bulk = FRAMES - FRAMES // STRAY
    assert count.taken >= SHARE * bulk, count
    assert count.refused == 0
    packets = lane.packets
    stray = packets["spi"] >= 0x40000
    assert int(stray.sum()) == FRAMES // STRAY
    want = "ok" if keyed else "unknown_sa"
    assert set(packets.loc[~stray, "verdict"]) == {want}
    assert len(lane.summary.sas) == 2 + FRAMES // STRAY
    assert_same(lane, analyze(path, _sas(keyed), Options(steady_lane=False)), FRAMES)


def _forces(
    monkeypatch: pytest.MonkeyPatch, path: Path, sas: SaTable, options: Options
) -> tuple[Analysis, list[tuple[int | None, int]], int]:
    """The analysis; each time a hold was given up (a bound, or the end): up to which
    frame, and how many records waited then; and how many of those were given up while
    a lane run was being put in line (``FrameAnalyzer.queue``)."""
    calls: list[tuple[int | None, int]] = []
    inside = [0, 0]  # queue calls running, holds given up inside one
    force, queue = FrameAnalyzer._force, FrameAnalyzer.queue

    def spy_force(self: FrameAnalyzer, upto: int | None) -> None:
        calls.append((upto, len(self._waiting)))
        inside[1] += inside[0]
        force(self, upto)

    def spy_queue(self: FrameAnalyzer, run: Run, ts_ns: int) -> Released:
        inside[0] += 1
        try:
            return queue(self, run, ts_ns)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(FrameAnalyzer, "_force", spy_force)
    monkeypatch.setattr(FrameAnalyzer, "queue", spy_queue)
    result = analyze(path, sas, options)
    monkeypatch.setattr(FrameAnalyzer, "_force", force)
    monkeypatch.setattr(FrameAnalyzer, "queue", queue)
    return result, calls, inside[1]


def _slow_sas(frames: Iterator[Frame], every: int, epoch: int) -> Iterator[Frame]:
    """The bench frames with every ``every``-th frame's SPI rewritten to a stray SA's, a new
    one each ``epoch`` frames: SAs of a packet every ``every`` frames, each still probing
    its IVs when a bound gives it up."""
    for f in frames:
        if f.number % every:
            yield f
            continue
        at = 14 + 20  # Ethernet, IPv4: the SPI
        spi = (0x50000 + f.number // epoch).to_bytes(4, "big")
        yield f._replace(data=f.data[:at] + spi + f.data[at + 4 :])


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@pytest.mark.parametrize(
    ("limit", "value"),
    [("MAX_BEHIND_CHECK", 100), ("MAX_BEHIND_CHECK", 350), ("MAX_WAITING", 150)],
)
@pytest.mark.parametrize("batch", [512, 4096])
def test_a_bound_fires_inside_a_lane_run_where_the_per_frame_path_fires_it(
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    limit: str,
    value: int,
    batch: int,
    keyed: bool,
) -> None:
    """One bound lowered to ``value`` (``MAX_WAITING`` below ``MAX_BEHIND_CHECK``: the
    other branch of ``_bound``); every 37th frame a packet of a stray SA, a new one every
    400 frames: each probes its IVs, its first packet held, until a bound gives it up
    once ``value`` + 1 records wait, in the middle of the bulk SAs' runs. Lane on, holds
    are given up while runs are put in line, at the same points with the same records
    waiting as lane off; the lane takes 90% of the bulk, and every output is the
    reference's."""
    monkeypatch.setattr(frame, limit, value)
    frames, every = 10_000, 37
    path = folder / f"slow-sas-{frames}.pcap"
    if not path.exists():
        write_capture(path, _slow_sas(iter_bench_frames(frames), every, 400), linktypes=(1,))
    lanecount.install()
    lanecount.take()
    lane, lane_forces, inside = _forces(monkeypatch, path, _sas(keyed), Options(batch_frames=batch))
    count = lanecount.take()
    ref, ref_forces, _ = _forces(monkeypatch, path, _sas(keyed), Options(steady_lane=False))
    bounded = [(upto, n) for upto, n in ref_forces if upto is not None]
    assert len(bounded) >= frames // 400 - 1 and {n for _, n in bounded} == {value + 1}
    assert lane_forces == ref_forces
    assert inside >= len(bounded) // 2
    assert count.taken >= 0.9 * (frames - frames // every), count
    assert_same(lane, ref, frames)


def test_a_held_sa_sharing_a_key_group_with_a_lane_sa_keeps_its_rows_from_the_lane(
    folder: Path,
) -> None:
    """Without keys, a flow's key group is its SPI and destination: frame 2,000 is frame
    2,500 of the bulk transfer from another source address, a new flow (its first packet
    held while its IVs are read) in the same key group as the bulk SA. Its IV is the one
    frame 2,500 carries later: the IV reuse check finds the reuse at frame 2,500 in the
    per-frame path, and the lane, planned before frame 2,000 put the IV in the group, must
    not take frame 2,500 as a plain packet: the outputs are the reference's."""
    frames = list(iter_bench_frames(3_000))
    later = frames[2_499]
    src = 14 + 12  # Ethernet, then the IPv4 source address
    data = later.data[:src] + bytes([192, 0, 2, 99]) + later.data[src + 4 : -1]
    data += bytes([later.data[-1] ^ 1])  # another packet (its ICV), not a copy
    frames[1_999] = later._replace(number=2_000, data=data)
    path = folder / "shared-group.pcap"
    write_capture(path, frames, linktypes=(1,))
    lane = analyze(path, SaTable(()), Options(batch_frames=4096))
    ref = analyze(path, SaTable(()), Options(steady_lane=False))
    assert "reuse" in " ".join(ref.packets["detail"].iloc[2_499:2_500].tolist()) or (
        ref.summary.finding_list
    )
    assert_same(lane, ref, 3_000)
