"""``analyze --annotate``: the capture again, every frame as it was, the findings as comments.

The output is read back with a small pcapng parser of this file (not the
analyzer's reader): every frame's bytes, lengths, link type and
timestamp must equal the scenario's, and each frame's comments must be
the ones its truth calls for. With tshark installed, Wireshark's own
filter ``frame.comment contains "espforensics: KIND"`` must select as
many frames as the findings of that kind count.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.analysis import analyze_to_dir
from espforensics.cli import app
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.keys import SaTable
from espforensics.model.enums import FindingKind, SeqAnomaly, Severity, Verdict
from espforensics.model.evidence import EsnWrap
from espforensics.model.records import Finding, PacketRecord
from espforensics.rewrite import WRITERS, CaptureCopies
from espforensics.rewrite.comments import FindingMarks
from espforensics.synth import Scenario, build_scenario, write_scenario
from tests.support import helpers

runner = CliRunner()
TSHARK = shutil.which("tshark")
PER_PACKET = (  # kinds whose count is of packets, each commented once
    FindingKind.ESP_MISPLACED,
    FindingKind.CLEARTEXT_LEAK,
    FindingKind.IV_REUSE,
    FindingKind.IV_DERIVATION,
    FindingKind.SEQ_DUPLICATE,
    FindingKind.SEQ_REORDER,
    FindingKind.ESN_MISMATCH,
)


@dataclass(frozen=True)
class Packet:
    if_id: int
    linktype: int
    ts_ns: int
    caplen: int
    wirelen: int
    data: bytes
    comments: tuple[str, ...]


def read_pcapng(path: Path) -> tuple[list[int], list[Packet]]:
    """Block types in order and the EPBs, parsed with struct (pcapng s3-s4)."""
    raw = path.read_bytes()
    types, packets = [], []
    interfaces: list[tuple[int, int]] = []  # (linktype, ticks per second)
    off, order = 0, "<"
    while off < len(raw):
        if raw[off : off + 4] == b"\x0a\x0d\x0d\x0a":
            order = "<" if raw[off + 8 : off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            interfaces = []
        btype, blen = struct.unpack_from(order + "II", raw, off)
        types.append(btype)
        body = raw[off + 8 : off + blen - 4]
        if btype == 1:
            linktype = struct.unpack_from(order + "H", body)[0]
            opts = _options(order, body[8:])
            res = opts.get(9, [b"\x06"])[0][0]
            interfaces.append((linktype, 10**res))
        elif btype == 6:
            if_id, high, low, caplen, wirelen = struct.unpack_from(order + "IIIII", body)
            data = body[20 : 20 + caplen]
            opts = _options(order, body[20 + caplen + (-caplen % 4) :])
            linktype, per_s = interfaces[if_id]
            ts_ns = ((high << 32) | low) * 1_000_000_000 // per_s
            comments = tuple(v.decode() for v in opts.get(1, []))
            packets.append(Packet(if_id, linktype, ts_ns, caplen, wirelen, data, comments))
        off += blen
    return types, packets


def _options(order: str, raw: bytes) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    pos = 0
    while pos + 4 <= len(raw):
        code, length = struct.unpack_from(order + "HH", raw, pos)
        if code == 0:
            break
        out.setdefault(code, []).append(raw[pos + 4 : pos + 4 + length])
        pos += 4 + length + (-length % 4)
    return out


def annotate(tmp: Path, sc: Scenario, **write: str) -> tuple[Path, list[Finding], Path]:
    files = write_scenario(sc, tmp / "in", **write)  # type: ignore[arg-type]
    target = tmp / "annotated.pcapng"
    summary = analyze_to_dir(
        files["capture"],
        SaTable(sc.sas),
        tmp / "out",
        plots=False,
        copies=CaptureCopies(annotate=target),
    )
    return target, list(summary.finding_list), files["capture"]


def _iv(sc: Scenario, number: int) -> str:
    truth, frame = sc.truth[number - 1], sc.frames[number - 1]
    assert truth.esp_offset is not None
    start = 14 + truth.esp_offset + ESP_HEADER_LEN  # Ethernet
    return frame.data[start : start + 8].hex()


def test_every_frame_as_it_was_and_the_gso_comments(tmp_path: Path) -> None:
    sc = build_scenario("kernel-gso-v4", seed=1)
    target, _, _ = annotate(tmp_path, sc)
    _, packets = read_pcapng(target)
    assert len(packets) == len(sc.frames) == 25
    for pkt, frame, truth in zip(packets, sc.frames, sc.truth, strict=True):
        got = (pkt.data, pkt.ts_ns, pkt.caplen, pkt.wirelen, pkt.linktype)
        assert got == (frame.data, frame.ts_ns, frame.caplen, frame.wirelen, frame.linktype)
        want: tuple[str, ...] = ()
        if truth.verdict is Verdict.ESP_MISPLACED:
            want = (
                f"espforensics: esp_misplaced: ESP at {truth.esp_offset}, not "
                f"{truth.expected_offset}; {truth.leaked} inner bytes in clear",
                f"espforensics: cleartext_leak: {truth.leaked} inner bytes in clear "
                "(IPv4 version+IHL, TOS, total length)",
            )
        assert pkt.comments == want, frame.number
    assert sum(bool(p.comments) for p in packets) == sc.facts["esp_misplaced"] == 12


def test_iv_reuse_names_the_other_frame(tmp_path: Path) -> None:
    sc = build_scenario("iv-reuse", seed=1)
    target, _, _ = annotate(tmp_path, sc)
    _, packets = read_pcapng(target)
    first = next(t.frame for t in sc.truth if t.seq64 == 300)
    second = next(t.frame for t in sc.truth if t.seq64 == 700)
    iv = _iv(sc, first)
    assert iv == _iv(sc, second)
    commented = {n: p.comments for n, p in enumerate(packets, 1) if p.comments}
    assert commented == {
        first: (f"espforensics: iv_reuse: IV {iv} also in frame {second} (same key)",),
        second: (
            "espforensics: iv_derivation: IV built from seq 300 (seq-400)",
            f"espforensics: iv_reuse: IV {iv} also in frame {first} (same key)",
        ),
    }


def test_pcapng_blocks_kept_and_no_secrets_block(tmp_path: Path) -> None:
    """Interfaces of several link types stay; the input's Decryption Secrets Block goes."""
    sc = build_scenario("pcapng-dsb", seed=1)
    target, _, capture = annotate(tmp_path, sc)
    types_in, packets_in = read_pcapng(capture)
    types_out, packets_out = read_pcapng(target)
    assert 0x0A in types_in and 0x0A not in types_out
    assert [t for t in types_in if t != 0x0A] == types_out
    assert [(p.data, p.ts_ns, p.if_id) for p in packets_in] == [
        (p.data, p.ts_ns, p.if_id) for p in packets_out
    ]
    sc = build_scenario("link-all", seed=1)
    target, _, capture = annotate(tmp_path / "links", sc)
    assert read_pcapng(capture) == read_pcapng(target)  # nothing to comment: identical


