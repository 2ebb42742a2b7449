"""The receiver model end to end: the ``receiver`` column and the predicted XfrmIn*
counters, on synthetic captures with every verdict planted and on the real captures
whose receiver's counters were measured.

Each synthetic capture is built packet by packet with the project's synth builder,
and the expected column is a table written by hand from xfrm_replay.c and
xfrm_input.c (tests/receiver/test_replay.py derives the windows themselves).
Every test runs with the steady lane off and on (the ``lane`` fixture); the
real captures' column is compared lane against lane too.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from espforensics.analysis import analyze
from espforensics.keys import SaTable
from espforensics.model.options import Options
from espforensics.model.records import DecryptionSecrets, Frame
from espforensics.receiver.verdict import COUNTERS, PROTO_ERROR
from espforensics.results.summary import Summary
from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, Fault, SaFlow, sa_pair
from espforensics.synth.keytext import esp_sa_text
from espforensics.synth.packets import udp_bytes
from tests.support.helpers import (
    CAPTURES,
    PER_FRAME,
    STEADY,
    needs_captures,
    real_capture,
    run_frames,
    scenario,
)

IN_ORDER = 150  # packets before the planted ones: the steady lane takes most of them


def _send(cb: CaptureBuilder, flow: SaFlow, seq64: int, fault: Fault | None = None) -> int:
    data = udp_bytes(flow.src, flow.dst, 4000, 5000, seq64.to_bytes(8) * 4)
    packet, truth = flow.send(data, 17, seq64, fault or Fault())
    return cb.emit_ip(packet, truth)


def _run(
    cb: CaptureBuilder, sas: SaTable, lane: Options
) -> tuple[dict[int, str], dict[str, dict[str, int]]]:
    """The receiver column by frame, and the predicted counters by host."""
    run = run_frames(cb.frames, sas, lane)
    check = run.analyzer.checks.receiver
    hosts, _ = check.prediction()
    return {r.frame: r.receiver for r in run.records}, {h.dst: h.counters for h in hosts}


def _planted(
    cb: CaptureBuilder, flow: SaFlow, rows: list[tuple[int, Fault | None, str]]
) -> dict[int, str]:
    """Send each (seq64, fault, expected receiver verdict); the expectation by frame."""
    return {_send(cb, flow, seq, fault): want for seq, fault, want in rows}


def _in_order(cb: CaptureBuilder, flow: SaFlow, first: int, skip: int = -1) -> dict[int, str]:
    """``IN_ORDER`` rising numbers from ``first`` (but ``skip``), each accepted."""
    return {_send(cb, flow, first + i): "accept" for i in range(IN_ORDER) if first + i != skip}


BAD_ICV = Fault(corrupt_icv=True)


def test_legacy_window_32(lane: Options) -> None:
    """replay-window 32 without ESN: below the window too_old, a repeat inside it replay,
    a bad ICV icv_fail without advancing, an SPI the key file lacks no_state."""
    cb = CaptureBuilder(seed=3)
    ab, ba = sa_pair(random.Random(3), (0x1001, 0x1002), V4_A, V4_B)
    stranger, _ = sa_pair(random.Random(4), (0x2001, 0x2002), V4_A, V4_B)
    want = _in_order(cb, ab, 1)  # 1..150
    want |= _planted(
        cb,
        ab,
        [
            (118, None, "too_old"),  # 150 - 118 = 32: min(32, 32)
            (119, None, "replay"),  # 31 below: in the window, accepted before
            (150, None, "replay"),
            (152, None, "accept"),
            (151, BAD_ICV, "icv_fail"),  # late, in the window: checked, not advanced
            (151, None, "accept"),
            (151, None, "replay"),
            (0, None, "seq_zero"),
            (300, None, "accept"),
            (151, None, "too_old"),
        ],
    )
    want |= _planted(cb, stranger, [(1, None, "no_state"), (2, None, "no_state")])
    want |= _planted(cb, ba, [(1, None, "accept")])
    sas = SaTable(tuple(replace(f.sealer.sa, replay_window=32, replay_esn=False) for f in (ab, ba)))
    got, hosts = _run(cb, sas, lane)
    assert {f: got[f] for f in want} == want
    assert hosts == {
        "192.0.2.1": dict.fromkeys(COUNTERS, 0),
        "192.0.2.2": {"XfrmInNoStates": 2, "XfrmInStateProtoError": 1, "XfrmInStateSeqError": 6},
    }


def test_esn_window_32(lane: Options) -> None:
    """flag esn, window 32, crossing the 32-bit wrap: a packet below the window is taken
    for the next epoch and fails its ICV (ProtoError, not SeqError); a repeat inside
    the window is a replay; the packet sealed with hi + 1 one packet early fails."""
    cb = CaptureBuilder(seed=5)
    ab, ba = sa_pair(random.Random(5), (0x1001, 0x1002), V4_A, V4_B, esn=True)
    start = 0x1_0000_0000 - IN_ORDER - 20  # 20 below the wrap after the in-order run
    want = _in_order(cb, ab, start)
    top = start + IN_ORDER - 1
    early = Fault(sealed_seq64=top + 2 + (1 << 32), tags=("early",))  # sealed with hi 1
    want |= _planted(
        cb,
        ab,
        [
            (top - 40, None, "icv_fail_seqhi"),  # below bottom: decrypted with hi 1
            (top - 31, None, "replay"),  # the bottom: in the window, accepted before
            (top + 1, None, "accept"),
            (top + 1, BAD_ICV, "replay"),  # the check comes before the ICV
            (top + 2, early, "icv_fail_seqhi"),
            (0x1_0000_0001, None, "accept"),  # after the wrap: hi 1 inferred, sealed with 1
            (top + 2, None, "accept"),  # late, in the window across the wrap: hi 0 inferred
            (top - 20, None, "icv_fail_seqhi"),  # below the window: taken for hi 1
        ],
    )
    sas = SaTable(tuple(replace(f.sealer.sa, replay_window=32, replay_esn=True) for f in (ab, ba)))
    got, hosts = _run(cb, sas, lane)
    assert {f: got[f] for f in want} == want
    assert hosts["192.0.2.2"] == {
        "XfrmInNoStates": 0,
        "XfrmInStateProtoError": 3,
        "XfrmInStateSeqError": 2,
    }


def test_bmp_window_and_the_assumed_default(lane: Options) -> None:
    """Without a window in the key file a non-ESN SA is taken to run the legacy window
    of 32 (the receiver says so); with replay_window 128 iproute2's bmp window."""
    for window, late, want_late in ((None, 40, "too_old"), (128, 40, "accept")):
        cb = CaptureBuilder(seed=7)
        ab, _ = sa_pair(random.Random(7), (0x1001, 0x1002), V4_A, V4_B)
        want = _in_order(cb, ab, 1, skip=IN_ORDER - late)
        want |= _planted(cb, ab, [(IN_ORDER - late, None, want_late)])
        sas = SaTable((replace(ab.sealer.sa, replay_window=window),))
        run = run_frames(cb.frames, sas, lane)
        assert {r.frame: r.receiver for r in run.records if r.frame in want} == want
        check = run.analyzer.checks.receiver
        _, states = check.prediction()
        described = "legacy window 32 (assumed: the key file says none)"
        assert states[0].window == (described if window is None else "bmp window 128")
        assert states[0].reorder_depth == late
        assert states[0].min_window == late + 1


