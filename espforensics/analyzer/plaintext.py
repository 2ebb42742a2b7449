"""A verified (or, without an ICV, decrypted) plaintext read into its packet's columns.

In: a ``Receiving`` whose ESP packet opened, its plaintext and the
cipher's block size. Out: the trailer columns (RFC 4303 s2.4: pad length,
next header, payload length), the inner packet's columns (protocol,
addresses, ports, after IPComp when there is one, RFC 3173 s2.2), and the
packet's ``plain_head``, ``payload`` and ``inner_next`` that the checks
read; ``apply_plaintext`` returns the trailer's problem ("" when sound).
An inner packet that does not decode says so in the record's ``detail``.
Raises nothing.

The pure decoders stay in decode/ (trailer.py, decode/inner.py,
decode/ipcomp.py); this is the receiver's step that runs them on one
packet and keeps what they found, so it sits with the other receiver
steps here.
"""

from __future__ import annotations

from espforensics.checks.context import HEAD_LEN, Receiving
from espforensics.decode.inner import Inner, l4_name, ntop, parse_inner
from espforensics.decode.ip import parse_ip
from espforensics.decode.ipcomp import PROTO_IPCOMP, decompress
from espforensics.decode.trailer import parse_trailer
from espforensics.errors import MalformedPacket

IPCOMP_NAME = l4_name(PROTO_IPCOMP)  # an inner IP packet's protocol 108, as parse_inner names it


def apply_plaintext(pkt: Receiving, plain: bytes, block: int = 4) -> str:
    """Fill the trailer and inner-packet columns from a verified plaintext.

    Returns the trailer problem ("" when sound, RFC 4303 s2.4); ``block``
    is the cipher's (``CipherContext.block``).
    """
    rec = pkt.rec
    pkt.plain_head = plain[:HEAD_LEN]
    trailer = parse_trailer(plain, block)
    if block > 4 and len(plain) % block:
        return trailer.problem  # not whole blocks: no trailer byte is readable
    rec.pad_len, rec.next_header = trailer.pad_len, trailer.next_header
    rec.payload_len = trailer.payload_len
    if trailer.problem:
        return trailer.problem
    payload, nh = plain[: trailer.payload_len], trailer.next_header
    pkt.payload, pkt.inner_next = payload, nh
    try:
        if nh == PROTO_IPCOMP:
            payload, nh = _inflate(pkt, payload)
        inner = parse_inner(nh, payload, rec.src, rec.dst)
        if inner.proto == IPCOMP_NAME and nh in (4, 41):
            inner = _tunneled_ipcomp(pkt, payload)
    except MalformedPacket as exc:
        rec.detail = f"inner packet: {exc}"
        return ""
    rec.inner_proto, rec.inner_src, rec.inner_dst = inner.proto, inner.src, inner.dst
    rec.inner_sport, rec.inner_dport = inner.sport, inner.dport
    return ""


def _inflate(pkt: Receiving, payload: bytes) -> tuple[bytes, int]:
    """The packet an IPComp payload compresses, and its next header (RFC 3173 s2.2).

    Until it inflates, ``payload`` stays the IPComp payload (next header 108).
    """
    comp = decompress(payload)
    pkt.rec.ipcomp_cpi, pkt.rec.ipcomp_len = comp.cpi, len(comp.data)
    pkt.payload, pkt.inner_next = comp.data, comp.next_header
    return comp.data, comp.next_header


def _tunneled_ipcomp(pkt: Receiving, packet: bytes) -> Inner:
    """The 5-tuple of an inner IP packet's IPComp payload (RFC 3173 s2.2), inflated.

    Only the inner columns: ``payload`` stays the inner IP packet, whose header
    the checksum check verifies (the inflated segment's checksum is not checked).
    """
    ip = parse_ip(packet)
    comp = decompress(packet[ip.header_len : ip.total_len])
    pkt.rec.ipcomp_cpi, pkt.rec.ipcomp_len = comp.cpi, len(comp.data)
    return parse_inner(comp.next_header, comp.data, ntop(ip.src), ntop(ip.dst))
