"""What other senders' captures showed (issue 34 s3): what was not decrypted is not
said to be, an ESN high half below the key file's, short ESP packets, SPI 0.

Each case through the pipeline with the steady lane on and off, with exact
counts, schemes, verdicts and sentences; the real Linux cbc(aes) capture
with its key file edited to a cipher this version does not open.
"""

from __future__ import annotations

import csv
import random
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from espforensics import analyze
from espforensics.keys import SaTable, load_sas
from espforensics.keys.sa import CBC_AES, SecurityAssociation
from espforensics.model.enums import FindingKind, IvScheme, Severity, Verdict
from espforensics.model.evidence import IvChained, IvPredictable, ReservedSpi
from espforensics.model.options import Options
from espforensics.model.records import Finding
from espforensics.report.lead import lead
from espforensics.report.narrative import verdict_sentences
from espforensics.results.coverage import tally
from espforensics.results.summary import Summary
from espforensics.synth import Scenario, write_scenario
from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, Fault, SaFlow, make_sa
from espforensics.synth.esp import ESP_HEADER, IvFixed
from espforensics.synth.keytext import esp_sa_secrets
from espforensics.synth.scenarios_crypto import send_udp
from espforensics.synth.scenarios_ivschemes import counter_iv
from espforensics.synth.truth import FrameTruth
from tests.support.helpers import needs_captures, real_capture, run_cli, run_frames, scenario

TWOFISH = "cbc(twofish)"  # a cipher this version does not open: its ICVs still verify


def _unopened(sas: tuple[SecurityAssociation, ...]) -> tuple[SecurityAssociation, ...]:
    """The key file with every cbc(aes) SA declared as Twofish (same keys, same ICVs)."""
    return tuple(replace(sa, algorithm=TWOFISH) if sa.algorithm == CBC_AES else sa for sa in sas)


def _schemes(
    name_or_sc: str | Scenario, sas: tuple[SecurityAssociation, ...], lane: Options
) -> tuple[dict[int, IvScheme], list[Finding]]:
    sc = scenario(name_or_sc) if isinstance(name_or_sc, str) else name_or_sc
    run = run_frames(sc.frames, sas, lane)
    ivd = run.analyzer.checks.iv_derivation
    return {spi: s for (spi, _, _), s in ivd.schemes().items()}, run.findings


# -- 1. an SA whose cipher is not opened: its IVs are on the wire ----------------------


def test_chained_ivs_of_a_cipher_not_opened_are_counted_and_named(lane: Options) -> None:
    """encauth-faults' 0x7502 chains its CBC IVs; declared Twofish, its ICVs verify and
    its IVs are on the wire: 9 of 10 chained, the scheme `chained`, as without a key."""
    sc = scenario("encauth-faults")
    schemes, findings = _schemes("encauth-faults", _unopened(sc.sas), lane)
    keyless, _ = _schemes("encauth-faults", (), lane)
    assert schemes[0x7502] is IvScheme.CHAINED is keyless[0x7502]
    [chained] = [f for f in findings if f.kind is FindingKind.IV_DERIVATION]
    assert (chained.spi, chained.count, tuple(chained.frames)) == (0x7502, 9, tuple(range(14, 23)))
    assert chained.evidence == IvChained(9, 10)
    assert chained.detail.startswith("192.0.2.1 -> 192.0.2.2: 9 of 10 CBC IVs are chained")


def _counter_cbc() -> Scenario:
    """An AES-CBC SA whose 40 IVs carry an additive counter in their last 8 bytes."""
    rng, cb = random.Random(5), CaptureBuilder(5)
    sa = make_sa(rng, 0xB601, V4_A, V4_B, algorithm=CBC_AES, auth_algorithm="hmac(sha256)")
    flow, head, c = SaFlow(sa, V4_A, V4_B), bytes(range(8)), 0x0123_4567_89AB_CDEF
    for seq in range(1, 41):
        send_udp(cb, flow, seq, Fault(iv=IvFixed(head + counter_iv(seq, c))))
    return cb.scenario("counter-cbc", "CBC IVs ending in seq64 + c", (flow.sealer,))


def test_counter_ivs_of_a_cipher_not_opened_are_predictable(lane: Options) -> None:
    """CBC IVs that follow a counter on the wire are predictable (RFC 3602 s2.1) whether
    the cipher is opened or not: the same scheme and finding for cbc(aes) and Twofish."""
    sc = _counter_cbc()
    opened, opened_findings = _schemes(sc, sc.sas, lane)
    schemes, findings = _schemes(sc, _unopened(sc.sas), lane)
    assert schemes == opened == {0xB601: IvScheme.COUNTER}
    [f], [same] = findings, opened_findings
    assert (f.kind, f.severity, f.count) == (FindingKind.IV_DERIVATION, Severity.HIGH, 40)
    assert f.evidence == IvPredictable(IvScheme.COUNTER, 40)
    assert (f.detail, f.evidence) == (same.detail, same.evidence)


