"""The real Linux 6.1 kernel captures in ../shared/captures, with their ground truth.

Clean captures: every ESP packet ``ok``, no finding above ``info``. The
ip6tnl TSO-on capture: exactly the frames the patch's tcpdump filter
selects are ``esp_misplaced``, each with the 4 clear bytes ``45 00 LL LL``.
The cbc(aes) capture with its key file edited to a cipher, or an HMAC, this
version does not open: every ICV still verified, or every packet decrypted.
"""

from __future__ import annotations

from pathlib import Path

import dpkt
import pytest

from espforensics import Analysis, analyze
from espforensics.model.enums import FindingKind, Severity
from espforensics.model.options import Options
from tests.support.helpers import analyze_real, needs_captures, real_capture

CLEAN = [
    "ip6tnl-transport-tso-off",
    "tcp-transport-v4",
    "tcp-tunnel-4in4",
    "natt-espinudp-v4",
    "cbc-aes-hmac-sha256-v4",  # cbc(aes) + hmac(sha256) 128: RFC 3602, RFC 4868
]
pytestmark = needs_captures


def _seed_filter_frames(path: Path) -> list[int]:
    """Frames matching `ip6 proto 50 and ip6[56:2] = 0x4500 and ip6[60:4] = 0x1001`, by hand."""
    frames = []
    with path.open("rb") as fh:
        for n, (_ts, buf) in enumerate(dpkt.pcap.Reader(fh), 1):
            ip6 = buf[14:]
            if (
                buf[12:14] == b"\x86\xdd"
                and ip6[6] == 50
                and ip6[56:58] == b"\x45\x00"
                and ip6[60:64] == b"\x00\x00\x10\x01"
            ):
                frames.append(n)
    return frames


@pytest.mark.parametrize("name", [*CLEAN, "ip6tnl-transport-tso-on"])
def test_one_row_per_frame_and_esp_counts(name: str, lane: Options) -> None:
    result, truth = analyze_real(f"linux-6.1/{name}", lane), real_capture(f"linux-6.1/{name}").truth
    packets = result.packets
    assert list(packets["frame"]) == list(range(1, int(truth["frames"]) + 1))
    assert result.summary.esp_packets == truth["esp_frames"]
    per_spi = {f"{sa.spi:#x}": sa.packets for sa in result.summary.sas}
    assert per_spi == truth["frames_per_spi"]
    assert (packets["proto"] == "esp-udp").sum() == truth.get("esp_in_udp_frames", 0)


@pytest.mark.parametrize("name", CLEAN)
def test_clean_captures_verify_and_find_nothing(name: str, lane: Options) -> None:
    result = analyze_real(f"linux-6.1/{name}", lane)
    esp = result.packets[result.packets["proto"] != "other"]
    assert set(esp["verdict"]) == {"ok"}
    assert result.summary.findings[FindingKind.CLEARTEXT_LEAK] == 0  # measured false positives: 0
    serious = [f for f in result.summary.finding_list if f.severity is not Severity.INFO]
    assert serious == []


def test_tso_on_misplaced_packets_are_exactly_the_filter_matches(lane: Options) -> None:
    result, truth = (
        analyze_real("linux-6.1/ip6tnl-transport-tso-on", lane),
        real_capture("linux-6.1/ip6tnl-transport-tso-on").truth,
    )
    packets = result.packets
    misplaced = packets[packets["verdict"] == "esp_misplaced"]
    expected = _seed_filter_frames(real_capture("linux-6.1/ip6tnl-transport-tso-on").pcap)
    assert (
        len(expected)
        == truth["seed_filter_matches"]
        == truth["receiver_XfrmInStateProtoError_delta"]
        == 94
    )
    assert list(misplaced["frame"]) == expected
    assert set(misplaced["leaked"]) == {4}
    assert set(misplaced["esp_offset"]) == {60} and set(misplaced["expected_offset"]) == {40}
    for frame_hex, length in zip(misplaced["leaked_hex"], misplaced["len"], strict=True):
        b = bytes.fromhex(frame_hex)
        assert b[:2] == b"\x45\x00"
        inner_total = int.from_bytes(b[2:4], "big")
        assert 0 < length - 14 - 56 - inner_total <= 16 + 2 + 255  # ICV + trailer + padding
    others = packets[(packets["proto"] == "esp") & (packets["verdict"] != "esp_misplaced")]
    assert set(others["verdict"]) == {"ok"}
    s = result.summary
    assert (
        s.findings[FindingKind.ESP_MISPLACED] == 94 and s.findings[FindingKind.CLEARTEXT_LEAK] == 94
    )


