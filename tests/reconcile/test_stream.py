"""reconcile streams: both captures read side by side, rows written as they are decided,
memory bounded by the horizon; a packet late by less than the horizon is reordered."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from espforensics.model.records import Frame
from espforensics.reconcile import join as reconcile_join
from espforensics.reconcile import run as reconcile_module
from espforensics.reconcile import wire as reconcile_wire
from espforensics.reconcile.run import FateRow, reconcile
from espforensics.synth.builder import V4_A, V4_B, SaFlow, ip, sa_pair
from espforensics.synth.packets import udp_bytes
from tests.reconcile.test_reconcile import _packet, _write


def _flow(seed: int = 3) -> SaFlow:
    flow, _ = sa_pair(random.Random(seed), (0x4001, 0x4002), V4_A, V4_B)
    return flow


def _sent(flow: SaFlow, count: int) -> list[bytes]:
    data = udp_bytes(V4_A, V4_B, 4000, 5000, b"s" * 32)
    return [_packet(flow, n, data) for n in range(1, count + 1)]


def _rows(sender: Path, receiver: Path) -> list[FateRow]:
    rows: list[FateRow] = []
    reconcile(sender, receiver, sink=rows.append)
    return rows


@pytest.mark.parametrize(
    ("later", "fates"),
    [
        (8, {"delivered": 39, "reordered": 1}),  # 8 packets late: within the horizon
        (9, {"delivered": 39, "lost": 1, "unexpected": 1}),  # 9: beyond it
    ],
)
def test_late_by_less_than_the_horizon_is_reordered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, later: int, fates: dict[str, int]
) -> None:
    """Horizon 8 packets: packet 5 is waited for until the receiver has got 8 packets of
    the SA after it was sent (4 had arrived then: 1-4, each 5 us after it was sent)."""
    monkeypatch.setattr(reconcile_join, "HORIZON_PACKETS", 8)
    sent = _sent(_flow(), 40)
    arrivals = {n: 10 * n + 5 for n in range(1, 41)}
    arrivals[5] = 10 * (5 + later) + 7  # right after packet 5 + later
    sender = _write(tmp_path / "s.pcap", [(10 * n, sent[n - 1]) for n in range(1, 41)])
    receiver = _write(tmp_path / "r.pcap", sorted((us, sent[n - 1]) for n, us in arrivals.items()))
    rows = _rows(sender, receiver)
    assert Counter(r.fate.value for r in rows) == fates
    five = [(r.fate.value, r.sender_frame, r.receiver_frame) for r in rows if r.seq64 == 5]
    if later == 8:
        assert five == [("reordered", 5, 5 + later)]
    else:
        assert five == [("lost", 5, None), ("unexpected", None, 5 + later)]


def test_late_by_more_than_the_time_horizon_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Horizon 1 ms (and the SAs swept at every packet), a packet every 0.3 ms: packet 2,
    0.9 ms late, is reordered; packet 4, 1.3 ms late, was lost once the receiver's clock
    had passed it by more than 1 ms, and its copy is unexpected."""
    monkeypatch.setattr(reconcile_join, "HORIZON_NS", 1_000_000)
    monkeypatch.setattr(reconcile_module, "_SWEEP", 1)
    sent = _sent(_flow(), 10)
    sender = _write(tmp_path / "s.pcap", [(300 * n, sent[n - 1]) for n in range(1, 11)])
    arrivals = {n: 300 * n + 10 for n in range(1, 11)}
    arrivals[2] += 900
    arrivals[4] += 1300
    got = sorted((us, sent[n - 1]) for n, us in arrivals.items())
    rows = _rows(sender, _write(tmp_path / "r.pcap", got))
    said = {(r.seq64, r.fate.value) for r in rows}
    assert said == {
        (1, "delivered"),
        (2, "reordered"),
        (3, "delivered"),
        (4, "lost"),
        (4, "unexpected"),
        *((n, "delivered") for n in range(5, 11)),
    }


