"""Clear-text leaks between the ESP header and the ICV, built from real fixture packets.

A sender that forgets to encrypt puts the inner packet where the ciphertext
belongs: the ICV then fails, and the bytes after the IV parse as a clear IP
header with a valid checksum. The leak check must name those bytes; on the
untouched packets it must report nothing.
"""

from __future__ import annotations

from espforensics.analyzer.frame import FrameAnalyzer
from espforensics.checks.leaks import name_fields
from espforensics.crypto import AeadContext
from espforensics.decode.clear import clear_ip_header
from espforensics.keys import SaTable, SecurityAssociation
from espforensics.keys.sa import NULL_CIPHER
from espforensics.model.enums import FindingKind, Severity, Verdict
from espforensics.model.evidence import Leak, LeakProof
from espforensics.model.options import Options
from espforensics.model.records import Frame
from espforensics.synth import build_scenario
from tests.support.helpers import iter_rows

ETH, HDR = 14, 16  # Ethernet header; ESP header + IV


def _unencrypted(frame: Frame, offset: int, sas: tuple[SecurityAssociation, ...]) -> Frame:
    """The same packet with its plaintext written where the ciphertext was."""
    data = frame.data
    esp = ETH + offset
    spi = int.from_bytes(data[esp : esp + 4], "big")
    seq = int.from_bytes(data[esp + 4 : esp + 8], "big")
    [sa] = [s for s in sas if s.spi == spi]
    plain = AeadContext(sa).open(seq, data[esp + 8 : esp + 16], data[esp + HDR :])
    assert plain is not None
    clear = data[: esp + HDR] + plain + data[esp + HDR + len(plain) :]
    return frame._replace(data=clear)


V4_FIELDS = (
    "IPv4 version+IHL, TOS, total length, identification, flags+fragment offset, "
    "TTL, protocol, header checksum, source address, destination address"
)
V6_FIELDS = (
    "IPv6 version+traffic class+flow label, payload length, next header, hop limit, "
    "source address, destination address"
)


def test_unencrypted_inner_header_is_named(lane: Options) -> None:
    sc = build_scenario("ipv6-tunnel", seed=1)
    table = SaTable(sc.sas)
    frames = list(sc.frames)
    ok = [t for t in sc.truth if t.verdict is Verdict.OK]
    targets = [t for t in ok if t.next_header == 4][:2] + [t for t in ok if t.next_header == 41][:1]
    for t in targets:
        assert t.esp_offset is not None
        frames[t.frame - 1] = _unencrypted(frames[t.frame - 1], t.esp_offset, sc.sas)
    analyzer = FrameAnalyzer(table, lane, "ipv6-tunnel")
    records = list(iter_rows(frames, analyzer, lane))
    leaked = {r.frame: (r.verdict, r.leaked, r.leaked_fields) for r in records if r.leaked}
    assert leaked == {
        t.frame: (Verdict.AUTH_FAIL, 20, V4_FIELDS)
        if t.next_header == 4
        else (Verdict.AUTH_FAIL, 40, V6_FIELDS)
        for t in targets
    }
    found = [f for f in analyzer.findings if f.kind is FindingKind.CLEARTEXT_LEAK]
    assert sum(f.count for f in found) == 3  # one finding per SPI
    assert {n for f in found for n in f.frames} == set(leaked)
    # No ICV verified them: the proof is the layout (a whole clear packet, then a trailer),
    # and the finding names the other way such bytes reach a capture, ESP crypto offload.
    fields = {V4_FIELDS, V6_FIELDS}
    for f in found:
        assert f.severity is Severity.CRITICAL and isinstance(f.evidence, Leak)
        assert f.evidence.proof is LeakProof.LAYOUT and set(f.evidence.fields) <= fields
        assert f.detail.startswith(f"{f.count} packets whose ICV does not verify carry a whole ")
        assert "captured on a host whose NIC does ESP crypto offload" in f.detail


def test_encrypted_packets_leak_nothing(lane: Options) -> None:
    sc = build_scenario("ipv6-tunnel", seed=1)
    analyzer = FrameAnalyzer(SaTable(sc.sas), lane, "ipv6-tunnel")
    assert not any(r.leaked for r in iter_rows(sc.frames, analyzer, lane))
    assert analyzer.findings == []


def test_field_names_and_header_test() -> None:
    assert name_fields(bytes.fromhex("4500 22de")) == "IPv4 version+IHL, TOS, total length"
    assert name_fields(bytes.fromhex("450022")) == "IPv4 version+IHL, TOS, part of total length"
    assert name_fields(bytes.fromhex("60000000 0014")) == (
        "IPv6 version+traffic class+flow label, payload length"
    )
    assert name_fields(b"\x99\x98") == "2 unidentified bytes"
    header = bytes.fromhex("45000028a4ad4000400678800a01038f0a010612")  # checksum valid
    assert clear_ip_header(header + bytes(20), 0, 40) == 20
    broken = header[:10] + b"\x00\x00" + header[12:]
    assert clear_ip_header(broken + bytes(20), 0, 40) == 0


def test_keyless_null_packets_are_clear_not_proven_leaks_and_have_no_iv(lane: Options) -> None:
    """ecb(cipher_null) sends its payload in clear right after the ESP header (RFC 2410).

    Without a key that cannot be told from a leak: one high finding per such SA
    that says so, never critical; and the bytes after the header are no IV, so
    no IV reuse or derivation finding names those SAs. With the key, nothing.
    """
    sc = build_scenario("encauth", seed=1)
    null = {sa.spi for sa in sc.sas if sa.algorithm == NULL_CIPHER}
    packets = {spi: sum(1 for t in sc.truth if t.spi == spi) for spi in null}
    assert len(null) == 10 and all(packets.values())
    keyless = FrameAnalyzer(SaTable(), lane, "encauth")
    records = list(iter_rows(sc.frames, keyless, lane))
    mine = [f for f in keyless.findings if f.spi in null]
    leaks = {f.spi: f for f in mine if f.kind is FindingKind.CLEARTEXT_LEAK}
    assert set(leaks) == null  # tunnel (an IP header) and transport (a TCP/UDP checksum)
    for spi, f in leaks.items():
        assert (f.severity, f.count) == (Severity.HIGH, packets[spi or 0])
        assert "unless the SA uses NULL encryption or GMAC" in f.detail
    assert {f.kind for f in mine} == {FindingKind.CLEARTEXT_LEAK}  # no IV finding
    assert {r.leaked for r in records if r.spi in null} <= {8, 20, 32, 40}  # the headers
    keyed = FrameAnalyzer(SaTable(sc.sas), lane, "encauth")
    list(iter_rows(sc.frames, keyed, lane))
    assert [f for f in keyed.findings if f.kind is FindingKind.CLEARTEXT_LEAK] == []


def test_a_short_clear_tcp_candidate_is_no_segment_and_no_error() -> None:
    """12 bytes then a sound trailer naming TCP: shorter than a TCP header, so not one."""
    from espforensics.decode.clear import clear_transport
    from espforensics.decode.trailer import parse_trailer

    body = bytes(12) + bytes([1, 2, 2, 6])  # payload, pad 1 2, pad length 2, next header TCP
    assert parse_trailer(body) == (12, 2, 6, "")  # the trailer is sound
    data = bytes(8) + body + bytes(12)  # ESP header, then the ICV
    assert clear_transport(data, 8, bytes(4), bytes(4), (12,)) == ("", 0)
