"""Inner checksums and TFC padding, on the real kernel captures and with faults sealed into them.

The 7.3.4 captures come with an independent decryption (ground-truth.json):
TFC padding per SA and per packet, and each inner checksum. For the faults
(a TCP segment or an inner IPv4 header damaged before encryption, a partial
checksum as checksum offload leaves it) a real 6.1 capture's packet is
decrypted with its real key, changed and sealed again under the same
sequence number and IV, so its ICV verifies: exactly that frame must be
named, by the per-frame path and the steady lane alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from espforensics.analysis import Analysis, analyze
from espforensics.capture import open_capture
from espforensics.capture.writer import write_pcap
from espforensics.crypto import context_for
from espforensics.decode.clear import internet_checksum
from espforensics.decode.inner import (
    INNER_FRAGMENT,
    NATT_TRANSPORT,
    OUTER_EXTENSIONS,
    check_inner,
    pseudo_header,
    unchecked_protocol,
)
from espforensics.keys import load_sas
from espforensics.model.enums import FindingKind, InnerChecksum, Severity
from espforensics.model.evidence import BadChecksums
from espforensics.model.records import Frame
from tests.support import helpers

SHARED = helpers.CAPTURES
TFC = SHARED / "linux-7.3.4" / "tfc-tunnel-6in6"
NETEM = SHARED / "linux-7.3.4" / "netem-duplicate-v4"
TRANSPORT = SHARED / "linux-6.1" / "tcp-transport-v4"
TUNNEL = SHARED / "linux-6.1" / "tcp-tunnel-4in4"
NATT = SHARED / "linux-6.1" / "natt-espinudp-v4"
ESP_AT = 14 + 20  # Ethernet, IPv4 without options
REFERENCE = helpers.PER_FRAME
LANE = helpers.STEADY  # the lane takes most packets of these small captures

A4, B4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])


def _analyze(folder: Path, capture: Path | None = None) -> Analysis:
    """The analysis of a capture with the folder's keys; the steady lane must agree."""
    path = capture or folder / "capture.pcap"
    keys = [folder / "xfrm-state.txt"]
    ref = analyze(path, keys, REFERENCE)
    lane = analyze(path, keys, LANE)
    assert_frame_equal(ref.packets, lane.packets)
    assert ref.summary == lane.summary
    return ref


