"""Header-only captures (``tcpdump -s 96``): what a packet the capture cut proves (issue 34).

The real captures of ../shared are cut here in Python (each frame's
``caplen`` and bytes cut, as ``editcap -s N`` does) and analyzed keyed and
keyless, with the steady lane off and on. A cut packet cannot be verified
(its ICV was not captured): its verdict is ``truncated``, its header is
found by layout as without a key (checks/placement.py), and every finding
of the cut capture is one the whole capture gives, keyed or keyless
(kind, SPI and frames), or ``info`` (possible, not proven).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture
from espforensics.keys import load_sas
from espforensics.model import Finding, FindingKind, Frame, PacketRecord, Proto, Severity, Verdict
from espforensics.pipeline import Options
from espforensics.rewrite.comments import verdict_comment
from espforensics.synth import write_capture
from tests.helpers import (
    PER_FRAME,
    STEADY,
    Run,
    packet_rows,
    printed_filter,
    real_capture,
    run_frames,
    run_scenario,
    tcpdump_frames,
)

TSO_ON = "linux-6.1/ip6tnl-transport-tso-on"
CUTS = (96, 128, 200)
# Captures whose cut copies must give nothing their whole capture does not: misplaced
# headers and reused IVs, an ESN wrap, duplicates, CBC, NAT-T, TFC padding.
OTHERS = (
    "linux-6.1/esn-wrap-v4",
    "linux-7.3.4/netem-duplicate-v4",
    "linux-6.1/cbc-aes-hmac-sha256-v4",
    "linux-6.1/natt-espinudp-v4",
    "linux-7.3.4/tfc-tunnel-6in6",
)
FindingKey = tuple[str, int | None, tuple[int, ...]]


@cache
def _frames(name: str, snap: int | None) -> tuple[Frame, ...]:
    """The capture's frames, each cut to ``snap`` bytes as ``editcap -s`` does."""
    with open_capture(real_capture(name).pcap) as cap:
        frames = [f for f in cap if isinstance(f, Frame)]
    if snap is None:
        return tuple(frames)
    return tuple(f._replace(caplen=min(f.caplen, snap), data=f.data[:snap]) for f in frames)


@cache
def _run(name: str, snap: int | None, keyed: bool, options: Options = PER_FRAME) -> Run:
    sas = load_sas(real_capture(name).keys) if keyed else ()
    return run_frames(_frames(name, snap), sas, options, name)


def _key(f: Finding) -> FindingKey:
    return (f.kind.value, f.spi, tuple(f.frames))


@cache
def _whole_findings(name: str) -> frozenset[FindingKey]:
    """What the whole capture proves, keyed or keyless."""
    return frozenset(_key(f) for keyed in (True, False) for f in _run(name, None, keyed).findings)


def _cut_esp(records: list[PacketRecord]) -> list[PacketRecord]:
    return [r for r in records if r.caplen < r.len and r.proto is not Proto.OTHER]


def _misplaced(records: list[PacketRecord]) -> dict[int, tuple[object, ...]]:
    """Frame -> what a misplaced header's row says: offsets, SPI, seq, IV, clear bytes."""
    return {
        r.frame: (r.expected_offset, r.esp_offset, r.spi, r.seq, r.iv, r.leaked, r.leaked_hex)
        for r in records
        if r.misplaced
    }


def _assert_only_whole_findings(name: str, run: Run) -> None:
    whole = _whole_findings(name)
    new = [f for f in run.findings if _key(f) not in whole and f.severity is not Severity.INFO]
    assert new == [], f"findings the whole capture does not give: {[f.detail for f in new]}"


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@pytest.mark.parametrize("snap", CUTS)
def test_a_cut_tso_capture_finds_the_94_misplaced_headers_by_layout(snap: int, keyed: bool) -> None:
    whole = _run(TSO_ON, None, False).records  # without a key: found by layout, every one
    expected = _misplaced(whole)
    assert len(expected) == real_capture(TSO_ON).truth["seed_filter_matches"] == 94
    assert {v[:2] for v in expected.values()} == {(40, 60)}
    cut = _run(TSO_ON, snap, keyed)
    assert _misplaced(cut.records) == expected  # same offsets, seq, IV and clear bytes
    rows = _cut_esp(cut.records)
    assert len(rows) == sum(r.proto is not Proto.OTHER and r.len > snap for r in whole)
    assert {r.verdict for r in rows} == {Verdict.TRUNCATED}  # never ok: nothing verified
    esp_len = {r.frame: r.esp_len for r in whole}
    for r in rows:
        if r.frame in expected:
            assert r.detail.startswith(
                f"captured {snap - 14 - 60} of {esp_len[r.frame]} ESP bytes; ESP header at "
                "offset 60, expected at 40; 4 bytes in clear before it; unproven: its ICV cut "
                "by the capture, found by layout"
            )
    by_kind = {f.kind: f for f in cut.findings if f.kind is not FindingKind.IV_REUSE}
    assert sorted(by_kind) == sorted(
        [FindingKind.ESP_MISPLACED, FindingKind.CLEARTEXT_LEAK, FindingKind.IV_DERIVATION]
    )
    assert tuple(by_kind[FindingKind.ESP_MISPLACED].frames) == tuple(sorted(expected))
    assert by_kind[FindingKind.ESP_MISPLACED].detail.endswith("0 proven by decryption")
    whole_reuse = {(f.detail.split(";")[0], f.frames) for f in _run(TSO_ON, None, False).findings}
    reuse = {(f.detail.split(";")[0], f.frames) for f in cut.findings if f.kind == "iv_reuse"}
    assert len(reuse) == 32 and reuse <= whole_reuse  # no IV 0000000000000002 used 94 times
    _assert_only_whole_findings(TSO_ON, cut)


