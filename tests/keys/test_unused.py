"""Key files on real captures: SAs that saw no packet and why, notations end to end, the doctor.

The real Linux captures of shared/ (skipped when absent), their keys
rewritten in the test into another notation or with one mistake, and the
exact verdicts, reasons and sentences a user reads.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.analysis import summarize
from espforensics.checks.unused import unused_note
from espforensics.cli import app
from espforensics.model.enums import FindingKind, UnusedReason, Verdict
from espforensics.model.options import Options
from espforensics.model.records import ANY_SPI
from espforensics.results.summary import Summary
from tests.support import helpers

CAPTURES = helpers.CAPTURES / "linux-6.1"
CBC = CAPTURES / "cbc-aes-hmac-sha256-v4"
NATT = CAPTURES / "natt-espinudp-v4"


def cbc_keys() -> dict[int, tuple[str, str]]:
    """SPI -> (cipher key hex, HMAC key hex) of the cbc(aes) capture's xfrm state."""
    text = (CBC / "xfrm-state.txt").read_text()
    found = re.findall(
        r"spi (0x[0-9a-f]+) .*?auth-trunc hmac\(sha256\) 0x([0-9a-f]+) 128\n"
        r"\tenc cbc\(aes\) 0x([0-9a-f]+)",
        text,
        re.S,
    )
    return {int(spi, 16): (enc, auth) for spi, auth, enc in found}


def by_spi(summary: Summary) -> dict[int, dict[str, int]]:
    return {sa.spi: sa.verdicts for sa in summary.sas}


# -- SAs that saw no packet ---------------------------------------------------------------


@helpers.needs_captures
def test_natt_on_a_port_not_given_names_the_port(tmp_path: Path) -> None:
    text = "\n".join(
        line for line in (NATT / "xfrm-state.txt").read_text().splitlines() if "encap" not in line
    )
    keys = tmp_path / "xfrm.txt"
    keys.write_text(text)
    s = summarize(NATT / "capture.pcap", [keys], Options(natt_ports=frozenset({4501})))
    assert s.esp_packets == 0
    assert [(u.spi, u.reason, u.packets, u.port) for u in s.unused_sas] == [
        (0x1002, UnusedReason.OTHER_PORT, 204, 4500),
        (0x1001, UnusedReason.OTHER_PORT, 386, 4500),
    ]
    assert s.unused_sas[1].detail == (
        f"SPI 0x00001001 ({keys}:line 10) saw no packet: 386 UDP payloads on port 4500 start "
        "with its SPI: ESP-in-UDP on a port not given; run with --natt-port 4500"
    )
    assert unused_note(s.unused_sas, 2) == (
        "none of the 2 SAs of the key files matched a packet: ESP-in-UDP on another port; "
        "run with --natt-port 4500"
    )
    # a fact of the key file, not of the capture: no finding
    assert [f.kind.value for f in s.finding_list if "saw no packet" in f.detail] == []
    # summary.json keeps them, and reads them back
    assert Summary.from_json(json.loads(json.dumps(s.to_json()))).unused_sas == s.unused_sas


@helpers.needs_captures
def test_natt_with_the_port_given_uses_every_sa(tmp_path: Path) -> None:
    s = summarize(NATT / "capture.pcap", [NATT / "xfrm-state.txt"])
    assert s.unused_sas == () and s.verdicts["ok"] == 590


@helpers.needs_captures
def test_one_directions_sa_with_the_addresses_swapped(tmp_path: Path) -> None:
    enc, auth = cbc_keys()[0x1001]
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        "sas:\n  - spi: 0x1001\n    src: 192.0.2.2\n    dst: 192.0.2.1\n"
        f"    enc: cbc(aes)\n    key: 0x{enc}\n    auth: hmac(sha256)\n"
        f"    auth_key: 0x{auth}\n    icv: 128\n"
    )
    s = summarize(CBC / "capture.pcap", [keys])
    assert by_spi(s) == {0x1001: {"unknown_sa": 318}, 0x1002: {"unknown_sa": 207}}
    [u] = s.unused_sas
    assert (u.reason, u.packets, u.src, u.dst) == (
        UnusedReason.OTHER_DIRECTION,
        318,
        "192.0.2.2",
        "192.0.2.1",
    )
    assert u.detail == (
        f"SPI 0x00001001 ({keys}:entry 1) saw no packet: its SPI goes from "
        "192.0.2.1 to 192.0.2.2 (318 packets), the other direction: swap src and dst, or give "
        "that direction's SA"
    )
    assert enc not in u.detail and auth not in u.detail


