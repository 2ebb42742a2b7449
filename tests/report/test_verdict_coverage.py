"""The report's verdict says "no clear text" and "no IV reused" only of what was examined.

NULL encryption (RFC 2410) carries its payload in clear and no IV; GMAC (RFC
4543) carries its payload in clear. The leak check does not examine such
packets (a clear payload is their design, not a leak) and the IV reuse check
has no IV to read in NULL's: the verdict must say so, not read as clean.
"""

from __future__ import annotations

from pathlib import Path

from espforensics import analyze
from espforensics.analysis import analyze_to_dir
from espforensics.keys import SaTable
from espforensics.model.options import Options
from espforensics.report.narrative import verdict_sentences
from espforensics.results.coverage import check_coverage, tally
from espforensics.results.folder import load_summary
from espforensics.results.summary import Summary
from espforensics.synth import write_scenario
from espforensics.synth.bench import bench_sas, iter_bench_frames
from espforensics.synth.capture import write_capture
from tests.support.helpers import scenario


def _sentences(summary: Summary) -> tuple[str, ...]:
    return verdict_sentences(summary, tally(summary.sas, summary.esp_layers))


def test_null_sas_leave_both_checks_unexamined(tmp_path: Path) -> None:
    path = tmp_path / "null.pcap"
    write_capture(path, iter_bench_frames(300, algorithm="null"), linktypes=(1,))
    summary = analyze(path, SaTable(bench_sas(1, "null"))).summary
    assert _sentences(summary) == (
        "every ESP packet decrypts at offset 0 (300 of 300)",
        "cleartext_leak not examined (300 of an algorithm that does not encrypt (GMAC, NULL))",
        "iv_reuse not examined (300 of an algorithm without IV (ecb(cipher_null)))",
    )


def test_gmac_sas_have_their_ivs_examined_not_their_clear_payload(tmp_path: Path) -> None:
    path = tmp_path / "gmac.pcap"
    write_capture(path, iter_bench_frames(300, algorithm="gmac"), linktypes=(1,))
    summary = analyze(path, SaTable(bench_sas(1, "gmac"))).summary
    assert _sentences(summary)[1:] == (
        "cleartext_leak not examined (300 of an algorithm that does not encrypt (GMAC, NULL))",
        "no IV reused",
    )


def test_a_capture_partly_gmac_says_how_many_were_examined(tmp_path: Path) -> None:
    """The aeads scenario: CCM, ChaCha20-Poly1305 and GMAC SAs, 24 of the 108 packets GMAC."""
    files = write_scenario(scenario("aeads"), tmp_path)
    summary = analyze(files["capture"], [files["keys"]]).summary
    assert _sentences(summary)[1:] == (
        "no inner header byte in clear in the 84 of 108 ESP packets examined "
        "(24 of an algorithm that does not encrypt (GMAC, NULL))",
        "no IV reused",
    )


def test_null_without_keys_has_no_iv_examined(tmp_path: Path) -> None:
    """The same NULL traffic without its keys: every packet a proven clear packet (the leak
    check's finding), and no IV read, since each is clear from its ESP header on: the IV
    checks' coverage says so (it said "examined all" before), and the verdict with it."""
    path = tmp_path / "null.pcap"
    write_capture(path, iter_bench_frames(300, algorithm="null"), linktypes=(1,))
    summary = analyze(path, SaTable(())).summary
    assert {sa.iv_scheme for sa in summary.sas} == {"none"}
    why = "300 clear from the ESP header on, no IV to read (NULL encryption, or a leak)"
    assert _sentences(summary)[-2:] == (
        "300 packets carry inner header bytes in clear",
        f"iv_reuse not examined ({why})",
    )
    iv = {c.name: c for c in summary.coverage if c.name in ("iv_reuse", "iv_derivation")}
    assert [(c.examined, c.skipped) for c in iv.values()] == [(0, {why[4:]: 300})] * 2
    gcm = tmp_path / "gcm.pcap"
    write_capture(gcm, iter_bench_frames(300, algorithm="gcm"), linktypes=(1,))
    assert _sentences(analyze(gcm, SaTable(())).summary)[-1] == "no IV reused"


def test_clear_packets_amid_ciphertext_are_not_counted_as_ivs_examined(tmp_path: Path) -> None:
    """Without keys, an AES-GCM capture in which every tenth packet went out clear from its
    ESP header on (the same SPI and sequence number, NULL's layout: a leak such as an
    offloading NIC's): the IV checks read the IVs of the 270 others only, and say why not
    of the 30, whichever path (steady lane or per frame) took them; summary.json counts
    them per SA (``no_iv``) and reads back the same coverage."""
    gcm = iter_bench_frames(300, algorithm="gcm")
    null = iter_bench_frames(300, algorithm="null")
    path = tmp_path / "mixed.pcap"
    write_capture(path, (n if n.number % 10 == 0 else g for g, n in zip(gcm, null, strict=True)))
    why = "clear from the ESP header on, no IV to read (NULL encryption, or a leak)"
    for lane in (True, False):
        out = tmp_path / f"lane-{lane}"
        analyze_to_dir(path, SaTable(()), out, options=Options(steady_lane=lane), plots=False)
        summary = load_summary(out)  # read back from summary.json
        assert sum(sa.no_iv for sa in summary.sas) == 30
        iv = [c for c in summary.coverage if c.name in ("iv_reuse", "iv_derivation")]
        assert [(c.examined, c.skipped) for c in iv] == [(270, {why: 30})] * 2
        assert check_coverage(summary.sas, summary.esp_layers) == summary.coverage
        assert _sentences(summary)[-1] == (
            f"no IV reused in the 270 of 300 ESP packets examined (30 {why})"
        )
