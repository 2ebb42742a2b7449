"""Facts handed on typed, never read back from their words (issue 36), continued.

tests/results/test_typed_facts.py has the SA mode, clear bytes and causes. Here: what
the capture showed of a packet it cut, a packet's sequence anomaly and a key
mismatch's cure are set where they are known and read as values: other
words for them change no count and no lead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path

import pytest

from espforensics.analysis import summarize
from espforensics.analyzer import crypto, placement
from espforensics.checks import context
from espforensics.checks.coverage import CUT_FOUND, CUT_READ, CUT_UNREAD, cut_kind
from espforensics.checks.keys import FIX_WORDS, fix_named, variants
from espforensics.keys import load_sas
from espforensics.keys.sa import SaTable
from espforensics.model.enums import Cut, FindingKind, KeyFix, Proto, SeqAnomaly, Verdict
from espforensics.model.evidence import KeyMismatch
from espforensics.model.options import Options
from espforensics.model.records import PACKET_COLUMNS, Frame, PacketRecord
from espforensics.report.lead import wrong_sentence
from espforensics.results.builder import SummaryBuilder
from espforensics.results.summary import CaptureInfo, SaSummary, Summary
from espforensics.tables.packets import packet_record
from espforensics.tables.rows import records_to_table
from tests.support import helpers
from tests.support.helpers import PER_FRAME, STEADY, run_frames, scenario

_OTHER_WORDS = "kept {} of the {} bytes of ESP"  # not CUT_DETAIL's


def _summary(records: Iterable[PacketRecord]) -> Summary:
    builder = SummaryBuilder()
    for rec in records:
        builder.observe(rec)
    return builder.finish(CaptureInfo("c.pcap", "0" * 64), [])


def _cut_counts(summary: Summary) -> tuple[int, int, int]:
    return (
        sum(sa.cut for sa in summary.sas),
        sum(sa.cut_read for sa in summary.sas),
        sum(sa.cut_found for sa in summary.sas),
    )


def _reword(monkeypatch: pytest.MonkeyPatch) -> None:
    """Other words for a cut packet's detail and for a header that did not count."""
    monkeypatch.setattr(crypto, "CUT_DETAIL", _OTHER_WORDS)
    monkeypatch.setattr(placement, "CUT_DETAIL", _OTHER_WORDS)
    monkeypatch.setattr(context, "NOT_COUNTED", "its header left out")


# -- item 1: a cut packet's kind, from the receiver's steps ---------------------------


def test_cut_is_no_packets_column() -> None:
    assert "cut" not in PACKET_COLUMNS
    rec = PacketRecord(1, 0, 60, 100, verdict=Verdict.TRUNCATED, cut=Cut.READ)
    assert "cut" not in records_to_table([rec]).column_names


@pytest.mark.parametrize("options", [PER_FRAME, STEADY], ids=["per-frame", "steady"])
def test_cut_packets_count_alike_in_other_words(
    monkeypatch: pytest.MonkeyPatch, options: Options
) -> None:
    """The snaplen scenario's 10 cut ESP packets (its header read where it is), whatever
    their detail says, in both lanes."""
    sc = scenario("snaplen")
    _reword(monkeypatch)
    records = run_frames(sc.frames, sc.sas, options, "snaplen").records
    cut = [r for r in records if r.cut is not None]
    assert len(cut) == 10
    assert all(r.detail.startswith("kept ") for r in cut)
    assert {cut_kind(r) for r in cut} == {CUT_READ}
    assert _cut_counts(_summary(records)) == (10, 10, 0)


def _cut_frames(snap: int) -> list[Frame]:
    from espforensics.capture import open_capture

    with open_capture(helpers.real_capture(TSO_ON).pcap) as cap:
        frames = [f for f in cap if isinstance(f, Frame)]
    return [f._replace(caplen=min(f.caplen, snap), data=f.data[:snap]) for f in frames]


TSO_ON = "linux-6.1/ip6tnl-transport-tso-on"


@helpers.needs_captures
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@pytest.mark.parametrize(("snap", "kind"), [(80, CUT_UNREAD), (96, CUT_FOUND)])
def test_cut_misplaced_packets_count_alike_in_other_words(
    monkeypatch: pytest.MonkeyPatch, snap: int, kind: str, keyed: bool
) -> None:
    """The 94 misplaced packets of the TSO capture cut at 80 bytes (before the real header:
    not counted) and at 96 (the real header found by layout): the same counts when the
    words of their details change."""
    sas = load_sas(helpers.real_capture(TSO_ON).keys) if keyed else ()
    frames = _cut_frames(snap)
    said = _cut_counts(_summary(run_frames(frames, sas, PER_FRAME, TSO_ON).records))
    _reword(monkeypatch)
    records = run_frames(frames, sas, PER_FRAME, TSO_ON).records
    assert sum(cut_kind(r) == kind for r in records) == 94
    assert not any("captured " in r.detail or "not counted" in r.detail for r in records)
    counts = _cut_counts(_summary(records))
    assert counts == said
    assert counts[2] == (94 if kind == CUT_FOUND else 0)


# -- item 3: duplicates and reorders by their kind ---------------------------------------


def _esp(frame: int, anomaly: SeqAnomaly) -> PacketRecord:
    return PacketRecord(
        frame,
        frame * 1000,
        120,
        120,
        verdict=Verdict.OK,
        proto=Proto.ESP,
        ip_version=4,
        src="192.0.2.1",
        dst="192.0.2.2",
        spi=0x1001,
        seq=frame,
        seq64=frame,
        seq_anomaly=anomaly,
    )


