"""The IV derivation check: seqiv's constant, whatever packet a capture starts with.

The check is driven directly with (seq64, IV) pairs built as Linux's seqiv
builds them (IV = (seq64 + d) xor c), through the pipeline on the
mid-stream scenarios (with and without keys), and on the real Linux
captures cut at many start frames: every packet's ``iv_seq_delta`` must
be the delta its IV was built with. A brute-force count over every
candidate constant says when the bytes themselves cannot tell.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.capture import open_capture
from espforensics.checks.context import Flow, KeyedSaState, PacketContext, SaState
from espforensics.checks.iv_derivation import WINDOW, IvDerivationCheck, choose_constant
from espforensics.checks.ivmath import SPAN
from espforensics.checks.ivscheme import MIN_SCHEME, read_ivs
from espforensics.checks.perflow import Holds
from espforensics.decode.ip import OuterIp
from espforensics.keys import SaTable, Secret, SecurityAssociation, load_sas
from espforensics.keys.sa import RFC4106
from espforensics.model.enums import FindingKind, Severity, Verdict
from espforensics.model.options import Options
from espforensics.model.records import Finding, Frame, PacketRecord
from espforensics.synth import SCENARIOS, build_scenario
from tests.support.helpers import needs_captures, real_capture, run_frames, run_scenario

M64 = (1 << 64) - 1
SRC, DST = "192.0.2.1", "192.0.2.2"
IP = OuterIp(4, bytes(4), bytes(4), 50, 20, 0, None, 0, False, 20, 9)
MIDSTREAM = sorted(n for n in SCENARIOS if n.startswith("midstream-"))

Sample = tuple[int, int]  # (seq64, IV)


def _seqiv(seqs: range | list[int], deltas: list[int], c: int) -> list[Sample]:
    """What Linux sends: each packet's IV built from its seq64 + delta (primer s4)."""
    return [(s, ((s + d) & M64) ^ c) for s, d in zip(seqs, deltas, strict=True)]


def _record(frame: int, seq64: int, verdict: Verdict = Verdict.UNKNOWN_SA) -> PacketRecord:
    return PacketRecord(frame, 0, 0, 0, verdict, spi=0x1001, seq=seq64 & 0xFFFFFFFF, seq64=seq64)


def _keyed() -> SaState:
    """The state of an SA whose key verified its packets: its high halves are authenticated."""
    state = KeyedSaState(SecurityAssociation(0x1001, RFC4106, Secret(bytes(20))))
    state.proven = True
    return state


def _drive(
    samples: list[Sample], records: list[PacketRecord] | None = None, keyed: bool = True
) -> tuple[list[PacketRecord], list[Finding]]:
    """Every sample through one check, as one SA; all holds released by its finish."""
    holds = Holds()
    check = IvDerivationCheck(holds)
    flow = Flow(0x1001, SRC, DST, _keyed() if keyed else SaState())
    recs = records or [_record(n, s) for n, (s, _) in enumerate(samples, 1)]
    for rec, (_, iv) in zip(recs, samples, strict=True):
        check.observe(PacketContext(rec, b"", IP, flow, iv))
    findings = list(check.finish())
    assert not holds
    return recs, findings


def _signed(x: int) -> int:
    return ((x + (1 << 63)) & M64) - (1 << 63)


def _readings(window: list[Sample]) -> dict[tuple[bool, int], tuple[float, int, int, int]]:
    """Brute force, per candidate constant of either counter scheme (additive or xor),
    counted over the whole window: the entropy of the deltas within SPAN as sum n log n,
    the packets within SPAN, minus the largest of their deltas, the packets at delta 0
    (docs/checks.md, in that order)."""
    out = {}
    for s0, iv0 in window:
        for d in range(-SPAN, SPAN + 1):
            for additive in (False, True):
                c = (iv0 - s0 - d) & M64 if additive else iv0 ^ ((s0 + d) & M64)
                if (additive, c) in out:
                    continue
                built = [((iv - c) & M64 if additive else iv ^ c, s) for s, iv in window]
                deltas = Counter(_signed(b - s) for b, s in built)
                near = {k: n for k, n in deltas.items() if abs(k) <= SPAN}
                concentration = round(sum(n * math.log(n) for n in near.values()), 9)
                out[(additive, c)] = (
                    concentration,
                    sum(near.values()),
                    -max(map(abs, near)),
                    deltas[0],
                )
    return out


