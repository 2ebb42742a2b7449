"""The fingerprint of a packet's ESP bytes (decode/digest.py): SHA-256 cut to 16 bytes.

The per-packet form (the per-frame path's ``PacketContext.digest``, reconcile's joins),
the batch form and the rows made when asked (the keyless steady lane's) are one rule:
the same bytes give the same digest in each, and any changed byte gives another.
"""

from __future__ import annotations

import hashlib
import mmap
import random
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.checks.context import Flow, PacketContext, SaState
from espforensics.decode.digest import (
    DIGEST_LEN,
    RowDigests,
    esp_digest,
    esp_digests,
    kept_source,
)
from espforensics.model.enums import Verdict
from espforensics.model.records import PacketRecord
from tests.support.bulk_batches import IP, OUTER

# FIPS 180-4's example "abc" (NIST's SHA-256 example values), its first 16 bytes
ABC = bytes.fromhex("ba7816bf8f01cfea414140de5dae2223")


def _packet(size: int = 1_300, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(size)


def test_the_digest_is_sha256s_first_16_bytes() -> None:
    assert DIGEST_LEN == 16
    assert esp_digest(b"abc") == ABC
    packet = _packet()
    assert esp_digest(packet) == hashlib.sha256(packet).digest()[:16]


def test_equal_bytes_give_equal_digests_whatever_holds_them() -> None:
    packet = _packet()
    framed = b"\xee" * 14 + packet + b"\x00" * 4  # in a frame's buffer, between other bytes
    view = memoryview(framed)[14 : 14 + len(packet)]
    assert esp_digest(bytes(packet)) == esp_digest(view) == esp_digest(view.tobytes())


def test_one_flipped_bit_anywhere_gives_another_digest() -> None:
    packet = _packet(200)
    digest = esp_digest(packet)
    seen = {digest}
    for at in range(len(packet)):
        for bit in (0x01, 0x80):
            changed = bytearray(packet)
            changed[at] ^= bit
            other = esp_digest(bytes(changed))
            assert len(other) == DIGEST_LEN
            seen.add(other)
    assert len(seen) == 2 * len(packet) + 1  # every one differs from the rest
    assert esp_digest(packet[:-1]) != digest  # and one byte fewer


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600), st.lists(st.tuples(st.integers(0, 600), st.integers(0, 600))))
def test_the_batch_form_is_the_per_packet_form(buf: bytes, cuts: list[tuple[int, int]]) -> None:
    spans = [(min(a, b, len(buf)), min(max(a, b), len(buf))) for a, b in cuts]
    rows = esp_digests(memoryview(buf), iter(spans))
    assert rows.dtype == np.uint8 and rows.shape == (len(spans), DIGEST_LEN)
    assert [r.tobytes() for r in rows] == [esp_digest(buf[a:b]) for a, b in spans]


def test_a_keyless_packets_context_digest_is_the_digest_of_its_esp_bytes() -> None:
    """The per-frame path's digest of a packet without a key: from its SPI to its end."""
    esp = (0x1001).to_bytes(4) + (5).to_bytes(4) + _packet(120)
    data = bytes(OUTER) + esp
    rec = PacketRecord(
        1, 0, len(data), len(data), Verdict.UNKNOWN_SA, spi=0x1001, seq=5, seq64=5, esp_offset=OUTER
    )
    flow = Flow(0x1001, "192.0.2.1", "192.0.2.2", SaState())
    pkt = PacketContext(rec, data, IP, flow, int.from_bytes(esp[8:16]))
    assert pkt.digest == esp_digest(esp)
    view = memoryview(data)
    assert esp_digests(view, [(OUTER, len(data))])[0].tobytes() == pkt.digest


def test_row_digests_are_made_when_asked_from_the_mapped_file(tmp_path: Path) -> None:
    """The steady lane's rows: a row with its digest made (an ICV) gives those bytes, and
    one without it, the digest of its ESP bytes in the mapped file, made at the ask;
    only a mapped file is kept to make them from."""
    packets = [_packet(300, seed) for seed in range(4)]
    path = tmp_path / "capture"
    path.write_bytes(b"".join(packets))
    starts = np.cumsum([0] + [len(p) for p in packets])
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert kept_source(mapped) is mapped and kept_source(bytes(mapped)) is None
        made = np.zeros((4, 32), np.uint8)
        made[1, :20] = 0xAB  # an ICV of 20 bytes
        spans = np.stack((starts[:-1] + 8, starts[1:] - 1), axis=1)
        digests = RowDigests(made, np.array([0, 20, 0, 0]), mapped, spans)
        assert digests(1) == b"\xab" * 20
        for i in (0, 2, 3):
            assert digests(i) == esp_digest(packets[i][8:-1])
        keyless = RowDigests(None, None, mapped, spans)  # a run without keys: none made
        assert [keyless(i) for i in range(4)] == [esp_digest(p[8:-1]) for p in packets]
