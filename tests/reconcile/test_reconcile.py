"""``espforensics reconcile SENDER RECEIVER`` on synthetic pairs with every fate planted,
and on the real two-sided captures (the receiver's reorders are the sequence check's)."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import espforensics.capture as capture_module
from espforensics.capture import compression
from espforensics.capture.compression import ByteSource
from espforensics.model.records import Frame
from espforensics.reconcile.clock import Spread, find_directions
from espforensics.reconcile.run import FateRow, Reconciled, reconcile
from espforensics.synth.builder import V4_A, V4_B, Fault, SaFlow, ip, sa_pair
from espforensics.synth.capture import write_capture
from espforensics.synth.keytext import keys_yaml
from espforensics.synth.link import frame_ip
from espforensics.synth.packets import udp_bytes
from tests.support.helpers import CAPTURES, needs_captures, run_cli

NAT = ip("203.0.113.9")


def _packet(flow: SaFlow, seq: int, payload: bytes) -> bytes:
    packet, _ = flow.send(payload, 17, seq, Fault())
    return packet


def _write(path: Path, packets: list[tuple[int, bytes]]) -> Path:
    """(time in us, IP packet) -> an Ethernet pcap, frames in that order."""
    frames = []
    for n, (us, packet) in enumerate(packets, 1):
        data = frame_ip(packet)
        frames.append(
            Frame(n, 1_700_000_000_000_000_000 + us * 1000, len(data), len(data), 1, data)
        )
    write_capture(path, frames)
    return path


def _planted() -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """SPI 0x1001 a -> b with every fate planted between the captures; SPI 0x1002 b -> a,
    which the receiver's capture sees first (it is sent there). Times in us; the forward
    packets take 60 to 90 us, the reverse one 49 us."""
    ab, ba = sa_pair(random.Random(11), (0x1001, 0x1002), V4_A, V4_B)
    nat = SaFlow(ab.sealer, NAT, V4_B)  # the same SA seen after a NAT rewrote the source
    data = {n: udp_bytes(V4_A, V4_B, 4000, 5000, bytes([n]) * 40) for n in range(1, 12)}
    sent = {n: _packet(ab, n, data[n]) for n in range(1, 11)}
    flipped = bytearray(sent[4])
    flipped[-3] ^= 0x01  # a bit flipped in flight, in the ICV
    sender = [(10 * n, sent[n]) for n in range(1, 11)]
    receiver = [
        (100, sent[1]),  # delivered
        (110, sent[3]),  # delivered (2 is lost)
        (115, bytes(flipped)),  # changed
        (120, sent[5]),
        (121, sent[5]),  # duplicated
        (130, sent[7]),
        (131, sent[6]),  # reordered
        (140, _packet(nat, 8, data[8])),  # outer_rewritten
        (150, sent[9]),
        (155, _packet(ab, 50, data[11])),  # unexpected: never in the sender's capture
        (160, sent[10]),
    ]
    back = {n: _packet(ba, n, udp_bytes(V4_B, V4_A, 5000, 4000, bytes([n]) * 8)) for n in (1, 2)}
    receiver = [(1, back[1]), (2, back[2]), *receiver]  # b sends first: b's capture
    sender = [(50, back[1]), *sender]  # b -> a packet 2 never reached a's capture
    return sender, receiver


def _run(sender: Path, receiver: Path) -> tuple[Reconciled, list[FateRow]]:
    """reconcile's counts and its rows, in the order it writes them."""
    rows: list[FateRow] = []
    return reconcile(sender, receiver, sink=rows.append), rows


def _pair(tmp: Path, shift_us: int = 0) -> tuple[Path, Path]:
    """The planted pair, the receiver's clock ``shift_us`` ahead of the sender's."""
    sender, receiver = _planted()
    shifted = [(us + shift_us, packet) for us, packet in receiver]
    return _write(tmp / "sender.pcap", sender), _write(tmp / "receiver.pcap", shifted)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _pair(tmp_path_factory.mktemp("pair"))


