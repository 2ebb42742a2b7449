"""ESP quoted inside ICMP and ICMPv6 errors (issue 34): named, tied to its SA, never counted.

A router that cannot forward an ESP packet (too big, TTL expired, no
route) sends its sender an ICMP error quoting the packet's IP header and
first bytes: the SPI and sequence number (RFC 792, RFC 4443 s2.4). tshark
shows them as ``esp.spi`` and ``esp.sequence`` inside the ICMP layer; the
analysis reports them in ``quoted_spi``/``quoted_seq`` and counts the
error under its SA's ``icmp_quoted``, and the SA's packets, sequence
numbers and findings stay those of the capture without the errors, with
the steady lane on and off.
"""

from __future__ import annotations

import csv
import json
import random
import shutil
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.analysis import analyze_to_dir
from espforensics.decode.clear import internet_checksum
from espforensics.decode.icmp import QuotedEsp, quoted_esp
from espforensics.decode.ip import parse_ip
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord
from espforensics.synth import Scenario, write_scenario
from espforensics.synth.builder import V4_A, V4_B, V6_A, V6_B, CaptureBuilder, ip, sa_pair
from espforensics.synth.packets import icmp6_message, ip_packet, udp_bytes
from espforensics.synth.truth import FrameTruth
from tests.support import helpers

ROUTER4, ROUTER6 = ip("192.0.2.254"), ip("2001:db8::fe")
NATT = frozenset({4500})


def _icmp4(kind: int, code: int, rest: bytes, quote: bytes) -> bytes:
    msg = bytes([kind, code, 0, 0]) + rest + quote
    return msg[:2] + internet_checksum(msg).to_bytes(2) + msg[4:]


def _quote_of(datagram: bytes) -> QuotedEsp | None:
    return quoted_esp(parse_ip(datagram), datagram, NATT)


# -- decode/icmp.py ----------------------------------------------------------------------


def _esp_packets() -> dict[str, bytes]:
    """One ESP datagram of each kind the quotes are cut from (SPI 0x1001 seq 1, ...)."""
    rng = random.Random(7)
    a4 = sa_pair(rng, (0x1001, 0x1002), V4_A, V4_B)[0]
    a6 = sa_pair(rng, (0x2001, 0x2002), V6_A, V6_B)[0]
    natt = sa_pair(rng, (0x3001, 0x3002), V4_A, V4_B, encap_port=4500)[0]
    return {
        "v4": a4.send(b"x" * 64, 59)[0],
        "v6": a6.send(b"y" * 64, 59)[0],
        "natt": natt.send(b"z" * 64, 59)[0],
    }


def test_quoted_esp_reads_the_spi_and_sequence_number_of_every_error() -> None:
    esp = _esp_packets()
    v4, v6, natt = esp["v4"], esp["v6"], esp["natt"]
    a4, b4, a6, b6 = V4_A.packed, V4_B.packed, V6_A.packed, V6_B.packed
    mtu = struct.pack(">HH", 0, 1400)
    cases = [  # (datagram, expected)
        (  # RFC 792's minimum: the IP header and 8 bytes, exactly SPI and seq
            ip_packet(ROUTER4, V4_A, 1, _icmp4(3, 4, mtu, v4[:28])),
            QuotedEsp(
                "ICMP destination unreachable (code 4, MTU 1400)", 4, a4, b4, 0x1001, 1, False
            ),
        ),
        (  # a longer quote (RFC 1812), time exceeded
            ip_packet(ROUTER4, V4_A, 1, _icmp4(11, 0, bytes(4), v4[:100])),
            QuotedEsp("ICMP time exceeded (code 0)", 4, a4, b4, 0x1001, 1, False),
        ),
        (  # a quote that ends inside the sequence number: the SPI alone
            ip_packet(ROUTER4, V4_A, 1, _icmp4(3, 1, bytes(4), v4[:26])),
            QuotedEsp("ICMP destination unreachable (code 1)", 4, a4, b4, 0x1001, None, False),
        ),
        (  # ESP in UDP 4500 (RFC 3948), quoted past its UDP header
            ip_packet(ROUTER4, V4_A, 1, _icmp4(3, 4, mtu, natt[:60])),
            QuotedEsp(
                "ICMP destination unreachable (code 4, MTU 1400)", 4, a4, b4, 0x3001, 1, True
            ),
        ),
        (  # ICMPv6 packet too big (RFC 4443 s3.2)
            ip_packet(
                ROUTER6, V6_A, 58, icmp6_message(ROUTER6, V6_A, 2, struct.pack(">I", 1280) + v6)
            ),
            QuotedEsp("ICMPv6 packet too big (code 0, MTU 1280)", 6, a6, b6, 0x2001, 1, False),
        ),
        (
            ip_packet(ROUTER6, V6_A, 58, icmp6_message(ROUTER6, V6_A, 3, bytes(4) + v6[:48])),
            QuotedEsp("ICMPv6 time exceeded (code 0)", 6, a6, b6, 0x2001, 1, False),
        ),
    ]
    for datagram, want in cases:
        assert _quote_of(datagram) == want
    ike = udp_bytes(V4_A, V4_B, 4500, 4500, bytes(4) + b"IKE message")
    not_quotes = [
        ip_packet(ROUTER4, V4_A, 1, _icmp4(0, 0, bytes(4), v4[:28])),  # an echo reply
        ip_packet(ROUTER4, V4_A, 1, _icmp4(3, 3, bytes(4), v4[:22])),  # the quote ends in it
        ip_packet(ROUTER4, V4_A, 1, _icmp4(3, 3, bytes(4), v4[:19])),  # no whole IP header
        ip_packet(ROUTER4, V4_A, 1, _icmp4(3, 3, bytes(4), ip_packet(V4_A, V4_B, 17, ike))),
        ip_packet(ROUTER4, V4_A, 1, _icmp4(3, 3, bytes(4), v4[:20] + bytes(8))),  # SPI 0
        ip_packet(ROUTER4, V4_A, 17, udp_bytes(ROUTER4, V4_A, 1, 2, v4)),  # not ICMP
        ip_packet(ROUTER6, V6_A, 58, icmp6_message(ROUTER6, V6_A, 129, bytes(4) + v6)),  # echo
    ]
    for datagram in not_quotes:
        assert _quote_of(datagram) is None, datagram.hex()
    later = bytearray(v4[:28])
    later[6:8] = (0x0010).to_bytes(2)  # a later fragment: its first bytes are not ESP's
    assert _quote_of(ip_packet(ROUTER4, V4_A, 1, _icmp4(3, 4, mtu, bytes(later)))) is None