@needs_captures
def test_real_capture_cipher_not_opened_keeps_its_ivs_and_says_none_decrypted(
    tmp_path: Path, lane: Options
) -> None:
    cap = real_capture("linux-6.1/cbc-aes-hmac-sha256-v4")
    keys = tmp_path / "xfrm.txt"
    keys.write_text(cap.keys.read_text().replace("cbc(aes)", TWOFISH))
    result = analyze(cap.pcap, [keys], lane)
    summary = result.summary
    # echainiv's IVs look random on the wire: 318 and 207 packets, past 16
    assert [(sa.spi, sa.iv_scheme) for sa in summary.sas] == [
        (0x1001, IvScheme.RANDOM),
        (0x1002, IvScheme.RANDOM),
    ]
    t = tally(summary.sas, summary.esp_layers)
    assert (t.tried, t.verified, t.authentic) == (525, 525, 525)
    sentences = verdict_sentences(summary, t)
    assert sentences[0] == (
        "every ESP packet verifies at offset 0 by its ICV (525 of 525); none was decrypted: "
        "a cipher this version does not decrypt"
    )
    assert not any("decrypts at offset 0" in s for s in sentences)
    assert lead(summary)[0] == "all 525 ESP packets verified with their keys (2 SAs)"


def _encauth_unopened(tmp: Path, sas: tuple[SecurityAssociation, ...]) -> Summary:
    files = write_scenario(scenario("encauth-faults"), tmp)
    return analyze(files["capture"], SaTable(sas)).summary


def test_report_counts_decrypted_apart_from_verified_only(tmp_path: Path) -> None:
    summary = _encauth_unopened(tmp_path, _unopened(scenario("encauth-faults").sas))
    t = tally(summary.sas, summary.esp_layers)
    assert verdict_sentences(summary, t)[:2] == (
        "4 of 46 ESP packets do not decrypt at offset 0 (2 auth_fail, 2 bad_trailer)",
        "28 of 46 ESP packets verify at offset 0 by their ICV but were not decrypted: a "
        "cipher this version does not decrypt",
    )


def test_lead_says_which_packets_were_decrypted_and_which_verified(tmp_path: Path) -> None:
    """Twofish SAs (verified, not decrypted) beside a CTR SA without its integrity key
    (decrypted, no ICV): no sentence calls the Twofish packets decrypted."""
    sas = tuple(
        replace(sa, auth_key=None) if sa.spi == 0x7505 else sa
        for sa in _unopened(scenario("encauth-faults").sas)
    )
    summary = _encauth_unopened(tmp_path, sas)
    assert lead(summary)[0] == (
        "45 of 46 ESP packets verified or decrypted with their keys: 39 verified by their "
        "ICV (28 of them not decrypted), 6 decrypted with no ICV to verify; not: 1 fail "
        "their ICV"
    )


# -- 4. SPI 0 (and 1..255): reserved, yet on the wire ------------------------------------


def _reserved() -> Scenario:
    """SPI 0 from .1 to .2 (200 packets: past the lane's first batches), SPI 0xff back (3)."""
    rng, cb = random.Random(3), CaptureBuilder(3)
    zero = SaFlow(make_sa(rng, 0, V4_A, V4_B), V4_A, V4_B)
    low = SaFlow(make_sa(rng, 0xFF, V4_B, V4_A), V4_B, V4_A)
    for seq in range(1, 201):
        send_udp(cb, zero, seq)
        if seq <= 3:
            send_udp(cb, low, seq, outgoing=False)
    return cb.scenario("reserved-spi", "SPI 0 and SPI 0xff", (zero.sealer, low.sealer))


@pytest.mark.parametrize("form", ["keys", "xfrm", "esp_sa"])
def test_a_key_file_of_spi_0_loads_with_a_warning_and_no_key(tmp_path: Path, form: str) -> None:
    files = write_scenario(_reserved(), tmp_path)
    table = load_sas([files[form]])
    assert sorted(sa.spi for sa in table) == [0, 0xFF]
    assert not any(sa.any_spi for sa in table)  # SPI 0 is no wildcard
    assert [n.split(": ", 1)[1] for n in table.notes] == [
        "SPI 0x00000000 is reserved (RFC 4303 s2.1: 0 must not be sent on the wire); loaded, "
        "and its packets are reported as reserved_spi",
        "SPI 0x000000ff is reserved (RFC 4303 s2.1: 1..255 are IANA's); loaded, and its "
        "packets are reported as reserved_spi",
    ]
    hexes = re.findall(r'key: "0x([0-9a-f]+)"', files["keys"].read_text())
    assert len(hexes) == 2 and not any(h[:16] in "\n".join(table.notes) for h in hexes)