@helpers.needs_captures
@pytest.mark.parametrize(
    ("spi", "src", "dst", "reason", "words"),
    [
        (
            "0x1001",
            "10.0.0.1",
            "10.0.0.2",
            UnusedReason.OTHER_ADDRESSES,
            "its SPI goes from 192.0.2.1 to 192.0.2.2 (318 packets in all), not between the "
            "key file's addresses: NAT, or another pair of hosts?",
        ),
        (
            "0x9999",
            "192.0.2.1",
            "192.0.2.2",
            UnusedReason.NO_SUCH_SPI,
            "its SPI is nowhere in the capture (not as ESP, nor at the start of a UDP payload); "
            "ESP from 192.0.2.1 to 192.0.2.2 has SPI 0x00001001 (rekeyed, or a key file of "
            "another run?)",
        ),
        (
            "0x9999",
            "10.0.0.1",
            "10.0.0.2",
            UnusedReason.NO_SUCH_SPI,
            "its SPI is nowhere in the capture (not as ESP, nor at the start of a UDP payload)",
        ),
    ],
)
def test_unused_sa_reasons(
    tmp_path: Path, spi: str, src: str, dst: str, reason: UnusedReason, words: str
) -> None:
    enc, auth = cbc_keys()[0x1001]
    keys = tmp_path / "esp_sa"
    keys.write_text(
        f'"IPv4","{src}","{dst}","{spi}","AES-CBC [RFC3602]","0x{enc}",'
        f'"HMAC-SHA-256-128 [RFC4868]","0x{auth}"\n'
    )
    s = summarize(CBC / "capture.pcap", [keys])
    [u] = s.unused_sas
    assert u.reason is reason
    assert u.detail == f"SPI 0x{int(spi, 16):08x} ({keys}:line 1) saw no packet: {words}"


# -- notations end to end -----------------------------------------------------------------


@helpers.needs_captures
def test_esp_sa_with_wildcards_decrypts_the_real_capture(tmp_path: Path) -> None:
    keys = cbc_keys()
    (e1, a1), (e2, a2) = keys[0x1001], keys[0x1002]
    path = tmp_path / "esp_sa"
    path.write_text(
        f'"IPv4","192.0.2.2","192.0.2.1","0x00001002","AES-CBC [RFC3602]","0x{e2}",'
        f'"HMAC-SHA-256-128 [RFC4868]","0x{a2}"\n'
        f'"IPv4","*","*","*","AES-CBC [RFC3602]","0x{e1}","HMAC-SHA-256-128 [RFC4868]",'
        f'"0x{a1}"\n'
        f'"Any","*","*","0x1*","AES-CBC [RFC3602]","0x{e1}","NULL",""\n'
    )
    for options in (Options(), Options(steady_lane=False)):
        s = summarize(CBC / "capture.pcap", [path], options)
        assert by_spi(s) == {0x1001: {"ok": 318}, 0x1002: {"ok": 207}}
        assert s.unused_sas == ()
        assert s.key_notes == (
            f"{path}: line 3: SPI '0x1*' has a partial wildcard; give '*' or one SPI "
            "(skipped; the other lines loaded)",
        )


@helpers.needs_captures
def test_wildcard_sa_that_every_spi_claimed_first_is_named(tmp_path: Path) -> None:
    keys = cbc_keys()
    path = tmp_path / "esp_sa"
    rows = [
        f'"IPv4","*","*","{spi:#010x}","AES-CBC [RFC3602]","0x{e}","HMAC-SHA-256-128 [RFC4868]",'
        f'"0x{a}"'
        for spi, (e, a) in keys.items()
    ]
    rows.append(f'"IPv4","*","*","*","AES-CBC [RFC3602]","0x{"00" * 16}","NULL",""')
    path.write_text("\n".join(rows) + "\n")
    s = summarize(CBC / "capture.pcap", [path])
    assert s.verdicts["ok"] == 525
    [u] = s.unused_sas
    assert (u.spi, u.reason) == (ANY_SPI, UnusedReason.NOT_CLAIMED)  # -1: no SPI, not SPI 0
    assert s.to_json()["unused_sas"][0]["spi"] == "any"