def test_every_fate(pair: tuple[Path, Path]) -> None:
    result, rows = _run(*pair)
    got = _fates(rows)
    fwd, back = "sender->receiver", "receiver->sender"
    # In the order decided, the captures read side by side in time: the reverse SA's
    # packet 1 first (b sent it before a sent anything); each received packet's row as it
    # arrives (6 once it is got, after 7); a lost packet's when the other capture ends.
    assert got == [
        ("delivered", back, 0x1002, 1, 1, 1),
        ("delivered", fwd, 0x1001, 1, 2, 3),
        ("lost", back, 0x1002, 2, None, 2),  # the SENDER capture ended without it
        ("delivered", fwd, 0x1001, 3, 4, 4),
        ("changed", fwd, 0x1001, 4, 5, 5),
        ("delivered", fwd, 0x1001, 5, 6, 6),
        ("duplicated", fwd, 0x1001, 5, 6, 7),
        ("delivered", fwd, 0x1001, 7, 8, 8),
        ("reordered", fwd, 0x1001, 6, 7, 9),
        ("outer_rewritten", fwd, 0x1001, 8, 9, 10),
        ("delivered", fwd, 0x1001, 9, 10, 11),
        ("unexpected", fwd, 0x1001, 50, None, 12),  # the SENDER capture has ended
        ("delivered", fwd, 0x1001, 10, 11, 13),
        ("lost", fwd, 0x1001, 2, 3, None),  # the RECEIVER capture ended without it
    ]
    assert [r.delay_ns for r in rows[:2]] == [-49_000, 90_000]  # receiver time - sender's
    assert result.counts == {
        "delivered": 7,
        "lost": 2,
        "changed": 1,
        "duplicated": 1,
        "reordered": 1,
        "outer_rewritten": 1,
        "unexpected": 1,
    }
    (rewritten,) = [r for r in rows if r.fate.value == "outer_rewritten"]
    assert rewritten.detail == "outer rewritten: src 192.0.2.1->203.0.113.9"
    assert rewritten.outer_changes == "src 192.0.2.1->203.0.113.9"


def _fates(rows: list[FateRow]) -> list[tuple[str, str, int, int, int | None, int | None]]:
    return [(r.fate.value, r.direction, r.spi, r.seq64, r.sender_frame, r.receiver_frame)
            for r in rows]  # fmt: skip


@pytest.mark.parametrize("shift_s", [-5, 3])
def test_the_clocks_need_not_agree(pair: tuple[Path, Path], tmp_path: Path, shift_s: int) -> None:
    """The receiver's clock 5 s behind or 3 s ahead: the same fates, both SAs' directions
    found, and the offset estimated within the planted shift plus the one-way delays
    (49 us back, 60 to 90 us forward)."""
    plain, plain_rows = _run(*pair)
    shifted, shifted_rows = _run(*_pair(tmp_path, shift_s * 1_000_000))
    assert _fates(shifted_rows) == _fates(plain_rows)
    offset, delay = shifted.clock.offset_ns, shifted.clock.delay_ns
    assert offset is not None and delay is not None
    assert abs(offset - shift_s * 1_000_000_000) <= 90_000
    assert offset - plain.clock.offset_ns == shift_s * 1_000_000_000  # type: ignore[operator]
    assert delay == (60_000 + 49_000) // 2  # the least delay forward and back, averaged
    assert offset == shift_s * 1_000_000_000 + (60_000 - 49_000) // 2
    spread = shifted.clock.spread
    assert spread is not None
    assert (spread.low, spread.high) == (
        shift_s * 1_000_000_000 + 60_000,
        shift_s * 1_000_000_000 + 90_000,
    )


SUMMARY_LINES = [
    "sender: 11 ESP packets (0 other frames); receiver: 13 (0 other frames)",
    "fates: delivered 7, lost 2, changed 1, duplicated 1, reordered 1, outer_rewritten 1, "
    "unexpected 1",
    "receiver clock minus sender clock: +5.500 us",
    "  (from both directions; one-way delay about 54.500 us)",
]


def test_sas_one_way_with_other_delays_run_one_way(tmp_path: Path) -> None:
    """Two SAs a -> b, one 60 us on the way and one 500 us (their ranges apart): both
    run SENDER to RECEIVER, as the arguments say: SAs between the same hosts the same
    way run the same direction, whatever their delays. With no SA back, only the delay
    plus the offset is known (the receiver's clock 2 s ahead here)."""
    rng = random.Random(5)
    fast, _ = sa_pair(rng, (0x2001, 0x2002), V4_A, V4_B)
    slow, _ = sa_pair(rng, (0x3001, 0x3002), V4_A, V4_B)
    data = udp_bytes(V4_A, V4_B, 4000, 5000, b"x" * 40)
    sender, receiver = [], []
    for n in range(1, 5):
        one, two = _packet(fast, n, data), _packet(slow, n, data)
        sender += [(100 * n, one), (100 * n + 5, two)]
        receiver += [(2_000_000 + 100 * n + 60, one), (2_000_000 + 100 * n + 505, two)]
    result, rows = _run(_write(tmp_path / "s.pcap", sender), _write(tmp_path / "r.pcap", receiver))
    assert {(r.fate.value, r.direction) for r in rows} == {("delivered", "sender->receiver")}
    assert len(rows) == 8
    assert (result.clock.offset_ns, result.clock.delay_ns) == (None, None)
    spread = result.clock.spread
    assert spread is not None
    assert (spread.low, spread.high) == (2_000_060_000, 2_000_500_000)