def test_no_key_file_no_prediction() -> None:
    cb = CaptureBuilder(seed=9)
    ab, _ = sa_pair(random.Random(9), (0x1001, 0x1002), V4_A, V4_B)
    _in_order(cb, ab, 1)
    run = run_frames(cb.frames, SaTable(), PER_FRAME)
    assert {r.receiver for r in run.records} == {""}


# -- the real captures ----------------------------------------------------------------


def _stat(path: Path) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}


def _wire(name: str, pcap: str, options: Options) -> Summary:
    folder = CAPTURES / "linux-6.1-wire" / name
    return analyze(folder / pcap, [folder / "xfrm-state.txt"], options).summary


@needs_captures
@pytest.mark.parametrize("name", ["reorder-window32", "reorder-esn32"])
def test_wire_receiver_counters_are_the_kernels(name: str, lane: Options) -> None:
    """From the receiver's capture and the key file, every covered counter of the
    receiving host moves exactly as its /proc/net/xfrm_stat did; the other host's
    prediction is zero."""
    folder = CAPTURES / "linux-6.1-wire" / name
    truth = json.loads((folder / "ground-truth.json").read_text())
    before = _stat(folder / "xfrm_stat-b-before.txt")
    after = _stat(folder / "xfrm_stat-b-after.txt")
    summary = _wire(name, "receiver.pcap", lane)
    hosts = {h.dst: h.counters for h in summary.receivers}
    host = truth["receiver_address"]
    assert hosts[host] == {c: after[c] - before[c] for c in COUNTERS}
    assert {c: n for c, n in hosts[host].items() if n} == truth["receiver_xfrm_stat_delta_nonzero"]
    assert all(n == 0 for h, c in hosts.items() if h != host for n in c.values())


@needs_captures
@pytest.mark.parametrize("name", ["reorder-window32", "reorder-esn32"])
def test_wire_sender_capture_predicts_no_drop(name: str) -> None:
    """What the sender put on the wire was in order: nothing for the receiver to drop;
    the drops of the receiver's capture come from the reordering between the two."""
    hosts = {h.dst: h.counters for h in _wire(name, "sender.pcap", PER_FRAME).receivers}
    assert all(n == 0 for c in hosts.values() for n in c.values())