@helpers.needs_captures
def test_tcpdump_hmac96_secrets_claim_the_real_packets_with_the_icv_unchecked(
    tmp_path: Path,
) -> None:
    keys = cbc_keys()
    (e1, _), (e2, _) = keys[0x1001], keys[0x1002]
    path = tmp_path / "secrets"
    # the capture's ICVs are 128 bits; -hmac96 says 96 and gives no HMAC key: ICV skipped
    path.write_text(
        f"0x1001@192.0.2.2 aes128-cbc-hmac96:0x{e1}, 0x1002@192.0.2.1 aes128-cbc-hmac96:0x{e2}\n"
    )
    s = summarize(CBC / "capture.pcap", [path])
    assert {sa.spi: (sa.algorithm, sa.packets) for sa in s.sas} == {
        0x1001: ("cbc(aes) + any", 318),
        0x1002: ("cbc(aes) + any", 207),
    }
    assert s.verdicts[Verdict.UNKNOWN_SA] == 0 and s.unused_sas == ()
    # 96 of the 128 ICV bits: the last 4 ICV bytes are read as ciphertext, so no trailer holds
    assert s.verdicts[Verdict.BAD_TRAILER] == 525
    mismatch = [f.detail for f in s.finding_list if f.kind is FindingKind.KEY_MISMATCH]
    assert mismatch == [
        f"SPI {spi:#010x}: {n} of {n} packets decrypt to no sound ESP trailer, and no ICV was "
        "checked (no integrity key): the cbc(aes) key, or the ICV length the key file gives "
        "(96 bits), is likely wrong"
        for spi, n in ((0x1001, 318), (0x1002, 207))
    ]
    detail = " ".join(f.detail for f in s.finding_list)
    assert e1 not in detail and e2 not in detail


@helpers.needs_captures
def test_tcpdump_secret_on_the_command_line(tmp_path: Path) -> None:
    (e1, _), (e2, _) = cbc_keys()[0x1001], cbc_keys()[0x1002]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "analyze",
            str(CBC / "capture.pcap"),
            "--sa",
            f"0x1001@192.0.2.2 aes128-cbc-hmac96:0x{e1}",
            "--sa",
            f"0x1002@192.0.2.1 aes256-cbc:0x{e2}",
            "--out",
            str(out),
            "--no-plots",
        ],
    )
    assert result.exit_code == 2
    assert result.output == (
        "espforensics: error: --sa (tcpdump -E text): line 1: aes256-cbc takes a 32-byte "
        "secret; this one is 16 bytes\n"
    )


@helpers.needs_captures
def test_policy_blocks_and_skipped_lines_are_warnings_on_stderr(tmp_path: Path) -> None:
    path = tmp_path / "xfrm.txt"
    policy = "src 192.0.2.1/32 dst 192.0.2.2/32 \n\tdir out priority 0 ptype main \n"
    states = (CBC / "xfrm-state.txt").read_text()
    path.write_text(states + policy)
    at = len(states.splitlines()) + 1
    out = tmp_path / "o"
    result = CliRunner().invoke(
        app,
        ["analyze", str(CBC / "capture.pcap"), "--sa", str(path), "--out", str(out), "-q"],
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        f"espforensics: warning: {path}: skipped 1 `ip xfrm policy` block (line {at}): "
        "a policy holds no keys\n"
    )
    doc = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert doc["key_notes"] == [
        f"{path}: skipped 1 `ip xfrm policy` block (line {at}): a policy holds no keys"
    ]


# -- the key doctor: a key one byte short that no 00 byte fixes ---------------------------