def _truth(folder: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((folder / "ground-truth.json").read_text())
    return doc


# -- decode/inner.py: one packet at a time -------------------------------------------------


def _udp(payload: bytes, src: bytes, dst: bytes, zero: bool = False) -> bytes:
    seg = (1234).to_bytes(2) + (53).to_bytes(2) + (8 + len(payload)).to_bytes(2) + bytes(2)
    seg += payload
    if zero:
        return seg
    csum = internet_checksum(pseudo_header(src, dst, 17, len(seg)) + seg) or 0xFFFF
    return seg[:6] + csum.to_bytes(2) + seg[8:]


def _ipv4(proto: int, body: bytes, frag: int = 0) -> bytes:
    head = bytearray(20)
    head[0], head[8], head[9] = 0x45, 64, proto
    head[2:4] = (20 + len(body)).to_bytes(2)
    head[6:8] = frag.to_bytes(2)
    head[12:16], head[16:20] = A4, B4
    head[10:12] = internet_checksum(bytes(head)).to_bytes(2)
    return bytes(head) + body


def _icmp_echo() -> bytes:
    msg = bytes([8, 0, 0, 0, 0, 1, 0, 1]) + b"ping"
    return msg[:2] + internet_checksum(msg).to_bytes(2) + msg[4:]


def test_check_inner_on_built_packets() -> None:
    """Each status and detail, with the TFC padding after an inner IP packet."""
    udp = _udp(b"hello", A4, B4)
    cases = [
        ((17, udp, A4, B4, ""), (InnerChecksum.OK, "", None)),
        ((17, _udp(b"hello", A4, B4, zero=True), A4, B4, ""), (InnerChecksum.NONE, "", None)),
        ((17, udp, A4, B4, NATT_TRANSPORT), (InnerChecksum.NOT_CHECKED, NATT_TRANSPORT, None)),
        ((4, _ipv4(17, udp) + bytes(11), b"", b"", ""), (InnerChecksum.OK, "", 11)),
        ((4, _ipv4(1, _icmp_echo()), b"", b"", ""), (InnerChecksum.OK, "", 0)),
        (
            (4, _ipv4(17, udp, frag=0x2000), b"", b"", ""),
            (InnerChecksum.NOT_CHECKED, INNER_FRAGMENT, 0),
        ),
        (
            (4, _ipv4(47, b"gre!"), b"", b"", ""),
            (InnerChecksum.NOT_CHECKED, unchecked_protocol(47), 0),
        ),
        ((59, b"", A4, B4, ""), (InnerChecksum.NONE, "", None)),
    ]
    for args, want in cases:
        assert tuple(check_inner(*args)) == (*want, False), args  # no next header mismatch
    # "hello" ends on an odd byte, the high half of its word (RFC 1071): 0x6f -> 0x6e takes
    # 0x100 from the sum, so the checksum that fits is 0x100 more.
    damaged = udp[:-1] + bytes([udp[-1] ^ 1])
    found = check_inner(17, damaged, A4, B4, "")
    stored = int.from_bytes(udp[6:8])
    assert found.status is InnerChecksum.BAD
    assert found.detail == (
        f"inner UDP checksum {stored:#06x}, {stored + 0x100:#06x} expected:"
        " damaged before encryption"
    )
    bad_header = bytearray(_ipv4(17, udp))
    bad_header[8] = 63  # the TTL after the header checksum was computed
    found = check_inner(4, bytes(bad_header), b"", b"", "")
    assert (found.status, found.detail.split(",")[0]) == (
        InnerChecksum.BAD,
        f"inner IPv4 header checksum {int.from_bytes(bad_header[10:12]):#06x}",
    )
    partial = 0xFFFF ^ internet_checksum(pseudo_header(A4, B4, 17, len(udp)))
    found = check_inner(17, udp[:6] + partial.to_bytes(2) + udp[8:], A4, B4, "")
    assert found.status is InnerChecksum.PARTIAL


@given(st.sampled_from([4, 41, 6, 17, 1, 58, 59, 47]), st.binary(max_size=120), st.booleans())
@settings(max_examples=400, deadline=None)
def test_check_inner_never_raises(nh: int, body: bytes, v6: bool) -> None:
    """Random bytes get a status (what cannot be verified is not_checked), never an error."""
    src, dst = (bytes(16), bytes(15) + b"\x01") if v6 else (A4, B4)
    found = check_inner(nh, body, src, dst, "")
    assert found.status in InnerChecksum
    assert (found.detail == "") == (found.status in (InnerChecksum.OK, InnerChecksum.NONE))


# -- TFC padding: the 7.3.4 tunnel capture -----------------------------------------------


@helpers.needs_captures
def test_tfc_padding_per_sa_is_the_ground_truths() -> None:
    """27 of 147 packets of 0x1001 and all 96 of 0x1002 padded to 1,400 bytes (tfcpad 1400)."""
    result = _analyze(TFC)
    truth = _truth(TFC)
    per_spi = truth["summary"]["per_spi"]
    sas = {sa.spi: sa for sa in result.summary.sas}
    got = {spi: (sa.packets, sa.tfc_packets, sa.tfc_padded_to) for spi, sa in sas.items()}
    assert got == {0x1001: (147, 27, {"1400": 27}), 0x1002: (96, 96, {"1400": 96})}
    for spi, sa in sas.items():
        want = per_spi[f"{spi:#x}"]
        assert (sa.tfc_packets, sa.tfc_bytes) == (want["tfc_packets"], want["tfc_bytes"])
    rows = truth["rows"]
    pkts = result.packets.set_index("frame")
    for frame, row in rows.items():
        if "spi" in row:
            assert pkts.at[int(frame), "tfc_len"] == row["tfc_len"], frame
            assert pkts.at[int(frame), "payload_len"] == row["inner_len"] + row["tfc_len"]


@helpers.needs_captures
def test_tfc_padding_is_in_sas_csv_summary_json_and_the_report(tmp_path: Path) -> None:
    from espforensics.analysis import analyze_to_dir

    out = tmp_path / "out"
    analyze_to_dir(TFC / "capture.pcap", [TFC / "xfrm-state.txt"], out, plots=False)
    sas = pd.read_csv(out / "sas.csv")
    assert sas[["spi_hex", "tfc_packets", "tfc_bytes", "tfc_padded_to"]].values.tolist() == [
        ["0x00001001", 27, 33822, "1400=27"],
        ["0x00001002", 96, 125621, "1400=96"],
    ]
    doc = json.loads((out / "summary.json").read_text())
    assert [(s["tfc_packets"], s["tfc_bytes"], s["tfc_padded_to"]) for s in doc["sas"]] == [
        (27, 33822, {"1400": 27}),
        (96, 125621, {"1400": 96}),
    ]
    report = (out / "report.txt").read_text()
    assert "\n    TFC padding: 27 of 147 packets padded to 1,400 bytes (33,822 bytes)\n" in report
    assert "\n    TFC padding: 96 of 96 packets padded to 1,400 bytes (125,621 bytes)\n" in report
    markdown = (out / "report.md").read_text()
    assert (
        "- SPI 0x00001001: TFC padding: 27 of 147 packets padded to 1,400 bytes (33,822 bytes)\n"
        "- SPI 0x00001002: TFC padding: 96 of 96 packets padded to 1,400 bytes (125,621 bytes)\n"
    ) in markdown
    html = (out / "report.html").read_text()
    assert "<p>SPI 0x00001002: TFC padding: 96 of 96 packets padded to 1,400 bytes" in html


# -- inner checksums of the real captures ---------------------------------------------------


@helpers.needs_captures
@pytest.mark.parametrize("folder", [TFC, NETEM], ids=lambda p: p.name)
def test_inner_checksums_of_the_7_3_4_captures_are_the_ground_truths(folder: Path) -> None:
    result = _analyze(folder)
    truth = _truth(folder)
    pkts = result.packets.set_index("frame")
    for frame, row in truth["rows"].items():
        want = "" if "spi" not in row else "bad" if row.get("inner_checksum_ok") is False else "ok"
        assert pkts.at[int(frame), "inner_checksum"] == want, frame
    bad = {s: v["inner_checksum_bad"] for s, v in truth["summary"]["per_spi"].items()}
    assert bad == {"0x1001": 0, "0x1002": 0}
    assert not [f for f in result.summary.finding_list if f.kind is FindingKind.INNER_CHECKSUM]


@helpers.needs_captures
def test_natt_transport_mode_is_not_checked_and_says_why() -> None:
    """RFC 3948 s3.1.2: NAT-T transport checksums cover addresses a NAT may rewrite."""
    result = _analyze(NATT)
    esp = result.packets[result.packets.verdict == "ok"]
    assert len(esp) == 590
    assert set(esp.inner_checksum) == {"not_checked"}
    assert set(esp.detail) == {NATT_TRANSPORT}
    per_spi = json.loads((NATT / "ground-truth.json").read_text())["frames_per_spi"]
    assert per_spi == {"0x1001": 386, "0x1002": 204}
    assert {f"{sa.spi:#x}": sa.inner_checksums for sa in result.summary.sas} == {
        spi: {"not_checked": n} for spi, n in per_spi.items()
    }


# -- faults sealed into a real capture ----------------------------------------------------


def _frames(folder: Path) -> list[Frame]:
    with open_capture(folder / "capture.pcap") as capture:
        return [f for f in capture if isinstance(f, Frame)]


def _reseal(folder: Path, frame: Frame, change: Callable[[bytearray], bytearray]) -> Frame:
    """``frame`` with its plaintext changed by ``change`` and sealed again (its ICV verifies)."""
    spi = int.from_bytes(frame.data[ESP_AT : ESP_AT + 4])
    (sa,) = [sa for sa in load_sas([folder / "xfrm-state.txt"]) if sa.spi == spi]
    ctx = context_for(sa)
    seq = int.from_bytes(frame.data[ESP_AT + 4 : ESP_AT + 8])
    body = frame.data[ESP_AT + 8 :]
    plain = ctx.open(seq, body[:8], body[8:])
    assert plain is not None
    changed = change(bytearray(plain))
    data = frame.data[: ESP_AT + 8] + body[:8] + ctx.seal(seq, body[:8], bytes(changed))
    return frame._replace(data=data)


def _forge(
    folder: Path, tmp_path: Path, number: int, change: Callable[[bytearray], bytearray]
) -> Path:
    frames = _frames(folder)
    frames[number - 1] = _reseal(folder, frames[number - 1], change)
    path = tmp_path / "forged.pcap"
    with path.open("wb") as fh:
        write_pcap(fh, frames, linktype=1, nanosecond=False)
    return path


def _esp_frames(folder: Path, spi: int) -> list[int]:
    return [
        f.number
        for f in _frames(folder)
        if f.data[12:14] == b"\x08\x00"
        and f.data[23] == 50
        and int.from_bytes(f.data[ESP_AT : ESP_AT + 4]) == spi
    ]


@helpers.needs_captures
def test_a_tcp_segment_damaged_before_encryption_is_named_on_its_frame(tmp_path: Path) -> None:
    """The netem ``corrupt`` case: the ICV verifies, the TCP checksum does not."""
    number = _esp_frames(TRANSPORT, 0x1001)[200]  # deep in the lane's steady state

    seen: dict[str, int] = {}

    def damage(plain: bytearray) -> bytearray:
        plain[30] ^= 0x40  # a byte of the TCP header's options or data (after 20 bytes)
        seg = bytes(plain[: len(plain) - 2 - plain[-2]])  # before padding and trailer
        pseudo = pseudo_header(bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2]), 6, len(seg))
        seen["stored"] = int.from_bytes(seg[16:18])
        seen["expected"] = internet_checksum(pseudo + seg[:16] + bytes(2) + seg[18:])
        return plain

    result = _analyze(TRANSPORT, _forge(TRANSPORT, tmp_path, number, damage))
    # Byte 30 is the high half of its 16-bit word: the sum moves by 0x4000 (RFC 1071).
    assert (seen["stored"] - seen["expected"]) % 0xFFFF in (0x4000, 0xFFFF - 0x4000)
    pkts = result.packets
    flagged = pkts[pkts.inner_checksum != "ok"]
    assert flagged[flagged.verdict == "ok"].frame.tolist() == [number]
    row = pkts[pkts.frame == number].iloc[0]
    assert (row.verdict, row.inner_checksum, row.detail) == (
        "ok",
        "bad",
        f"inner TCP checksum {seen['stored']:#06x}, {seen['expected']:#06x} expected:"
        " damaged before encryption",
    )
    (finding,) = [f for f in result.summary.finding_list if f.kind is FindingKind.INNER_CHECKSUM]
    assert (finding.severity, finding.spi, finding.frames, finding.count) == (
        Severity.HIGH,
        0x1001,
        (number,),
        1,
    )
    assert f"First: frame {number} (seq " in finding.detail
    ev = finding.evidence  # typed: the status, and the first packet's words the detail ends with
    assert isinstance(ev, BadChecksums) and ev.status is InnerChecksum.BAD
    assert ev.first.startswith(f"frame {number} (seq ") and finding.detail.endswith(ev.first)
    assert {sa.spi: sa.inner_checksums.get("bad", 0) for sa in result.summary.sas} == {
        0x1001: 1,
        0x1002: 0,
    }


