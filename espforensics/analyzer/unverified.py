"""Verdicts of SAs the pipeline cannot both decrypt and verify.

In: a packet (``Receiving``) of an SA whose context has no checked ICV
(``verifies`` False: RFC 4303 s3.2 confidentiality-only, or an ICV whose key
or algorithm is not given) or no opened cipher (``decrypts`` False). Out:
``no_icv`` sets the record's verdict from the plaintext alone (a context
whose cipher is not opened is read through ``crypto.opener``). Raises
nothing.

Without an ICV nothing proves a packet authentic or its key right (RFC 4303
s3.2, s6: an SA without integrity is open to cut-and-paste and bit-flipping
attacks; Bellovin, "Problem Areas for the IP Security Protocols", 1996).
What the plaintext can show is that it is sound: the trailer of RFC 4303
s2.4 and an inner header that holds together. Such a packet is
``decrypted_no_icv``, never ``ok``; one that is not sound is ``bad_trailer``
or ``undecodable``, and its header is no evidence of anything.
"""

from __future__ import annotations

from espforensics.analyzer.plaintext import apply_plaintext
from espforensics.checks.context import Receiving
from espforensics.decode.clear import internet_checksum
from espforensics.model.enums import Verdict

_TCP, _UDP, _ICMP, _ICMP6, _DUMMY = 6, 17, 1, 58, 59


def no_icv(pkt: Receiving, seq64: int, plain: bytes | None, block: int, why: str) -> None:
    """The verdict of a packet decrypted without an ICV check, from its plaintext alone."""
    rec = pkt.rec
    pkt.state.tracker.commit(seq64)  # the header is all there is, as without a key
    if plain is None:
        rec.verdict = Verdict.SHORT  # whole (open_packet said so): not cut by the capture
        rec.detail = f"ESP packet of {rec.esp_len} bytes is too short for its IV and ICV"
        return
    problem = apply_plaintext(pkt, plain, block)
    if problem:
        rec.verdict, rec.detail = Verdict.BAD_TRAILER, f"{problem}; {why}"
        return
    if rec.detail.startswith("inner packet:"):  # apply_plaintext could not decode it
        rec.verdict, rec.detail = Verdict.UNDECODABLE, f"{rec.detail}; {why}"
        return
    # The inner packet, after IPComp when there was one (analyzer/plaintext.py inflates it).
    unsound = inner_problem(pkt.inner_next or 0, pkt.payload or b"")
    if unsound:
        rec.verdict, rec.detail = Verdict.UNDECODABLE, f"inner packet: {unsound}; {why}"
        return
    rec.verdict = Verdict.DECRYPTED_NO_ICV
    rec.detail = f"trailer and inner header sound; {why}"


def inner_problem(next_header: int, payload: bytes) -> str:
    """What makes ``payload`` no sound packet of ``next_header`` ("" when it is one).

    Tunnel mode: an IPv4 header whose checksum verifies (RFC 791) and whose
    total length fits, or an IPv6 header whose payload length fits (TFC
    padding may follow, RFC 4303 s2.7). Transport mode: a UDP length equal
    to the payload (RFC 768), a TCP data offset of 5 or more inside it (RFC
    9293 s3.1), an ICMP header of 8 bytes. A dummy packet (next header 59,
    RFC 4303 s2.6) has nothing to check; any other next header is not sound.
    """
    n = len(payload)
    if next_header == 4:
        ihl = (payload[0] & 0x0F) * 4 if n else 0
        if n < 20 or payload[0] >> 4 != 4 or ihl < 20 or ihl > n:
            return "next header 4 but no IPv4 header"
        if internet_checksum(payload[:ihl]) or int.from_bytes(payload[2:4]) > n:
            return "IPv4 header checksum or length does not hold"
    elif next_header == 41:
        if n < 40 or payload[0] >> 4 != 6 or 40 + int.from_bytes(payload[4:6]) > n:
            return "next header 41 but no IPv6 header of that length"
    elif next_header == _UDP:
        if n < 8 or int.from_bytes(payload[4:6]) != n:
            return f"UDP length field is not the payload's {n} bytes"
    elif next_header == _TCP:
        if n < 20 or not 20 <= (payload[12] >> 4) * 4 <= n:
            return "TCP header length does not fit the payload"
    elif next_header in (_ICMP, _ICMP6):
        if n < 8:
            return f"ICMP header cut at {n} bytes"
    elif next_header != _DUMMY:
        # A wrong key makes a sound trailer once in 256 packets or so (pad length 0);
        # only a header that can be checked lifts the plaintext above that chance.
        return f"next header {next_header}, an inner header this version does not check"
    return ""


__all__ = ["inner_problem", "no_icv"]
