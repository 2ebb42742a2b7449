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

import json
from functools import cache
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture
from espforensics.checks.coverage import TRUNCATED
from espforensics.keys import load_sas
from espforensics.model.enums import FindingKind, Proto, Severity, Verdict
from espforensics.model.evidence import SeqDuplicates
from espforensics.model.options import Options
from espforensics.model.records import Finding, Frame, PacketRecord
from espforensics.render.ktap import format_ktap
from espforensics.render.text import format_text
from espforensics.report.content import report_content
from espforensics.results.builder import SummaryBuilder
from espforensics.results.stored import stored_evidence
from espforensics.results.summary import CaptureInfo, Summary
from espforensics.rewrite.comments import verdict_comment
from espforensics.synth import write_capture
from tests.support.helpers import (
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
DUP = "linux-7.3.4/netem-duplicate-v4"
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
@pytest.mark.parametrize("name", [TSO_ON, "linux-6.1/esn-wrap-v4", DUP])
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


# -- coverage: what each check examined of the packets the capture cut ----------------


def _summary(run: Run) -> Summary:
    builder = SummaryBuilder()
    for rec in run.records:
        builder.observe(rec)
    return builder.finish(CaptureInfo("cut.pcap", "0" * 64), run.findings)


def _lines(text: str) -> str:
    return " ".join(text.split())


# (snap, cut ESP packets whose header the capture did not show to be theirs, found later)
TSO_CUT_READ = [(80, 94, 0), (96, 0, 94), (128, 0, 94)]


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@pytest.mark.parametrize(("snap", "unread", "found"), TSO_CUT_READ)
def test_coverage_counts_what_each_check_examined_of_a_cut_capture(
    snap: int, unread: int, found: int, keyed: bool
) -> None:
    """Placement, sequence and the IV checks examined every cut packet whose header the
    capture showed (by its clear bytes: the 94 misplaced ones at 96 and 128), the leak check
    the clear bytes in front of the headers found later; what they could not read, and what
    needs an ICV, is "cut short by the capture", with or without a key."""
    run = _run(TSO_ON, snap, keyed)
    summary = _summary(run)
    rows = _cut_esp(run.records)
    assert len(rows) == summary.esp_packets == 687  # every ESP packet of it is cut
    # the records say the same: the headers not counted, the headers found later
    assert sum("its header not counted" in r.detail for r in rows) == unread
    assert len(_misplaced(run.records)) == found
    read = 687 - unread
    assert [(sa.cut, sa.cut_read, sa.cut_found) for sa in summary.sas] == [
        (452, 452 - unread, found),
        (235, 235, 0),
    ]
    got = {c.name: (c.examined, c.keyless, c.cut, c.skipped) for c in summary.coverage}
    by_layout = (read, read, read if keyed else 0, {TRUNCATED: unread} if unread else {})
    assert got == {
        "esp_placement": by_layout,
        "cleartext_leak": (found, found, found if keyed else 0, {TRUNCATED: 687 - found}),
        "iv_reuse": by_layout,
        "iv_derivation": by_layout,
        "sequence": by_layout,
        "esn_mismatch": (0, 0, 0, {TRUNCATED: 687}),
        "keys": (0, 0, 0, {TRUNCATED: 687}),
        "inner_checksum": (0, 0, 0, {TRUNCATED: 687}),
    }
    # what the findings say agrees: each misplaced header was examined by both checks
    counts = {f.kind: f.count for f in run.findings}
    assert counts.get(FindingKind.ESP_MISPLACED, 0) == found
    assert counts.get(FindingKind.CLEARTEXT_LEAK, 0) == found
    gap = [f for f in run.findings if f.kind is FindingKind.SEQ_GAP]
    if unread:  # the packets the sequence check could not read are the ones it names
        assert [f.severity for f in gap] == [Severity.INFO]
        assert f"possible, not proven: {unread} packets cut by the capture" in gap[0].detail
    else:
        assert gap == []
    how = (
        "by their clear bytes only, cut by the capture before their ICV"
        if keyed
        else "without a key, by their clear bytes only"
    )
    skip = f" ({unread} cut short by the capture)" if unread else ""
    head = f"examined {read} of 687 ESP packets{skip}" if unread else "examined all 687 ESP packets"
    leak_head = f"examined {found} of 687 ESP packets ({687 - found} cut short by the capture)"
    ktap = format_ktap(report_content(summary)).splitlines()
    for name in ("esp_placement", "iv_reuse", "iv_derivation", "sequence"):
        assert f"# {name}: {head}; all of them {how}" in ktap
    none = "SKIP examined none of 687 ESP packets: 687 cut short by the capture"
    for number, name in ((6, "esn_mismatch"), (7, "keys"), (8, "inner_checksum")):
        assert f"ok {number} {name} # {none}" in ktap
    if found:
        assert f"# cleartext_leak: {leak_head}; all of them {how}" in ktap
        assert "not ok 1 esp_placement # 94 ESP headers misplaced" in ktap
    else:
        assert f"ok 2 cleartext_leak # {none}" in ktap
    text = _lines(format_text(report_content(summary)))
    assert f"esp_placement: {head}; all of them {how}" in text
    assert ("without a key" if keyed else "before their ICV") not in text
    # summary.json keeps it, and reads it back
    doc = json.loads(json.dumps(summary.to_json()))
    assert {k: doc["sas"][0][k] for k in ("cut", "cut_read", "cut_found")} == {
        "cut": 452,
        "cut_read": 452 - unread,
        "cut_found": found,
    }
    placement = next(c for c in doc["coverage"] if c["name"] == "esp_placement")
    assert (placement["examined"], placement["keyless"]) == (read, read)
    assert placement.get("cut", 0) == (read if keyed else 0)
    assert Summary.from_json(doc) == summary


def test_an_older_summary_json_of_a_cut_capture_loads_and_a_whole_ones_is_unchanged() -> None:
    cut = json.loads(json.dumps(_summary(_run(TSO_ON, 96, True)).to_json()))
    for sa in cut["sas"]:  # written before the cut packets were counted
        for name in ("cut", "cut_read", "cut_found"):
            del sa[name]
    for c in cut["coverage"]:
        c.pop("cut", None)
    old = Summary.from_json(cut)
    assert [sa.cut for sa in old.sas] == [0, 0]
    del cut["coverage"]  # older still: coverage derived from the verdicts, as it was
    derived = {c.name: (c.examined, c.skipped) for c in Summary.from_json(cut).coverage}
    assert derived["esp_placement"] == (0, {TRUNCATED: 687})
    assert derived["sequence"] == (687, {})
    whole = _summary(_run(TSO_ON, None, True)).to_json()
    assert not any("cut" in sa for sa in whole["sas"])
    assert not any("cut" in c for c in whole["coverage"])


# -- duplicates the capture cut: identical only in the bytes captured -----------------


def _dup_finding(run: Run) -> Finding:
    (dup,) = [f for f in run.findings if f.kind is FindingKind.SEQ_DUPLICATE]
    return dup


def _anomaly(run: Run, frame: int) -> str:
    return next(r.seq_anomaly for r in run.records if r.frame == frame)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
def test_a_cut_duplicate_is_identical_only_in_the_bytes_captured(keyed: bool) -> None:
    """netem's byte-identical duplicate (frame 10) cut at 96 bytes: 62 ESP bytes of each
    were captured and are equal, the rest is unknown; the 4 repeats with other data differ
    in what was captured, so they stay proven different packets."""
    whole, cut = _run(DUP, None, keyed), _run(DUP, 96, keyed)
    where = "192.0.2.1 -> 192.0.2.2: 5 repeated sequence numbers"
    assert _dup_finding(whole).detail == (
        f"{where} (1 byte-identical retransmissions, 4 different packets)"
    )
    assert _anomaly(whole, 10) == "duplicate-identical"
    dup = _dup_finding(cut)
    assert dup.detail == (
        f"{where} (0 byte-identical retransmissions, 4 different packets, 1 identical in the "
        "62 bytes captured: possibly retransmissions, the rest of their bytes not captured)"
    )
    assert (dup.kind, dup.frames) == (_dup_finding(whole).kind, _dup_finding(whole).frames)
    assert dup.evidence == SeqDuplicates(5, 0, 1)
    assert stored_evidence(dup.kind, dup.detail, dup.count) == dup.evidence
    assert _anomaly(cut, 10) == "duplicate"  # not "duplicate-identical": not proven
    assert [_anomaly(cut, n) for n in (121, 122, 123, 124)] == ["duplicate"] * 4
    # cut at 200 bytes the duplicate is whole: byte-identical again
    assert _dup_finding(_run(DUP, 200, keyed)).detail == _dup_finding(whole).detail


def _cut_frames(frames: tuple[Frame, ...], cut: set[int], snap: int) -> list[Frame]:
    return [
        f._replace(caplen=snap, data=f.data[:snap]) if n in cut else f
        for n, f in enumerate(frames, 1)
    ]


def test_a_duplicate_of_which_one_packet_was_cut_is_not_called_byte_identical() -> None:
    """Only one of the two copies cut: a cut copy after a whole one cannot be compared (only
    the whole one's digest is kept); a whole copy after a cut one is compared in the bytes
    the cut one holds."""
    frames = _frames(DUP, None)
    whole = _run(DUP, None, True)
    seq = {r.frame: (r.spi, r.seq64) for r in whole.records}
    (first,) = [n for n in seq if seq[n] == seq[10] and n != 10]
    assert first < 10
    sas = load_sas(real_capture(DUP).keys)
    later_cut = run_frames(_cut_frames(frames, {10}, 96), sas, PER_FRAME)
    assert _dup_finding(later_cut).detail.endswith(
        "(0 byte-identical retransmissions, 4 different packets, 1 not compared: cut by the "
        "capture, the earlier copy's bytes no longer held)"
    )
    assert _dup_finding(later_cut).evidence == SeqDuplicates(5, 0, 1)
    first_cut = run_frames(_cut_frames(frames, {first}, 96), sas, PER_FRAME)
    assert _dup_finding(first_cut).detail.endswith(
        "(0 byte-identical retransmissions, 4 different packets, 1 identical in the 62 bytes "
        "captured: possibly retransmissions, the rest of their bytes not captured)"
    )
    assert _anomaly(later_cut, 10) == _anomaly(first_cut, 10) == "duplicate"
