"""ESP captured inside a tunnel: VXLAN, Geneve, GRE, ERSPAN, IP in IP (decode/tunnel.py).

A capture taken on an underlay holds the IPsec peers' datagrams inside
another datagram. Each scenario's frames are wrapped here, byte by byte,
as an underlay would carry them (RFC 7348, RFC 8926, RFC 2784/2890,
draft-foschiano-erspan-03, RFC 2003/4213), and the analysis must be the
plain capture's, packet by packet: every column but the frame's length
and ``carriers``, which names the tunnel. tshark (its own dissectors, the
same esp_sa rows) must find the same ESP packets and verify the same
ICVs; tcpdump must select the misplaced packets with the report's filter
behind Geneve, the one tunnel libpcap 1.10 crosses. ``--decrypted`` must
write the decrypted plain capture inside the same tunnels, byte for byte,
every checksum in it verified by tshark.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from dataclasses import fields, replace
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.analysis import analyze_to_dir
from espforensics.analyzer.frame import MAX_TUNNELS, FrameAnalyzer
from espforensics.capture.batch import FrameBatch
from espforensics.decode.clear import internet_checksum
from espforensics.decode.ip import parse_ip
from espforensics.decode.tunnel import unwrap
from espforensics.engine import Engine, SteadyRows
from espforensics.engine.wire import parse
from espforensics.errors import Truncated
from espforensics.keys import SaTable
from espforensics.model.options import Options
from espforensics.model.records import Finding, Frame, PacketRecord
from espforensics.report.filters import HEADING
from espforensics.rewrite.decrypted import DecryptionKeys, Decryptor
from espforensics.synth import Scenario, bench_sas, esp_sa_text, iter_bench_frames, write_scenario
from espforensics.synth.tunnels import (
    ERSPAN_II,
    ERSPAN_III,
    GENEVE_ETH,
    GENEVE_OPT,
    MACS,
    TUNNELS,
    VXLAN,
    Tunnel,
    in_tunnel,
    ipv4,
    udp,
)
from tests.rewrite.test_annotate import read_pcapng
from tests.rewrite.test_decrypted import decrypt, frames_of
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


def _tunneled(sc: Scenario, tunnel: Tunnel) -> Scenario:
    """The scenario with every frame in ``tunnel``."""
    return replace(sc, frames=tuple(in_tunnel(f, tunnel.name) for f in sc.frames))


ALL = list(TUNNELS.values())


_OWN = frozenset({"caplen", "len", "carriers"})  # what the tunnel changes


def _same_analysis(plain: list[PacketRecord], tunneled: list[PacketRecord]) -> None:
    assert len(plain) == len(tunneled)
    names = [f.name for f in fields(PacketRecord) if f.name not in _OWN]
    for a, b in zip(plain, tunneled, strict=True):
        assert [getattr(a, n) for n in names] == [getattr(b, n) for n in names], a.frame


# Algorithms, outer fragments, misplaced headers, NAT-T, an ESN wrap, IV reuse.
NAMES = ["encauth", "fragments-v4", "kernel-gso-v6", "natt", "esn-wrap", "iv-reuse"]


@pytest.mark.parametrize("tunnel", ALL, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_esp_in_a_tunnel_is_analyzed_as_without_it(name: str, tunnel: Tunnel) -> None:
    sc = scenario(name)
    plain = run_frames(sc.frames, sc.sas, PER_FRAME)
    for options in (PER_FRAME, STEADY):
        got = run_frames(_tunneled(sc, tunnel).frames, sc.sas, options)
        _same_analysis(plain.records, got.records)
        assert got.findings == plain.findings
        assert {r.carriers for r in got.records} == {tunnel.carriers}


def test_frames_in_and_out_of_a_tunnel_keep_capture_order() -> None:
    """One SA's packets, every third inside VXLAN: the lane takes the plain ones in bulk,
    and the tunneled ones between them (never inert) reach the checks in their place."""
    bench = enumerate(iter_bench_frames(900))
    mixed = [in_tunnel(f, "vxlan") if i % 3 == 0 else f for i, f in bench]
    run = run_frames(mixed, bench_sas(), Options(batch_frames=256))
    reference = run_frames(mixed, bench_sas(), PER_FRAME)
    assert (run.records, run.findings) == (reference.records, reference.findings)
    assert [r.verdict.value for r in run.records].count("ok") == 900
    assert [r.carriers for r in run.records[:6]] == ["vxlan", "", "", "vxlan", "", ""]
    assert not [f for f in run.findings if f.kind.value == "seq_gap"]  # none is lost
    wire = parse(FrameBatch.of(tuple(mixed[:6])), frozenset({4500}))
    assert not wire.inert[::3].any() and wire.steady[1:3].all()


@pytest.mark.parametrize("name", ["kernel-gso-v4", "kernel-gso-v6"])
def test_filter_behind_geneve_selects_exactly_the_misplaced_frames(
    tmp_path: Path, name: str
) -> None:
    geneve = TUNNELS["geneve"]
    capture, out = analyzed_scenario(tmp_path, _tunneled(scenario(name), geneve), name, plots=False)
    misplaced = [int(r["frame"]) for r in packet_rows(out) if r["verdict"] == "esp_misplaced"]
    assert len(misplaced) == 12
    bpf = printed_filter((out / "report.txt").read_text())
    assert bpf.startswith("geneve and ip")
    assert tcpdump_frames(capture, bpf, tmp_path) == misplaced


@pytest.mark.parametrize("tunnel", [t for t in ALL if t.carriers != "geneve"], ids=str)
def test_no_filter_behind_a_tunnel_libpcap_cannot_cross(tmp_path: Path, tunnel: Tunnel) -> None:
    sc = _tunneled(scenario("kernel-gso-v4"), tunnel)
    _, out = analyzed_scenario(tmp_path, sc, "gso", plots=False)
    assert sum(r["verdict"] == "esp_misplaced" for r in packet_rows(out)) == 12
    words = " or ".join(sorted(set(tunnel.carriers.split()) - {"vlan"}))
    why = f"No tcpdump filter: libpcap has no keyword that crosses {words}, so no filter"
    for name in ("report.txt", "report.md", "report.html"):
        report = (out / name).read_text()
        assert HEADING not in report and why in " ".join(report.split()), name


def _tshark_esp(capture: Path, esp_sa: str, extra: tuple[str, ...]) -> dict[int, tuple[int, bool]]:
    """Per frame tshark finds ESP in: (SPI, whether its ICV verified)."""
    opts = ["-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE"]
    for row in esp_sa.splitlines():
        opts += ["-o", f"uat:esp_sa:{row}"]
    fields_ = ["frame.number", "esp.spi", "esp.icv_good"]
    res = subprocess.run(
        ["tshark", "-n", "-r", str(capture), *opts, *extra, "-T", "fields",
         *(a for f in fields_ for a in ("-e", f))],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    found = {}
    for line in res.stdout.splitlines():
        frame, spi, good = line.split("\t")
        if spi:
            found[int(frame)] = (int(spi, 16), good in ("1", "True"))
    return found


@pytest.mark.parametrize("tunnel", ALL, ids=str)
def test_tshark_finds_the_same_esp_inside_the_tunnel(tmp_path: Path, tunnel: Tunnel) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    sc = _tunneled(scenario("encauth"), tunnel)
    paths = write_scenario(sc, tmp_path, stem="cap")
    esp_sa = esp_sa_text(sc.sas, esn_columns=False)  # tshark 4.0 reads strongSwan's columns
    (tmp_path / "rows.esp_sa").write_text(esp_sa, encoding="ascii")
    theirs = _tshark_esp(paths["capture"], esp_sa, tunnel.tshark)
    out = tmp_path / "out"
    analyze_to_dir(paths["capture"], [tmp_path / "rows.esp_sa"], out, plots=False)
    rows = packet_rows(out)
    assert {int(r["frame"]): int(r["spi"]) for r in rows if r["spi"]} == {
        f: spi for f, (spi, _) in theirs.items()
    }
    assert [int(r["frame"]) for r in rows if r["verdict"] == "ok"] == sorted(
        f for f, (_, good) in theirs.items() if good
    )
    assert len(theirs) == 366


# -- what is not a tunnel, or not all of one -------------------------------------------


def _one(frame_data: bytes) -> PacketRecord:
    frame = Frame(1, 0, len(frame_data), len(frame_data), 1, frame_data)
    (rec,) = run_frames([frame], (), PER_FRAME).records
    return rec


def _first_v4() -> tuple[bytes, bytes]:
    """The first IPv4 frame of the encauth scenario: (Ethernet frame, its IP datagram)."""
    data = next(f.data for f in scenario("encauth").frames if f.data[12:14] == b"\x08\x00")
    return data, data[14:]


def test_what_is_not_opened_says_what_it_is() -> None:
    frame, ip = _first_v4()
    deep = ip
    for _ in range(MAX_TUNNELS + 1):  # one more IP in IP than is opened
        deep = ipv4(4, deep)
    cases = {
        "UDP 40000 -> 4789": ipv4(17, udp(4789, b"\x00" * 8 + frame)),  # VXLAN's I flag clear
        "GRE": ipv4(47, b"\x00\x01\x08\x00" + ip),  # version 1 (PPTP's)
        "IPv4-in-IP": deep,
    }
    for detail, under in cases.items():
        rec = _one(MACS + b"\x08\x00" + under)
        assert (rec.verdict.value, rec.detail) == ("not_esp", detail)
    assert _one(MACS + b"\x08\x00" + deep).carriers == " ".join(["ipip"] * MAX_TUNNELS)


def test_a_nat_t_port_is_never_a_tunnel() -> None:
    under = ipv4(17, udp(4789, VXLAN))
    ip = parse_ip(under)
    assert unwrap(ip, under, frozenset({4789})) is None
    assert unwrap(ip, under, frozenset({4500})) is not None


GENEVE_12 = "Geneve header cut at 12 bytes"  # its option cut
ERSPAN_16 = "ERSPAN type III header cut at 16 bytes"  # its platform subheader cut


@pytest.mark.parametrize(
    ("under", "said"),
    [
        (ipv4(47, ERSPAN_II[:6]), "GRE header cut at 6 bytes"),  # its sequence number
        (ipv4(47, ERSPAN_II[:10]), "ERSPAN type II header cut at 2 bytes"),
        (ipv4(17, udp(4789, VXLAN[:2])), "VXLAN header cut at 2 bytes"),
        (ipv4(17, udp(6081, GENEVE_ETH[:4])), "Geneve header cut at 4 bytes"),
        (ipv4(17, udp(6081, b"\x02" + GENEVE_ETH[1:] + GENEVE_OPT[:4])), GENEVE_12),
        (ipv4(47, ERSPAN_III + b"\x00\x00\x00\x01" + b"\x00" * 4), ERSPAN_16),
    ],
    ids=["gre", "erspan", "vxlan", "geneve", "geneve-options", "erspan-platform"],
)
def test_a_tunnel_header_cut_short_is_undecodable(under: bytes, said: str) -> None:
    with pytest.raises(Truncated, match=said):
        unwrap(parse_ip(under), under, frozenset({4500}))
    rec = _one(MACS + b"\x08\x00" + under)
    assert (rec.verdict.value, rec.detail) == ("undecodable", said)


def test_a_frame_the_mirror_cut_is_truncated() -> None:
    """ERSPAN type II with its T bit: the mirrored frame was cut, so a header cut short
    in it is ``truncated``, not ``undecodable``."""
    frame, _ = _first_v4()
    cut = ERSPAN_II[:10] + bytes([ERSPAN_II[10] | 0x04]) + ERSPAN_II[11:]  # its T bit
    rec = _one(MACS + b"\x08\x00" + ipv4(47, cut + frame[:30]))
    assert rec.verdict.value == "truncated"
    assert rec.carriers == "erspan"


def _gre_checksum(data: bytes) -> tuple[bytes, bool]:
    """A frame of the gre-csum-key-seq layout with its GRE checksum zeroed, and whether
    that checksum verified (RFC 2784 s2.5: over the GRE header and its payload)."""
    gre = 14 + 20  # Ethernet, the underlay's IPv4 header
    zeroed = data[: gre + 4] + b"\x00\x00" + data[gre + 6 :]
    return zeroed, internet_checksum(data[gre:]) == 0


# Misplaced headers rebuilt, a tunnel-mode SA, ESP in UDP, and packets whose IP version
# differs from the datagram that carried them (IPv6 in IPv4 by next header 41).
DECRYPTED = ["kernel-gso-v4", "ipv6-tunnel", "natt", "inner-protocols"]


@pytest.mark.parametrize("tunnel", ALL, ids=str)
@pytest.mark.parametrize("name", DECRYPTED)
def test_the_decrypted_copy_rewrites_the_tunnels_around_the_inner_packet(
    tmp_path: Path, name: str, tunnel: Tunnel
) -> None:
    """``--decrypted`` of a capture inside a tunnel is the decrypted plain capture inside
    the same tunnel, byte for byte: the tunnels' lengths and checksums fixed, and what
    names the carried packet's IP version changed with it."""
    sc = scenario(name)
    plain = frames_of(decrypt(tmp_path / "plain", sc))
    got = frames_of(decrypt(tmp_path / "tunneled", _tunneled(sc, tunnel)))
    assert len(got) == len(plain) == len(sc.frames)
    rewritten = 0
    for frame, mine, theirs in zip(sc.frames, plain, got, strict=True):
        want = in_tunnel(mine, tunnel.name).data
        data = theirs.data
        if mine.data != frame.data:
            rewritten += 1
            if tunnel.name == "gre-csum-key-seq":  # in_tunnel leaves its checksum 0
                data, verified = _gre_checksum(data)
                assert verified, theirs.number
        assert data == want, theirs.number
    assert rewritten == sum(p.data != f.data for f, p in zip(sc.frames, plain, strict=True)) > 0


