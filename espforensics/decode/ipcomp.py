"""An IPComp payload (RFC 3173) inflated to the packet it compresses.

In: the bytes an ESP trailer's next header 108 announces (or an inner IP
packet's protocol 108 carries): the 4-byte IPComp header (next header,
flags, CPI; RFC 3173 s2.2) and the compressed data. Out: ``Decompressed``
(the next header, the CPI, and the inflated packet). Raises
``MalformedPacket`` when the header is cut, the data does not inflate as
DEFLATE, or it inflates past ``MAX_INFLATED`` bytes (a zip bomb).

The data is raw DEFLATE (RFC 2394 s2: RFC 1951 without the zlib wrapper,
wbits -15). CPIs 1..63 are IANA's well-known algorithms (RFC 3173 s3.3:
2 is DEFLATE); the others are negotiated by IKE, unknown here: any CPI is
read as DEFLATE when its data inflates cleanly to its end, and a detail
names the CPI when it does not.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from espforensics.errors import MalformedPacket

PROTO_IPCOMP = 108  # IANA protocol number (RFC 3173 s2.2)
IPCOMP_HEADER_LEN = 4
CPI_DEFLATE = 2  # RFC 3173 s3.3, RFC 2394
MAX_INFLATED = 65535  # an IP packet's largest size: more is no packet IPComp compressed


@dataclass(frozen=True, slots=True)
class Decompressed:
    """The packet an IPComp payload carries."""

    next_header: int  # what the inflated data is (RFC 3173 s2.2)
    cpi: int
    compressed: int  # bytes of compressed data after the IPComp header
    data: bytes  # the inflated packet


def _algorithm(cpi: int) -> str:
    if cpi == CPI_DEFLATE:
        return "CPI 2 (DEFLATE)"
    if cpi < 64:
        return f"well-known CPI {cpi} (not DEFLATE)"
    return f"negotiated CPI {cpi:#06x}"


def decompress(payload: bytes) -> Decompressed:
    """Inflate the IPComp payload ``payload`` (its 4-byte header first)."""
    if len(payload) < IPCOMP_HEADER_LEN:
        raise MalformedPacket(f"IPComp header cut at {len(payload)} bytes")
    nh, cpi = payload[0], int.from_bytes(payload[2:4])
    body = payload[IPCOMP_HEADER_LEN:]
    inflater = zlib.decompressobj(-15)  # raw DEFLATE (RFC 2394 s2)
    try:
        out = inflater.decompress(body, MAX_INFLATED + 1)
    except zlib.error as exc:
        raise MalformedPacket(
            f"IPComp data of {_algorithm(cpi)} does not inflate as DEFLATE: {exc}"
        ) from None
    if len(out) > MAX_INFLATED:
        raise MalformedPacket(
            f"IPComp data of {len(body)} bytes inflates past {MAX_INFLATED} bytes (not followed)"
        )
    if not inflater.eof or inflater.unused_data:
        raise MalformedPacket(
            f"IPComp data of {_algorithm(cpi)} is not one whole DEFLATE stream ({len(body)} bytes)"
        )
    return Decompressed(nh, cpi, len(body), out)
