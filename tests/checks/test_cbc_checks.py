"""The CBC checks on the real cbc(aes) + hmac(sha256) capture, with faults sealed into it.

Each test takes the Linux 6.1 capture in ../shared, decrypts chosen packets
with their real keys and seals them again (same plaintext, same sequence
number, a valid HMAC) with the IV the fault calls for: the IV of an earlier
packet (two packets built from one sequence number, as the esp6 GSO fault
does), or the last ciphertext block of the SA's previous packet (chained
IVs). The analyzer must then name exactly those frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from espforensics import analyze
from espforensics.capture import open_capture
from espforensics.capture.writer import write_pcap
from espforensics.crypto import EncAuthContext
from espforensics.keys import load_sas
from espforensics.model.enums import FindingKind, Severity
from espforensics.model.records import Frame
from tests.support import helpers

pytestmark = helpers.needs_captures  # every test reads the capture in ../shared
FOLDER = helpers.CAPTURES / "linux-6.1" / "cbc-aes-hmac-sha256-v4"
ESP_AT = 14 + 20  # Ethernet, IPv4 without options: transport mode ESP
SPI = 0x1001


@dataclass(frozen=True)
class Sealed:
    frame: int
    seq: int
    iv: bytes
    ciphertext: bytes


def _frames() -> list[Frame]:
    with open_capture(FOLDER / "capture.pcap") as capture:
        return [f for f in capture if isinstance(f, Frame)]


def _context() -> EncAuthContext:
    (sa,) = [sa for sa in load_sas([FOLDER / "xfrm-state.txt"]) if sa.spi == SPI]
    return EncAuthContext(sa)


def _esp(frame: Frame) -> Sealed | None:
    data = frame.data
    if len(data) < ESP_AT + 8 or int.from_bytes(data[ESP_AT : ESP_AT + 4]) != SPI:
        return None
    seq = int.from_bytes(data[ESP_AT + 4 : ESP_AT + 8])
    body = data[ESP_AT + 8 :]
    return Sealed(frame.number, seq, body[:16], body[16:-16])


def _reseal(frame: Frame, ctx: EncAuthContext, iv: bytes) -> Frame:
    """The frame with its plaintext sealed again under ``iv`` (same length, valid HMAC)."""
    esp = _esp(frame)
    assert esp is not None
    body = frame.data[ESP_AT + 8 :]
    plain = ctx.open(esp.seq, body[:16], body[16:])
    assert plain is not None
    data = frame.data[: ESP_AT + 8] + iv + ctx.seal(esp.seq, iv, plain)
    return frame._replace(data=data)


def _write(tmp_path: Path, frames: list[Frame]) -> Path:
    path = tmp_path / "forged.pcap"
    with path.open("wb") as fh:
        write_pcap(fh, frames, linktype=1, nanosecond=False)
    return path


def test_a_cbc_iv_repeated_under_one_key_is_high_with_its_reason(tmp_path: Path) -> None:
    frames, ctx = _frames(), _context()
    mine = [f for f in frames if _esp(f) is not None]
    first, second = mine[10], mine[40]  # frames of SPI 0x1001, far apart
    first_iv = _esp(first).iv  # type: ignore[union-attr]
    frames[second.number - 1] = _reseal(second, ctx, first_iv)
    result = analyze(_write(tmp_path, frames), [FOLDER / "xfrm-state.txt"])
    packets = result.packets
    assert set(packets.loc[packets["proto"] == "esp", "verdict"]) == {"ok"}  # still verify
    reused = packets[packets["iv_reused"].fillna(False).astype(bool)]
    assert list(reused["frame"]) == [second.number]
    (finding,) = [f for f in result.summary.finding_list if f.kind is FindingKind.IV_REUSE]
    assert finding.severity is Severity.HIGH  # CBC: not a keystream reuse
    assert finding.frames == (first.number, second.number)
    assert finding.detail.startswith(f"IV {first_iv.hex()} used 2 times")
    assert "equal leading plaintext blocks" in finding.detail
    assert "one sequence number" in finding.detail


def test_cbc_ivs_chained_from_the_previous_ciphertext_are_named(tmp_path: Path) -> None:
    frames, ctx = _frames(), _context()
    mine = [f for f in frames if _esp(f) is not None]
    chained = []
    for before, frame in pairwise(mine[20:25]):
        previous = frames[before.number - 1]  # as sealed, the chained one included
        last_block = previous.data[-16 - 16 : -16]  # before the 16-byte ICV
        frames[frame.number - 1] = _reseal(frame, ctx, last_block)
        chained.append(frame.number)
    result = analyze(_write(tmp_path, frames), [FOLDER / "xfrm-state.txt"])
    packets = result.packets
    assert set(packets.loc[packets["proto"] == "esp", "verdict"]) == {"ok"}
    derivation = [
        f
        for f in result.summary.finding_list
        if f.kind is FindingKind.IV_DERIVATION and f.spi == SPI
    ]
    # Two proofs: each IV is the block before it, and none decodes to its own seq64.
    finding, deviating = sorted(derivation, key=lambda f: "chained" not in f.detail)
    assert finding.severity is Severity.HIGH
    assert finding.frames == tuple(chained)
    assert finding.count == 4
    assert "4 of 318 CBC IVs are chained" in finding.detail
    assert (deviating.severity, deviating.frames, deviating.count) == (
        Severity.HIGH,
        tuple(chained),
        4,
    )
    assert "4 of 318 IVs not built from their own sequence number" in deviating.detail
    details = packets.set_index("frame").loc[chained, "detail"]
    for number, detail in zip(chained, details, strict=True):
        assert f"IV is the last ciphertext block of frame {frame_before(mine, number)}" in detail


def frame_before(mine: list[Frame], number: int) -> int:
    numbers = [f.number for f in mine]
    return numbers[numbers.index(number) - 1]


def test_the_clean_capture_has_echainiv_ivs_each_built_from_its_own_seq() -> None:
    """Linux 6.1 made every CBC IV with echainiv: decrypted, its words are seq64 x (salt|1)."""
    result = analyze(FOLDER / "capture.pcap", [FOLDER / "xfrm-state.txt"])
    derivation = [f for f in result.summary.finding_list if f.kind is FindingKind.IV_DERIVATION]
    assert derivation == []
    esp = result.packets[result.packets["proto"] == "esp"]
    assert len(esp) == 525 and set(esp["iv_seq_delta"]) == {0}
    assert result.summary.findings[FindingKind.IV_REUSE] == 0
    assert result.summary.verdicts["ok"] == 525


def test_a_cbc_iv_built_from_the_next_sequence_number_is_named(tmp_path: Path) -> None:
    """The esp6 GSO fault's pattern under CBC: a packet sealed with the IV echainiv makes for
    seq + 1. Nothing repeats, so only the IV generator read back with the key shows it."""
    frames, ctx = _frames(), _context()
    mine = [f for f in frames if _esp(f) is not None]
    # The IVs of two packets of the SA, each of which the next packet's: built from seq + 1.
    early, late = mine[50], mine[90]
    for frame in (early, late):
        after = next(f for f in mine if _esp(f).seq == _esp(frame).seq + 1)  # type: ignore[union-attr]
        frames[frame.number - 1] = _reseal(frame, ctx, _esp(after).iv)  # type: ignore[union-attr]
        frames[after.number - 1] = _reseal(after, ctx, _esp(frame).iv)  # type: ignore[union-attr]
    result = analyze(_write(tmp_path, frames), [FOLDER / "xfrm-state.txt"])
    rows = result.packets.set_index("frame")
    assert rows.loc[early.number, "iv_seq_delta"] == 1
    assert rows.loc[late.number, "iv_seq_delta"] == 1
    (finding,) = [f for f in result.summary.finding_list if f.kind is FindingKind.IV_DERIVATION]
    assert finding.severity is Severity.HIGH and finding.count == 4  # the pairs' other halves
    assert "4 of 318 IVs not built from their own sequence number" in finding.detail
    assert "seq+1 x2" in finding.detail and "seq-1 x2" in finding.detail


def _misplace(frame: Frame) -> Frame:
    """The frame with a clear 20-byte IPv4 header between the outer header and ESP."""
    data = frame.data
    inner_len = len(data) - ESP_AT + 20
    clear = bytes([0x45, 0]) + inner_len.to_bytes(2) + bytes(5) + b"\x32" + bytes(10)
    outer = bytearray(data[14:ESP_AT])
    outer[2:4] = (len(outer) + len(clear) + len(data) - ESP_AT).to_bytes(2)
    outer[10:12] = b"\0\0"
    words = sum(int.from_bytes(outer[i : i + 2]) for i in range(0, 20, 2))
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    outer[10:12] = (~words & 0xFFFF).to_bytes(2)
    data = data[:14] + bytes(outer) + clear + data[ESP_AT:]
    return frame._replace(data=data, caplen=len(data), wirelen=len(data))


def test_a_cbc_esp_header_20_bytes_late_is_proven_misplaced_by_decryption(tmp_path: Path) -> None:
    frames = _frames()
    mine = [f for f in frames if _esp(f) is not None]
    moved = [mine[5].number, mine[6].number]
    for number in moved:
        frames[number - 1] = _misplace(frames[number - 1])
    result = analyze(_write(tmp_path, frames), [FOLDER / "xfrm-state.txt"])
    rows = result.packets.set_index("frame").loc[moved]
    assert list(rows["verdict"]) == ["esp_misplaced"] * 2
    assert list(rows["expected_offset"]) == [20, 20]
    assert list(rows["esp_offset"]) == [40, 40]
    assert list(rows["leaked"]) == [20, 20]
    assert all("proven by decryption there" in d for d in rows["detail"])
    assert list(rows["inner_proto"]) == ["tcp", "tcp"]  # the plaintext decoded from there
    (finding,) = [f for f in result.summary.finding_list if f.kind is FindingKind.ESP_MISPLACED]
    assert (finding.severity, finding.frames, finding.count) == (Severity.CRITICAL, tuple(moved), 2)
    assert "20 -> 40" in finding.detail and "2 proven by decryption" in finding.detail


def test_cbc_with_esn_verifies_the_high_half_and_names_a_packet_sealed_with_the_next(
    tmp_path: Path,
) -> None:
    """ESN on for SPI 0x1001: every packet sealed again with the high half 0 in its ICV
    (RFC 4303 s2.2.1), one with the high half 1: that one is esn_mismatch."""
    frames, plain_ctx = _frames(), _context()
    keys = tmp_path / "esn.txt"
    text = (FOLDER / "xfrm-state.txt").read_text()
    keys.write_text(
        text.replace(
            "spi 0x00001001 reqid 1 mode transport\n",
            "spi 0x00001001 reqid 1 mode transport\n\tflag esn\n",
        )
    )
    (esn_sa,) = [sa for sa in load_sas([keys]) if sa.spi == SPI]
    assert esn_sa.esn
    esn_ctx = EncAuthContext(esn_sa)
    mine = [f for f in frames if _esp(f) is not None]
    odd = mine[30].number
    for frame in mine:
        esp = _esp(frame)
        assert esp is not None
        body = frame.data[ESP_AT + 8 :]
        plain = plain_ctx.open(esp.seq, body[:16], body[16:])
        assert plain is not None
        seq64 = esp.seq + ((1 << 32) if frame.number == odd else 0)
        data = frame.data[: ESP_AT + 8] + esp.iv + esn_ctx.seal(seq64, esp.iv, plain)
        frames[frame.number - 1] = frame._replace(data=data)
    result = analyze(_write(tmp_path, frames), [keys])
    packets = result.packets
    mine_rows = packets[packets["spi"] == SPI]
    assert mine_rows.loc[mine_rows["frame"] == odd, "verdict"].tolist() == ["esn_mismatch"]
    others = mine_rows[mine_rows["frame"] != odd]
    assert set(others["verdict"]) == {"ok"} and len(others) == 317
    assert set(others["seq_hi_verified"]) == {0}
    row = packets.set_index("frame").loc[odd]
    assert row["seq_hi_verified"] == 1
    assert "ICV verifies only with ESN high half 0x1" in row["detail"]