def test_tso_on_ivs_of_misplaced_packets_come_from_the_next_seq(lane: Options) -> None:
    result = analyze_real("linux-6.1/ip6tnl-transport-tso-on", lane)
    packets = result.packets
    misplaced = packets[packets["verdict"] == "esp_misplaced"]
    assert set(misplaced["iv_seq_delta"]) == {1}
    assert set(packets[packets["verdict"] == "ok"]["iv_seq_delta"]) == {0}
    # Each reuse: the misplaced packet took seq+1's IV, and seq+1 was sent too.
    reuse = [f for f in result.summary.finding_list if f.kind is FindingKind.IV_REUSE]
    assert len(reuse) == int(packets["iv_reused"].sum()) == result.summary.reused_ivs == 32
    by_frame = packets.set_index("frame")
    for f in reuse:
        first, second = f.frames
        assert by_frame.loc[first, "verdict"] == "esp_misplaced"
        seq64 = by_frame["seq64"]
        assert int(seq64[second]) == int(seq64[first]) + 1
        assert str(by_frame["iv"][first]) == str(by_frame["iv"][second])


def test_ccm_capture_decrypts_every_packet_to_its_tcp_stream(lane: Options) -> None:
    """rfc4309(ccm(aes)), AES-128, ICV 128, IPv4 transport: iperf3's TCP stream on port 5201."""
    result, truth = (
        analyze_real("linux-6.1/rfc4309-ccm-v4", lane),
        real_capture("linux-6.1/rfc4309-ccm-v4").truth,
    )
    packets = result.packets
    assert list(packets["frame"]) == list(range(1, int(truth["frames"]) + 1))
    esp = packets[packets["proto"] != "other"]
    assert len(esp) == truth["esp_frames"] == 530
    assert {f"{sa.spi:#x}": sa.packets for sa in result.summary.sas} == truth["frames_per_spi"]
    assert set(esp["verdict"]) == {"ok"} and set(esp["algorithm"]) == {"rfc4309(ccm(aes))"}
    assert set(esp["inner_proto"]) == {"tcp"} and set(esp["next_header"]) == {6}
    ports = set(zip(esp["inner_sport"], esp["inner_dport"], strict=True))
    # iperf3's control connection and its data connection, each way
    assert ports == {(40838, 5201), (5201, 40838), (40852, 5201), (5201, 40852)}
    assert set(esp["iv_seq_delta"]) == {0}  # seqiv: every IV built from its own number
    assert list(esp["payload_len"][:3]) == [40, 40, 32]  # SYN, SYN-ACK, ACK with options
    assert result.summary.finding_list == ()


# -- a real Linux capture, its key file edited -----------------------------------------------


def _real(tmp_path: Path, old: str, new: str, lane: Options) -> tuple[Analysis, Analysis]:
    cap = real_capture("linux-6.1/cbc-aes-hmac-sha256-v4")
    keys = tmp_path / "xfrm.txt"
    keys.write_text(cap.keys.read_text().replace(old, new))
    given = analyze(cap.pcap, [cap.keys], lane)
    return given, analyze(cap.pcap, [keys], lane)


def _kinds(a: Analysis) -> dict[str, int]:
    return {k: n for k, n in a.summary.findings.items() if n}


@needs_captures
def test_real_capture_cipher_not_opened_every_icv_verified(tmp_path: Path, lane: Options) -> None:
    given, edited = _real(tmp_path, "cbc(aes)", "cbc(twofish)", lane)
    esp = given.summary.esp_packets
    assert given.summary.verdicts["ok"] == esp > 0
    assert {k: n for k, n in edited.summary.verdicts.items() if n} == {
        "authentic_not_decrypted": esp,
        "not_esp": given.summary.verdicts["not_esp"],
    }
    mine = edited.packets[edited.packets["verdict"] == "authentic_not_decrypted"]
    same = given.packets[given.packets["verdict"] == "ok"]
    assert list(mine["seq64"]) == list(same["seq64"])  # verified with the same high halves
    assert list(mine["iv"]) == list(same["iv"])  # the clear IVs, for IV reuse
    assert mine["inner_proto"].eq("").all() and mine["pad_len"].isna().all()
    # the same sequence and IV reuse findings, none about keys; no echainiv verdict
    both = {k: n for k, n in _kinds(given).items() if k != "iv_derivation"}
    assert _kinds(edited) == both


@needs_captures
def test_real_capture_hmac_not_verified_decrypts_and_says_so(tmp_path: Path, lane: Options) -> None:
    given, edited = _real(tmp_path, "hmac(sha256)", "hmac(sm3)", lane)
    esp = given.summary.esp_packets
    assert edited.summary.verdicts["decrypted_no_icv"] == esp
    mine = edited.packets[edited.packets["verdict"] == "decrypted_no_icv"]
    same = given.packets[given.packets["verdict"] == "ok"]
    for column in ("seq64", "inner_proto", "inner_sport", "inner_dport", "pad_len"):
        assert list(mine[column]) == list(same[column]), column
    assert set(mine["detail"]) == {
        "trailer and inner header sound; ICV not checked: hmac(sm3) is not verified by this version"
    }
    found = [f for f in edited.summary.finding_list if f.kind is FindingKind.NO_INTEGRITY]
    assert sorted((f.spi, f.count) for f in found) == sorted(
        (sa.spi, sa.packets) for sa in given.summary.sas if sa.packets
    )