@pytest.mark.parametrize("tunnel", ALL, ids=str)
def test_tshark_verifies_every_checksum_of_the_decrypted_tunneled_copy(
    tmp_path: Path, tunnel: Tunnel
) -> None:
    """tshark's own checksum checks (IPv4, UDP, TCP, GRE) over the decrypted copy: none
    bad, and the rebuilt tunnels' headers are among those it verified."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    copy = decrypt(tmp_path, _tunneled(scenario("inner-protocols"), tunnel))
    protos = ("ip", "udp", "tcp", "gre", "icmp", "icmpv6")
    opts = [a for p in ("ip", "udp", "tcp") for a in ("-o", f"{p}.check_checksum:TRUE")]
    res = subprocess.run(
        ["tshark", "-n", "-r", str(copy), *opts, *tunnel.tshark, "-T", "fields",
         *(a for p in protos for a in ("-e", f"{p}.checksum.status"))],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    frames = [
        [col.split(",") if col else [] for col in line.split("\t")]
        for line in res.stdout.splitlines()
    ]
    assert len(frames) == 18
    for cols in frames:  # Wireshark's checksum states: 0 bad, 1 good, 2 unverified, 3 absent
        assert "0" not in (every := [v for col in cols for v in col])
        assert "1" in every
        if tunnel.name not in ("vxlan-v6", "ip6ip"):
            assert cols[0][0] == "1"  # the underlay's IPv4 header, rewritten
        if tunnel.name == "vxlan-v6":
            assert cols[1][0] == "1"  # the underlay's UDP checksum, required over IPv6
        if tunnel.name == "gre-csum-key-seq":
            assert cols[3] == ["1"]


def test_the_decrypted_copy_says_why_a_tunneled_packet_is_kept(tmp_path: Path) -> None:
    """A packet inside a tunnel that ``--decrypted`` cannot rebuild (here one whose ICV
    fails) stays as captured, and the pcapng comment says why, as without a tunnel."""
    sc = _tunneled(scenario("corrupt-icv"), TUNNELS["vxlan"])
    plain_comments = [
        p.comments
        for p in read_pcapng(decrypt(tmp_path / "p", scenario("corrupt-icv"), ".pcapng"))[1]
    ]
    _, packets = read_pcapng(decrypt(tmp_path / "t", sc, ".pcapng"))
    assert [p.comments for p in packets] == plain_comments


def test_a_tunnel_behind_an_ah_is_kept_as_captured(tmp_path: Path) -> None:
    """IP in IP behind an IPv4 AH (RFC 4302): the analysis opens the tunnel through the
    AH, but an AH's ICV could not cover the rebuilt packet, so ``--decrypted`` keeps the
    frame, saying why (as it leaves an AH out in transport mode)."""
    sc = scenario("encauth")
    ah = bytes([4, 4, 0, 0]) + (0x1234).to_bytes(4) + (1).to_bytes(4) + bytes(12)  # 24 bytes
    frames = tuple(
        f._replace(data=MACS + b"\x08\x00" + ipv4(51, ah + f.data[14:])) for f in sc.frames[:4]
    )
    frames = tuple(f._replace(caplen=len(f.data), wirelen=len(f.data)) for f in frames)
    tunneled = replace(sc, frames=frames)
    got = run_frames(tunneled.frames, sc.sas, PER_FRAME).records
    assert [r.carriers for r in got] == ["ipip"] * 4
    assert [r.verdict.value for r in got] == ["ok"] * 4
    _, packets = read_pcapng(decrypt(tmp_path, tunneled, ".pcapng"))
    kept = "espforensics: kept as captured: its ipip tunnel's AH could not cover the inner packet"
    assert [p.comments for p in packets] == [(kept,)] * 4
    assert [p.data for p in packets] == [f.data for f in frames]


@cache
def _decryptable(name: str) -> tuple[tuple[Frame, PacketRecord], ...]:
    """The encauth scenario's ESP frames inside the tunnel ``name``, with their rows."""
    sc = _tunneled(scenario("encauth"), TUNNELS[name])
    rows = run_frames(sc.frames, sc.sas, PER_FRAME).records
    return tuple((f, r) for f, r in zip(sc.frames, rows, strict=True) if r.verdict.value == "ok")