@helpers.needs_captures
def test_a_partial_checksum_is_told_apart_from_damage(tmp_path: Path) -> None:
    """CHECKSUM_PARTIAL: the stored value is the folded pseudo-header sum, not a checksum."""
    number = _esp_frames(TRANSPORT, 0x1001)[150]
    src, dst = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])  # 0x1001's, in xfrm-state.txt
    frames = _frames(TRANSPORT)
    assert frames[number - 1].data[26:34] == src + dst

    def offload(plain: bytearray) -> bytearray:
        seg_len = len(plain) - 2 - plain[-2]  # before the pad bytes, pad length, next header
        partial = 0xFFFF ^ internet_checksum(pseudo_header(src, dst, 6, seg_len))
        plain[16:18] = partial.to_bytes(2)
        return plain

    result = _analyze(TRANSPORT, _forge(TRANSPORT, tmp_path, number, offload))
    row = result.packets[result.packets.frame == number].iloc[0]
    assert row.inner_checksum == "partial"
    assert "is the pseudo-header sum alone (CHECKSUM_PARTIAL" in row.detail
    (finding,) = [f for f in result.summary.finding_list if f.kind is FindingKind.INNER_CHECKSUM]
    assert (finding.severity, finding.frames, finding.count) == (Severity.MEDIUM, (number,), 1)
    assert "not damage" in finding.detail
    ev = finding.evidence
    assert isinstance(ev, BadChecksums) and ev.status is InnerChecksum.PARTIAL


