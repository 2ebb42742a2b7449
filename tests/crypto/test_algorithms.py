"""Every cipher with every HMAC, end to end: the ``encauth`` and ``encauth-faults`` scenarios.

The analyzer's records are compared with the builder's truth frame by
frame, its findings with the scenario's facts, and every ESP packet is
also opened here by a second, independent reading of the RFCs (AES/3DES
from ``cryptography``, HMAC from ``hmac``): RFC 4303 s3.4.4 (ICV over SPI,
seq, IV and ciphertext, then with ESN the high half, RFC 4303 s2.2.1),
RFC 3602 (AES-CBC), RFC 2451 (3DES-CBC), RFC 3686 s4 (AES-CTR counter
block), RFC 2410 (NULL), RFC 2404 / RFC 4868 (truncated HMACs). The
TCP payload it finds is compared with the bytes the builder sealed.
"""

from __future__ import annotations

import hmac
import shutil
import struct
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from espforensics import analyze
from espforensics.crypto import context_for
from espforensics.keys import SaTable
from espforensics.keys.sa import SecurityAssociation
from espforensics.model.enums import FindingKind, Severity, Verdict
from espforensics.model.options import Options
from espforensics.model.records import PacketRecord
from espforensics.synth import Scenario, build_scenario, esp_sa_text, write_scenario
from espforensics.synth.builder import filler
from espforensics.synth.scenarios_encauth import combinations
from tests.support.helpers import STEADY, run_frames, run_scenario

WRAP = 1 << 32
# RFC 3602 s3 (16), RFC 2451 (8), RFC 3686 s3 (8), RFC 2410 (none): the explicit IV.
IV_BYTES = {"cbc(aes)": 16, "cbc(des3_ede)": 8, "rfc3686(ctr(aes))": 8, "ecb(cipher_null)": 0}
HASHES = {
    "hmac(md5)": "md5",
    "hmac(sha1)": "sha1",
    "hmac(sha256)": "sha256",
    "hmac(sha384)": "sha384",
    "hmac(sha512)": "sha512",
}
ICV_BITS = {"hmac(md5)": 96, "hmac(sha1)": 96, "hmac(sha256)": 128, "hmac(sha384)": 192}
ICV_BITS["hmac(sha512)"] = 256  # RFC 2403, RFC 2404, RFC 4868 s2.3


def _sa(sc: Scenario, spi: int) -> SecurityAssociation:
    return next(sa for sa in sc.sas if sa.spi == spi)


def independent_open(sa: SecurityAssociation, esp: bytes, seq64: int) -> bytes | None:
    """The plaintext of one ESP packet (header to ICV), or None if its ICV fails."""
    assert sa.auth_algorithm is not None and sa.auth_key is not None
    iv_len, icv_len = IV_BYTES[sa.algorithm], ICV_BITS[sa.auth_algorithm] // 8
    assert sa.icv_bits // 8 == icv_len
    covered = esp[:-icv_len] + (struct.pack(">I", seq64 >> 32) if sa.esn else b"")
    mac = hmac.new(sa.auth_key.reveal(), covered, HASHES[sa.auth_algorithm]).digest()
    if not hmac.compare_digest(mac[:icv_len], esp[-icv_len:]):
        return None
    iv, ciphertext, key = esp[8 : 8 + iv_len], esp[8 + iv_len : -icv_len], sa.key.reveal()
    if sa.algorithm == "ecb(cipher_null)":
        return ciphertext
    mode: modes.CTR | modes.CBC
    if sa.algorithm == "rfc3686(ctr(aes))":  # RFC 3686 s4: nonce || IV || block counter 1
        mode, key = modes.CTR(key[-4:] + iv + b"\0\0\0\1"), key[:-4]
    else:
        mode = modes.CBC(iv)
    cipher = Cipher(
        TripleDES(key) if sa.algorithm == "cbc(des3_ede)" else algorithms.AES(key), mode
    )
    dec = cipher.decryptor()
    return dec.update(ciphertext) + dec.finalize()