def _constant_iv(window: list[Sample]) -> bool:
    """One IV over at least MIN_SCHEME distinct seqs and half the window (ivscheme.py)."""
    seqs: dict[int, set[int]] = {}
    for s, iv in window:
        seqs.setdefault(iv, set()).add(s)
    most = max(len(v) for v in seqs.values())
    return most >= MIN_SCHEME and 2 * most >= len(window)


def _expected_finding(deltas: list[int]) -> str:
    off = Counter(d for d in deltas if d)
    parts = ", ".join(f"seq{d:+d} x{n}" for d, n in off.most_common(4))
    return (
        f"{SRC} -> {DST}: {sum(off.values())} of {len(deltas)} IVs not built from their own "
        f"sequence number (IV built from {parts})"
    )


STARTS = st.one_of(
    st.integers(1, 1 << 16), st.integers((1 << 32) - 40, (1 << 32) + 40), st.integers(1, 1 << 48)
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, M64), STARTS, st.lists(st.integers(-2, 2), min_size=1, max_size=WINDOW + 12))
def test_every_delta_exact_unless_the_bytes_cannot_tell(
    c: int, start: int, deltas: list[int]
) -> None:
    samples = _seqiv(range(start, start + len(deltas)), deltas, c)
    recs, findings = _drive(samples)
    got = [r.iv_seq_delta for r in recs]
    window = samples[:WINDOW]
    if len(window) < MIN_SCHEME:  # no evidence of any scheme: nothing judged, no finding
        assert got == [None] * len(deltas) and findings == []
        return
    if _constant_iv(window):  # e.g. deltas 0, -1, -2, -3: one IV, built from one number
        assert got == [None] * len(deltas)
        assert [(f.kind, f.severity) for f in findings] == [
            (FindingKind.IV_DERIVATION, Severity.HIGH)
        ]
        assert "a constant IV" in findings[0].detail
        return
    readings = _readings(window)
    best = max(readings.values())
    if best[0] == 0 or best[1] < MIN_SCHEME or 2 * best[1] < len(window):  # not followed
        assert got == [None] * len(deltas)
        assert findings == []
        return
    if all(readings[(False, c)] > r for k, r in readings.items() if k != (False, c)):
        assert got == deltas
        want = [_expected_finding(deltas)] if any(deltas) else []
        assert [f.detail for f in findings] == want
        return
    # Another constant explains the window as well or better: the bytes cannot tell.
    judged = [(s, iv, g) for (s, iv), g in zip(samples, got, strict=True) if g is not None]
    xors = {iv ^ ((s + g) & M64) for s, iv, g in judged}
    adds = {(iv - s - g) & M64 for s, iv, g in judged}
    chosen = [(False, x) for x in xors if len(xors) == 1] + [
        (True, a) for a in adds if len(adds) == 1
    ]
    assert chosen  # one reading of every packet, by one constant
    assert best in [readings[k] for k in chosen if k in readings]  # the best, documented order


@settings(max_examples=100, deadline=None)
@given(st.integers(0, M64), STARTS, st.lists(st.integers(-2, 2), min_size=1, max_size=WINDOW))
def test_the_constant_does_not_depend_on_the_packets_order(
    c: int, start: int, deltas: list[int]
) -> None:
    samples = _seqiv(range(start, start + len(deltas)), deltas, c)
    first = choose_constant(samples)
    assert choose_constant(samples[::-1]) == first
    assert choose_constant(samples[1:] + samples[:1]) == first
    reading = read_ivs(samples)  # the scheme too, xor or add
    assert read_ivs(samples[::-1]) == reading
    assert read_ivs(samples[1:] + samples[:1]) == reading


