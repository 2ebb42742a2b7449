"""Clear-text leaks: inner header bytes on the wire where only ciphertext may be.

In: ``PacketContext`` of ESP packets. Out: ``leaked``/``leaked_hex``/
``leaked_fields`` columns and one ``cleartext_leak`` finding per SPI.
Raises nothing.

Two places are looked at. (1) In front of a misplaced ESP header (the
placement check measured the bytes): their fields are named. (2) Between
the ESP header and the ICV: the bytes after the IV (and, for a header
without IV, right after the ESP header) are tested as a clear IPv4
header (valid header checksum, RFC 791 s3.1, and a total length that
fits) or IPv6 header (payload length that fits); and for packets that
decrypted, a ciphertext that equals its plaintext over the first
``MIN_RUN`` bytes. RFC 4543 (GMAC) SAs are clear by design and skipped.

A finding is a proof. A decrypted packet proves its leak (ciphertext equal
to plaintext); so do the bytes in front of a misplaced header. A packet
that did not verify (no key, or a failed ICV) proves a clear inner packet
only when an exact ESP trailer and ICV follow it (``trailer_follows``);
a header that parses without that is reported as ``possible`` (``info``,
``leaked`` left empty), since random ciphertext sometimes parses as one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from espforensics.checks.context import PacketContext
from espforensics.crypto import IV_LEN
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.keys.sa import CLEAR_BY_DESIGN
from espforensics.model import Finding, FindingKind, Severity, Verdict
from espforensics.trailer import parse_trailer

# The ICV lengths an unknown SA may use: RFC 4106 s6 (8, 12, 16), HMAC-SHA-384-192 and
# HMAC-SHA-512-256 (RFC 4868: 24, 32).
KEYLESS_ICV_LENS = (32, 24, 16, 12, 8)
_TRANSPORT = (6, 17)  # TCP, UDP: their checksums cover a pseudo-header of the outer addresses
MIN_RUN = 8  # equal ciphertext/plaintext bytes that count as "not encrypted" (2^-64 by chance)
IPV4_FIELDS = (
    (1, "version+IHL"),
    (1, "TOS"),
    (2, "total length"),
    (2, "identification"),
    (2, "flags+fragment offset"),
    (1, "TTL"),
    (1, "protocol"),
    (2, "header checksum"),
    (4, "source address"),
    (4, "destination address"),
)
IPV6_FIELDS = (
    (4, "version+traffic class+flow label"),
    (2, "payload length"),
    (1, "next header"),
    (1, "hop limit"),
    (16, "source address"),
    (16, "destination address"),
)


def name_fields(leaked: bytes) -> str:
    """Names of the IP header fields that ``leaked`` (from the header's start) covers."""
    if not leaked:
        return ""
    layout = IPV4_FIELDS if leaked[0] >> 4 == 4 else IPV6_FIELDS if leaked[0] >> 4 == 6 else ()
    if not layout:
        return f"{len(leaked)} unidentified bytes"
    names, pos = [], 0
    for size, name in layout:
        if pos >= len(leaked):
            break
        names.append(name if pos + size <= len(leaked) else f"part of {name}")
        pos += size
    return ("IPv4 " if leaked[0] >> 4 == 4 else "IPv6 ") + ", ".join(names)


def trailer_follows(data: bytes, start: int, icv_lens: tuple[int, ...]) -> bool:
    """Is the clear IP packet at ``start`` followed exactly by an ESP trailer and an ICV?

    RFC 4303 s2.4: pad bytes 1, 2, 3, ..., the pad length, and the next header
    that an IP packet takes (4 or 41, RFC 4303 s3.1), 4-byte aligned, then the
    ICV up to the end of the datagram. Together with the header test, random
    ciphertext passes this by chance with a probability below 2^-32.
    """
    version = data[start] >> 4
    if version == 4:
        total = int.from_bytes(data[start + 2 : start + 4], "big")
    else:
        total = 40 + int.from_bytes(data[start + 4 : start + 6], "big")
    proto = 4 if version == 4 else 41
    for icv in icv_lens:
        trailer = parse_trailer(data[start : len(data) - icv])
        if not trailer.problem and trailer.payload_len == total and trailer.next_header == proto:
            return True
    return False


def _ipv4_checksum_ok(hdr: bytes) -> bool:
    total = sum(int.from_bytes(hdr[i : i + 2], "big") for i in range(0, len(hdr), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def clear_ip_header(data: bytes, start: int, end: int) -> int:
    """Length of a plausible clear IP header at ``start`` (0 if none)."""
    if end - start < 20:
        return 0
    first = data[start]
    if first >> 4 == 4 and first & 0x0F >= 5:
        ihl = (first & 0x0F) * 4
        total = int.from_bytes(data[start + 2 : start + 4], "big")
        hdr = data[start : start + ihl]
        if len(hdr) == ihl and ihl <= total <= end - start and _ipv4_checksum_ok(hdr):
            return ihl
    elif first >> 4 == 6 and end - start >= 40:
        plen = int.from_bytes(data[start + 4 : start + 6], "big")
        if 0 < 40 + plen <= end - start and end - start - 40 - plen <= 16 + 255 + 2:
            return 40
    return 0


def clear_from_header(pkt: PacketContext) -> bool:
    """Does a keyless packet carry a whole clear IP packet right after its ESP header?

    That is how ``ecb(cipher_null)`` (RFC 2410) sends a tunnel packet: no IV,
    the payload, an ESP trailer and an ICV. Without a key it cannot be told
    from a leak; what is sure is that the 8 bytes after the header are no IV,
    so the IV checks leave such packets alone.
    """
    rec, data = pkt.rec, pkt.data
    if pkt.flow.state.ctx is not None or pkt.plain_head is not None or rec.esp_offset is None:
        return False
    body = rec.esp_offset + ESP_HEADER_LEN
    if clear_ip_header(data, body, len(data)):
        return trailer_follows(data, body, KEYLESS_ICV_LENS)
    return bool(clear_transport(data, body, pkt.ip.src, pkt.ip.dst, KEYLESS_ICV_LENS)[1])


def clear_transport(
    data: bytes, start: int, src: bytes, dst: bytes, icv_lens: tuple[int, ...]
) -> tuple[str, int]:
    """A clear TCP or UDP segment at ``start``, a trailer and an ICV after it: (name, header).

    In transport mode the segment's checksum covers the outer addresses (RFC
    793 s3.1, RFC 768, RFC 8200 s8.1); with a sound trailer after it, random
    ciphertext passes by chance with a probability near 2^-31. ("", 0) if not.
    """
    for icv in icv_lens:
        trailer = parse_trailer(data[start : len(data) - icv])
        nh = trailer.next_header
        if trailer.problem or nh not in _TRANSPORT or trailer.payload_len < 8:
            continue
        segment = data[start : start + trailer.payload_len]
        header = 8 if nh == 17 else (segment[12] >> 4) * 4
        if nh == 17 and int.from_bytes(segment[4:6]) != len(segment):
            continue
        if 8 <= header <= len(segment) and _l4_checksum_ok(src, dst, nh, segment):
            return ("UDP" if nh == 17 else "TCP"), header
    return "", 0


def _l4_checksum_ok(src: bytes, dst: bytes, proto: int, segment: bytes) -> bool:
    n = len(segment)
    if len(src) == 4:
        pseudo = src + dst + bytes([0, proto]) + n.to_bytes(2)
    else:
        pseudo = src + dst + n.to_bytes(4) + bytes([0, 0, 0, proto])
    words = pseudo + segment + (b"\0" if n % 2 else b"")
    total = sum(memoryview(words).cast("H"))  # native order: the ones' complement sum is
    while total >> 16:  # the same byte-swapped, and so is its all-ones result
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


@dataclass(slots=True)
class _PerSpi:
    frames: list[int] = field(default_factory=list)
    count: int = 0
    fields: set[str] = field(default_factory=set)


class LeakCheck:
    """Names clear-text inner header bytes and counts them per SPI."""

    name = "leaks"

    def __init__(self) -> None:
        self._per_spi: dict[int, _PerSpi] = {}
        self._possible_per_spi: dict[int, _PerSpi] = {}
        self._keyless_per_spi: dict[int, _PerSpi] = {}  # proven clear, algorithm unknown

    def observe(self, pkt: PacketContext) -> None:
        rec, sa = pkt.rec, pkt.flow.state.sa
        if (sa is not None and sa.algorithm in CLEAR_BY_DESIGN) or rec.esp_offset is None:
            return  # GMAC, NULL: clear by design
        if rec.verdict is Verdict.ESP_MISPLACED:
            if rec.leaked:
                self._report(pkt, bytes.fromhex(rec.leaked_hex))
            return
        self._between_header_and_icv(pkt)

    def _between_header_and_icv(self, pkt: PacketContext) -> None:
        rec, data = pkt.rec, pkt.data
        if rec.esp_offset is None:
            return
        body = rec.esp_offset + ESP_HEADER_LEN
        ctx = pkt.flow.state.ctx
        iv_len = IV_LEN if ctx is None else ctx.iv_len
        if pkt.plain_head is not None:
            sealed = data[body + iv_len : body + iv_len + MIN_RUN]
            if len(sealed) == MIN_RUN and sealed == pkt.plain_head[:MIN_RUN]:
                rec.leaked, rec.leaked_hex = MIN_RUN, sealed.hex(" ")
                rec.leaked_fields = "payload not encrypted: ciphertext equals plaintext"
                self._count(rec.spi, rec.frame, rec.leaked_fields)
            return
        if rec.verdict is Verdict.TRUNCATED:
            return
        icv_lens = (ctx.icv_len,) if ctx is not None else KEYLESS_ICV_LENS
        into = None if pkt.flow.state.sa is not None else self._keyless_per_spi
        for start in (body + iv_len, body):
            n = clear_ip_header(data, start, len(data))
            if n and trailer_follows(data, start, icv_lens):
                self._report(pkt, data[start : start + n], into)
                return
            if n:
                self._possible(pkt, data[start : start + n])
                return
        for start in (body + iv_len, body):
            proto, n = clear_transport(data, start, pkt.ip.src, pkt.ip.dst, icv_lens)
            if n:
                self._report(pkt, data[start : start + n], into, f"{proto} header")
                return

    def _report(
        self,
        pkt: PacketContext,
        leaked: bytes,
        into: dict[int, _PerSpi] | None = None,
        fields: str = "",
    ) -> None:
        rec = pkt.rec
        rec.leaked, rec.leaked_hex = len(leaked), leaked.hex(" ")
        rec.leaked_fields = fields or name_fields(leaked)
        self._count(rec.spi, rec.frame, rec.leaked_fields, into)

    def _possible(self, pkt: PacketContext, clear: bytes) -> None:
        """Bytes that look like a clear inner header but that nothing else proves."""
        rec = pkt.rec
        rec.leaked_hex = clear.hex(" ")
        rec.leaked_fields = f"possible: {name_fields(clear)}"
        self._count(rec.spi, rec.frame, rec.leaked_fields, self._possible_per_spi)

    def _count(
        self, spi: int | None, frame: int, fields: str, into: dict[int, _PerSpi] | None = None
    ) -> None:
        per_spi = self._per_spi if into is None else into
        acc = per_spi.setdefault(spi if spi is not None else -1, _PerSpi())
        acc.count += 1
        acc.fields.add(fields)
        if len(acc.frames) < 5:
            acc.frames.append(frame)

    def finish(self) -> Iterator[Finding]:
        proven = (
            self._per_spi,
            Severity.CRITICAL,
            "{n} packets carry inner header bytes in clear: {fields}",
        )
        keyless = (
            self._keyless_per_spi,
            Severity.HIGH,
            "{n} packets carry a whole clear IP packet after the ESP header, then an ESP "
            "trailer and ICV ({fields}): a leak, unless the SA uses NULL encryption or GMAC "
            "(clear by design, RFC 2410 / RFC 4543), which only its key file can say",
        )
        possible = (
            self._possible_per_spi,
            Severity.INFO,
            "possible, not proven: {n} packets that did not verify hold, after the ESP header, "
            "bytes that parse as a clear IP header but are not followed by an ESP trailer and "
            "ICV; random ciphertext looks like this now and then",
        )
        for per_spi, severity, words in (proven, keyless, possible):
            for spi, acc in sorted(per_spi.items()):
                yield Finding(
                    FindingKind.CLEARTEXT_LEAK,
                    severity,
                    spi if spi >= 0 else None,
                    tuple(acc.frames),
                    acc.count,
                    words.format(n=acc.count, fields="; ".join(sorted(acc.fields))),
                )