@helpers.needs_captures
def test_an_inner_ipv4_header_damaged_before_encryption_is_named(tmp_path: Path) -> None:
    """Tunnel mode: the inner IPv4 header's own checksum (RFC 791 s3.1) is verified too."""
    number = _esp_frames(TUNNEL, 0x1001)[100]

    def ttl(plain: bytearray) -> bytearray:
        plain[8] -= 1  # the inner TTL, its header checksum left as it was
        return plain

    result = _analyze(TUNNEL, _forge(TUNNEL, tmp_path, number, ttl))
    pkts = result.packets
    assert pkts[pkts.inner_checksum == "bad"].frame.tolist() == [number]
    row = pkts[pkts.frame == number].iloc[0]
    assert row.detail.startswith("inner IPv4 header checksum 0x")
    (finding,) = [f for f in result.summary.finding_list if f.kind is FindingKind.INNER_CHECKSUM]
    assert (finding.severity, finding.frames) == (Severity.HIGH, (number,))


# -- the steady lane's columns against decode/inner.py, row by row ---------------------------


def _sealed_form(payload: bytes, nh: int) -> bytes:
    """``payload`` with the RFC 4303 s2.4 padding and trailer, 4-byte aligned."""
    pad = (-(len(payload) + 2)) % 4
    return payload + bytes(range(1, pad + 1)) + bytes([pad, nh])