@pytest.mark.parametrize("start", [0x3A2C4, 0x3A2C5, (1 << 32) - 3])
@pytest.mark.parametrize("lead", [2, 10, 100])
def test_capture_starting_inside_a_burst_of_seq_plus_one(start: int, lead: int) -> None:
    """The field case: `lead` IVs from seq+1, then bursts of 3 from seq+1 and one own."""
    deltas = [1] * lead + [0] + ([1, 1, 1, 0] * 8)
    c = 0x5A17_C0DE_0BAD_F00D
    recs, findings = _drive(_seqiv(range(start, start + len(deltas)), deltas, c))
    assert [r.iv_seq_delta for r in recs] == deltas
    assert [f.detail for f in findings] == [_expected_finding(deltas)]


@pytest.mark.parametrize(
    ("seqs", "deltas", "reported"),
    [
        ([1000, 1002, 1004, 1006], [1, 1, 1, 1], [0, 0, 0, 0]),  # even seqs only, from seq+1
        (list(range(1000, 1016)), [1, -1] * 8, [0, 0] * 8),  # one IV per pair of seqs
        ([1001], [1], [None]),  # a lone packet is no evidence of a scheme
        ([1001, 1002, 1003], [1, 0, 0], [None] * 3),  # nor are three (MIN_SCHEME is 4)
    ],
)
def test_what_the_bytes_cannot_tell_is_not_reported(
    seqs: list[int], deltas: list[int], reported: list[int | None]
) -> None:
    """Ambiguous bytes: the reading with the most packets built from their own number."""
    recs, findings = _drive(_seqiv(seqs, deltas, 0x0123_4567_89AB_CDEF))
    assert [r.iv_seq_delta for r in recs] == reported
    assert findings == []


def test_random_ivs_are_sound_and_a_fixed_iv_is_a_finding() -> None:
    """Random IVs follow no counter and need none: no finding. One IV: a constant IV."""
    random_ivs = [(n, (n * 0x9E3779B97F4A7C15 + 0x1234) & M64) for n in range(1, 41)]
    recs, findings = _drive(random_ivs)
    assert {r.iv_seq_delta for r in recs} == {None}
    assert findings == []
    recs, findings = _drive([(n, 0x0011223344556677) for n in range(1, 41)])
    assert {r.iv_seq_delta for r in recs} == {None}
    assert [(f.kind, f.severity, f.count, tuple(f.frames), f.detail) for f in findings] == [
        (
            FindingKind.IV_DERIVATION,
            Severity.HIGH,
            40,
            tuple(range(1, 41)),
            f"{SRC} -> {DST}: a constant IV: 40 of 40 packets carry IV 11223344556677 (an IV "
            "must not repeat under one key: RFC 4106 s3.1, RFC 3602 s2.1)",
        )
    ]


def test_esn_mismatch_ivs_are_two_to_the_32_off() -> None:
    """A packet sealed with hi - 1 (RFC 4303 A2.2) has its IV built from hi-1:lo too."""
    c, hi = 0x7777_0000_1234_5678, 1 << 32
    samples = _seqiv(range(hi, hi + 12), [0] * 12, c)
    samples[5] = (hi + 5, 5 ^ c)  # sealed (AAD and IV) with high half 0
    recs = [_record(n, s, Verdict.OK) for n, (s, _) in enumerate(samples, 1)]
    recs[5] = _record(6, hi + 5, Verdict.ESN_MISMATCH)
    recs[5].seq_hi_verified = 0
    recs, findings = _drive(samples, recs)
    assert [r.iv_seq_delta for r in recs] == [0] * 5 + [-(1 << 32)] + [0] * 6
    assert [f.detail for f in findings] == [_expected_finding([0] * 11 + [-(1 << 32)])]
    # Without the verdict, an IV 2^32 away encodes no nearby number.
    plain = [_record(n, s, Verdict.OK) for n, (s, _) in enumerate(samples, 1)]
    plain, findings = _drive(samples, plain)
    assert plain[5].iv_seq_delta is None and plain[5].detail.endswith("no nearby sequence number")
    assert [f.count for f in findings] == [1] and "no nearby seq x1" in findings[0].detail


def test_holds_last_at_most_a_window_of_packets() -> None:
    holds = Holds()
    check = IvDerivationCheck(holds)
    flow = Flow(0x1001, SRC, DST, _keyed())
    for n, (seq64, iv) in enumerate(_seqiv(range(1, WINDOW + 2), [0] * (WINDOW + 1), 99), 1):
        check.observe(PacketContext(_record(n, seq64), b"", IP, flow, iv))
        held = [f for f in range(1, n + 1) if f in holds]
        assert held == (list(range(1, n + 1)) if n < WINDOW else [])


