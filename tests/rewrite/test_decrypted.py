"""``analyze --decrypted``: each verified ESP packet becomes the packet it carried.

The expected inner bytes come from an independent decryption in this file
(``cryptography``'s AESGCM with the RFC 4106 nonce and AAD, not
espforensics.crypto) at the offset and sequence number the scenario's
truth gives; headers are checked with dpkt (protocol, lengths, IPv4 and
TCP checksums). Frames that are not decrypted must be byte-identical to
the input. With tshark installed, the inner TCP streams must reassemble:
per stream and direction the segments are contiguous and their checksums
good.
"""

from __future__ import annotations

import itertools
import shutil
import struct
import subprocess
from collections import defaultdict
from pathlib import Path

import dpkt
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from typer.testing import CliRunner

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture, write_pcap, write_pcapng
from espforensics.cli import app
from espforensics.keys import SaTable, SecurityAssociation
from espforensics.model.enums import Verdict
from espforensics.model.records import Frame
from espforensics.rewrite import CaptureCopies
from espforensics.synth import Scenario, build_scenario, write_scenario
from espforensics.synth.truth import FrameTruth
from tests.rewrite.test_annotate import read_pcapng
from tests.support import helpers

runner = CliRunner()
TSHARK = shutil.which("tshark")
ETH = 14


def decrypt(tmp: Path, sc: Scenario, suffix: str = ".pcap", keys: bool = True) -> Path:
    files = write_scenario(sc, tmp / "in")
    target = tmp / f"decrypted{suffix}"
    analyze_to_dir(
        files["capture"],
        SaTable(sc.sas if keys else ()),
        tmp / "out",
        plots=False,
        copies=CaptureCopies(decrypted=target),
    )
    return target


def frames_of(path: Path) -> list[Frame]:
    with open_capture(path) as cap:
        return [f for f in cap if isinstance(f, Frame)]


def sa_of(sc: Scenario, truth: FrameTruth) -> SecurityAssociation:
    return next(sa for sa in sc.sas if sa.spi == truth.spi)


def plaintext(sc: Scenario, frame: Frame, truth: FrameTruth) -> tuple[bytes, int]:
    """Payload and next header, decrypted here (RFC 4106 s4-s5), for an ESP frame's truth."""
    sa = sa_of(sc, truth)
    assert sa.algorithm == "rfc4106(gcm(aes))" and sa.icv_bits == 128
    assert truth.esp_offset is not None and truth.seq64 is not None
    key = sa.key.reveal()
    esp = frame.data[ETH + truth.esp_offset :]
    spi, seq = struct.unpack(">II", esp[:8])
    for hi in (truth.seq64 >> 32, (truth.seq64 >> 32) + 1):  # esn_mismatch: sealed with hi+1
        aad = struct.pack(">III", spi, hi, seq) if sa.esn else esp[:8]
        try:
            plain = AESGCM(key[:-4]).decrypt(key[-4:] + esp[8:16], esp[16:], aad)
        except InvalidTag:
            continue
        pad_len, nh = plain[-2], plain[-1]
        return plain[: len(plain) - 2 - pad_len], nh
    raise AssertionError(f"frame {frame.number} does not decrypt")


def assert_ip_header_sound(packet: bytes, nh: int) -> None:
    if packet[0] >> 4 == 4:
        ip = dpkt.ip.IP(packet)
        assert (ip.p, ip.len) == (nh, len(packet))
        head = bytearray(packet[: ip.hl * 4])
        head[10:12] = b"\x00\x00"
        assert dpkt.in_cksum(bytes(head)) == ip.sum
    else:
        ip6 = dpkt.ip6.IP6(packet)
        assert (ip6.nxt, ip6.plen) == (nh, len(packet) - 40)


def tcp_checksum_good(inner: bytes) -> bool:
    src, dst, segment = inner[12:16], inner[16:20], inner[20:]
    pseudo = src + dst + struct.pack(">BBH", 0, 6, len(segment))
    return bool(dpkt.in_cksum(pseudo + segment) == 0)


