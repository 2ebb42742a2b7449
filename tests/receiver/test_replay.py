"""The kernel's three replay windows (receiver/replay.py) against tables derived by hand
from net/xfrm/xfrm_replay.c, and against a plain reference window on random streams.

Each table row is (sequence number, what the receiver does); a row that is
accepted advances the window, as xfrm_input does after the ICV verified.
The hand derivation of each row is in its comment: the branch of the C code
it takes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.receiver.config import ReplayConfig, Variant
from espforensics.receiver.replay import BmpWindow, EsnWindow, LegacyWindow, ReplayFail
from espforensics.receiver.verdict import Icv, RxState, RxVerdict

A, R, OLD, ZERO = RxVerdict.ACCEPT, RxVerdict.REPLAY, RxVerdict.TOO_OLD, RxVerdict.SEQ_ZERO
SEQHI = RxVerdict.ICV_FAIL_SEQHI

# xfrm_replay_check / xfrm_replay_advance, replay-window 32, a new state (seq 0, bitmap 0).
LEGACY_32 = [
    (0, ZERO),  # seq == 0: goto err
    (5, A),  # seq > x->replay.seq; advance: diff 5 < 32, bitmap = 0 << 5 | 1
    (5, R),  # diff 0, bit 0 set
    (3, A),  # diff 2, bit 2 clear; advance: bitmap |= 1 << 2
    (3, R),  # bit 2 set
    (40, A),  # diff 35 >= 32: bitmap = 1, seq = 40
    (8, OLD),  # diff 32 >= min(32, 32)
    (9, A),  # diff 31: bit 31 clear
    (9, R),
    (41, A),  # diff 1: bitmap << 1 | 1: bit 32 (seq 9) falls off the u32
    (9, OLD),  # diff 32
]

# The legacy window with replay-window 64 (a legacy state made without iproute2): the
# check caps it at 32 (min_t), the advance does not: its u32 shift by diff runs as x86
# executes it, the count taken modulo 32.
LEGACY_64 = [
    (100, A),  # diff 100 >= 64: bitmap = 1
    (140, A),  # diff 40 < 64: bitmap << 40 is bitmap << 8 on x86: 0x101
    (132, R),  # diff 8: bit 8 set (it was seq 100's bit): never received, yet a replay
    (105, OLD),  # diff 35 >= min(64, 32)
    (109, A),  # diff 31: bit 31 clear
]

# replay-window 0 without ESN: xfrm_replay_check returns 0 before anything else.
LEGACY_OFF = [(0, A), (7, A), (7, A), (1, A)]

# xfrm_replay_check_bmp / _advance_bmp, replay_window 128 (ring slot (seq - 1) % 128).
BMP_128 = [
    (0, ZERO),
    (1, A),  # advance: diff 1, slot (0 + 1) % 128 = 1 ... top 1
    (1, R),  # diff 0: pos = 0, bitnr 0 set
    (200, A),  # diff 199 >= 128: every word cleared, then slot (0 + 199) % 128 = 71
    (73, A),  # diff 127 < 128: pos 71 < 127: bitnr 128 - (127 - 71) = 72, clear
    (72, OLD),  # diff 128 >= 128
    (73, R),  # bitnr 72 set
    (201, A),  # diff 1: slot (71 + 1) % 128 = 72 cleared, then set: seq 73's slot reused
    (73, OLD),  # diff 128
    (200, R),
]

# replay_window 40 from a new state: a ring that is not a whole number of words, and
# (0 - 1) % 40 computed in u32 is 15, not 39: the first packet's bit lands in another slot
# than the one later checks look in, so its first replay passes (as the kernel does).
BMP_40 = [
    (10, A),  # pos (0 - 1) % 40 = 15; diff 10: slots 16..24 cleared, slot 25 set; top 10
    (10, A),  # diff 0, pos (10 - 1) % 40 = 9: slot 9 is clear; advance sets slot 9
    (10, R),  # slot 9 set
    (45, A),  # pos 9, diff 35: slots 10..39, 0..3 cleared (25 among them), slot 4 set
    (10, R),  # pos 4 < diff 35: bitnr 40 - 31 = 9, set
    (5, OLD),  # diff 40 >= 40
    (6, A),  # diff 39: bitnr 40 - 35 = 5, clear; set
    (50, A),  # pos 4, diff 5: slots 5..8 cleared (seq 6's), slot 9 set (seq 10's slot)
    (10, OLD),  # diff 40
    (11, A),  # diff 39, pos 9: bitnr 40 - 30 = 10, cleared by the jump to 45
    (11, R),
    (6, OLD),  # diff 44
]


def _run(config: ReplayConfig, table: list[tuple[int, RxVerdict]], top: int | None = None) -> None:
    rx = RxState(config, None if top is None else top + 1)
    got = [(seq, rx.receive(seq, Icv.VERIFIES)) for seq, _ in table]
    assert got == table


def test_legacy_32() -> None:
    _run(ReplayConfig(Variant.LEGACY, 32), LEGACY_32)


def test_legacy_window_over_32_is_checked_to_32() -> None:
    _run(ReplayConfig(Variant.LEGACY, 64), LEGACY_64)


def test_legacy_window_0_checks_nothing() -> None:
    _run(ReplayConfig(Variant.LEGACY, 0), LEGACY_OFF)


def test_bmp_128() -> None:
    _run(ReplayConfig(Variant.BMP, 128), BMP_128)


def test_bmp_40() -> None:
    _run(ReplayConfig(Variant.BMP, 40), BMP_40)


# xfrm_replay_seqhi / _check_esn / _advance_esn, replay_window 32. Rows are (the 64-bit
# number the sender sealed, what the receiver does); the receiver sees its low half.
ESN_32 = [
    (0xFFFF_FFF0, A),  # placed just below: top 0xffffffef (A: top >= 31), seq > top
    (0xFFFF_FFF5, A),
    (0x1_0000_0003, A),  # seq 3 < bottom 0xffffffd6: seqhi 0 + 1; advance: wrap 1, top 3 hi 1
    (0xFFFF_FFF5, R),  # B (top 3 < 31): seq >= bottom 0xffffffe4: seqhi 0, diff 14, bit set
    (0xFFFF_FFE0, SEQHI),  # B: top < seq < bottom: passes, seqhi 1 (not 0): the ICV fails
    (0x1_0000_0030, A),  # A again after the advance: top 0x30
    (0x1_0000_0005, SEQHI),  # A: seq 5 < bottom 0x11: taken for the next epoch (hi 2)
    (0x1_0000_0011, A),  # seq == bottom: in the window, bit clear
    (0x1_0000_0011, R),
    (0x2_0000_0005, A),  # seq 5 < bottom: hi 2, and it was sealed with 2: the wrap
]


def test_esn_32() -> None:
    rx = RxState(ReplayConfig(Variant.ESN, 32), 0xFFFF_FFF0)
    got = [(s, rx.receive(s & 0xFFFFFFFF, Icv.VERIFIES, s >> 32)) for s, _ in ESN_32]
    assert got == ESN_32


# replay_window 3 across the wrap: (seq - 1) % 3 in u32 is not continuous at 2^32
# (2^32 % 3 = 1), so the ring slips and a replay right after the wrap passes.
ESN_3_WRAP = [
    (0xFFFF_FFD9, A),  # placed just below: top 0xffffffd8
    (0x1_0000_0001, A),  # A: 1 < bottom: hi 1; wrap: pos 0xffffffd8 % 3 = 0, diff 0x28 >= 3:
    # every bit cleared, bitnr (0 + 40) % 3 = 1 set; top 1, hi 1
    (0x1_0000_0001, A),  # B: top 1 < 2; diff 0, pos (1 - 1) % 3 = 0: bit 0 clear: passes
    (0x1_0000_0001, R),  # the advance set bit 0 this time
]


def test_esn_window_not_dividing_2_32_slips_at_the_wrap() -> None:
    rx = RxState(ReplayConfig(Variant.ESN, 3), 0xFFFF_FFD9)
    got = [(s, rx.receive(s & 0xFFFFFFFF, Icv.VERIFIES, s >> 32)) for s, _ in ESN_3_WRAP]
    assert got == ESN_3_WRAP


def test_esn_seq_zero_only_before_the_window_fills() -> None:
    """xfrm_replay_check_esn: seq 0 fails only with seq_hi 0 and top below the window."""
    rx = RxState(ReplayConfig(Variant.ESN, 32))
    assert rx.receive(0, Icv.VERIFIES, 0) is ZERO
    assert rx.receive(40, Icv.VERIFIES, 0) is A
    assert rx.window.check(0) is None  # top 40 >= 31: 0 < bottom, taken for hi 1


def test_the_icv_decides_after_the_check() -> None:
    """A replay is a SeqError even with a bad ICV; a failed ICV does not advance."""
    rx = RxState(ReplayConfig(Variant.BMP, 64))
    assert rx.receive(5, Icv.VERIFIES) is A
    assert rx.receive(5, Icv.FAILS) is R
    assert rx.receive(6, Icv.FAILS) is RxVerdict.ICV_FAIL
    assert rx.receive(6, Icv.VERIFIES) is A  # not advanced by the failed one
    assert rx.receive(7, Icv.NO_PAYLOAD) is RxVerdict.BAD_TRAILER
    assert rx.receive(7, Icv.UNKNOWN) is RxVerdict.UNCHECKED
    assert rx.receive(7, Icv.VERIFIES) is R  # the unchecked one was taken as accepted


# -- against a plain reference ---------------------------------------------------------


class _Reference:
    """A window as RFC 4303 s3.4.3 describes it, over 64-bit numbers: accepted numbers
    in a set, the top, and for ESN the number a low half stands for: the one in
    [top - W + 1, top - W + 2^32] (the window's bottom and the 2^32 above it)."""

    def __init__(self, size: int, top: int, esn: bool) -> None:
        self.size, self.top, self.esn = size, top, esn
        self.accepted: set[int] = set()

    def receive(self, sent: int) -> RxVerdict:
        lo = sent & 0xFFFFFFFF
        if self.esn:
            bottom = self.top - self.size + 1
            seq = bottom + ((lo - bottom) & 0xFFFFFFFF)
        else:
            seq = lo
            if seq == 0:
                return ZERO
            if seq <= self.top and self.top - seq >= self.size:
                return OLD
        if seq in self.accepted:
            return R
        if seq != sent:
            return SEQHI
        self.accepted.add(seq)
        self.top = max(self.top, seq)
        return A


# Streams that mostly rise, with late packets, repeats and jumps. Windows are placed at a
# top of 1 or more: from top 0 a window that does not divide 2^32 is misaligned (BMP_40).
_jitter = st.lists(st.integers(-80, 40), min_size=1, max_size=120)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300), st.integers(1, 2**31), _jitter)
def test_bmp_is_the_reference_window(size: int, start: int, steps: list[int]) -> None:
    rx, ref = RxState(ReplayConfig(Variant.BMP, size), start + 1), _Reference(size, start, False)
    seq = start
    for step in steps:
        seq = max(1, seq + step)
        assert rx.receive(seq, Icv.VERIFIES) is ref.receive(seq), (seq, step)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 32), st.integers(1, 2**31), _jitter)