def test_force_settles_exactly_the_sas_probing_since_then() -> None:
    """One packet on each of 50 SAs: forcing frame k releases the SAs of frames 1..k."""
    holds = Holds()
    check = IvDerivationCheck(holds)
    recs = [_record(n, 7) for n in range(1, 51)]
    for rec in recs:
        flow = Flow(0x2000 + rec.frame, SRC, DST, SaState())
        check.observe(PacketContext(rec, b"", IP, flow, 7 ^ 0xABCDEF))
    for upto in (10, 10, 37, 50):
        check.force(upto)
        assert [f for f in range(1, 51) if f in holds] == list(range(upto + 1, 51))
        # one packet each: no evidence of a scheme, so none is judged (ivscheme.MIN_SCHEME)
        assert [r.iv_seq_delta for r in recs] == [None] * 50
    assert list(check.finish()) == []
    assert check.schemes() == {}  # every SA's scheme unknown: none is named


# -- through the pipeline: the mid-stream scenarios, with and without keys ------------


@pytest.mark.parametrize("keys", [True, False])
@pytest.mark.parametrize("name", MIDSTREAM)
def test_midstream_scenarios_give_every_delta(name: str, keys: bool, lane: Options) -> None:
    sc = build_scenario(name, seed=1)
    _, recs, findings = run_scenario(name, lane, keys=keys)
    assert [r.iv_seq_delta for r in recs] == [t.iv_seq_delta for t in sc.truth]
    data = [t for t in sc.truth if t.spi == 0x1501]
    first = sc.truth[0].seq64
    assert first is not None and first % 2 == (name.split("-")[1] == "odd")
    n = sc.facts["iv_not_seqiv"]
    assert [f.detail for f in findings if f.kind is FindingKind.IV_DERIVATION] == [
        f"fd00:c::1 -> fd00:c::2: {n} of {len(data)} IVs not built from their own "
        f"sequence number (IV built from seq+1 x{n})"
    ]
    reused = [r.frame for r in recs if r.iv_reused]
    assert reused == [t.frame for t in sc.truth if "iv_reuse" in t.tags]
    assert len(reused) == sc.facts["iv_repeats"]


# -- the real Linux captures ------------------------------------------------------------


@cache
def _frames(name: str) -> tuple[Frame, ...]:
    with open_capture(real_capture(f"linux-6.1/{name}").pcap) as cap:
        return tuple(f for f in cap if isinstance(f, Frame))


def _real(
    name: str, start: int, keys: bool, lane: Options
) -> tuple[list[PacketRecord], list[Finding]]:
    """The capture as if tcpdump had started at frame ``start`` (frames renumbered)."""
    frames = [f._replace(number=f.number - start + 1) for f in _frames(name)[start - 1 :]]
    sas = load_sas([real_capture(f"linux-6.1/{name}").keys]) if keys else SaTable()
    run = run_frames(frames, sas, lane, name)
    return run.records, run.findings


@needs_captures
def test_tso_on_cut_anywhere_gives_the_same_deltas(lane: Options) -> None:
    """Cut at its 20th frame, 5 misplaced (seq+1) packets open the capture."""
    full = [r.iv_seq_delta for r in _real("ip6tnl-transport-tso-on", 1, keys=False, lane=lane)[0]]
    assert full.count(1) == 94  # ground truth: the 94 misplaced packets, built from seq+1
    for start in range(2, 61):
        cut = [
            r.iv_seq_delta
            for r in _real("ip6tnl-transport-tso-on", start, keys=False, lane=lane)[0]
        ]
        assert cut == full[start - 1 :], f"capture cut at frame {start}"