@needs_captures
@pytest.mark.parametrize(
    ("name", "host", "counter", "verdict"),
    [
        ("linux-6.1/ip6tnl-transport-tso-on", "fd00:a::2", PROTO_ERROR, "esp_misplaced"),
        ("linux-6.1/esn-wrap-v4", "192.0.2.2", PROTO_ERROR, "esn_mismatch"),
    ],
)
def test_sender_capture_drops_are_the_measured_ones(
    name: str, host: str, counter: str, verdict: str, lane: Options
) -> None:
    """The receiver's measured XfrmInStateProtoError, exactly, and the frames behind it
    are the misplaced headers (the ESN-early packet): nothing else drops."""
    cap = real_capture(name)
    result = analyze(cap.pcap, [cap.keys], lane)
    hosts = {h.dst: h for h in result.summary.receivers}
    want = dict.fromkeys(COUNTERS, 0) | {counter: cap.truth["receiver_XfrmInStateProtoError_delta"]}
    assert hosts[host].counters == want
    frames = result.packets.loc[result.packets.verdict == verdict, "frame"].tolist()
    assert list(hosts[host].frames[counter]) == frames
    assert all(n == 0 for h, x in hosts.items() if h != host for n in x.counters.values())


@needs_captures
def test_netem_duplicates_are_replays(lane: Options) -> None:
    """netem duplicate on the sender's egress: every repeated sequence number is a
    replay inside the window (XfrmInStateSeqError), the byte-identical one and the
    four that reuse numbers for other data alike."""
    cap = real_capture("linux-7.3.4/netem-duplicate-v4")
    result = analyze(cap.pcap, [cap.keys], lane)
    seq = cap.truth["summary"]["seq"]["0x1001"]
    dups = seq["duplicate_frames_identical"] + seq["duplicate_frames_different"]
    hosts = {h.dst: h for h in result.summary.receivers}
    assert hosts["192.0.2.2"].counters == dict.fromkeys(COUNTERS, 0) | {
        "XfrmInStateSeqError": len(dups)
    }
    assert list(hosts["192.0.2.2"].frames["XfrmInStateSeqError"]) == dups
    replays = result.packets.loc[result.packets.receiver == "replay", "frame"].tolist()
    assert replays == dups


@needs_captures
@pytest.mark.parametrize(
    ("name", "pcap"),
    [
        ("linux-6.1-wire/reorder-window32", "receiver.pcap"),
        ("linux-6.1-wire/reorder-esn32", "receiver.pcap"),
        ("linux-6.1/esn-wrap-v4", "capture.pcap"),
        ("linux-6.1/ip6tnl-transport-tso-on", "capture.pcap"),
    ],
)
def test_the_lanes_agree_on_the_receiver(name: str, pcap: str) -> None:
    """The ``receiver`` column and the prediction are the same with the lane off and on."""
    folder = CAPTURES / name
    runs = [analyze(folder / pcap, [folder / "xfrm-state.txt"], o) for o in (PER_FRAME, STEADY)]
    assert runs[0].packets.receiver.tolist() == runs[1].packets.receiver.tolist()
    assert runs[0].summary.receivers == runs[1].summary.receivers
    assert runs[0].summary.receiver_sas == runs[1].summary.receiver_sas


def test_a_secrets_block_gives_a_state_to_an_spi_that_had_none(lane: Options) -> None:
    """Before the pcapng Decryption Secrets Block, SPI 0x1001 has no state (no_state);
    after it, the receiver holds one and accepts (a new window, from that packet on)."""
    cb = CaptureBuilder(seed=13)
    ab, ba = sa_pair(random.Random(13), (0x1001, 0x1002), V4_A, V4_B)
    early = _planted(cb, ab, [(1, None, "no_state"), (2, None, "no_state")])
    late = _planted(cb, ab, [(3, None, "accept"), (2, None, "accept"), (3, None, "replay")])
    dsb = DecryptionSecrets(0x45535053, esp_sa_text([ab.sealer.sa]).encode())
    items: list[Frame | DecryptionSecrets] = [*cb.frames[:2], dsb, *cb.frames[2:]]
    run = run_frames(items, SaTable((ba.sealer.sa,)), lane)
    assert {r.frame: r.receiver for r in run.records} == early | late


def test_a_number_damaged_far_ahead_leaves_the_window_there_in_both_lanes() -> None:
    """A packet whose sequence number's top byte was flipped (0x81000002) and that the
    capture cut: the receiver's window (no ESN: low halves) moves up to it, and the
    SA's next packets, inferred one high half up by the sender's view, are below the
    window (``too_old``), with the lane on as off. The lane's rule read them in the
    sender's seq64 and took them as accepted (found by tests/analyzer/test_fuzz.py)."""
    sc = scenario("iv-reuse")
    frames = list(sc.frames[:100])
    raw = bytearray(frames[1].data)
    raw[38] ^= 0x80 | 0x01  # the sequence number's top byte, then 14 + 20 + 4 bytes in
    frames[1] = frames[1]._replace(data=bytes(raw[:56]), caplen=56)
    per_frame = run_frames(frames, sc.sas, PER_FRAME, "damaged")
    steady = run_frames(frames, sc.sas, Options(batch_frames=16), "damaged")
    verdicts = [r.receiver for r in per_frame.records]
    assert verdicts[65] == "too_old" and verdicts.count("too_old") >= 17
    assert [r.receiver for r in steady.records] == verdicts
