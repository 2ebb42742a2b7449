"""The malformed ESP packets of the Linux GSO bug (primer section 5).

In: the ``EspSealer`` of a transport-mode SA, an inner IPv4 packet (ipip
or ip6tnl payload, 20-byte header), its sequence number and the sequence
number of the first segment of its GSO super-packet. Out: the bytes that
follow the outer IP header chain. Raises ``ValueError`` for an inner
packet that is not IPv4 with a 20-byte header.

On the wire (offsets from the end of the outer header chain; add 40 for
an outer IPv6 header, 20 for an outer IPv4 header without options)::

    +0   16-byte slot: SPI || seq_lo of the GSO super-packet's first
         segment || 00 00 00 00 00 00 00 02
    +16  45 00 LL LL    first 4 bytes of the inner IPv4 header, in clear
    +20  SPI || seq_lo  the real ESP header (inner header bytes 4..11)
    +28  IV             (inner header bytes 12..19: the addresses)
    +36  ciphertext of the inner TCP header onwards, padding, pad length,
         next header 4 (IPv4-in-IP), then the ICV

The slot bytes are copied from linux-6.1/ip6tnl-transport-tso-on: in every
one of its 94 malformed frames the slot holds the ESP header xfrm wrote
before segmentation (same SPI, the first segment's sequence number) and
an IV area that the GSO path never fills, always 00..00 02.
"""

from __future__ import annotations

import struct

from espforensics.synth.esp import EspSealer, IvOverride
from espforensics.synth.packets import IPV4_HEADER_LEN, PROTO_IPIP

SLOT_LEN = 16
SLOT_IV_AREA = bytes(7) + b"\x02"  # as observed on linux 6.1.192
CLEAR_INNER_LEN = 4  # 45 00 LL LL
MISPLACED_SHIFT = SLOT_LEN + CLEAR_INNER_LEN  # real ESP header offset - expected


def gso_misplaced_payload(
    sealer: EspSealer,
    inner_ipv4: bytes,
    seq64: int,
    *,
    slot_seq64: int | None = None,
    iv: IvOverride | None = None,
) -> bytes:
    """The outer IP payload of one GSO-path ESP packet (see module doc).

    Decrypting at the real ESP header (``MISPLACED_SHIFT`` bytes after
    where ESP belongs) with AAD = its SPI and sequence number succeeds and
    yields the inner TCP segment with next header 4.
    """
    if inner_ipv4[0] != 0x45:
        raise ValueError("the GSO layout needs an inner IPv4 packet with a 20-byte header")
    first = seq64 if slot_seq64 is None else slot_seq64
    slot = struct.pack(">II", sealer.spi, first & 0xFFFFFFFF) + SLOT_IV_AREA
    esp = sealer.seal(inner_ipv4[IPV4_HEADER_LEN:], PROTO_IPIP, seq64, iv=iv)
    return slot + inner_ipv4[:CLEAR_INNER_LEN] + esp