@given(
    st.sampled_from(sorted(TUNNELS)),
    st.integers(0, 300),
    st.integers(14, 90),
    st.binary(min_size=1, max_size=4),
)
@settings(max_examples=400, deadline=None)
def test_damaged_tunnel_headers_leave_the_decrypted_frame_as_captured_or_sound(
    name: str, pick: int, at: int, junk: bytes
) -> None:
    """The row says the frame verified, but the bytes of its tunnels' headers differ
    (``at``: from the underlay's IP header on): ``--decrypted`` keeps it, saying why, or
    rewrites it; it never raises."""
    pairs = _decryptable(name)
    frame, rec = pairs[pick % len(pairs)]
    data = frame.data[:at] + junk + frame.data[at + len(junk) :]
    damaged = frame._replace(data=data)
    decryptor = Decryptor(DecryptionKeys(SaTable(scenario("encauth").sas), "keys"))
    out, comment = decryptor.frame(damaged, rec)
    assert comment.startswith(("espforensics: kept as captured: ", "espforensics: decrypted"))
    assert (out == damaged) == comment.startswith("espforensics: kept as captured: ")


@given(
    st.sampled_from([4, 41, 47, 17]),
    st.sampled_from([b"", b"\x12\xb5", b"\x21\x18", b"\x17\xc1"]),  # UDP to 4789, 8472, 6081
    st.binary(max_size=120),
)
@settings(max_examples=400, deadline=None)
def test_any_bytes_in_a_tunnel_are_a_record(proto: int, port: bytes, rest: bytes) -> None:
    """Whatever follows a tunnel's outer header, the decoder raises only Truncated, never
    points past the datagram, and the frame is one record."""
    payload = b"\x9c\x40" + port + (8 + len(rest)).to_bytes(2) + b"\x00\x00" if port else b""
    under = ipv4(proto, payload + rest)
    with contextlib.suppress(Truncated):
        carried = unwrap(parse_ip(under), under, frozenset({4500}))
        assert carried is None or carried.offset <= len(under)
    rec = _one(MACS + b"\x08\x00" + under)
    assert rec.frame == 1