@pytest.mark.parametrize("name", ["ipv4-transport-tcp", "ipv6-tunnel", "natt", "kernel-gso-v4"])
def test_each_verified_packet_is_its_inner_packet(tmp_path: Path, name: str) -> None:
    sc = build_scenario(name, seed=1)
    target = decrypt(tmp_path, sc)
    with target.open("rb") as fh:
        stamps = [ts for ts, _ in dpkt.pcap.Reader(fh)]
    out = frames_of(target)
    assert len(out) == len(stamps) == len(sc.frames)
    assert [f.ts_ns for f in out] == [f.ts_ns for f in sc.frames]
    assert [int(ts * 1_000_000_000) for ts in stamps] == [f.ts_ns for f in sc.frames]  # Decimal
    inner_addresses = set()
    for new, old, truth in zip(out, sc.frames, sc.truth, strict=True):
        if truth.verdict not in (Verdict.OK, Verdict.ESP_MISPLACED):
            assert new == old, new.number
            continue
        payload, nh = plaintext(sc, old, truth)
        packet = new.data[ETH:]
        assert new.data[:12] == old.data[:12] and new.caplen == new.wirelen == len(new.data)
        if sa_of(sc, truth).mode == "tunnel":
            if nh == 59:  # a dummy packet: nothing to show
                assert new == old
                continue
            assert packet == payload[: len(packet)] and len(packet) >= 20
            assert_ip_header_sound(packet, packet[9] if packet[0] >> 4 == 4 else packet[6])
            continue
        assert_ip_header_sound(packet, nh)
        chain = (old.data[ETH] & 0x0F) * 4 if old.data[ETH] >> 4 == 4 else 40
        inner = packet[chain:]
        if truth.verdict is Verdict.ESP_MISPLACED:  # the GSO layout, rebuilt
            assert inner[20:] == payload
            assert inner[:4].hex(" ") == truth.leaked_hex
            assert tcp_checksum_good(inner)
            assert (inner[12:16], inner[16:20]) in inner_addresses
        else:
            assert inner == payload
            if nh == 4:
                inner_addresses.add((inner[12:16], inner[16:20]))


def test_esn_mismatch_is_decrypted_with_the_high_half_that_verified(tmp_path: Path) -> None:
    sc = build_scenario("esn-fault-v4", seed=1)
    target = decrypt(tmp_path, sc, ".pcapng")
    _, packets = read_pcapng(target)
    (truth,) = [t for t in sc.truth if t.verdict is Verdict.ESN_MISMATCH]
    assert truth.seq64 is not None
    verified = truth.seq64 + (1 << 32)
    pkt = packets[truth.frame - 1]
    assert pkt.comments == (
        f"espforensics: decrypted from frame {truth.frame}: ESP SPI {truth.spi:#010x} "
        f"seq {verified} (esn_mismatch)",
    )
    payload, nh = plaintext(sc, sc.frames[truth.frame - 1], truth)
    assert pkt.data[ETH + 20 :] == payload
    assert_ip_header_sound(pkt.data[ETH:], nh)


def test_bad_trailers_and_fragments_stay_as_they_were(tmp_path: Path) -> None:
    sc = build_scenario("bad-trailer", seed=1)
    _, packets = read_pcapng(decrypt(tmp_path / "bt", sc, ".pcapng"))
    kept = [
        p.comments[0]
        for p, t in zip(packets, sc.truth, strict=True)
        if t.verdict is Verdict.BAD_TRAILER
    ]
    assert len(kept) == 6
    assert all(c.startswith("espforensics: kept as captured: the payload's end") for c in kept)
    for p, f, t in zip(packets, sc.frames, sc.truth, strict=True):
        assert (p.data == f.data) == (t.verdict is not Verdict.OK)
    sc = build_scenario("fragments-v4", seed=1)
    out = frames_of(decrypt(tmp_path / "frag", sc))
    for new, old, truth in zip(out, sc.frames, sc.truth, strict=True):
        assert (new == old) == (truth.fragments is not None or truth.verdict is not Verdict.OK)


def test_secrets_block_keys_decrypt_and_are_not_copied(tmp_path: Path) -> None:
    sc = build_scenario("pcapng-dsb", seed=1)
    target = decrypt(tmp_path, sc, ".pcapng", keys=False)
    types, packets = read_pcapng(target)
    assert 0x0A not in types
    assert sum(p.comments[0].startswith("espforensics: decrypted") for p in packets) == 20


def test_link_types_a_pcap_cannot_mix_are_one_line(tmp_path: Path) -> None:
    sc = build_scenario("link-all", seed=1)
    files = write_scenario(sc, tmp_path / "in")
    args = ["analyze", str(files["capture"]), "--sa", str(files["keys"]), "--no-plots", "-q"]
    target = tmp_path / "d.pcap"
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "o1"), "--decrypted", str(target)])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"espforensics: error: {target}: frame ")
    assert res.stderr.endswith(": a pcap holds one; name the file .pcapng\n")
    assert len(res.stderr.splitlines()) == 1 and not target.exists()
    assert not Path(f"{target}.partial").exists()
    target = tmp_path / "d.pcapng"
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "o2"), "--decrypted", str(target)])
    assert res.exit_code == 0, res.stderr
    _, packets = read_pcapng(target)
    linktypes = {p.linktype for p in packets}
    assert linktypes == set(sc.linktypes)
    decrypted = [p for p in packets if p.comments]
    assert len(decrypted) == sc.verdict_counts()["ok"]
    assert all(
        c.startswith("espforensics: decrypted from frame ") for p in decrypted for c in p.comments
    )