def _tcp(src: bytes, dst: bytes, data: bytes, checksum: int | None = None) -> bytes:
    seg = bytearray(20 + len(data))
    seg[0:4] = (40000).to_bytes(2) + (5201).to_bytes(2)
    seg[12] = 5 << 4
    seg[20:] = data
    if checksum is None:
        checksum = internet_checksum(pseudo_header(src, dst, 6, len(seg)) + bytes(seg))
    seg[16:18] = checksum.to_bytes(2)
    return bytes(seg)


def test_the_lane_columns_are_check_inners_and_it_leaves_bad_and_partial_alone() -> None:
    """engine/plain.py's vectorised sums give what decode/inner.py gives, row by row."""
    import numpy as np

    from espforensics.checks.bulk import Outer
    from espforensics.engine.plain import decode_plaintexts

    partial = 0xFFFF ^ internet_checksum(pseudo_header(A4, B4, 6, 20 + 7))
    v6_src, v6_dst = bytes(15) + b"\1", bytes(15) + b"\2"
    inner6 = bytearray(40)
    inner6[0], inner6[6], inner6[7] = 0x60, 17, 64
    udp6 = _udp(b"over six", v6_src, v6_dst)
    inner6[4:6] = len(udp6).to_bytes(2)
    inner6[8:24], inner6[24:40] = v6_src, v6_dst
    rows = [  # (next header, payload, NAT-T, the lane takes it)
        (6, _tcp(A4, B4, b"payload"), False, True),
        (6, _tcp(A4, B4, b"payload!"), True, True),  # NAT-T transport: not_checked
        (17, _udp(b"zero", A4, B4, zero=True), False, True),
        (4, _ipv4(17, _udp(b"tunnel", A4, B4)) + bytes(100), False, True),  # TFC 100
        (4, _ipv4(17, _udp(b"frag", A4, B4), frag=0x2000), False, True),
        (4, _ipv4(47, b"gre!"), False, True),
        (41, bytes(inner6) + udp6 + bytes(37), False, True),  # TFC 37, odd length
        (4, _ipv4(1, _icmp_echo()), False, True),
        (59, bytes(20), False, True),  # a dummy packet (RFC 4303 s2.6), 16 bytes or more
        (6, _tcp(A4, B4, b"damaged", checksum=0x1234), False, False),
        (6, _tcp(A4, B4, b"offload", checksum=partial), False, False),
    ]
    plains = [_sealed_form(p, nh) for nh, p, _, _ in rows]
    m = len(plains)
    outer_words = sum(int.from_bytes((A4 + B4)[k : k + 2]) for k in range(0, 8, 2))
    outer = Outer(
        np.full(m, outer_words, np.int64),
        np.ones(m, np.bool_),
        np.array([natt for _, _, natt, _ in rows]),
    )
    names = np.array(["10.0.0.1"] * m, dtype=object), np.array(["10.0.0.2"] * m, dtype=object)
    cols = decode_plaintexts(
        plains, *names, np.full((m, 16), 0xEE, np.uint8), np.zeros(m, np.bool_), outer
    )
    assert cols.plain.tolist() == [takes for _, _, _, takes in rows]
    for i, (nh, payload, natt, takes) in enumerate(rows):
        want = check_inner(nh, payload, A4, B4, NATT_TRANSPORT if natt else "")
        if not takes:
            assert want.status in (InnerChecksum.BAD, InnerChecksum.PARTIAL)
            continue
        tfc = int(cols.tfc_len[i])
        got = (cols.checksum[i], cols.checksum_detail[i], None if tfc < 0 else tfc)
        assert got == (want.status.value, want.detail, want.tfc_len), i
    statuses = [str(s) for s, (_, _, _, t) in zip(cols.checksum, rows, strict=True) if t]
    nc = "not_checked"
    assert statuses == ["ok", nc, "none", "ok", nc, nc, "ok", "ok", "none"]
    assert cols.tfc_len[:9].tolist() == [-1, -1, -1, 100, 0, 0, 37, 0, -1]


