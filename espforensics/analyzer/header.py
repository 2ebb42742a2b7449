"""The clear columns of an ESP packet: SPI, sequence number, IV (RFC 4303 s2.1-s2.3).

In: a whole datagram, where its ESP header is, and the flow its SPI and
addresses name. Out: the record's header columns filled and the packet for
the crypto stage (``Sealed``). Raises ``Truncated`` from the header parse.
"""

from __future__ import annotations

from dataclasses import dataclass

from espforensics.checks.context import Flow, Receiving
from espforensics.crypto import IV_LEN
from espforensics.decode.esp import ESP_HEADER_LEN, EspLocation
from espforensics.decode.ip import OuterIp
from espforensics.model.records import PacketRecord


@dataclass(frozen=True, slots=True)
class Sealed:
    """An ESP packet before it is opened: the seq64 its place infers, its IV, its sealed bytes."""

    pkt: Receiving
    seq64: int
    iv: bytes
    sealed_at: int  # offset in ``pkt.data`` of the ciphertext after the IV


def read_header(
    rec: PacketRecord, ip: OuterIp, data: bytes, loc: EspLocation, flow: Flow, seq: int
) -> Sealed:
    """Fill ``rec``'s header columns; the IV length is the SA's, unknown: an AEAD's (8)."""
    state = flow.state
    seq64 = state.tracker.infer(seq)
    rec.spi, rec.seq, rec.seq64 = flow.spi, seq, seq64
    rec.esp_len = ip.total_len - loc.offset
    body = loc.offset + ESP_HEADER_LEN
    iv_len = IV_LEN if state.ctx is None else state.ctx.iv_len
    iv = data[body : body + iv_len]
    rec.iv = iv.hex()
    iv_int = int.from_bytes(iv) if iv_len and len(iv) == iv_len else None
    return Sealed(Receiving(rec, data, ip, flow, iv_int), seq64, iv, body + iv_len)