@pytest.mark.parametrize("keys", [True, False], ids=["keyed", "keyless"])
def test_packets_of_a_reserved_spi_are_analyzed_and_reported(keys: bool, lane: Options) -> None:
    sc = _reserved()
    run = run_frames(sc.frames, sc.sas if keys else (), lane)
    assert {r.verdict for r in run.records} == {Verdict.OK if keys else Verdict.UNKNOWN_SA}
    zero = [r.frame for r in run.records if r.spi == 0]
    low = [r.frame for r in run.records if r.spi == 0xFF]
    assert (len(zero), low) == (200, [2, 4, 6])
    found = [(f.kind, f.severity, f.spi, f.count, tuple(f.frames)) for f in run.findings]
    assert found == [
        (FindingKind.RESERVED_SPI, Severity.MEDIUM, 0, 200, tuple(zero)),
        (FindingKind.RESERVED_SPI, Severity.INFO, 0xFF, 3, (2, 4, 6)),
    ]
    assert run.findings[0].evidence == ReservedSpi(0, 200)
    assert run.findings[0].detail == (
        "192.0.2.1 -> 192.0.2.2: 200 ESP packets with SPI 0x00000000: SPI 0 is reserved for "
        "local use and must not be sent on the wire (RFC 4303 s2.1); a receiver may drop them"
    )