def test_only_a_routing_header_keeps_a_transport_checksum_unchecked() -> None:
    """outer-headers (docs/synth.md): behind hop-by-hop + routing + destination options the
    pseudo-header's destination is the routing header's last address (RFC 8200 s8.1), so the
    checksum is not checked and says why; behind hop-by-hop only it is checked (it was not:
    every IPv6 extension header counted as a routing header)."""
    sc = helpers.scenario("outer-headers")
    run = helpers.run_frames(sc.frames, sc.sas, helpers.PER_FRAME)
    seen = [(r.frame, r.esp_offset, r.inner_checksum, r.detail) for r in run.records if r.spi]
    assert seen == [
        *[(n, 28, InnerChecksum.OK, "") for n in range(1, 5)],
        *[(n, 64, InnerChecksum.NOT_CHECKED, OUTER_EXTENSIONS) for n in range(5, 9)],
        (9, 48, InnerChecksum.OK, ""),
        (10, 48, InnerChecksum.OK, ""),
        (11, 64, InnerChecksum.NOT_CHECKED, NATT_TRANSPORT),
        (12, 64, InnerChecksum.NOT_CHECKED, NATT_TRANSPORT),
    ]


# -- a next header that names another protocol than the payload (issue 34) ----------------


def _ipv6(proto: int, body: bytes, src: bytes, dst: bytes) -> bytes:
    return b"\x60\x00\x00\x00" + len(body).to_bytes(2) + bytes([proto, 64]) + src + dst + body


S6, D6 = bytes(15) + b"\1", bytes(15) + b"\2"
IN4_UDP = _ipv4(17, _udp(b"draft-mcgrew-gcm-test", A4, B4))
IN6_UDP = _ipv6(17, _udp(b"over six", S6, D6), S6, D6)


def _mismatch(nh: int, what: str) -> tuple[InnerChecksum, str, None, bool]:
    named = {1: "ICMP", 4: "IPv4-in-IP", 6: "TCP", 17: "UDP", 41: "IPv6-in-IP"}[nh]
    why = f"next header {nh} ({named}) over {what}, not the protocol it names"
    return (InnerChecksum.NOT_CHECKED, "inner checksum not checked: " + why, None, True)


def test_check_inner_names_a_next_header_that_is_not_the_payload() -> None:
    """A whole IP packet under a transport protocol's number (draft-mcgrew-gcm-test's
    vectors: next header 1 over IPv4/UDP), an IP packet of the other version, or a
    transport segment under 4 or 41: the mismatch, never "damaged before encryption"."""
    udp4 = "a whole IPv4 packet (udp 10.0.0.1 -> 10.0.0.2)"
    udp6 = "a whole IPv6 packet (udp ::1 -> ::2)"
    cases = [
        ((1, IN4_UDP, A4, B4, ""), _mismatch(1, udp4)),
        ((6, IN4_UDP + bytes(3), A4, B4, NATT_TRANSPORT), _mismatch(6, udp4)),
        ((17, IN6_UDP, S6, D6, ""), _mismatch(17, udp6)),
        ((41, IN4_UDP, b"", b"", ""), _mismatch(41, udp4)),
        ((4, IN6_UDP, b"", b"", ""), _mismatch(4, udp6)),
        (
            (4, _tcp(A4, B4, b"x"), A4, B4, ""),
            _mismatch(4, "a TCP segment whose checksum verifies"),
        ),
        (
            (41, _udp(b"x", S6, D6), S6, D6, ""),
            _mismatch(41, "a UDP segment whose checksum verifies"),
        ),
    ]
    for args, want in cases:
        assert tuple(check_inner(*args)) == want, args
    # What the bytes do not prove stays as it was: an IPv4 header whose checksum fails
    # under next header 1 is checked as ICMP; a segment under 4 behind NAT-T (its
    # addresses untrusted) is an inner IP version that is not the next header's.
    bad = bytearray(IN4_UDP)
    bad[8] ^= 1  # the TTL: the header checksum no longer verifies
    found = check_inner(1, bytes(bad), A4, B4, "")
    assert (found.status, found.mismatch) == (InnerChecksum.BAD, False)
    assert found.detail.startswith("inner ICMP checksum ")
    found = check_inner(4, _tcp(A4, B4, b"x"), A4, B4, NATT_TRANSPORT)
    assert found == (
        InnerChecksum.NOT_CHECKED,
        "inner checksum not checked: the inner IP version is not the next header's",
        None,
        False,
    )
    # An IPv6-looking payload under next header 17 whose inner checksum fails is no proof.
    wrong = IN6_UDP[:-1] + bytes([IN6_UDP[-1] ^ 1])
    assert not check_inner(17, wrong, S6, D6, "").mismatch