def test_compressed_input_gives_the_same_file(tmp_path: Path) -> None:
    sc = build_scenario("kernel-gso-v6", seed=1)
    plain, _, _ = annotate(tmp_path / "plain", sc)
    packed, _, capture = annotate(tmp_path / "zstd", sc, compression="zstd")
    assert capture.suffix == ".zst"
    assert plain.read_bytes() == packed.read_bytes()


def test_a_damaged_capture_keeps_the_frames_read(tmp_path: Path) -> None:
    sc = build_scenario("kernel-gso-v4", seed=1)
    files = write_scenario(sc, tmp_path / "in")
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(files["capture"].read_bytes()[:-100])  # inside the last record
    target = tmp_path / "a.pcapng"
    res = runner.invoke(
        app, ["analyze", str(cut), "--sa", str(files["keys"]), "--out", str(tmp_path / "o"),
              "--annotate", str(target), "--no-plots", "-q"],
    )  # fmt: skip
    assert res.exit_code == 2, res.stderr
    _, packets = read_pcapng(target)
    assert [p.data for p in packets] == [f.data for f in sc.frames[:-1]]
    assert not Path(f"{target}.partial").exists()


def _record(**fields: object) -> PacketRecord:
    return PacketRecord(7, 0, 100, 100, **fields)  # type: ignore[arg-type]