def test_short_key_that_no_leading_zero_fixes_is_named_by_its_length(
    tmp_path: Path, lane: Options
) -> None:
    from espforensics.analyzer.frame import FrameAnalyzer
    from espforensics.keys import SaTable, load_sas
    from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, SaFlow, make_sa
    from espforensics.synth.keytext import keys_yaml
    from espforensics.synth.scenarios_crypto import send_udp
    from tests.support.helpers import iter_rows

    rng, cb = random.Random(7), CaptureBuilder(7)
    material = rng.randbytes(20)  # a byte lost in the middle, not a leading zero
    flow = SaFlow(make_sa(rng, 0x1001, V4_A, V4_B, material=material), V4_A, V4_B)
    for _ in range(6):
        send_udp(cb, flow)
    sc = cb.scenario("short-key", "one SA whose key lost a byte", (flow.sealer,))
    text = keys_yaml(sc.sas)
    path = tmp_path / "keys.yaml"
    short = material[:7] + material[8:]
    path.write_text(text.replace("0x" + material.hex(), "0x" + short.hex()))
    [sa] = load_sas([path])
    assert len(sa.key) == 19 and not sa.key_usable
    analyzer = FrameAnalyzer(SaTable((sa,)), lane, "test")
    records = list(iter_rows(list(sc.frames), analyzer, lane))
    assert [r.verdict for r in records] == [Verdict.AUTH_FAIL] * 6
    [f] = [f for f in analyzer.findings if f.kind is FindingKind.KEY_MISMATCH]
    assert f.detail == (
        "SPI 0x00001001: 0 of 6 packets verify with the given key; the key is 19 bytes where "
        "rfc4106(gcm(aes)) needs 20, 28 or 36 (4-byte salt included), and a 00 byte put in "
        "front (a leading zero lost in a copy-paste) does not make them verify either: is a "
        "byte missing elsewhere in the key?"
    )
    assert short.hex() not in f.detail


@helpers.needs_captures
def test_hmac_key_of_another_length_is_an_info_finding(tmp_path: Path) -> None:
    enc, auth = cbc_keys()[0x1001]
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        "sas:\n  - spi: 0x1001\n    src: 192.0.2.1\n    dst: 192.0.2.2\n"
        f"    enc: cbc(aes)\n    key: 0x{enc}\n    auth: hmac(sha256)\n"
        f"    auth_key: 0x{auth[:32]}\n    icv: 128\n"
    )
    s = summarize(CBC / "capture.pcap", [keys])
    [f] = [f for f in s.finding_list if f.kind is FindingKind.HMAC_KEY_SIZE]
    assert (f.severity, f.spi, f.detail) == (
        "info",
        0x1001,
        f"SPI 0x00001001 ({keys}:entry 1): the hmac(sha256) key is 16 bytes; "
        "RFC 4868 s2.1.1 asks for 32 (RFC 2104 s3 takes any length: it is used as given)",
    )
    # the capture's real key is 32 bytes: its first 16 verify nothing, and the doctor says so
    assert by_spi(s)[0x1001] == {"auth_fail": 318}


@helpers.needs_captures
def test_unused_reasons_are_the_same_with_the_steady_lane_on_and_off(tmp_path: Path) -> None:
    keys = cbc_keys()
    e2, a2 = keys[0x1002]
    path = tmp_path / "esp_sa"
    path.write_text(
        f'"IPv4","192.0.2.2","192.0.2.1","0x00001002","AES-CBC [RFC3602]","0x{e2}",'
        f'"HMAC-SHA-256-128 [RFC4868]","0x{a2}"\n'
        f'"IPv4","192.0.2.2","192.0.2.1","0x00009998","AES-CBC [RFC3602]","0x{e2}",'
        f'"HMAC-SHA-256-128 [RFC4868]","0x{a2}"\n'
        f'"IPv4","192.0.2.1","192.0.2.2","0x00009999","AES-CBC [RFC3602]","0x{e2}",'
        f'"HMAC-SHA-256-128 [RFC4868]","0x{a2}"\n'
    )
    got = []
    for options in (Options(batch_frames=64), Options(steady_lane=False)):
        s = summarize(CBC / "capture.pcap", [path], options)
        assert by_spi(s)[0x1002] == {"ok": 207}
        got.append(s.unused_sas)
    assert got[0] == got[1]
    assert [(u.spi, u.reason, u.detail.split(": ", 1)[1]) for u in got[0]] == [
        (
            0x9998,
            UnusedReason.NO_SUCH_SPI,
            "its SPI is nowhere in the capture (not as ESP, nor at the start of a UDP payload); "
            "ESP from 192.0.2.2 to 192.0.2.1 has SPI 0x00001002 (rekeyed, or a key file of "
            "another run?)",
        ),
        (
            0x9999,
            UnusedReason.NO_SUCH_SPI,
            "its SPI is nowhere in the capture (not as ESP, nor at the start of a UDP payload); "
            "ESP from 192.0.2.1 to 192.0.2.2 has SPI 0x00001001 (rekeyed, or a key file of "
            "another run?)",
        ),
    ]