def test_rows_are_written_while_the_captures_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,000 packets each way, prefixes of 16 packets, horizon 64: at every row written,
    fewer than 2 x (16 + 64) packets read are still without theirs (the old reading
    held every packet of both captures to the end)."""
    monkeypatch.setattr(reconcile_module, "PREFIX_PACKETS", 16)
    monkeypatch.setattr(reconcile_join, "HORIZON_PACKETS", 64)
    read = [0]
    decode = reconcile_wire._Decoder.__call__

    def counting(self: reconcile_wire._Decoder, frame: Frame) -> reconcile_wire.WirePacket | None:
        read[0] += 1
        return decode(self, frame)

    monkeypatch.setattr(reconcile_wire._Decoder, "__call__", counting)
    sent = _sent(_flow(), 2000)
    sender = _write(tmp_path / "s.pcap", [(10 * n, p) for n, p in enumerate(sent, 1)])
    lost = set(range(100, 2000, 97))
    got = [(10 * n + 25, p) for n, p in enumerate(sent, 1) if n not in lost]
    receiver = _write(tmp_path / "r.pcap", got)
    behind: list[int] = []
    rows: list[FateRow] = []

    def sink(row: FateRow) -> None:
        rows.append(row)
        behind.append(read[0] - 2 * len(rows))

    result = reconcile(sender, receiver, sink=sink)
    assert result.counts["delivered"] == 2000 - len(lost)
    assert result.counts["lost"] == len(lost)
    assert max(behind) < 2 * (16 + 64)
    assert len(rows) == 2000


def test_the_prefix_does_not_decide_the_fates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clocks estimated from the first 4 packets (200 us on the way) while the path
    later takes 0 us: later copies are read before their sent ones and wait for them. The
    rows are those of an estimate from every packet, reorders included."""
    sent = _sent(_flow(), 30)
    sender = _write(tmp_path / "s.pcap", [(1000 * n, p) for n, p in enumerate(sent, 1)])
    arrivals = {n: 1000 * n + (200 if n <= 4 else 0) for n in range(1, 31)}
    arrivals[12] += 2500  # after 14: reordered
    arrivals[20] = arrivals[21] + 1  # after 21: reordered
    got = sorted((us, sent[n - 1]) for n, us in arrivals.items())
    receiver = _write(tmp_path / "r.pcap", got)
    whole = _rows(sender, receiver)
    monkeypatch.setattr(reconcile_module, "PREFIX_PACKETS", 4)
    early = _rows(sender, receiver)
    assert sorted(map(repr, early)) == sorted(map(repr, whole))  # the same rows
    assert {r.seq64 for r in early if r.fate.value == "reordered"} == {12, 20}
    assert Counter(r.fate.value for r in early) == {"delivered": 28, "reordered": 2}


def test_sas_first_seen_after_the_prefixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefixes of 2 packets (SA 0x4001 a -> b, joined there: offset unknown, one way).
    Then, between two other hosts, SA 0x6001 c -> d in both captures (its direction
    waits for its first join: forward, as no offset is known) and SA 0x6002 d -> c only
    in the receiver's (none joined: it ran from the capture that holds it, its packets
    lost on the way back)."""
    monkeypatch.setattr(reconcile_module, "PREFIX_PACKETS", 2)
    c, d = ip("198.51.100.1"), ip("198.51.100.2")
    first = _sent(_flow(), 4)
    cd, dc = sa_pair(random.Random(9), (0x6001, 0x6002), c, d)
    later = [_packet(cd, n, udp_bytes(c, d, 1, 2, bytes([n]) * 16)) for n in (1, 2, 3)]
    back = [_packet(dc, n, udp_bytes(d, c, 2, 1, bytes([n]) * 16)) for n in (1, 2)]
    sender = [(10, first[0]), (20, first[1]), (30, first[2]), (40, first[3])]
    sender += [(100, later[0]), (110, later[1]), (120, later[2])]
    receiver = [(15, first[0]), (25, first[1]), (35, first[2]), (45, first[3])]
    receiver += [(104, back[0]), (105, later[0]), (115, later[1]), (116, back[1])]
    rows = _rows(_write(tmp_path / "s.pcap", sender), _write(tmp_path / "r.pcap", receiver))
    got = [(r.fate.value, r.direction, r.spi, r.seq64, r.sender_frame, r.receiver_frame)
           for r in rows]  # fmt: skip
    fwd, rev = "sender->receiver", "receiver->sender"
    assert sorted(got) == sorted(
        [("delivered", fwd, 0x4001, n, n, n) for n in range(1, 5)]
        + [
            ("delivered", fwd, 0x6001, 1, 5, 6),
            ("delivered", fwd, 0x6001, 2, 6, 7),
            ("lost", fwd, 0x6001, 3, 7, None),
            ("lost", rev, 0x6002, 1, None, 5),
            ("lost", rev, 0x6002, 2, None, 8),
        ]
    )


def test_an_sa_never_joined_is_decided_at_the_horizon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Horizon 1 ms: SA 0x6002, only in the receiver's capture at 0.1 ms, is decided once
    the sender's capture has read past 1.1 ms (it ran from the receiver's host, its
    packet lost on the way back), its row written then, not at the end."""
    monkeypatch.setattr(reconcile_module, "PREFIX_PACKETS", 2)
    monkeypatch.setattr(reconcile_module, "HORIZON_NS", 1_000_000)
    monkeypatch.setattr(reconcile_join, "HORIZON_NS", 1_000_000)
    monkeypatch.setattr(reconcile_module, "_SWEEP", 1)
    c, d = ip("198.51.100.1"), ip("198.51.100.2")
    _, dc = sa_pair(random.Random(9), (0x6001, 0x6002), c, d)
    back = _packet(dc, 1, udp_bytes(d, c, 2, 1, b"b" * 16))
    sent = _sent(_flow(), 8)
    sender = [(400 * n, p) for n, p in enumerate(sent, 1)]
    receiver = [(400 * n + 5, p) for n, p in enumerate(sent, 1)]
    receiver.insert(0, (100, back))
    rows = _rows(_write(tmp_path / "s.pcap", sender), _write(tmp_path / "r.pcap", receiver))
    got = [(r.fate.value, r.spi, r.seq64) for r in rows]
    # 1.1 ms passed when the sender's packet 3 (1.2 ms) is read: after rows 1 and 2
    assert got == [
        ("delivered", 0x4001, 1),
        ("delivered", 0x4001, 2),
        ("lost", 0x6002, 1),
        *(("delivered", 0x4001, n) for n in range(3, 9)),
    ]
    assert rows[2].direction == "receiver->sender"