def test_legacy_up_to_32_is_the_reference_window(size: int, start: int, steps: list[int]) -> None:
    rx, ref = RxState(ReplayConfig(Variant.LEGACY, size), start + 1), _Reference(size, start, False)
    seq = start
    for step in steps:
        seq = max(1, seq + step)
        assert rx.receive(seq, Icv.VERIFIES) is ref.receive(seq), (seq, step)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([2**k for k in range(9)]), st.integers(0, 3), _jitter)
def test_esn_is_the_reference_window_across_the_wrap(size: int, hi: int, steps: list[int]) -> None:
    """Streams around a 32-bit wrap, with late packets below the window (the ESN cases).

    Windows that divide 2^32 (every window iproute2 users pick: 32, 64, 128): the
    ring of any other size slips at the wrap, as ESN_3_WRAP shows."""
    start = (hi << 32) + 0xFFFF_FF80
    rx, ref = RxState(ReplayConfig(Variant.ESN, size), start + 1), _Reference(size, start, True)
    sent = start
    for step in steps:
        sent = max(start - 300, sent + step)
        got = rx.receive(sent & 0xFFFFFFFF, Icv.VERIFIES, sent >> 32)
        assert got is ref.receive(sent), (hex(sent), step)


def test_the_windows_say_why() -> None:
    """The check's reasons, as x->stats counts them (replay_window, replay)."""
    for window in (LegacyWindow(32), BmpWindow(32), EsnWindow(32)):
        window.place(100)
        window.advance(101)
        assert window.check(101) is ReplayFail.REPLAY
    assert LegacyWindow(32).check(0) is ReplayFail.ZERO