def test_a_frame_a_copy_cannot_hold_is_one_line_naming_the_copy(tmp_path: Path) -> None:
    """A capture may hold what a copy's format cannot: a timestamp past pcap's 32-bit
    seconds (year 2106), a pcap link type past pcapng's 16 bits (the reserved bits of the
    pcap header's field, kept as libpcap keeps them). The copy is refused in one line
    naming it and the frame, exit 2; the analysis's own outputs are written."""
    sc = build_scenario("example", seed=1)
    files = write_scenario(sc, tmp_path / "in")
    late = [f._replace(ts_ns=f.ts_ns + (1 << 33) * 10**9) for f in sc.frames]  # 2242
    pcapng = tmp_path / "late.pcapng"
    with pcapng.open("wb") as stream:
        write_pcapng(stream, late, linktypes=[1])
    odd = tmp_path / "odd.pcap"
    with odd.open("wb") as stream:
        write_pcap(stream, [f._replace(linktype=0x3FFFFFF) for f in sc.frames], linktype=0x3FFFFFF)
    cases = [
        (
            pcapng,
            "--decrypted",
            "d.pcap",
            f"frame 1: timestamp {late[0].ts_ns} ns outside pcap's range",
        ),
        (
            odd,
            "--annotate",
            "a.pcapng",
            "frame 1: link type 67108863 does not fit pcapng's 16 bits",
        ),
    ]
    for n, (capture, option, name, why) in enumerate(cases):
        target, out = tmp_path / name, tmp_path / f"out{n}"
        args = ["analyze", str(capture), "--sa", str(files["keys"]), "--no-plots", "-q"]
        res = runner.invoke(app, [*args, "--out", str(out), option, str(target)])
        assert res.exit_code == 2
        assert res.stderr == f"espforensics: error: {target}: {why}\n"
        assert not target.exists() and not Path(f"{target}.partial").exists()
        assert (out / "summary.json").exists()
    target = tmp_path / "d.pcapng"  # pcapng's 64-bit count of nanoseconds holds it
    res = runner.invoke(
        app,
        [
            *args[:1],
            str(pcapng),
            *args[2:],
            "--out",
            str(tmp_path / "o"),
            "--decrypted",
            str(target),
        ],
    )
    assert res.exit_code == 0, res.stderr
    assert [f.ts_ns for f in frames_of(target)] == [f.ts_ns for f in late]


def _tshark_tcp(path: Path) -> list[list[str]]:
    out = subprocess.run(
        [str(TSHARK), "-r", str(path), "-o", "tcp.check_checksum:TRUE", "-Y", "tcp",
         "-T", "fields", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.seq",
         "-e", "tcp.len", "-e", "tcp.checksum.status"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [line.split("\t") for line in out.splitlines()]


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
@pytest.mark.parametrize("name", ["ipv4-transport-tcp", "ipv6-tunnel", "kernel-gso-v4"])
def test_tshark_reassembles_the_inner_tcp_streams(tmp_path: Path, name: str) -> None:
    sc = build_scenario(name, seed=1)
    rows = _tshark_tcp(decrypt(tmp_path, sc))
    esp_tcp = [t for t in sc.truth if t.verdict in (Verdict.OK, Verdict.ESP_MISPLACED)]
    assert rows and len(rows) <= len(esp_tcp)
    assert {r[4] for r in rows} == {"1"}  # every TCP checksum good
    flows: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for stream, port, seq, length, _ in rows:
        if int(length):
            flows[(stream, port)].append((int(seq), int(length)))
    assert flows
    for segments in flows.values():
        segments.sort()
        for (at, size), (after, _) in itertools.pairwise(segments):
            assert at + size == after  # contiguous: nothing lost, nothing doubled
        first, (last, last_len) = segments[0][0], segments[-1]
        assert last + last_len - first == sum(n for _, n in segments)
    if name == "kernel-gso-v4":  # the 12 misplaced packets are the bulk data: 12 x 1400 bytes
        assert max(sum(n for _, n in s) for s in flows.values()) >= 12 * 1400


REAL = helpers.CAPTURES / "linux-6.1"


@helpers.needs_captures
def test_real_gso_capture_decrypts_every_packet(tmp_path: Path) -> None:
    """linux-6.1 ip6tnl over a transport SA: 593 ok and 94 misplaced packets, all rebuilt."""
    folder = REAL / "ip6tnl-transport-tso-on"
    target = tmp_path / "d.pcap"
    analyze_to_dir(
        folder / "capture.pcap",
        [folder / "xfrm-state.txt"],
        tmp_path / "o",
        plots=False,
        copies=CaptureCopies(decrypted=target),
    )
    before, after = frames_of(folder / "capture.pcap"), frames_of(target)
    assert [f.ts_ns for f in after] == [f.ts_ns for f in before]
    changed = [new for new, old in zip(after, before, strict=True) if new != old]
    assert len(changed) == 593 + 94 == len(before) - 3
    tcp4 = 0
    for frame in changed:
        ip6 = dpkt.ip6.IP6(frame.data[ETH:])
        assert ip6.nxt in (4, 41) and ip6.plen == len(frame.data) - ETH - 40  # no ESP left
        inner = frame.data[ETH + 40 :]
        assert_ip_header_sound(inner, inner[9] if ip6.nxt == 4 else inner[6])
        if ip6.nxt == 4 and inner[9] == 6:
            assert tcp_checksum_good(inner)
            tcp4 += 1
    assert tcp4 >= 94  # the misplaced ones are the bulk TCP data