@needs_captures
def test_tso_on_cut_at_frame_20_reports_seq_plus_one_only(lane: Options) -> None:
    recs, findings = _real("ip6tnl-transport-tso-on", 20, keys=True, lane=lane)
    truth = real_capture("linux-6.1/ip6tnl-transport-tso-on").truth
    misplaced = [r for r in recs if r.verdict is Verdict.ESP_MISPLACED]
    assert misplaced[0].frame == 1 and len(misplaced) == truth["seed_filter_matches"]
    assert {r.iv_seq_delta for r in misplaced} == {1}
    assert {r.iv_seq_delta for r in recs if r.verdict is Verdict.OK} == {0}
    sa = sum(r.spi == 0x1001 for r in recs)
    n = len(misplaced)
    assert [f.detail for f in findings if f.kind is FindingKind.IV_DERIVATION] == [
        f"fd00:a::1 -> fd00:a::2: {n} of {sa} IVs not built from their own sequence number "
        f"(IV built from seq+1 x{n})"
    ]


@needs_captures
def test_esn_wrap_v4_frame_373_iv_is_from_the_next_high_half(lane: Options) -> None:
    cap = real_capture("linux-6.1/esn-wrap-v4")
    run = run_frames(_frames("esn-wrap-v4"), load_sas([cap.keys]), lane, "esn")
    recs = run.records
    [odd] = [r for r in recs if r.spi == 0x1001 and r.iv_seq_delta != 0]
    assert (odd.frame, odd.verdict, odd.iv_seq_delta) == (373, Verdict.ESN_MISMATCH, 1 << 32)
    assert (odd.seq64, odd.seq_hi_verified) == (0xFFFFFFFF, 1)
    truth = cap.truth
    sa_packets = sum(r.spi == 0x1001 for r in recs)
    assert sa_packets == truth["frames_per_spi"]["0x1001"]
    [f] = [f for f in run.findings if f.kind is FindingKind.IV_DERIVATION]
    assert (f.severity, f.frames, f.count) == (Severity.HIGH, (373,), 1)
    assert f.detail.endswith(
        f"1 of {sa_packets} IVs not built from their own sequence number "
        "(IV built from seq+4294967296 x1)"
    )


def test_keyless_high_halves_are_a_guess_and_make_no_finding() -> None:
    """Without a key only the low 32 bits count: a capture that starts after an ESN wrap
    (the inference guesses high half 0, then 1 at the wrap, where the sender used 1, then 2)
    is not a run of deviating IVs."""
    c = 0x1122334455667788
    seqs = list(range((1 << 33) - 6, (1 << 33) + 6))  # true numbers: 1:fffffffa .. 2:00000005
    samples = [(s - (1 << 32), s ^ c) for s in seqs]  # seq64 as guessed without a key
    recs, findings = _drive(samples, keyed=False)
    assert [r.iv_seq_delta for r in recs] == [0] * len(seqs)
    assert findings == []
    recs, findings = _drive(samples, keyed=True)  # the same numbers, were they authenticated
    assert [f.kind for f in findings] == [FindingKind.IV_DERIVATION]


@pytest.mark.parametrize("seed", range(40))
def test_bursts_of_one_delta_always_give_every_delta_exactly(seed: int) -> None:
    """GSO-like traffic: runs of 3 to 6 packets built with one delta in -2..+2, any start."""
    import random

    rng = random.Random(seed)
    deltas: list[int] = []
    while len(deltas) < WINDOW + 20:
        deltas += [rng.randint(-2, 2)] * rng.randint(3, 6)
    start = rng.choice([rng.randint(1, 1 << 16), (1 << 32) - rng.randint(1, 40)])
    c = rng.getrandbits(64)
    recs, _ = _drive(_seqiv(range(start, start + len(deltas)), deltas, c))
    assert [r.iv_seq_delta for r in recs] == deltas


@pytest.mark.parametrize("seed", range(60))
def test_uniform_mixes_over_a_window_give_every_delta_exactly(seed: int) -> None:
    """Deltas drawn uniformly from -2..+2 for every packet (fixed seeds, no search)."""
    import random

    rng = random.Random(1000 + seed)
    deltas = [rng.randint(-2, 2) for _ in range(WINDOW + 10)]
    start, c = rng.randint(1, 1 << 40), rng.getrandbits(64)
    recs, _ = _drive(_seqiv(range(start, start + len(deltas)), deltas, c))
    assert [r.iv_seq_delta for r in recs] == deltas