def test_the_summary_counts_duplicates_and_reorders_by_their_kind() -> None:
    kinds = [
        SeqAnomaly.NONE,
        SeqAnomaly.DUPLICATE,
        SeqAnomaly.DUPLICATE_IDENTICAL,
        SeqAnomaly.REORDERED,
        SeqAnomaly.DUPLICATE,
    ]
    (sa,) = _summary(_esp(i, k) for i, k in enumerate(kinds, 1)).sas
    assert (sa.duplicates, sa.reordered) == (3, 1)


def test_the_sequence_check_marks_its_kinds(lane: Options) -> None:
    """The sequence scenario: one byte-identical duplicate, one reorder, as SeqAnomaly values
    that read back from the packets table as the same values."""
    sc = scenario("sequence")
    records = run_frames(sc.frames, sc.sas, lane, "sequence").records
    marked = [r.seq_anomaly for r in records if r.seq_anomaly]
    assert sorted(marked) == [SeqAnomaly.DUPLICATE_IDENTICAL, SeqAnomaly.REORDERED]
    assert all(type(r.seq_anomaly) is SeqAnomaly for r in records)
    (sa,) = _summary(records).sas
    assert (sa.duplicates, sa.reordered) == (1, 1)
    rows = records_to_table(records).to_pylist()
    back = [packet_record(row).seq_anomaly for row in rows]
    assert back == [r.seq_anomaly for r in records]
    assert all(type(a) is SeqAnomaly for a in back)


# -- item 2: the key doctor's fix, typed ---------------------------------------------------


@pytest.mark.parametrize("name", ["example", "aeads", "encauth", "esn-wrap", "shared-key"])
def test_every_variant_s_words_read_back_as_its_fix(name: str) -> None:
    """What results/stored.py reads a stored cure back by names the fix each variant undoes."""
    sas = SaTable(scenario(name).sas)
    tried = [v for sa in sas for v in variants(sa, sas)]
    assert tried
    assert [fix_named(v.what) for v in tried] == [v.fix for v in tried]


@helpers.needs_captures
def test_swapped_keys_lead_by_their_fix_not_its_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The TCP capture with its two SAs' keys exchanged: each verifies with the other's key,
    the lead says the keys are swapped, also when that variant's words are others."""
    tcp = helpers.real_capture("linux-6.1/tcp-transport-v4")
    text = tcp.keys.read_text()
    a, b = re.findall(r"0x[0-9a-f]{40}", text)
    keys = tmp_path / "swapped.txt"
    keys.write_text(text.replace(a, "KEY").replace(b, a).replace("KEY", b))
    monkeypatch.setitem(FIX_WORDS, KeyFix.OTHER_DIRECTION, "the key written for SPI")
    summary = summarize(tcp.pcap, [keys])
    found = [f.evidence for f in summary.finding_list if f.kind is FindingKind.KEY_MISMATCH]
    assert len(found) == 2
    for ev in found:
        assert isinstance(ev, KeyMismatch) and ev.fix is KeyFix.OTHER_DIRECTION
        assert ev.cure.startswith("the key written for SPI 0x0000100")
    swapped = (
        "447 of 447 ESP packets fail their ICV with the key file and verify with the key "
        "given for the other direction: the directions' keys are swapped, fix the key file "
        "for SPIs 0x00001001, 0x00001002"
    )
    assert swapped in " ".join(wrong_sentence(summary).split())
    again = Summary.from_json(json.loads(json.dumps(summary.to_json())))
    assert swapped in " ".join(wrong_sentence(again).split())


# -- item 4: an SA's times held once, in ns ------------------------------------------------


def test_an_sa_holds_its_times_once_and_summary_json_writes_both(lane: Options) -> None:
    """SaSummary keeps the ns; summary.json writes the float seconds where it always did
    (after ``last_seq64``) and the ns after ``icmp_quoted``; a summary.json of a version
    before the ns reads back to the ns nearest its seconds, the same seconds again."""
    assert {"first_time", "last_time"}.isdisjoint(f.name for f in fields(SaSummary))
    sc = scenario("sequence")
    summary = _summary(run_frames(sc.frames, sc.sas, lane, "sequence").records)
    (sa,) = summary.sas
    times = [f.ts_ns for f in sc.frames]
    assert (sa.first_ns, sa.last_ns) == (min(times), max(times))
    doc = json.loads(json.dumps(summary.to_json()))
    (row,) = doc["sas"]
    keys = list(row)
    assert keys[keys.index("last_seq64") + 1 : keys.index("wire_bytes")] == [
        "first_time",
        "last_time",
    ]
    assert keys[keys.index("icmp_quoted") + 1 :][:2] == ["first_ns", "last_ns"]
    assert (row["first_time"], row["last_time"]) == (sa.first_ns / 1e9, sa.last_ns / 1e9)
    assert Summary.from_json(doc) == summary
    old = json.loads(json.dumps(doc))
    for s in old["sas"]:
        del s["first_ns"], s["last_ns"]
    (back,) = Summary.from_json(old).sas
    # the float holds the time to 238 ns (its ulp in 2025): the ns nearest it, within half
    assert abs(back.first_ns - sa.first_ns) < 120 and abs(back.last_ns - sa.last_ns) < 120
    assert (back.first_time, back.last_time) == (row["first_time"], row["last_time"])
    assert back.mbit_per_s == sa.mbit_per_s
