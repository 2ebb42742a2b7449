"""The misplaced-ESP filter behind VLAN tags, PPPoE and MPLS, checked with tcpdump itself.

The kernel-gso scenarios (12 misplaced ESP packets among 25 frames) are
re-framed behind each encapsulation, as a capture on a trunk port or an
access network would hold them: 802.1Q/802.1ad tags (IEEE 802.1Q), a PPPoE
session (RFC 2516 s4, then PPP's protocol, RFC 1332/5072) and MPLS label
stacks (RFC 3032). The ``carriers`` column must name what each frame
crosses, the report's filter must select exactly the misplaced frames when
tcpdump runs it (pcap-filter(7): ``vlan``, ``pppoes`` and ``mpls`` move
the offsets of all that follows them), also behind an IPv4 AH, and no
filter is printed when no single expression can reach every layout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from ipaddress import ip_address
from pathlib import Path

import pytest

from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.engine import SteadyRows
from espforensics.engine.run import Engine
from espforensics.keys import SaTable
from espforensics.model.records import Frame
from espforensics.report.filters import (
    FIRST_FRAGMENT_NOTE,
    HEADING,
    MAX_LAYOUTS,
    filter_note,
    misplaced_filter,
)
from espforensics.results.summary import MisplacedLayout
from espforensics.synth import Scenario, bench_sas, iter_bench_frames
from espforensics.synth.packets import ipv4_fragments, ipv6_fragments
from tests.support.helpers import (
    PER_FRAME,
    STEADY,
    analyzed_scenario,
    packet_rows,
    printed_filter,
    records_of,
    run_frames,
    scenario,
    tcpdump_frames,
)

TAG = {"vlan": b"\x81\x00\x00\x64", "svlan": b"\x88\xa8\x00\xc8"}  # TPID, then VLAN 100 / 200
PPP_IP = {0x0800: b"\x00\x21", 0x86DD: b"\x00\x57"}


def _behind(frame: Frame, carriers: tuple[str, ...]) -> Frame:
    """``frame`` (Ethernet, IP right after the EtherType) behind ``carriers``, outermost first."""
    data = frame.data
    macs, etype, ip = data[:12], int.from_bytes(data[12:14]), data[14:]
    inner = etype.to_bytes(2) + ip
    labels = carriers.count("mpls")
    if labels:  # the stack, its last entry bottom of stack (S bit), TTL 64
        stack = b"".join(
            ((16 + k) << 12 | (k == labels - 1) << 8 | 64).to_bytes(4) for k in range(labels)
        )
        inner = b"\x88\x47" + stack + ip
    if "pppoes" in carriers:  # version/type 0x11, code 0, session 7, length, PPP protocol
        inner = b"\x88\x64\x11\x00\x00\x07" + (len(ip) + 2).to_bytes(2) + PPP_IP[etype] + ip
    tags = [TAG["svlan" if k == 0 and carriers.count("vlan") == 2 else "vlan"] for k in range(2)]
    head = b"".join(tags[: carriers.count("vlan")])
    body = macs + head + inner
    return frame._replace(data=body, caplen=len(body), wirelen=len(body))


def _reframed(sc: Scenario, pick: list[tuple[str, ...]]) -> Scenario:
    """The scenario with frame ``i`` behind ``pick[i % len(pick)]``."""
    frames = tuple(_behind(f, pick[i % len(pick)]) for i, f in enumerate(sc.frames))
    return replace(sc, frames=frames)


def _analyzed(tmp: Path, sc: Scenario, name: str) -> tuple[Path, Path]:
    return analyzed_scenario(tmp, sc, name, plots=False)


CHAINS = [
    ("vlan",),
    ("vlan", "vlan"),
    ("pppoes",),
    ("vlan", "pppoes"),
    ("mpls",),
    ("mpls", "mpls"),
]


@pytest.mark.parametrize("name", ["kernel-gso-v4", "kernel-gso-v6"])
@pytest.mark.parametrize("carriers", CHAINS, ids=" ".join)
def test_filter_behind_carriers_selects_exactly_the_misplaced_frames(
    tmp_path: Path, name: str, carriers: tuple[str, ...]
) -> None:
    capture, out = _analyzed(tmp_path, _reframed(scenario(name), [carriers]), name)
    rows = packet_rows(out)
    assert [r["carriers"] for r in rows] == [" ".join(carriers)] * 25
    misplaced = [int(r["frame"]) for r in rows if r["verdict"] == "esp_misplaced"]
    assert len(misplaced) == 12
    bpf = printed_filter((out / "report.txt").read_text())
    assert bpf.startswith(" and ".join(carriers) + " and ip")
    assert tcpdump_frames(capture, bpf, tmp_path) == misplaced
    layouts = json.loads((out / "summary.json").read_text())["layouts"]
    assert {x["carriers"] for x in layouts} == {" ".join(carriers)}


@pytest.mark.parametrize(
    "pick",
    [[(), ("vlan",)], [("vlan",), ("vlan", "vlan"), ()], [("pppoes",), ()]],
    ids=["none+vlan", "none+vlan+qinq", "none+pppoes"],
)
def test_filter_reaches_layouts_behind_a_chain_of_carriers(
    tmp_path: Path, pick: list[tuple[str, ...]]
) -> None:
    """Frames behind none, one and two tags in one capture: one clause per depth, each
    crossing only the keywords the clauses before it did not (libpcap's offsets add up)."""
    capture, out = _analyzed(tmp_path, _reframed(scenario("kernel-gso-v6"), pick), "mixed")
    rows = packet_rows(out)
    assert [r["carriers"] for r in rows] == [" ".join(pick[i % len(pick)]) for i in range(25)]
    misplaced = [int(r["frame"]) for r in rows if r["verdict"] == "esp_misplaced"]
    assert len(misplaced) == 12
    bpf = printed_filter((out / "report.txt").read_text())
    assert bpf.count(" or ") == len(pick) - 1, bpf
    md = (out / "report.md").read_text()  # one layout per depth, each saying which
    for carriers in pick:
        assert f"| IPv6 esp{' behind ' if carriers else ''}{' '.join(carriers)} |" in md
    assert tcpdump_frames(capture, bpf, tmp_path) == misplaced


def test_no_filter_when_no_one_expression_reaches_every_layout(tmp_path: Path) -> None:
    """``vlan`` and ``mpls``: after one keyword no clause reaches the other's IP header."""
    sc = _reframed(scenario("kernel-gso-v6"), [("vlan",), ("mpls",)])
    _, out = _analyzed(tmp_path, sc, "split")
    report = (out / "report.txt").read_text()
    assert HEADING not in report
    assert "No tcpdump filter: no one libpcap expression crosses both mpls and vlan." in report
    assert sum(r["verdict"] == "esp_misplaced" for r in packet_rows(out)) == 12


def test_the_lane_names_the_tags_as_the_per_frame_path_does() -> None:
    """A long capture behind none, one and two tags: the steady lane's ``carriers`` are the
    per-frame path's, row for row."""
    pick = [(), ("vlan",), ("vlan", "vlan")]
    frames = [_behind(f, pick[i % 3]) for i, f in enumerate(iter_bench_frames(600))]
    sas = bench_sas()
    analyzer = FrameAnalyzer(SaTable(sas), STEADY, "<capture>")
    engine = Engine(analyzer, STEADY)
    try:
        rows = list(engine.iter_rows(frames))
    finally:
        engine.close()
    steady = [r for r in rows if isinstance(r, SteadyRows)]
    assert {int(v) for r in steady for v in r.carriers} == {0, 1, 2}  # the lane took each depth
    records = [rec for row in rows for rec in records_of(row)]
    assert records == run_frames(frames, sas, PER_FRAME).records
    assert [r.carriers for r in records] == [" ".join(pick[i % 3]) for i in range(600)]


def _behind_ah(frame: Frame) -> Frame:
    """``frame`` (Ethernet, IPv4 without options) with an AH between IPv4 and what it
    carried (RFC 4302 s2: next header, length in 4-byte words minus 2, SPI, seq, a 12-byte
    ICV), its protocol 51 and its total length 24 bytes longer."""
    data = frame.data
    ip = bytearray(data[14:34])
    ah = bytes([ip[9], 4, 0, 0]) + (0x2001).to_bytes(4) + (7).to_bytes(4) + bytes(12)
    ip[9] = 51
    ip[2:4] = (int.from_bytes(ip[2:4]) + len(ah)).to_bytes(2)
    ip[10:12] = bytes(2)
    words = sum(int.from_bytes(ip[k : k + 2]) for k in range(0, 20, 2))
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    ip[10:12] = (~words & 0xFFFF).to_bytes(2)  # RFC 791's header checksum, over the new header
    body = data[:14] + bytes(ip) + ah + data[34:]
    return frame._replace(data=body, caplen=len(body), wirelen=len(body))


@pytest.mark.parametrize("carriers", [(), ("vlan",)], ids=["ah", "vlan ah"])
def test_filter_behind_an_ipv4_ah(tmp_path: Path, carriers: tuple[str, ...]) -> None:
    """IPv4 AH before the misplaced ESP (as KLIPS bundles them): libpcap's ``ip proto``
    is then 51, the offsets still count from the IPv4 header."""
    sc = scenario("kernel-gso-v4")
    frames = tuple(_behind(_behind_ah(f), carriers) for f in sc.frames)
    capture, out = _analyzed(tmp_path, replace(sc, frames=frames), "ah")
    rows = packet_rows(out)
    misplaced = [int(r["frame"]) for r in rows if r["verdict"] == "esp_misplaced"]
    assert len(misplaced) == 12
    assert {r["expected_offset"] for r in rows} == {"44"}  # 20 + AH's 24
    bpf = printed_filter((out / "report.txt").read_text())
    assert bpf.startswith(" and ".join([*carriers, "(ip proto 50 or ip proto 51) and ip["]))
    assert tcpdump_frames(capture, bpf, tmp_path) == misplaced


def test_carriers_are_what_tshark_dissects(tmp_path: Path) -> None:
    """Every depth in one capture, against Wireshark's own dissectors: per frame, the tags
    (``vlan``, ``ieee8021ad``), a PPPoE session and the MPLS labels tshark finds are the
    ``carriers`` column's."""
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark is not installed")
    pick = [*CHAINS, ()]
    capture, out = _analyzed(tmp_path, _reframed(scenario("kernel-gso-v6"), pick), "all")
    fields = ["-e", "frame.protocols", "-e", "mpls.label", "-E", "aggregator=,"]
    res = subprocess.run(
        [tshark, "-n", "-r", str(capture), "-T", "fields", *fields],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    theirs = []
    for line in res.stdout.splitlines():
        layers, labels = line.split("\t")
        names = layers.split(":")
        tags = names.count("vlan") + names.count("ieee8021ad")
        session = ["pppoes"] if "pppoes" in names else []
        mpls = ["mpls"] * len(labels.split(",")) if labels else []
        theirs.append(" ".join(["vlan"] * tags + session + mpls))
    ours = [r["carriers"] for r in packet_rows(out)]
    assert ours == theirs == [" ".join(pick[i % len(pick)]) for i in range(25)]


def _fragmented(sc: Scenario) -> Scenario:
    """Every frame's outer datagram (Ethernet, IPv4 without options or bare IPv6) in two
    fragments (RFC 791 s2.3, RFC 8200 s4.5), the first a microsecond before the second."""
    frames: list[Frame] = []
    for i, f in enumerate(sc.frames):
        ip = f.data[14:]
        if ip[0] >> 4 == 4:
            src, dst = ip_address(ip[12:16]), ip_address(ip[16:20])
            parts = ipv4_fragments(src, dst, ip[9], ip[20:], 2, ident=100 + i)
        else:
            src, dst = ip_address(ip[8:24]), ip_address(ip[24:40])
            parts = ipv6_fragments(src, dst, ip[6], ip[40:], 2, ident=100 + i)
        for k, part in enumerate(parts):
            body = f.data[:14] + part
            number, ts_ns = len(frames) + 1, f.ts_ns + k * 1000
            frames.append(Frame(number, ts_ns, len(body), len(body), f.linktype, body))
    return replace(sc, frames=tuple(frames))


@pytest.mark.parametrize("name", ["kernel-gso-v4", "kernel-gso-v6"])
def test_filter_of_reassembled_datagrams_selects_their_first_fragments(
    tmp_path: Path, name: str
) -> None:
    """The row of a reassembled datagram is its last fragment's; the ESP header travels in
    its first, where the filter finds it (IPv6: 8 bytes further, behind the Fragment
    header), and the report says which fragment it selects."""
    capture, out = _analyzed(tmp_path, _fragmented(scenario(name)), "frag")
    rows = packet_rows(out)
    misplaced = [int(r["frame"]) for r in rows if r["verdict"] == "esp_misplaced"]
    assert len(misplaced) == 12
    assert {r["fragments"] for r in rows if r["verdict"] == "esp_misplaced"} == {"2"}
    report = (out / "report.txt").read_text()
    bpf = printed_filter(report)
    assert tcpdump_frames(capture, bpf, tmp_path) == [frame - 1 for frame in misplaced]
    assert "it selects the first fragment" in " ".join(report.split())


def test_the_report_says_why_misplaced_headers_get_no_filter() -> None:
    """In place of the filter, one sentence: too many layouts, a tunnel libpcap cannot
    cross, or carriers no one expression crosses together; under a filter, nothing
    unless a datagram was reassembled."""
    one = MisplacedLayout(4, "esp", 20, 20, "4500", 24, 0x1001, 3)
    spis = tuple(replace(one, spi=0x1001 + k) for k in range(MAX_LAYOUTS + 1))
    assert misplaced_filter(spis) is None
    assert filter_note(spis) == "No tcpdump filter: 9 layouts, more than the 8 it takes."
    assert filter_note(spis[:MAX_LAYOUTS]) == ""
    gre = (one, replace(one, carriers="vlan gre"))
    assert filter_note(gre) == (
        "No tcpdump filter: libpcap has no keyword that crosses gre, "
        "so no filter reaches the ESP header inside."
    )
    assert filter_note((replace(one, carriers="geneve"),)) == ""
    assert filter_note((replace(one, reassembled=True),)) == FIRST_FRAGMENT_NOTE
    assert filter_note(()) == ""