def test_cli_warns_once_per_entry_and_exits_0_below_high(tmp_path: Path) -> None:
    files = write_scenario(_reserved(), tmp_path / "in")
    run = run_cli("analyze", files["capture"], "--sa", files["keys"], "--out", tmp_path / "out",
                  "--no-plots", "--quiet")  # fmt: skip
    assert run.code == 0, run.stderr
    warned = [line for line in run.stderr.splitlines() if "reserved" in line]
    assert warned == [
        f"espforensics: warning: {files['keys']}:entry 1: SPI 0x00000000 is reserved (RFC "
        "4303 s2.1: 0 must not be sent on the wire); loaded, and its packets are reported as "
        "reserved_spi",
        f"espforensics: warning: {files['keys']}:entry 2: SPI 0x000000ff is reserved (RFC "
        "4303 s2.1: 1..255 are IANA's); loaded, and its packets are reported as reserved_spi",
    ]
    with (tmp_path / "out" / "findings.csv").open(newline="") as fh:
        rows = [(r["kind"], r["severity"], r["spi"]) for r in csv.DictReader(fh)]
    assert rows == [("reserved_spi", "medium", "0"), ("reserved_spi", "info", "255")]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_decrypts_spi_0_as_we_do(tmp_path: Path) -> None:
    files = write_scenario(_reserved(), tmp_path)
    opts = [
        "-o", "esp.enable_encryption_decode:TRUE",
        "-o", "esp.enable_authentication_check:TRUE",
    ]  # fmt: skip
    for line in files["esp_sa"].read_text().splitlines():
        if line and not line.startswith("#"):
            opts += ["-o", f"uat:esp_sa:{line}"]
    res = subprocess.run(
        ["tshark", "-n", "-r", str(files["capture"]), *opts, "-T", "fields",
         "-e", "esp.spi", "-e", "udp.dstport"],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    rows = [line.split("\t") for line in res.stdout.splitlines()]
    assert len(rows) == 203 and {tuple(r) for r in rows} == {
        ("0x00000000", "6001"),
        ("0x000000ff", "6001"),
    }
    records = run_frames(_reserved().frames, _reserved().sas, Options()).records
    assert {r.inner_dport for r in records} == {6001}


# -- 3. ESP packets shorter than their header and IV --------------------------------------


def _short(snaplen: int | None = None) -> Scenario:
    """SA 0xb401 (4 sound packets, then ESP packets of 4 and 12 bytes); SA 0xb402's only
    packet is 4 bytes: its SPI and nothing else. ``snaplen``: every frame cut there."""
    rng, cb = random.Random(1), CaptureBuilder(1, snaplen=snaplen)
    flow = SaFlow(make_sa(rng, 0xB401, V4_A, V4_B), V4_A, V4_B)
    back = SaFlow(make_sa(rng, 0xB402, V4_B, V4_A), V4_B, V4_A)
    for seq in range(1, 5):
        send_udp(cb, flow, seq)
    shape = FrameTruth(0, Verdict.SHORT)
    cb.emit_ip(flow.outer(*flow.body(ESP_HEADER.pack(flow.spi, 5)[:4])), shape)
    cb.emit_ip(flow.outer(*flow.body(ESP_HEADER.pack(flow.spi, 6) + bytes(4))), shape)
    cb.emit_ip(back.outer(*back.body(ESP_HEADER.pack(back.spi, 1)[:4])), shape)
    return cb.scenario("short", "short ESP packets", (flow.sealer, back.sealer))


def test_short_esp_packets_are_short_and_name_their_spi(lane: Options) -> None:
    sc = _short()
    run = run_frames(sc.frames, sc.sas, lane)
    rows = [(r.frame, r.verdict, r.spi, r.seq, r.esp_len, r.algorithm) for r in run.records[4:]]
    gcm = "rfc4106(gcm(aes))"
    assert rows == [
        (5, Verdict.SHORT, 0xB401, None, 4, gcm),
        (6, Verdict.SHORT, 0xB401, 6, 12, gcm),
        (7, Verdict.SHORT, 0xB402, None, 4, gcm),
    ]
    assert [r.detail for r in run.records[4:]] == [
        "ESP packet of 4 bytes: shorter than its 8-byte header (RFC 4303 s2)",
        "ESP packet of 12 bytes: shorter than the 34 that the ESP header, IV, pad length, next "
        "header and ICV take (RFC 4303 s2)",
        "ESP packet of 4 bytes: shorter than its 8-byte header (RFC 4303 s2)",
    ]
    assert run.analyzer.unused_sas == ()  # 0xb402 is in the capture: its 4 bytes say so


def test_short_packets_are_not_said_to_be_cut_by_the_capture(tmp_path: Path) -> None:
    files = write_scenario(_short(), tmp_path)
    summary = analyze(files["capture"], [files["keys"]]).summary
    assert [(sa.spi, sa.packets, sa.verdicts) for sa in summary.sas] == [
        (0xB401, 6, {"ok": 4, "short": 2}),
        (0xB402, 1, {"short": 1}),
    ]
    assert summary.unused_sas == ()
    t = tally(summary.sas, summary.esp_layers)
    assert t.untried == {"too short to be ESP, though whole in the capture": 3}
    assert {c.name: c.skipped for c in summary.coverage}["sequence"] == {
        "too short to be ESP, though whole in the capture": 3
    }
    assert lead(summary)[0] == (
        "4 of 7 ESP packets verified with their keys; not: 3 too short to be ESP, though "
        "whole in the capture (SPIs 0x0000b401, 0x0000b402)"
    )


def test_an_esp_header_cut_by_the_capture_is_truncated_and_names_its_spi(
    lane: Options,
) -> None:
    """Cut at 40 bytes (Ethernet 14, IPv4 20, then 6 bytes of ESP): truncated, SPI named."""
    sc = _short(snaplen=40)
    run = run_frames(sc.frames, sc.sas, lane)
    assert [(r.frame, r.verdict, r.spi) for r in run.records if r.caplen < r.len] == [
        (n, Verdict.TRUNCATED, 0xB401) for n in (1, 2, 3, 4, 6)
    ]
    assert {r.detail for r in run.records if r.caplen < r.len} == {"ESP header cut at 6 bytes"}
    # the 4-byte packets are whole (38 bytes): short, as without a snap length
    assert [(r.frame, r.verdict) for r in run.records if r.caplen == r.len] == [
        (5, Verdict.SHORT),
        (7, Verdict.SHORT),
    ]


def test_a_decryption_secrets_block_of_spi_0_warns_too(lane: Options) -> None:
    """pcapng: the SAs of SPI 0 and 0xff in a Decryption Secrets Block, then the packets."""
    sc = _reserved()
    run = run_frames([esp_sa_secrets(sc.sas), *sc.frames], (), lane, "dsb.pcapng")
    assert {r.verdict for r in run.records} == {Verdict.OK}
    assert [n.split(": ", 1)[1].split(" is reserved")[0] for n in run.analyzer.sas.notes] == [
        "SPI 0x00000000",
        "SPI 0x000000ff",
    ]
    assert [(f.kind, f.spi, f.count) for f in run.findings] == [
        (FindingKind.RESERVED_SPI, 0, 200),
        (FindingKind.RESERVED_SPI, 0xFF, 3),
    ]