def test_the_command_writes_its_folder(pair: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "r"
    run = run_cli("reconcile", *pair, "--out", out)
    assert run.code == 0, run.stderr
    assert run.stdout.splitlines() == [*SUMMARY_LINES, f"  outputs: {out}/"]
    assert sorted(p.name for p in out.iterdir()) == [
        "reconcile.csv",
        "reconcile.parquet",
        "report.txt",
        "summary.json",
    ]
    rows = list(csv.DictReader((out / "reconcile.csv").read_text().splitlines()))
    assert len(rows) == 14
    assert rows[-1] == {
        "fate": "lost",
        "direction": "sender->receiver",
        "spi": "4097",
        "seq64": "2",
        "sender_frame": "3",
        "receiver_frame": "",
        "delay_ns": "",
        "detail": "",
        "receiver_verdict": "",  # no keys
        "outer_changes": "",
    }
    table = pq.read_table(out / "reconcile.parquet").to_pylist()
    as_text = [{k: "" if v is None else str(v) for k, v in row.items()} for row in table]
    assert as_text == rows
    summary = json.loads((out / "summary.json").read_text())
    for role, path, frames in (("sender", pair[0], 11), ("receiver", pair[1], 13)):
        assert summary[role] == {
            "path": str(path),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "frames": frames,
            "esp_packets": frames,
            "other_frames": 0,
        }
    assert summary["fates"] == reconcile(*pair).counts
    assert [(sa["spi"], sa["direction"], sa["fates"]["lost"]) for sa in summary["sas"]] == [
        (0x1001, "sender->receiver", 1),
        (0x1002, "receiver->sender", 1),
    ]
    assert summary["clock"] == {
        "method": "both directions",
        "offset_ns": 5_500,  # (60 us least forward - 49 us back) / 2: their asymmetry
        "one_way_delay_ns": 54_500,
        "receiver_minus_sender_ns": {"low": 60_000, "median": 70_000, "high": 90_000},
    }
    assert summary["receiver_verdicts"] is None
    report = (out / "report.txt").read_text()
    assert report.isascii()
    assert max(len(line) for line in report.splitlines()) <= 72
    lines = report.splitlines()
    at = lines.index("  SPI 0x00001002 receiver->sender: delivered 1, lost 1")
    assert lines[at + 1] == "    usual TTL/hop limit change on the way: unchanged"
    assert "  lost                   2  sent, never received" in report.splitlines()


def test_with_keys_each_copy_has_the_receiver_models_verdict(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """A changed packet fails its ICV, a duplicated copy is a replay; the NAT's packet
    matches no key's addresses (unchecked); packet 10, after the unexpected 50 moved the
    32-packet window, is too old. Rows of the receiver->sender SA have none: the
    receiver capture is its sending side."""
    ab, ba = sa_pair(random.Random(11), (0x1001, 0x1002), V4_A, V4_B)
    keys = tmp_path / "keys.yaml"
    keys.write_text(keys_yaml([ab.sealer.sa, ba.sealer.sa]))
    out = tmp_path / "r"
    run = run_cli("reconcile", *pair, "--sa", keys, "--out", out, "-q")
    assert run.code == 0, run.stderr
    rows = list(csv.DictReader((out / "reconcile.csv").read_text().splitlines()))
    got = [(r["fate"], r["seq64"], r["receiver_verdict"]) for r in rows]
    assert got == [
        ("delivered", "1", ""),  # receiver->sender
        ("delivered", "1", "accept"),
        ("lost", "2", ""),  # receiver->sender
        ("delivered", "3", "accept"),
        ("changed", "4", "icv_fail"),
        ("delivered", "5", "accept"),
        ("duplicated", "5", "replay"),
        ("delivered", "7", "accept"),
        ("reordered", "6", "accept"),
        ("outer_rewritten", "8", "unchecked"),
        ("delivered", "9", "accept"),
        ("unexpected", "50", "accept"),
        ("delivered", "10", "too_old"),
        ("lost", "2", ""),
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["receiver_verdicts"] == {
        "delivered": {"accept": 5, "too_old": 1},
        "changed": {"icv_fail": 1},
        "duplicated": {"replay": 1},
        "reordered": {"accept": 1},
        "outer_rewritten": {"unchecked": 1},
        "unexpected": {"accept": 1},
    }
    assert "  changed: icv_fail 1" in (out / "report.txt").read_text().splitlines()
    table = pq.read_table(out / "reconcile.parquet").column("receiver_verdict").to_pylist()
    assert table == [r["receiver_verdict"] or None for r in rows]


def test_with_keys_each_capture_is_read_once(
    pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receiver model's verdicts come from the analysis's pass over the frames the
    join reads: the receiver capture is opened once (it was opened twice, once more by
    ``analyze``), as the sender's (summary.json's sha256 hashes the files apart)."""
    opened: list[str] = []
    real = compression.open_source

    def counting(name: str) -> ByteSource:
        opened.append(name)
        return real(name)

    monkeypatch.setattr(capture_module, "open_source", counting)  # as open_capture calls it
    ab, ba = sa_pair(random.Random(11), (0x1001, 0x1002), V4_A, V4_B)
    keys = tmp_path / "keys.yaml"
    keys.write_text(keys_yaml([ab.sealer.sa, ba.sealer.sa]))
    run = run_cli("reconcile", *pair, "--sa", keys, "--out", tmp_path / "r", "-q")
    assert run.code == 0, run.stderr
    assert sorted(opened) == sorted(str(path) for path in pair)


def test_no_key_in_any_output(pair: tuple[Path, Path], tmp_path: Path) -> None:
    """With --sa, no key byte in any file written nor on stdout (hex, either case, or the
    raw bytes), whatever --format prints."""
    ab, ba = sa_pair(random.Random(11), (0x1001, 0x1002), V4_A, V4_B)
    keys = tmp_path / "keys.yaml"
    keys.write_text(keys_yaml([ab.sealer.sa, ba.sealer.sa]))
    secrets = re.findall(r'key: "0x([0-9a-f]+)"', keys.read_text())
    assert len(secrets) == 2
    out = tmp_path / "r"
    said = [run_cli("reconcile", *pair, "--sa", keys, "--out", out).stdout]
    for fmt in ("text", "json"):
        said.append(run_cli("reconcile", *pair, "--sa", keys, "--out", "-", "--format", fmt).stdout)
    blobs = [text.encode() for text in said] + [f.read_bytes() for f in out.iterdir()]
    assert len(blobs) == 7
    for secret in secrets:
        for needle in (secret.encode(), secret.upper().encode(), bytes.fromhex(secret)):
            assert not any(needle in blob for blob in blobs)


def test_a_bad_key_file_is_one_line(pair: tuple[Path, Path], tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("sas: [not a mapping]\n")
    run = run_cli("reconcile", *pair, "--sa", keys, "--out", tmp_path / "r")
    assert run.code == 2
    assert run.stderr.startswith(f"espforensics: error: {keys}")
    assert len(run.stderr.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_a_long_path_has_a_line_of_its_own(pair: tuple[Path, Path], tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 70)
    deep.mkdir()
    sender = deep / "sender.pcap"
    sender.write_bytes(pair[0].read_bytes())
    run = run_cli("reconcile", sender, pair[1], "--out", "-", "--format", "text")
    assert run.code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[lines.index("sender:") + 1] == f"  {sender}"


def test_out_dash_prints_and_writes_nothing(
    pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    written = run_cli("reconcile", *pair, "--out", tmp_path / "r")
    assert written.code == 0, written.stderr
    as_json = run_cli("reconcile", *pair, "--out", "-", "--format", "json")
    as_text = run_cli("reconcile", *pair, "--out", "-", "--format", "text")
    summary = run_cli("reconcile", *pair, "--out", "-")
    assert (as_json.code, as_text.code, summary.code) == (0, 0, 0)
    assert json.loads(as_json.stdout) == json.loads((tmp_path / "r" / "summary.json").read_text())
    assert as_text.stdout == (tmp_path / "r" / "report.txt").read_text()
    assert summary.stdout.splitlines() == SUMMARY_LINES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no folder for -
    assert not pair[1].with_name("receiver.pcap.reconcile").exists()


def test_an_existing_folder_needs_force(pair: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "r"
    out.mkdir()
    (out / "summary.json").write_text("{}")
    (out / "mine.txt").write_text("kept")
    again = run_cli("reconcile", *pair, "--out", out)
    assert (again.code, again.stdout, again.stderr) == (
        2,
        "",
        f"espforensics: error: {out}: output folder exists; use --force to overwrite it\n",
    )
    assert (out / "summary.json").read_text() == "{}"
    forced = run_cli("reconcile", *pair, "--out", out, "--force", "--quiet")
    assert (forced.code, forced.stdout) == (0, "")
    assert json.loads((out / "summary.json").read_text())["rows"] == 14
    assert (out / "mine.txt").read_text() == "kept"


@pytest.mark.parametrize(
    ("which", "content", "why"),
    [
        ("missing", None, ""),
        ("folder", None, "a folder, not a capture"),
        ("garbage", b"not a capture at all", ""),
        ("empty", b"", ""),
    ],
)
def test_a_capture_it_cannot_read_is_one_line(
    pair: tuple[Path, Path], tmp_path: Path, which: str, content: bytes | None, why: str
) -> None:
    bad = tmp_path / which
    if which == "folder":
        bad.mkdir()
    elif content is not None:
        bad.write_bytes(content)
    for args in ((pair[0], bad), (bad, pair[1])):
        run = run_cli("reconcile", *args, "--out", tmp_path / "r")
        assert run.code == 2, run.stdout
        assert run.stderr.startswith(f"espforensics: error: {bad}: {why}")
        assert len(run.stderr.splitlines()) == 1
        assert not (tmp_path / "r").exists()


def test_a_capture_damaged_further_on_leaves_no_folder(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """The rows are written as the captures are read: a receiver capture cut inside its
    6th frame stops the run there, with one line, and the folder it made is gone."""
    cut = tmp_path / "cut.pcap"
    data = pair[1].read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    run = run_cli("reconcile", pair[0], cut, "--out", tmp_path / "r")
    assert (run.code, run.stdout) == (2, "")
    assert run.stderr.startswith(f"espforensics: error: {cut}: capture ends inside frame")
    assert len(run.stderr.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_bad_options_are_one_line(pair: tuple[Path, Path], tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    run = run_cli("reconcile", *pair, "--out", a_file)
    assert (run.code, run.stderr) == (
        2,
        f"espforensics: error: {a_file}: exists and is not a folder\n",
    )
    run = run_cli("reconcile", *pair, "--out", "-", "--format", "ktap")
    assert run.code == 2
    assert "Traceback" not in run.stderr
    assert "'ktap' is not one of" in run.stderr


@needs_captures
@pytest.mark.parametrize(("name", "reordered"), [("reorder-window32", 229), ("reorder-esn32", 201)])
def test_the_wire_captures(name: str, reordered: int) -> None:
    """The router delayed and reordered, lost and duplicated nothing: every packet is
    delivered or reordered, as many reordered as the sequence check counts on the
    receiver's capture (its seq_reorder finding)."""
    folder = CAPTURES / "linux-6.1-wire" / name
    result = reconcile(folder / "sender.pcap", folder / "receiver.pcap")
    assert result.counts["reordered"] == reordered
    assert result.counts["delivered"] + reordered == result.sender_esp == result.receiver_esp


AB, BA, CB, BD = ("a", "b"), ("b", "a"), ("c", "b"), ("b", "d")


@pytest.mark.parametrize(
    ("spreads", "reverse", "offset", "delay"),
    [
        # a <-> b both ways: offset (1_060 + 940) / 2, least delay 60; c -> b alone, its
        # median above the offset: forward; b -> d alone, below it: receiver->sender
        ({1: (AB, 1_060, 1_100, 1_200), 2: (BA, 900, 930, 940), 3: (CB, 1_500, 1_600, 1_700),
          4: (BD, 700, 800, 900)}, {2, 4}, 1_000, 60),
        # equal medians both ways, no offset known: both as the arguments say
        ({1: (AB, 50, 100, 150), 2: (BA, 60, 100, 140)}, set(), None, None),
        # one way only: forward, whatever the clock
        ({1: (BA, -5_000, -4_000, -3_000)}, set(), None, None),
    ],
)  # fmt: skip
def test_which_way_each_sa_ran(
    spreads: dict[int, tuple[tuple[str, str], int, int, int]],
    reverse: set[int],
    offset: int | None,
    delay: int | None,
) -> None:
    got_reverse, clock = find_directions(
        {spi: Spread(low, median, high) for spi, (_, low, median, high) in spreads.items()},
        {spi: way for spi, (way, *_) in spreads.items()},
        set(),
    )
    assert (set(got_reverse), clock.offset_ns, clock.delay_ns) == (reverse, offset, delay)
