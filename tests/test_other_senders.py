"""What other senders' captures showed (issue 34 s3): what was not decrypted is not
said to be, an ESN high half below the key file's, short ESP packets, SPI 0.

Each case through the pipeline with the steady lane on and off, with exact
counts, schemes, verdicts and sentences; the real Linux cbc(aes) capture
with its key file edited to a cipher this version does not open.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from espforensics import analyze
from espforensics.checks.iv_derivation import IvDerivationCheck
from espforensics.coverage import tally
from espforensics.evidence import IvChained, IvPredictable
from espforensics.keys import SaTable
from espforensics.keys.sa import CBC_AES, SecurityAssociation
from espforensics.lead import lead
from espforensics.model import Finding, FindingKind, IvScheme, Severity
from espforensics.narrative import verdict_sentences
from espforensics.pipeline import Options
from espforensics.summary import Summary
from espforensics.synth import Scenario, write_scenario
from espforensics.synth.builder import V4_A, V4_B, CaptureBuilder, Fault, SaFlow, make_sa
from espforensics.synth.esp import IvFixed
from espforensics.synth.scenarios_crypto import send_udp
from espforensics.synth.scenarios_ivschemes import counter_iv
from tests.helpers import needs_captures, real_capture, run_frames, scenario

TWOFISH = "cbc(twofish)"  # a cipher this version does not open: its ICVs still verify


def _unopened(sas: tuple[SecurityAssociation, ...]) -> tuple[SecurityAssociation, ...]:
    """The key file with every cbc(aes) SA declared as Twofish (same keys, same ICVs)."""
    return tuple(replace(sa, algorithm=TWOFISH) if sa.algorithm == CBC_AES else sa for sa in sas)


def _schemes(
    name_or_sc: str | Scenario, sas: tuple[SecurityAssociation, ...], lane: Options
) -> tuple[dict[int, IvScheme], list[Finding]]:
    sc = scenario(name_or_sc) if isinstance(name_or_sc, str) else name_or_sc
    run = run_frames(sc.frames, sas, lane)
    [ivd] = [c for c in run.analyzer.checks if isinstance(c, IvDerivationCheck)]
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