# -- the analysis ------------------------------------------------------------------------

QUOTING = {6: 28, 51: 200}  # packet index of SA 0x1001 -> bytes quoted by the router
QUOTING6 = 8  # packet index of SA 0x2001 quoted by a packet too big


def _capture(with_errors: bool) -> Scenario:
    """Two SAs' steady traffic; the routers' ICMP errors quoting three of its packets."""
    rng = random.Random(34)
    a4, b4 = sa_pair(rng, (0x1001, 0x1002), V4_A, V4_B)
    a6, b6 = sa_pair(rng, (0x2001, 0x2002), V6_A, V6_B)
    builder = CaptureBuilder(34)
    for i in range(150):
        packet, truth = a4.send(b"x" * (100 + i % 7), 59)
        builder.emit_ip(packet, truth)
        if with_errors and i in QUOTING:
            error = _icmp4(3, 4, struct.pack(">HH", 0, 1400), packet[: QUOTING[i]])
            builder.emit_ip(ip_packet(ROUTER4, V4_A, 1, error), FrameTruth(0, Verdict.NOT_ESP))
        packet, truth = a6.send(b"y" * 60, 59)
        builder.emit_ip(packet, truth)
        if with_errors and i == QUOTING6:
            error = icmp6_message(ROUTER6, V6_A, 2, struct.pack(">I", 1280) + packet)
            builder.emit_ip(ip_packet(ROUTER6, V6_A, 58, error), FrameTruth(0, Verdict.NOT_ESP))
    sas = (a4.sealer, b4.sealer, a6.sealer, b6.sealer)
    return builder.scenario("icmp-quoted", "ICMP errors quoting ESP", sas)


def _esp_only(records: list[PacketRecord]) -> list[PacketRecord]:
    """The ESP rows, numbered as in the capture without the errors (whose timestamps the
    builder draws apart: ``time`` is left out)."""
    errors = sorted(r.frame for r in records if r.quoted_spi is not None)
    return [
        replace(r, frame=r.frame - sum(1 for e in errors if e < r.frame), time=0)
        for r in records
        if r.quoted_spi is None
    ]


