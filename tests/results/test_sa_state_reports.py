"""The reports of many SAs (issue 21): summary.json streamed a row at a time.

``format_json`` makes, dumps and drops one row dict at a time and joins the text
once; the document and its layout (one compact line per SA and per finding) are
what they were.
"""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.bounded.frames import Frames
from espforensics.model.enums import FindingKind, Proto, Severity, Verdict
from espforensics.model.records import Finding, PacketRecord, SaKey
from espforensics.render import json as json_render
from espforensics.render.json import format_json
from espforensics.report.content import report_content
from espforensics.results.accounts import FirstPackets, SaAcc
from espforensics.results.builder import SummaryBuilder
from espforensics.results.summary import CaptureInfo, SaSummary, Summary, finding_json, sa_json


def _sa(spi: int) -> SaSummary:
    return SaSummary(
        spi, "10.0.0.1", "10.0.0.2", "", 1, {"not_verified": 1}, 1, 1, 5 * 10**9, 5 * 10**9, 98
    )


def _summary(sas: int, findings: int) -> Summary:
    gap = Finding(FindingKind.SEQ_GAP, Severity.MEDIUM, 0x1001, (7, 8, 9), 3, "gap", "a", "b")
    return Summary(
        tool_version="1",
        capture=CaptureInfo("c.pcap", "00", 10, sas, 5.0, 5.0),
        esp_packets=sas,
        verdicts={"not_verified": sas},
        sas=tuple(_sa(0x10000 + i) for i in range(sas)),
        finding_list=(gap,) * findings,
    )


def test_sa_and_finding_rows_are_the_documents_rows() -> None:
    s = _summary(2, 1)
    doc = s.to_json()
    assert doc["sas"] == [sa_json(sa) for sa in s.sas]
    assert sa_json(s.sas[1])["spi"] == "0x00010001"
    assert sa_json(s.sas[1])["verdicts"] == {"not_verified": 1}
    assert finding_json(s.finding_list[0])["frames"] == [[7, 9]]
    assert doc["finding_list"] == [finding_json(s.finding_list[0])]


def test_summary_json_of_two_sas_one_line_each() -> None:
    s = _summary(2, 1)
    text = format_json(report_content(s))
    lines = text.splitlines()
    start = lines.index('  "sas": [')
    assert lines[start + 1] == "    " + json.dumps(sa_json(s.sas[0])) + ","
    assert lines[start + 2] == "    " + json.dumps(sa_json(s.sas[1]))
    assert lines[start + 3] == "  ],"
    at = lines.index('  "finding_list": [')
    assert lines[at + 1 : at + 3] == ["    " + json.dumps(finding_json(s.finding_list[0])), "  ],"]
    assert text.endswith("\n}\n") and not text.endswith("\n\n")
    doc = json.loads(text)
    assert list(doc)[:3] == ["schema", "tool_version", "capture"]
    assert list(doc).index("likely_causes") == list(doc).index("layouts") + 1
    assert Summary.from_json(doc) == s