def _mcgrew_capture(mismatched: tuple[int, ...]) -> Any:
    """A transport-mode SA sending IPv4/UDP packets under next header 4 (as an ipip device
    over transport mode would), except ``mismatched`` ones (0-based) under next header 1."""
    import random

    from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, ip, sa_pair
    from espforensics.synth.packets import ip_packet, udp_bytes

    a, b = sa_pair(random.Random(34), (0x4321, 0x4322), V4_A, V4_B)
    builder = CaptureBuilder(34)
    src, dst = ip("192.168.1.2"), ip("192.168.1.1")
    for i in range(200):
        inner = ip_packet(src, dst, 17, udp_bytes(src, dst, 2715, 61782, bytes(40 + i % 9)))
        builder.emit_ip(*a.send(inner, 1 if i in mismatched else 4))
    return builder.scenario("mcgrew", "next header 1 over IPv4/UDP", (a.sealer, b.sealer))


def test_a_whole_ip_packet_under_next_header_1_is_named_as_a_mismatch() -> None:
    """The per-frame path and the steady lane alike: the frames are named, their checksum is
    not run as ICMP's, and no inner_checksum finding says they were damaged."""
    from espforensics.analyzer.frame import FrameAnalyzer
    from espforensics.engine import Engine, SteadyRows
    from espforensics.keys import SaTable

    mismatched = (0, 1, 150, 151, 199)
    sc = _mcgrew_capture(mismatched)
    runs = []
    for options in (helpers.PER_FRAME, helpers.STEADY):
        analyzer = FrameAnalyzer(SaTable(sc.sas), options, "mcgrew")
        engine = Engine(analyzer, options)
        try:
            rows = list(engine.iter_rows(sc.frames))
        finally:
            engine.close()
        runs.append(([r for row in rows for r in helpers.records_of(row)], analyzer.findings))
        taken = {int(n) for row in rows if isinstance(row, SteadyRows) for n in row.frame}
        if options is helpers.STEADY:  # the lane took most frames, and none named
            assert len(taken) > 50 and not taken & {n + 1 for n in mismatched}
    (records, findings), (lane_records, lane_findings) = runs
    assert records == lane_records and findings == lane_findings
    named = [r.frame for r in records if r.detail.startswith("inner checksum not checked: next")]
    assert named == [n + 1 for n in mismatched]
    first = records[0]
    assert (first.verdict, first.next_header, first.inner_checksum) == ("ok", 1, "not_checked")
    assert first.detail == _mismatch(1, "a whole IPv4 packet (udp 192.168.1.2 -> 192.168.1.1)")[1]
    assert {r.inner_checksum for r in records if r.frame - 1 not in mismatched} == {"ok"}
    [finding] = findings
    assert (finding.kind, finding.severity) == (FindingKind.NEXT_HEADER_MISMATCH, Severity.MEDIUM)
    assert (finding.spi, list(finding.frames), finding.count) == (0x4321, [1, 2, 151, 152, 200], 5)
    assert finding.detail.endswith(
        "First: frame 1 (seq 1): next header 1 (ICMP) over a whole IPv4 packet "
        "(udp 192.168.1.2 -> 192.168.1.1), not the protocol it names"
    )