# The tunnels the steady lane opens itself (engine/wire.py); the others are per frame.
LANE = frozenset({"vxlan", "vxlan-8472", "vxlan-v6", "geneve", "geneve-ip", "gre", "ipip", "ip6ip"})


def _lane(frames: list[Frame]) -> tuple[list[PacketRecord], list[Finding], int]:
    """Records, findings and the frames the steady lane took, in batches of 128."""
    options = Options(batch_frames=128)
    analyzer = FrameAnalyzer(SaTable(bench_sas()), options)
    engine = Engine(analyzer, options)
    try:
        rows = list(engine.iter_rows(frames))
    finally:
        engine.close()
    taken = sum(len(r.frame) for r in rows if isinstance(r, SteadyRows))
    return [rec for row in rows for rec in records_of(row)], analyzer.findings, taken


@pytest.mark.parametrize("tunnel", ALL, ids=str)
def test_the_lane_takes_esp_in_the_tunnels_it_opens(tunnel: Tunnel) -> None:
    """A long transfer inside each tunnel: the steady lane takes what it takes of the
    plain transfer where it opens the tunnel, none where it does not, and the outputs are
    the per-frame path's, rows and findings."""
    plain = list(iter_bench_frames(600))
    frames = [in_tunnel(f, tunnel.name) for f in plain]
    records, findings, taken = _lane(frames)
    reference = run_frames(frames, bench_sas(), PER_FRAME)
    assert (records, findings) == (reference.records, reference.findings)
    assert {r.carriers for r in records} == {tunnel.carriers}
    assert [r.verdict.value for r in records].count("ok") == 600
    lane = tunnel.name in LANE
    assert taken == (_lane(plain)[2] if lane else 0)
    assert taken > 0 or not lane


def test_a_datagram_longer_than_its_tunnel_says_is_not_the_lanes() -> None:
    """The underlay's IPv4 header claims 10 bytes fewer than its VXLAN datagram holds:
    the per-frame path cuts the carried datagram there (``truncated``); the lane must not
    take it, so both lanes agree."""
    frames = [in_tunnel(f, "vxlan") for f in iter_bench_frames(400)]
    for i in range(49, 400, 50):  # bytes 16-17: the underlay's total length, after Ethernet
        data = frames[i].data
        short = (int.from_bytes(data[16:18]) - 10).to_bytes(2)
        frames[i] = frames[i]._replace(data=data[:16] + short + data[18:])
    wire = parse(FrameBatch.of(tuple(frames[:50])), frozenset({4500}))
    assert wire.steady[:49].all() and not wire.steady[49]
    records, findings, _ = _lane(frames)
    reference = run_frames(frames, bench_sas(), PER_FRAME)
    assert (records, findings) == (reference.records, reference.findings)
    assert [r.frame for r in records if r.verdict.value == "truncated"] == list(range(50, 401, 50))
