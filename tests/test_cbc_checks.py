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

import pytest

from espforensics import analyze
from espforensics.capture import open_capture
from espforensics.capture.writer import write_pcap
from espforensics.crypto import EncAuthContext
from espforensics.keys import load_sas
from espforensics.model import FindingKind, Frame, Severity

FOLDER = Path(__file__).resolve().parents[2] / "shared" / "captures" / "linux-6.1"
FOLDER = FOLDER / "cbc-aes-hmac-sha256-v4"
pytestmark = pytest.mark.skipif(
    not FOLDER.is_dir(), reason="shared/captures not beside the project"
)
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
    (finding,) = derivation
    assert finding.severity is Severity.HIGH
    assert finding.frames == tuple(chained)
    assert finding.count == 4
    assert "4 of 318 CBC IVs are chained" in finding.detail
    details = packets.set_index("frame").loc[chained, "detail"]
    for number, detail in zip(chained, details, strict=True):
        assert f"IV is the last ciphertext block of frame {frame_before(mine, number)}" in detail


def frame_before(mine: list[Frame], number: int) -> int:
    numbers = [f.number for f in mine]
    return numbers[numbers.index(number) - 1]


def test_the_clean_capture_has_echainiv_ivs_and_no_reuse() -> None:
    result = analyze(FOLDER / "capture.pcap", [FOLDER / "xfrm-state.txt"])
    derivation = [f for f in result.summary.finding_list if f.kind is FindingKind.IV_DERIVATION]
    assert [(f.spi, f.severity, f.count) for f in derivation] == [
        (0x1001, Severity.INFO, 318),
        (0x1002, Severity.INFO, 207),
    ]
    assert all("as echainiv makes them" in f.detail for f in derivation)
    assert result.summary.findings[FindingKind.IV_REUSE] == 0
    assert result.summary.verdicts["ok"] == 525
