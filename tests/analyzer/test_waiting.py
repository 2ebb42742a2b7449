"""analyzer/waiting.py: records leave in capture order once nothing before them is held."""

from __future__ import annotations

from espforensics.analyzer.waiting import Waiting
from espforensics.checks.perflow import Holds
from espforensics.model.records import PacketRecord


def _recs(*frames: int) -> list[PacketRecord]:
    return [PacketRecord(n, n, 60, 60) for n in frames]


def test_records_wait_behind_the_first_held_one() -> None:
    holds = Holds()
    waiting = Waiting(holds)
    assert not waiting
    holds.hold(2)
    assert waiting  # a hold alone makes later records wait
    waiting.push(_recs(1, 2, 3))
    waiting.push(_recs(4))
    assert (len(waiting), waiting.head) == (4, 1)
    assert [r.frame for r in waiting.release()] == [1]
    assert (len(waiting), waiting.head) == (3, 2)
    assert list(waiting.release()) == []
    holds.release(2)
    assert [r.frame for r in waiting.release()] == [2, 3, 4]
    assert not waiting


def test_a_frame_held_twice_waits_for_both_holders() -> None:
    holds = Holds()
    waiting = Waiting(holds)
    holds.hold(1)
    holds.hold(1)
    waiting.push(_recs(1, 2))
    holds.release(1)
    assert list(waiting.release()) == [] and waiting.head == 1
    holds.release(1)
    assert [r.frame for r in waiting.release()] == [1, 2]