def tcp_payload(plaintext: bytes, tunnel: bool) -> tuple[int, int, bytes]:
    """(source port, destination port, data) of the TCP segment in an ESP payload."""
    body = plaintext[: -2 - plaintext[-2]]
    if tunnel:
        header = (body[0] & 15) * 4 if body[0] >> 4 == 4 else 40
        body = body[header:]
    sport, dport = struct.unpack_from(">HH", body)
    return sport, dport, body[(body[12] >> 4) * 4 :]


def _esp(sc: Scenario, rec: PacketRecord) -> bytes:
    frame = sc.frames[rec.frame - 1].data[14:]  # Ethernet
    assert rec.esp_offset is not None and rec.esp_len is not None
    return frame[rec.esp_offset : rec.esp_offset + rec.esp_len]


# -- encauth ----------------------------------------------------------------------------


def test_every_combination_decrypts_every_packet(lane: Options) -> None:
    sc, records, _ = run_scenario("encauth", lane)
    assert [r.verdict for r in records] == [t.verdict for t in sc.truth] == [Verdict.OK] * 366
    assert [r.seq64 for r in records] == [t.seq64 for t in sc.truth]
    per_spi = Counter(r.spi for r in records)
    # A TCP session: the client sends SYN, ACK, 4 segments, FIN, ACK; the server 4.
    want = {spi: 8 for spi, *_ in combinations()} | {spi + 0x100: 4 for spi, *_ in combinations()}
    assert per_spi == want | {0x7480: 6}
    suite = {sa.spi: f"{sa.algorithm} + {sa.auth_algorithm}" for sa in sc.sas}
    assert [r.algorithm for r in records] == [suite[r.spi or 0] for r in records]
    per_cipher = Counter(r.algorithm.split(" + ")[0] for r in records)
    assert per_cipher == {
        "cbc(aes)": 186,
        "cbc(des3_ede)": 60,
        "rfc3686(ctr(aes))": 60,
        "ecb(cipher_null)": 60,
    }
    seen = {(c, k, a, e) for _, c, k, a, e in combinations()}
    assert len(seen) == 30 and {(c, a) for c, _, a, _ in seen} == {
        (c, a) for c in IV_BYTES for a in HASHES
    }
    assert {e for c, _, _, e in seen if c == "cbc(des3_ede)"} == {True, False}
    assert {e for _, _, a, e in seen if a == "hmac(sha384)"} == {True, False}


def test_decrypted_payload_is_what_was_sealed(lane: Options) -> None:
    """Per combination: every data segment's TCP payload, opened here, is the builder's bytes."""
    sc, records, _ = run_scenario("encauth", lane)
    segments: Counter[int] = Counter()
    for rec in records:
        sa = _sa(sc, rec.spi or 0)
        plain = independent_open(sa, _esp(sc, rec), rec.seq64 or 0)
        assert plain is not None, rec.frame
        iv_len = IV_BYTES[sa.algorithm]
        esp = _esp(sc, rec)
        ctx = context_for(sa)
        assert ctx.open(rec.seq64 or 0, esp[8 : 8 + iv_len], esp[8 + iv_len :]) == plain
        assert (rec.pad_len, rec.next_header) == (plain[-2], plain[-1])
        assert rec.payload_len == len(plain) - 2 - plain[-2]
        if rec.spi == 0x7480:
            continue
        sport, dport, data = tcp_payload(plain, sa.mode == "tunnel")
        assert (rec.inner_sport, rec.inner_dport) == (sport, dport)
        if rec.spi in {spi for spi, *_ in combinations()} and data:
            i = rec.spi - 0x7401
            k = segments[rec.spi]
            assert data == filler(100 + 7 * i, k * (100 + 7 * i)), rec.frame
            segments[rec.spi] += 1
    assert segments == {spi: 4 for spi, *_ in combinations()}


