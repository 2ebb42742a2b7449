"""Records held back (fragments, an SA's first IVs) never make the rest wait without bound.

The bounds are the per-frame path's (``iter_records``): the steady lane reads a batch of
frames before it yields their rows, so these tests do not take the ``lane`` fixture.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from espforensics.analyzer import frame
from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.engine.run import iter_records
from espforensics.keys import SaTable
from espforensics.keys.wireshark import ESP_SA_SECRETS_TYPE
from espforensics.model.enums import Verdict
from espforensics.model.options import Options
from espforensics.model.records import Frame
from espforensics.synth import build_scenario

ARP = bytes(12) + b"\x08\x06" + bytes(28)


def _then_arp(first: list[Frame], n: int, consumed: list[int]) -> Iterator[Frame]:
    for f in first:
        consumed[0] += 1
        yield f
    for i in range(n):
        consumed[0] += 1
        yield Frame(len(first) + i + 1, 10**9 + i, len(ARP), len(ARP), 1, ARP)


@pytest.mark.parametrize("scenario", ["fragments-v4", "kernel-gso-v4"])
def test_first_record_leaves_within_the_bound(
    monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    monkeypatch.setattr(frame, "MAX_WAITING", 100)
    sc = build_scenario(scenario, seed=1)
    if scenario == "fragments-v4":  # one fragment alone: its datagram never completes
        lone = next(
            t.frame for t in sc.truth if t.verdict is Verdict.FRAGMENT and t.reassembled_in is None
        )
        first = [sc.frames[lone - 1]._replace(number=1)]
    else:  # one ESP packet of an SA that sends nothing else: its IV constant never settles
        first = [sc.frames[2]._replace(number=1)]
    consumed = [0]
    records = iter_records(
        _then_arp(first, 1000, consumed), FrameAnalyzer(SaTable(sc.sas), Options(), "bound")
    )
    head = next(records)
    assert head.frame == 1
    assert consumed[0] <= 102  # it left once 100 records were waiting behind it
    rest = list(records)
    assert [r.frame for r in rest] == list(range(2, 1002))
    if scenario == "fragments-v4":
        assert head.detail == (
            "fragment of a datagram never completed: incomplete when "
            "100 later frames were waiting behind it"
        )
    else:  # it left unjudged: one packet is no evidence of an IV scheme (ivscheme.MIN_SCHEME)
        assert head.iv_seq_delta is None and head.verdict is Verdict.OK


def test_a_check_hold_gives_up_sooner_than_a_fragment(monkeypatch: pytest.MonkeyPatch) -> None:
    """An SA's first record waits behind at most MAX_BEHIND_CHECK frames, a fragment longer."""
    monkeypatch.setattr(frame, "MAX_WAITING", 1000)
    monkeypatch.setattr(frame, "MAX_BEHIND_CHECK", 100)
    for scenario, bound in (("kernel-gso-v4", 102), ("fragments-v4", 1002)):
        sc = build_scenario(scenario, seed=1)
        if scenario == "fragments-v4":
            lone = next(
                t.frame
                for t in sc.truth
                if t.verdict is Verdict.FRAGMENT and t.reassembled_in is None
            )
            first = [sc.frames[lone - 1]._replace(number=1)]
        else:
            first = [sc.frames[2]._replace(number=1)]
        consumed = [0]
        records = iter_records(
            _then_arp(first, 2000, consumed), FrameAnalyzer(SaTable(sc.sas), Options(), "b")
        )
        assert next(records).frame == 1
        assert bound - 2 < consumed[0] <= bound, scenario
        assert len(list(records)) == 2000


def _many_spis(n: int) -> Iterator[Frame]:
    """``n`` copies of one ESP frame, each with an SPI of its own (a scan of SAs)."""
    sc = build_scenario("ipv4-transport-tcp", seed=1)
    frame = next(f for f, t in zip(sc.frames, sc.truth, strict=True) if t.spi is not None)
    at = 14 + 20  # Ethernet and IPv4 header: the SPI
    for i in range(n):
        data = frame.data[:at] + (0x10000 + i).to_bytes(4, "big") + frame.data[at + 4 :]
        yield frame._replace(number=i + 1, data=data)


def test_many_sas_keep_few_records_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SA's first record is held while it probes; the wait stays bounded per frame."""
    monkeypatch.setattr(frame, "MAX_BEHIND_CHECK", 64)
    analyzer = FrameAnalyzer(SaTable(), Options(), "scan")
    fed, out, most = 0, 0, 0

    def feed() -> Iterator[Frame]:
        nonlocal fed
        for f in _many_spis(3000):
            fed += 1
            yield f

    for rec in iter_records(feed(), analyzer):
        out += 1
        assert rec.frame == out
        most = max(most, fed - out)
    assert out == 3000
    assert most <= 65


def test_a_bad_secrets_block_still_yields_the_held_records() -> None:
    """Records held at the moment a bad Decryption Secrets Block is met are not lost."""
    from espforensics.errors import KeyFileError
    from espforensics.model.records import DecryptionSecrets

    sc = build_scenario("fragments-v4", seed=1)
    lone = next(
        t.frame for t in sc.truth if t.verdict is Verdict.FRAGMENT and t.reassembled_in is None
    )
    frames = [sc.frames[lone - 1]._replace(number=1)]
    frames += [f._replace(number=i + 2) for i, f in enumerate(sc.frames[:4]) if f is not frames[0]]
    bad = DecryptionSecrets(ESP_SA_SECRETS_TYPE, b'"IPv4","x","y","0x1","nope"\n')
    analyzer = FrameAnalyzer(SaTable(sc.sas), Options(), "dsb")
    got: list[int] = []
    with pytest.raises(KeyFileError):
        for rec in iter_records([*frames, bad, *frames], analyzer):
            got.append(rec.frame)
    assert got == [f.number for f in frames]  # the held fragment and all that waited behind it