@pytest.mark.parametrize("options", [helpers.PER_FRAME, helpers.STEADY], ids=["frame", "lane"])
def test_a_quote_names_its_packet_and_the_sa_counts_nothing_of_it(options: object) -> None:
    from espforensics.model.options import Options

    assert isinstance(options, Options)
    with_errors, without = _capture(True), _capture(False)
    run = helpers.run_frames(with_errors.frames, with_errors.sas, options)
    plain = helpers.run_frames(without.frames, without.sas, options)
    assert len(run.records) == len(with_errors.frames)  # every frame accounted for
    quotes = [
        (r.verdict, r.spi, r.seq, r.quoted_spi, r.quoted_seq, r.quoted_src, r.quoted_dst)
        for r in run.records
        if r.quoted_spi is not None
    ]
    v4, v6 = ("192.0.2.1", "192.0.2.2"), ("2001:db8::1", "2001:db8::2")
    assert quotes == [
        (Verdict.NOT_ESP, None, None, 0x1001, 7, *v4),
        (Verdict.NOT_ESP, None, None, 0x2001, 9, *v6),
        (Verdict.NOT_ESP, None, None, 0x1001, 52, *v4),
    ]
    first = next(r for r in run.records if r.quoted_spi is not None)
    assert first.detail == (
        "ICMP destination unreachable (code 4, MTU 1400) quoting ESP of SPI 0x00001001 seq 7"
        " (192.0.2.1 -> 192.0.2.2)"
    )
    # The SAs are what they are without the errors: packets, sequence numbers, findings.
    assert _esp_only(run.records) == _esp_only(plain.records)
    assert run.findings == plain.findings == []
    assert all(r.verdict is Verdict.OK for r in plain.records)


def test_sas_csv_summary_json_and_report_count_the_quotes(tmp_path: Path) -> None:
    paths = write_scenario(_capture(True), tmp_path / "in")
    out = tmp_path / "out"
    analyze_to_dir(paths["capture"], [paths["keys"]], out, plots=False)
    with (out / "sas.csv").open(newline="") as fh:
        sas = {(r["spi_hex"], r["src"]): r for r in csv.DictReader(fh)}
    assert {k: (r["packets"], r["icmp_quoted"]) for k, r in sas.items()} == {
        ("0x00001001", "192.0.2.1"): ("150", "2"),
        ("0x00002001", "2001:db8::1"): ("150", "1"),
    }
    doc = json.loads((out / "summary.json").read_text())
    assert (doc["esp_packets"], doc["icmp_quoted"], doc["capture"]["frames"]) == (300, 3, 303)
    assert doc["verdicts"]["not_esp"] == 3
    report = (out / "report.txt").read_text()
    assert "ICMP errors quoting its packets: 2 (not counted in them)" in report
    rows = [r for r in helpers.packet_rows(out) if r["quoted_spi"]]
    assert [(r["frame"], r["quoted_spi"], r["quoted_seq"]) for r in rows] == [
        ("14", "4097", "7"),
        ("20", "8193", "9"),
        ("106", "4097", "52"),
    ]


def test_tshark_reads_the_same_quoted_headers(tmp_path: Path) -> None:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark not installed")
    sc = _capture(True)
    paths = write_scenario(sc, tmp_path)
    fields = ["-e", "frame.number", "-e", "esp.spi", "-e", "esp.sequence"]
    shown = subprocess.run(
        [tshark, "-r", str(paths["capture"]), "-Y", "icmp or icmpv6", "-T", "fields", *fields],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    run = helpers.run_frames(sc.frames, sc.sas, helpers.PER_FRAME)
    ours = [
        (str(r.frame), f"{r.quoted_spi:#010x}", str(r.quoted_seq))
        for r in run.records
        if r.quoted_spi is not None
    ]
    assert [tuple(shown[i : i + 3]) for i in range(0, len(shown), 3)] == ours


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([3, 11, 1, 2, 4]), st.binary(max_size=120), st.booleans())
def test_quoted_esp_never_raises(kind: int, body: bytes, v6: bool) -> None:
    """Random quotes after an error's header: a QuotedEsp or None, never an exception."""
    src, dst = (ROUTER6, V6_A) if v6 else (ROUTER4, V4_A)
    datagram = ip_packet(src, dst, 58 if v6 else 1, bytes([kind, 0, 0, 0]) + body)
    found = _quote_of(datagram)
    assert found is None or 0 < found.spi <= 0xFFFFFFFF


def test_the_lane_never_takes_an_error_and_runs_around_it() -> None:
    """engine/wire.py: an ICMP error is no steady frame (it carries no ESP header of its
    own) but inert, so the per-frame path reads it inside the lane's runs; the lane takes
    the ESP frames around it (the records of both lanes are equal, above)."""
    from espforensics.engine.wire import FrameBatch, parse

    sc = _capture(True)
    wire = parse(FrameBatch.of(tuple(sc.frames)), NATT)
    errors = [14, 20, 106]
    assert [n + 1 for n in np.flatnonzero(wire.inert).tolist()] == errors
    assert not wire.steady[[n - 1 for n in errors]].any()
    assert int(wire.steady.sum()) == len(sc.frames) - len(errors)