def test_padding_fills_the_cipher_block(lane: Options) -> None:
    sc, records, _ = run_scenario("encauth", lane)
    pads: dict[str, set[int]] = {}
    for rec in records:
        sa = _sa(sc, rec.spi or 0)
        block = {"cbc(aes)": 16, "cbc(des3_ede)": 8}.get(sa.algorithm, 4)
        icv = sa.icv_bits // 8
        assert ((rec.esp_len or 0) - 8 - IV_BYTES[sa.algorithm] - icv) % block == 0
        pads.setdefault(sa.algorithm, set()).add(rec.pad_len or 0)
    assert pads["cbc(aes)"] == set(range(16))  # every pad length comes round
    assert pads["cbc(des3_ede)"] == set(range(1, 7))  # its 5 sizes leave out 0 and 7
    assert pads["rfc3686(ctr(aes))"] == pads["ecb(cipher_null)"] == set(range(4))


def test_the_esn_high_half_enters_every_icv(lane: Options) -> None:
    """RFC 4303 s2.2.1: the SA flipped to the other ESN setting verifies none of its packets."""
    sc, records, _ = run_scenario("encauth", lane)
    flipped = tuple(replace(sa, esn=not sa.esn) for sa in sc.sas)
    wrong = run_frames(sc.frames, SaTable(flipped), lane, "flipped").records
    assert {r.verdict for r in wrong} == {Verdict.AUTH_FAIL}
    esn_spis = {sa.spi for sa in sc.sas if sa.esn}
    assert len(esn_spis) == 31 and sum(r.spi in esn_spis for r in records) == 186
    assert {r.seq_hi_verified for r in records if r.spi in esn_spis and r.spi != 0x7480} == {0}


def test_cbc_sa_across_the_wrap(lane: Options) -> None:
    sc, records, findings = run_scenario("encauth", lane)
    wrapped = [r for r in records if r.spi == 0x7480]
    assert [r.seq64 for r in wrapped] == list(range(WRAP - 3, WRAP + 3))
    assert [r.seq_hi_verified for r in wrapped] == [0, 0, 0, 1, 1, 1]
    [wrap] = [f for f in findings if f.kind is FindingKind.ESN_WRAP]
    assert wrap.count == sc.facts["esn_wraps"] == 1


def test_every_iv_follows_its_generator_from_its_own_sequence_number(lane: Options) -> None:
    """CBC's echainiv (read back with the key), CTR's seqiv: every IV built from its own
    seq64, so iv_seq_delta is 0 and no iv_derivation finding is made; NULL has no IV."""
    sc, records, findings = run_scenario("encauth", lane)
    cipher = {sa.spi: sa.algorithm for sa in sc.sas}
    deltas: dict[str, set[int | None]] = {}
    for r in records:
        deltas.setdefault(cipher[r.spi or 0], set()).add(r.iv_seq_delta)
    assert deltas == {
        "cbc(aes)": {0},
        "cbc(des3_ede)": {0},
        "rfc3686(ctr(aes))": {0},
        "ecb(cipher_null)": {None},
    }
    assert not [f for f in findings if f.kind is FindingKind.IV_DERIVATION]
    assert not [f for f in findings if f.kind is FindingKind.IV_REUSE]


def test_null_cipher_sas_do_not_share_a_key(lane: Options) -> None:
    _, _, findings = run_scenario("encauth", lane)
    assert [f for f in findings if f.kind is FindingKind.SHARED_KEY] == []