@pytest.mark.parametrize("snap", (64, 74, 80, 86, 90))
def test_a_capture_cut_before_the_real_header_proves_nothing_with_the_slot(snap: int) -> None:
    """Cut before the misplaced header is whole, the stale slot at offset 40 (SPI, seq 11
    three times, "IV" 0000000000000002) counts for nothing: no duplicate, gap or reuse."""
    for keyed in (True, False):
        cut = _run(TSO_ON, snap, keyed)
        _assert_only_whole_findings(TSO_ON, cut)
        assert {r.verdict for r in _cut_esp(cut.records)} == {Verdict.TRUNCATED}
        found = _misplaced(cut.records)
        # the real header's SPI and sequence number end at byte 14 + 68 of the frame
        assert len(found) == (94 if snap >= 14 + 68 else 0)
        frame20 = next(r for r in cut.records if r.frame == 20)
        if not found:
            assert "its header not counted" in frame20.detail
            assert frame20.seq_anomaly == "" and frame20.iv_reused is None


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@pytest.mark.parametrize("snap", CUTS)
@pytest.mark.parametrize("name", OTHERS)
def test_a_cut_capture_gives_no_finding_its_whole_capture_does_not(
    name: str, snap: int, keyed: bool
) -> None:
    cut = _run(name, snap, keyed)
    _assert_only_whole_findings(name, cut)
    rows = _cut_esp(cut.records)
    assert rows and {r.verdict for r in rows} == {Verdict.TRUNCATED}


@pytest.mark.parametrize("snap", CUTS)
@pytest.mark.parametrize("name", [TSO_ON, "linux-6.1/esn-wrap-v4"])
def test_the_steady_lane_and_the_per_frame_path_agree_on_a_cut_capture(
    name: str, snap: int
) -> None:
    for keyed in (True, False):
        per_frame, steady = _run(name, snap, keyed), _run(name, snap, keyed, STEADY)
        assert steady.records == per_frame.records
        assert steady.findings == per_frame.findings


def test_the_esn_state_follows_cut_packets_as_without_a_key() -> None:
    """Cut packets of a keyed ESN SA move its high half as keyless ones do: past the wrap
    their seq64 is in high half 1, not a reorder below the top of high half 0."""
    cut = _run("linux-6.1/esn-wrap-v4", 96, True)
    keyless = _run("linux-6.1/esn-wrap-v4", 96, False)
    assert [r.seq64 for r in cut.records] == [r.seq64 for r in keyless.records]
    assert not [f for f in cut.findings if f.kind in ("seq_gap", "seq_reorder")]
    assert any(r.seq64 is not None and r.seq64 >> 32 == 1 for r in cut.records)


def test_a_keyless_cut_packet_is_truncated_and_says_it_has_no_key() -> None:
    rec = next(r for r in _run(TSO_ON, 96, False).records if r.frame == 30)
    assert (rec.verdict, rec.detail) == (
        Verdict.TRUNCATED,
        "captured 42 of 8960 ESP bytes; no key for SPI 0x00001001",
    )


def test_the_report_filter_of_a_cut_capture_selects_the_misplaced_frames(tmp_path: Path) -> None:
    cap = real_capture(TSO_ON)
    cut = tmp_path / "cut96.pcap"
    write_capture(cut, _frames(TSO_ON, 96), snaplen=96, nanosecond=False)
    out = tmp_path / "out"
    analyze_to_dir(cut, [cap.keys], out, plots=False)
    rows = packet_rows(out)
    misplaced = [int(r["frame"]) for r in rows if r["esp_offset"] == "60"]
    assert len(misplaced) == 94
    assert {r["verdict"] for r in rows if r["caplen"] != r["len"]} == {"truncated"}
    bpf = printed_filter((out / "report.txt").read_text())
    assert tcpdump_frames(cut, bpf, tmp_path) == misplaced


def test_a_cut_null_packet_without_a_key_carries_no_iv() -> None:
    """``ecb(cipher_null)`` without a key: a whole packet is clear from its ESP header on
    (no IV, RFC 2410); a cut one has no trailer to show it, its SA's whole packets do:
    the IV checks read no IV in it either."""
    whole = run_scenario("null-icmp", PER_FRAME, keys=False)
    assert {(r.iv_seq_delta, r.iv_reused) for r in whole.records} == {(None, None)}
    frames = [  # the first five whole, then cut as a snap length cuts longer packets
        f if i < 5 else f._replace(caplen=96, data=f.data[:96])
        for i, f in enumerate(whole.scenario.frames)
    ]
    cut = run_frames(frames, (), PER_FRAME)
    assert [r.verdict for r in cut.records] == [Verdict.UNKNOWN_SA] * 5 + [Verdict.TRUNCATED] * 15
    assert {(r.iv_seq_delta, r.iv_reused) for r in cut.records} == {(None, None)}


def test_the_annotation_of_a_cut_misplaced_packet_says_what_the_layout_shows() -> None:
    rec = next(r for r in _run(TSO_ON, 96, True).records if r.frame == 20)
    assert verdict_comment(rec) == (
        "espforensics: truncated: ESP at 60, not 40; 4 inner bytes in clear; "
        "unproven (its ICV cut by the capture: found by layout)"
    )