COMMENT_CASES = [
    (_record(verdict=Verdict.OK), ()),
    (_record(verdict=Verdict.NOT_ESP, detail="ARP"), ()),
    (
        _record(
            verdict=Verdict.ESP_MISPLACED, esp_offset=60, expected_offset=40, leaked=4,
            leaked_fields="IPv4 version+IHL, TOS, total length",
            detail="ESP header at offset 60, expected at 40; 4 bytes in clear before it; "
            "unproven: no key, found by layout",
        ),
        ("espforensics: esp_misplaced: ESP at 60, not 40; 4 inner bytes in clear; "
         "unproven (no key: found by layout)",
         "espforensics: cleartext_leak: 4 inner bytes in clear "
         "(IPv4 version+IHL, TOS, total length)"),
    ),
    (
        _record(verdict=Verdict.AUTH_FAIL, spi=0x1001, seq=9, esp_offset=20),
        ("espforensics: auth_fail: ICV does not verify at offset 20, SPI 0x00001001 seq 9",),
    ),
    (
        _record(verdict=Verdict.UNKNOWN_SA, detail="no key for SPI 0x00008103"),
        ("espforensics: unknown_sa: no key for SPI 0x00008103",),
    ),
    (
        _record(verdict=Verdict.BAD_TRAILER, detail="pad byte 1 is 0x00, expected 0x01"),
        ("espforensics: bad_trailer: pad byte 1 is 0x00, expected 0x01",),
    ),
    (
        _record(verdict=Verdict.OK, iv="00112233445566aa", iv_reused=True, seq64=5,
                seq_anomaly=SeqAnomaly.DUPLICATE),
        ("espforensics: seq_duplicate: seq 5 seen before",
         "espforensics: iv_reuse: IV 00112233445566aa used before (same key)"),
    ),
    (
        _record(verdict=Verdict.OK, leaked_fields="possible: IPv4 version+IHL"),
        ("espforensics: cleartext_leak: IPv4 version+IHL in clear? (not proven)",),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("rec", "want"), COMMENT_CASES)
def test_comment_of_a_record(rec: PacketRecord, want: tuple[str, ...]) -> None:
    assert FindingMarks([]).comments(rec) == want


def test_comment_of_a_listed_frame() -> None:
    wrap = Finding(
        FindingKind.ESN_WRAP, Severity.INFO, 0x6001, (7,), 1,
        "SPI 0x00006001 192.0.2.1 -> 192.0.2.2: sequence number crossed into high half 0x1 "
        "at frame 7", evidence=EsnWrap(7, 1),
    )  # fmt: skip
    reuse = Finding(FindingKind.IV_REUSE, Severity.CRITICAL, 1, (3, 7), 2, "IV ...")
    marks = FindingMarks([wrap, reuse])
    assert marks.comments(_record(iv="ab" * 8, iv_reused=True)) == (
        f"espforensics: iv_reuse: IV {'ab' * 8} also in frame 3 (same key)",
        "espforensics: esn_wrap: sequence number crossed into high half 0x1",
    )


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
@pytest.mark.parametrize(
    "name", ["iv-reuse", "kernel-gso-v4", "kernel-gso-v6", "sequence", "esn-below"]
)
def test_tshark_filter_counts_equal_the_findings(tmp_path: Path, name: str) -> None:
    sc = build_scenario(name, seed=1)
    target, findings, _ = annotate(tmp_path, sc)
    kinds = {f.kind for f in findings if f.kind in PER_PACKET}
    assert kinds
    for kind in kinds:
        shown = subprocess.run(
            [str(TSHARK), "-r", str(target), "-Y",
             f'frame.comment contains "espforensics: {kind.value}"', "-T", "fields",
             "-e", "frame.number"],
            check=True, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        assert len(shown) == sum(f.count for f in findings if f.kind is kind), kind
        listed = {n for f in findings if f.kind is kind for n in f.frames}
        assert listed <= {int(n) for n in shown}


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("missing/a.pcapng", "cannot write: its folder does not exist"),
        ("existing.pcapng", "exists; use --force to overwrite it"),
        ("folder", "is a folder"),
    ],
)
def test_a_target_that_cannot_be_written_is_one_line(
    tmp_path: Path, where: str, message: str
) -> None:
    sc = build_scenario("kernel-gso-v4", seed=1)
    files = write_scenario(sc, tmp_path / "in")
    (tmp_path / "existing.pcapng").write_bytes(b"keep")
    (tmp_path / "folder").mkdir()
    target = tmp_path / where
    for option in ("--annotate", "--decrypted"):
        res = runner.invoke(
            app, ["analyze", str(files["capture"]), "--out", str(tmp_path / "o"),
                  option, str(target), "-q"],
        )  # fmt: skip
        assert res.exit_code == 2
        assert res.stderr == f"espforensics: error: {target}: {message}\n"
    assert (tmp_path / "existing.pcapng").read_bytes() == b"keep"
    assert not (tmp_path / "o").exists()  # refused before the analysis started


REAL = helpers.CAPTURES / "linux-6.1"


def test_every_copy_of_the_registry_is_written(tmp_path: Path) -> None:
    """``WRITERS`` and ``CaptureCopies`` name the same copies, and each one is written."""
    assert set(WRITERS) == {f.name for f in fields(CaptureCopies)}
    sc = build_scenario("kernel-gso-v4", seed=1)
    files = write_scenario(sc, tmp_path / "in")
    copies = CaptureCopies(**{name: tmp_path / f"{name}.pcapng" for name in WRITERS})
    analyze_to_dir(files["capture"], SaTable(sc.sas), tmp_path / "o", plots=False, copies=copies)
    for _, target in copies.targets():
        _, packets = read_pcapng(target)
        assert len(packets) == len(sc.frames) and sum(bool(p.comments) for p in packets) >= 12


@helpers.needs_captures
def test_real_gso_capture_comments_count_as_the_findings(tmp_path: Path) -> None:
    folder = REAL / "ip6tnl-transport-tso-on"
    target = tmp_path / "a.pcapng"
    summary = analyze_to_dir(
        folder / "capture.pcap",
        [folder / "xfrm-state.txt"],
        tmp_path / "o",
        plots=False,
        copies=CaptureCopies(annotate=target),
    )
    _, packets = read_pcapng(target)
    assert len(packets) == summary.capture.frames == 690
    counts = {
        kind: sum(any(c.startswith(f"espforensics: {kind.value}:") for c in p.comments)
                  for p in packets)
        for kind in PER_PACKET
    }  # fmt: skip
    want = {k: sum(f.count for f in summary.finding_list if f.kind is k) for k in PER_PACKET}
    assert counts == want
    assert want[FindingKind.ESP_MISPLACED] == 94 and want[FindingKind.IV_REUSE] == 64