def test_summary_json_of_no_sas_keeps_empty_lists_inline() -> None:
    text = format_json(report_content(_summary(0, 0)))
    assert '  "sas": [],' in text.splitlines()
    assert '  "finding_list": [],' in text.splitlines()
    assert "\0" not in text and "\\u0000" not in text
    assert json.loads(text)["sas"] == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 10**7), max_size=60),
    st.text(max_size=12),
    st.sampled_from(["", "192.0.2.1", '"frames": []']),
    st.integers(1, 4),
)
def test_a_findings_frames_are_written_a_piece_at_a_time_as_json_dumps_lays_them_out(
    frames: list[int], detail: str, src: str, runs_a_piece: int
) -> None:
    """A finding's row of summary.json, its frames written a few runs a piece, is the
    text ``json.dumps`` makes of its row, whatever its detail and addresses hold."""
    f = Finding(FindingKind.SEQ_GAP, Severity.LOW, 0x1001, Frames.of(frames), 3, detail, src)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(json_render, "_RUNS_A_PIECE", runs_a_piece)
        pieces = list(json_render._finding_pieces(f))
    assert "".join(pieces) == json.dumps(finding_json(f))
    runs = len(Frames.of(frames).runs)
    assert len(pieces) == 2 + -(-runs // runs_a_piece)  # the row's head, its runs, its tail


def test_summary_json_of_a_finding_of_many_runs() -> None:
    """Frames in more runs than a piece holds: the finding's line is still the row's dump."""
    frames = Frames.of(range(1, 3 * json_render._RUNS_A_PIECE * 2 + 2, 2))
    s = replace(
        _summary(1, 0), finding_list=(replace(_summary(0, 1).finding_list[0], frames=frames),)
    )
    lines = format_json(report_content(s)).splitlines()
    at = lines.index('  "finding_list": [')
    assert lines[at + 1] == "    " + json.dumps(finding_json(s.finding_list[0]))
    assert json.loads(lines[at + 1])["frames"][-1] == [6 * json_render._RUNS_A_PIECE + 1] * 2


# -- per-SA counts made at their first use ----------------------------------------


def _esp(frame: int, spi: int, **kw: object) -> PacketRecord:
    rec = PacketRecord(frame, frame * 1_000_000_000, 100, 100, Verdict.UNKNOWN_SA, Proto.ESP)
    rec.spi, rec.src, rec.dst, rec.seq64 = spi, "10.0.0.1", "10.0.0.2", frame
    for name, value in kw.items():
        setattr(rec, name, value)
    return rec


def test_sas_of_one_spi_are_counted_apart_by_their_addresses() -> None:
    # The builder finds the first SA of an SPI by the SPI alone and the others by their
    # addresses too: every SA keeps its own counts, and the table lists them in order.
    b = SummaryBuilder()
    ends = [("10.0.0.1", "10.0.0.2"), ("10.0.0.2", "10.0.0.1"), ("10.0.0.1", "10.0.0.3")]
    plan = [(0x1001, 0), (0x1001, 1), (0x1001, 0), (0x1001, 2), (0x1000, 0), (0x1001, 1)]
    for frame, (spi, end) in enumerate(plan, 1):
        b.observe(_esp(frame, spi, src=ends[end][0], dst=ends[end][1], len=100 * frame))
    rows = [
        (s.spi, s.src, s.dst, s.packets, s.first_seq64, s.last_seq64, s.wire_bytes)
        for s in b.finish(CaptureInfo("c.pcap", "00"), []).sas
    ]
    assert rows == [
        (0x1000, "10.0.0.1", "10.0.0.2", 1, 5, 5, 500),
        (0x1001, "10.0.0.1", "10.0.0.2", 2, 1, 3, 400),
        (0x1001, "10.0.0.1", "10.0.0.3", 1, 4, 4, 400),
        (0x1001, "10.0.0.2", "10.0.0.1", 2, 2, 6, 800),
    ]
    assert sorted(b.sa_keys()) == [(r[0], r[1], r[2]) for r in rows]


def test_sa_without_padding_or_checksums_makes_no_counter() -> None:
    b = SummaryBuilder()
    for frame in (1, 2):
        b.observe(_esp(frame, 0x1001))
    b.observe(_esp(3, 0x1002, tfc_len=12, payload_len=1400, inner_checksum="ok"))
    b.observe(_esp(4, 0x1002, tfc_len=20, payload_len=1400, inner_checksum="bad"))
    b.observe(_esp(5, 0x1002, tfc_len=8, payload_len=600, inner_checksum="ok"))
    accs = {key: b.acc_of(key) for key in b.sa_keys()}
    bare, padded = (
        accs[SaKey(0x1001, "10.0.0.1", "10.0.0.2")],
        accs[SaKey(0x1002, "10.0.0.1", "10.0.0.2")],
    )
    assert (bare.tfc_to, bare.checksums) == (None, None)
    assert (padded.tfc_to, padded.checksums) == ({1400: 2, 600: 1}, {"ok": 2, "bad": 1})
    sas = b.finish(CaptureInfo("c.pcap", "00"), []).sas
    assert (sas[0].tfc_padded_to, sas[0].inner_checksums, sas[0].tfc_packets) == ({}, {}, 0)
    assert sas[1].tfc_padded_to == {"1400": 2, "600": 1}
    assert sas[1].inner_checksums == {"ok": 2, "bad": 1}
    assert (sas[1].tfc_packets, sas[1].tfc_bytes, sas[1].packets) == (3, 40, 3)


def test_sequence_wrap_list_is_made_at_the_first_wrap() -> None:
    from espforensics.checks.sequence import SequenceCheck
    from espforensics.keys.sa import RFC4106
    from tests.support.bulk_batches import Pkt, context, keyed, sa_of

    flow = keyed(sa_of(0x1001, RFC4106, bytes(20)))
    check = SequenceCheck()
    for frame, seq64 in enumerate([(1 << 32) - 2, (1 << 32) - 1], 1):
        check.observe(context(flow, Pkt(frame, seq64, bytes(8), bytes(32), bytes(16))))
    state = check._sas.get(flow)
    assert state.wraps is None
    check.observe(context(flow, Pkt(3, 1 << 32, bytes(8), bytes(32), bytes(16))))
    assert state.wraps == [(3, 1)]
    wraps = [f for f in check.finish() if f.kind is FindingKind.ESN_WRAP]
    assert [(f.frames, f.count) for f in wraps] == [((3,), 1)]


def test_sa_verdicts_one_kept_plain_others_counted_in_verdict_order() -> None:
    b = SummaryBuilder()
    b.observe(_esp(1, 0x1001, verdict=Verdict.TRUNCATED))
    b.observe(_esp(2, 0x1001, verdict=Verdict.OK))
    b.observe(_esp(3, 0x1001, verdict=Verdict.TRUNCATED))
    b.observe(_esp(4, 0x1001, verdict=Verdict.AUTH_FAIL))
    b.observe(_esp(5, 0x1002))
    accs = {key: b.acc_of(key) for key in b.sa_keys()}
    one, mixed = (
        accs[SaKey(0x1002, "10.0.0.1", "10.0.0.2")],
        accs[SaKey(0x1001, "10.0.0.1", "10.0.0.2")],
    )
    assert (one.verdict, one.verdict_packets, one.other_verdicts) == ("unknown_sa", 1, None)
    assert (mixed.verdict, mixed.verdict_packets) == ("truncated", 2)
    assert mixed.other_verdicts == {"ok": 1, "auth_fail": 1}
    sas = b.finish(CaptureInfo("c.pcap", "00"), []).sas
    assert list(sas[0].verdicts.items()) == [("ok", 1), ("auth_fail", 1), ("truncated", 2)]
    assert sas[1].verdicts == {"unknown_sa": 1}


# A one-packet SA's summary row by tracemalloc: 500 bytes (the SaSummary, its verdicts'
# dict of one entry, the tuple's slot); 685 when each row had two empty dicts and a copy
# of its verdict's text.
ROW_BYTES = 560


def test_the_rows_of_many_one_packet_sas_share_their_empty_maps_and_verdict_text() -> None:
    """The summary's row of an SA that counted no padding nor checksum holds no map of its
    own, and its one verdict's text is shared: at the end of a run of 200,000 SAs an empty
    dict each was 64 bytes an SA, twice, and a copy of the verdict's text 60."""
    b = SummaryBuilder()
    for frame in range(1, 4001):
        b.observe(_esp(frame, 0x10000 + frame))
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        sas = b.finish(CaptureInfo("c.pcap", "00"), []).sas
        used = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert len(sas) == 4000 and sas[0].verdicts == {"unknown_sa": 1} and sas[0].tfc_padded_to == {}
    assert used < 4000 * ROW_BYTES


def _plain_acc(verdict: str, ns: int, seq: int | None, wire: int, algorithm: str) -> SaAcc:
    acc = SaAcc("10.0.0.1", "10.0.0.2", algorithm, ns, ns)
    acc.first_seq64 = acc.last_seq64 = seq
    acc.packets, acc.wire_bytes, acc.verdict = 1, wire, verdict
    return acc


_FIELDS = (
    "src", "dst", "algorithm", "first_ns", "last_ns", "first_seq64", "last_seq64",
    "packets", "wire_bytes", "verdict", "rare_fields",
)  # fmt: skip


@given(
    st.lists(
        st.tuples(
            st.sampled_from([Verdict.UNKNOWN_SA, Verdict.OK, "unknown_sa", ""]),
            st.integers(0, 2**64),
            st.one_of(st.none(), st.integers(0, 2**64)),
            st.integers(0, 2**63),
            st.sampled_from(["", "rfc4106(gcm(aes))"]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_first_packets_give_back_the_accumulators_they_took(
    accs: list[tuple[str, int, int | None, int, str]],
) -> None:
    """``FirstPackets``: an SA's accumulator after one packet of nothing rare comes back
    equal, field for field, its verdict the very object (a ``Verdict`` or a str); one
    whose time, seq64 or bytes an int64 does not hold is not taken (the object stays)."""
    once = FirstPackets()
    for verdict, ns, seq, wire, algorithm in accs:
        acc = _plain_acc(verdict, ns, seq, wire, algorithm)
        row = once.add(acc)
        fits = ns < 2**63 and (seq is None or seq < 2**63) and wire < 2**63
        assert (row is not None) == fits
        if row is not None:
            back = once.acc(row)
            assert [getattr(back, f) for f in _FIELDS] == [getattr(acc, f) for f in _FIELDS]
            assert type(back.verdict) is type(acc.verdict)
            assert once.names(row) == ("10.0.0.1", "10.0.0.2")


def test_first_packets_take_no_accumulator_of_two_packets_or_of_something_rare() -> None:
    once = FirstPackets()
    two = _plain_acc(Verdict.OK, 5, 1, 100, "")
    two.packets = 2
    leaked = _plain_acc(Verdict.OK, 5, 1, 100, "")
    leaked.leaked += 1
    moved = _plain_acc(Verdict.OK, 5, 1, 100, "")
    moved.last_seq64 = 2
    assert [once.add(a) for a in (two, leaked, moved)] == [None, None, None]


def test_one_packet_sas_cost_the_builder_few_bytes_each() -> None:
    """Most SAs of a scan have one packet: the builder keeps theirs as columns (130 bytes
    an SA with its dict entry, by tracemalloc; an accumulator object with its time and
    byte count as ints, and its dict entry, were 285), and their rows are what they were."""
    b = SummaryBuilder()
    b.observe(_esp(1, 0x1000))
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for frame in range(2, 4002):
            b.observe(_esp(frame, 0x10000 + frame, len=1400, time=1_700_000_000 * 10**9 + frame))
        used = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert used < 4000 * 160
    sas = b.finish(CaptureInfo("c.pcap", "00"), []).sas
    last = sas[-1]
    assert (last.spi, last.packets, last.first_seq64, last.last_seq64) == (
        0x10000 + 4001,
        1,
        4001,
        4001,
    )
    assert (last.first_ns, last.last_ns, last.wire_bytes) == (1_700_000_000 * 10**9 + 4001,) * 2 + (
        1400,
    )
    assert last.verdicts == {"unknown_sa": 1}