@pytest.mark.parametrize("role", ["keys", "xfrm", "esp_sa", "esp_sa_esn"])
def test_each_key_file_format(tmp_path: Path, role: str) -> None:
    sc = build_scenario("encauth", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap")
    if role == "esp_sa_esn":
        paths[role] = tmp_path / "cap.esp_sa_esn"
        paths[role].write_text(esp_sa_text(sc.sas, esn_columns=True), encoding="ascii")
    verdicts = list(analyze(paths["capture"], [paths[role]]).packets["verdict"])
    if role != "esp_sa":
        assert verdicts == ["ok"] * 366
        return
    # strongSwan's 8 columns cannot say ESN: the ESN SAs' ICVs are computed without it.
    esn = {sa.spi for sa in sc.sas if sa.esn}
    want = ["auth_fail" if t.spi in esn else "ok" for t in sc.truth]
    assert verdicts == want and want.count("auth_fail") == 186


# -- encauth-faults ----------------------------------------------------------------------


def test_fault_verdicts_frame_by_frame(lane: Options) -> None:
    sc, records, _ = run_scenario("encauth-faults", lane)
    assert [r.verdict for r in records] == [t.verdict for t in sc.truth]
    wrong = {r.frame: (r.spi, r.seq, r.verdict) for r in records if r.verdict is not Verdict.OK}
    assert wrong == {
        25: (0x7503, 3, Verdict.BAD_TRAILER),
        27: (0x7503, 5, Verdict.BAD_TRAILER),
        31: (0x7504, 3, Verdict.BAD_TRAILER),
        32: (0x7504, 4, Verdict.BAD_TRAILER),
        36: (0x7505, 2, Verdict.AUTH_FAIL),
        42: (0x7506, 2, Verdict.AUTH_FAIL),
    }
    detail = {r.frame: r.detail for r in records}
    assert "ciphertext of 52 bytes is not a whole number of 16-byte cipher blocks" in detail[25]
    assert "ciphertext of 52 bytes is not a whole number of 8-byte cipher blocks" in detail[31]
    assert "pad byte 1 is 0x00, expected 0x01" in detail[27]
    assert "pad byte 1 is 0x00, expected 0x01" in detail[32]
    trailer = {r.frame: (r.pad_len, r.next_header) for r in records}
    assert trailer[25] == trailer[31] == (None, None)  # not whole blocks: nothing to read
    assert trailer[27][0] is not None and trailer[32][0] is not None  # bad padding: read
    tagged = {t.frame for t in sc.truth if {"ragged_ciphertext", "bad_padding"} & set(t.tags)}
    assert tagged == {25, 27, 31, 32}
    assert {t.frame for t in sc.truth if "bad_icv" in t.tags} == {36, 42}


def test_ragged_ciphertext_has_a_valid_icv(lane: Options) -> None:
    """The ragged packets fail on their blocks, not on their ICV: both readings agree."""
    sc, records, _ = run_scenario("encauth-faults", lane)
    for frame in (25, 31):
        rec = records[frame - 1]
        sa = _sa(sc, rec.spi or 0)
        esp = _esp(sc, rec)
        block = 16 if sa.algorithm == "cbc(aes)" else 8
        body = len(esp) - 8 - IV_BYTES[sa.algorithm] - sa.icv_bits // 8
        assert body % block == 4
        covered = esp[: -(sa.icv_bits // 8)]
        assert sa.auth_key is not None and sa.auth_algorithm is not None
        mac = hmac.new(sa.auth_key.reveal(), covered, HASHES[sa.auth_algorithm]).digest()
        assert mac[: sa.icv_bits // 8] == esp[-(sa.icv_bits // 8) :]


def test_cbc_iv_reuse_is_high_with_its_reason(lane: Options) -> None:
    sc, _, findings = run_scenario("encauth-faults", lane)
    reuse = [f for f in findings if f.kind is FindingKind.IV_REUSE]
    assert [(f.spi, f.frames, f.severity) for f in reuse] == [
        (0x7501, (5, 6), Severity.HIGH),
        (0x7501, (9, 10), Severity.HIGH),
    ]
    assert sum(f.count - 1 for f in reuse) == sc.facts["iv_repeats"]
    assert all("equal leading plaintext blocks" in f.detail for f in reuse)
    assert all("ciphertext XOR " + "00" * 16 in f.detail for f in reuse)  # same datagram


def test_chained_cbc_ivs_are_an_iv_derivation_finding(lane: Options) -> None:
    sc, _, findings = run_scenario("encauth-faults", lane)
    derivation = {f.spi: f for f in findings if f.kind is FindingKind.IV_DERIVATION}
    chained = derivation[0x7502]
    assert "chained" in chained.detail and chained.severity is Severity.HIGH
    assert chained.count == sc.facts["iv_chained"] == 9
    assert chained.frames[0] == 14  # the SA's second packet: the first IV is echainiv's
    assert all("chained" not in f.detail or f.spi == 0x7502 for f in derivation.values())


# -- tshark cross-check --------------------------------------------------------------------

TSHARK_FIELDS = (
    "frame.number",
    "esp.spi",
    "esp.icv_good",
    "esp.icv_bad",
    "esp.protocol",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "esp.pad_len",
)


def _skip_unless_it_reads(command: str, capture: Path) -> None:
    """A peer on PATH that cannot open a file here is absent, not in disagreement.

    ``tshark44`` is a wrapper that runs Debian 13's tshark in a chroot
    (docs/performance.md): where the chroot cannot be entered, or sees no
    ``/tmp``, it fails before reading a frame, and that says nothing about us.
    """
    probe = subprocess.run(
        [command, "-n", "-r", str(capture), "-c", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=capture.parent,
        check=False,
    )
    if probe.returncode != 0 or not probe.stdout.strip():
        said = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"{command} is installed but cannot read {capture.name} here: {said}")


def _tshark_rows(command: str, capture: Path, esp_sa: str) -> list[dict[str, str]]:
    opts = ["-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE"]
    for row in esp_sa.splitlines():
        opts += ["-o", f"uat:esp_sa:{row}"]
    fields = [arg for name in TSHARK_FIELDS for arg in ("-e", name)]
    res = subprocess.run(
        [command, "-n", "-r", str(capture), *opts, "-T", "fields", *fields],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=capture.parent,  # a folder the chroot of tshark44 sees
    )
    return [
        dict(zip(TSHARK_FIELDS, line.split("\t"), strict=True)) for line in res.stdout.splitlines()
    ]


def _flag(value: str) -> bool:
    return value in ("1", "True")  # tshark 4.0 prints 1/0, 4.4 True/False


# (command, ESN columns in the esp_sa rows): tshark 4.0 discards the SN columns, so it is
# given strongSwan's 8 columns, and computes every ICV without the ESN high half, as we
# do from the same rows; tshark 4.4 reads them.
TSHARKS = [("tshark", False), ("tshark44", True)]


@pytest.mark.parametrize(("command", "esn_columns"), TSHARKS)
def test_tshark_agrees_on_every_packet(tmp_path: Path, command: str, esn_columns: bool) -> None:
    """Per frame: tshark's ICV status is our verdict from the same esp_sa rows; what it
    decrypts (next header, pad length, inner ports) is what we report."""
    if shutil.which(command) is None:
        pytest.skip(f"{command} is not installed")
    sc = build_scenario("encauth", seed=1)
    paths = write_scenario(sc, tmp_path, stem="cap")
    _skip_unless_it_reads(command, paths["capture"])
    esp_sa = esp_sa_text(sc.sas, esn_columns=esn_columns)
    rows = _tshark_rows(command, paths["capture"], esp_sa)
    (tmp_path / "rows.esp_sa").write_text(esp_sa, encoding="ascii")
    ours = analyze(paths["capture"], [tmp_path / "rows.esp_sa"]).packets
    _, records, _ = run_scenario(
        "encauth", STEADY
    )  # keys.yaml: every packet ok, with its plaintext
    assert len(rows) == len(ours) == len(records) == 366
    good = [r["frame.number"] for r in rows if _flag(r["esp.icv_good"])]
    bad = [r["frame.number"] for r in rows if _flag(r["esp.icv_bad"])]
    assert [int(f) for f in good] == list(ours[ours["verdict"] == "ok"]["frame"])
    assert [int(f) for f in bad] == list(ours[ours["verdict"] == "auth_fail"]["frame"])
    assert len(good) == (366 if esn_columns else 180)
    for row, rec in zip(rows, records, strict=True):
        assert int(row["esp.spi"], 16) == rec.spi
        sport = row["tcp.srcport"] or row["udp.srcport"]
        dport = row["tcp.dstport"] or row["udp.dstport"]
        got = (int(row["esp.protocol"], 16), int(row["esp.pad_len"]), int(sport), int(dport))
        assert got == (rec.next_header, rec.pad_len, rec.inner_sport, rec.inner_dport), rec.frame
