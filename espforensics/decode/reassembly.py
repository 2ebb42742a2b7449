"""Outer IPv4/IPv6 fragment reassembly with bounded memory.

In: fragments (already decoded by ``decode.ip``), each with the frame it
came in and its capture time. Out: ``Completed`` (the rebuilt datagram,
which ``parse_ip`` decodes as an unfragmented packet, and the frames that
made it) or ``Expired`` (a datagram that never completed: its frames and
why). Raises nothing; overlapping or inconsistent fragments, and fragments
that add up to more than a 16-bit length field holds, expire the datagram
with a reason instead.

Limits: a datagram waits at most ``timeout_ns`` of capture time (RFC 791
suggests a 15 s lower bound, Linux uses 30 s); at most ``max_datagrams``
wait at once and ``max_bytes`` of fragment data are held, the oldest
datagram expiring first when a limit is hit.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

from espforensics.decode.ip import OuterIp

MAX_DATAGRAM = 65535 + 40
_Key = tuple[int, bytes, bytes, int, int]  # version, src, dst, identification, protocol


class Completed(NamedTuple):
    """A datagram rebuilt from all its fragments."""

    packet: bytes
    frames: tuple[int, ...]


class Expired(NamedTuple):
    """A datagram whose fragments are not all in the capture."""

    frames: tuple[int, ...]
    reason: str


@dataclass(slots=True)
class _Pending:
    first_ts: int
    first: OuterIp | None = None  # the offset-0 fragment's header fields
    header: bytes = b""  # the offset-0 fragment's unfragmentable part
    pieces: dict[int, bytes] = field(default_factory=dict)
    total: int | None = None
    frames: list[int] = field(default_factory=list)
    held: int = 0


def _rebuild_header(ip: OuterIp, head_bytes: bytes, payload_len: int) -> bytes:
    """The first fragment's unfragmentable part, patched to describe the whole."""
    head = bytearray(head_bytes)
    if ip.version == 4:
        head[2:4] = (ip.unfrag_len + payload_len).to_bytes(2, "big")
        head[6:8] = b"\x00\x00"  # no more fragments, offset 0
    else:
        head[4:6] = (ip.unfrag_len - 40 + payload_len).to_bytes(2, "big")
        head[ip.next_header_at] = ip.proto  # unlink the Fragment header
    return bytes(head)


def _too_long(ip: OuterIp, payload_len: int) -> str | None:
    """Why fragments cannot make one datagram of ``payload_len`` bytes, if so.

    The length field is 16 bits: RFC 791 s3.1 total length (header
    included), RFC 8200 s3 payload length (after the fixed header; a
    jumbogram, RFC 2675 s5, is never fragmented).
    """
    if ip.version == 4:
        total, what = ip.unfrag_len + payload_len, "length"
    else:
        total, what = ip.unfrag_len - 40 + payload_len, "payload length"
    return f"reassembled {what} {total} exceeds 65,535" if total > 0xFFFF else None


class Reassembler:
    """Collects fragments per (version, src, dst, id, proto) until complete."""

    def __init__(
        self, timeout_ns: int = 30_000_000_000, max_datagrams: int = 4096, max_bytes: int = 1 << 26
    ) -> None:
        self.timeout_ns = timeout_ns
        self.max_datagrams = max_datagrams
        self.max_bytes = max_bytes
        self._pending: OrderedDict[_Key, _Pending] = OrderedDict()
        self._held = 0

    def add(self, ip: OuterIp, data: bytes, frame: int, ts_ns: int) -> Completed | Expired | None:
        """Add one fragment; the datagram if this completes (or ruins) it."""
        key = (ip.version, ip.src, ip.dst, ip.frag_id or 0, ip.proto)
        pend = self._pending.get(key)
        if pend is None:
            pend = self._pending[key] = _Pending(first_ts=ts_ns)
        pend.frames.append(frame)
        piece = data[ip.header_len : ip.total_len]
        if ip.frag_offset in pend.pieces or ip.frag_offset + len(piece) > MAX_DATAGRAM:
            return self._ruin(key, pend, "overlapping or oversized fragment")
        pend.pieces[ip.frag_offset] = piece
        pend.held += len(piece)
        self._held += len(piece)
        if ip.frag_offset == 0:
            pend.first, pend.header = ip, data[: ip.unfrag_len]
        if not ip.more_fragments:
            pend.total = ip.frag_offset + len(piece)
        return self._try_complete(key, pend)

    def _try_complete(self, key: _Key, pend: _Pending) -> Completed | Expired | None:
        if pend.total is None or pend.first is None:
            return None
        pos, parts = 0, []
        for off in sorted(pend.pieces):
            if off != pos:
                return None if off > pos else self._ruin(key, pend, "overlapping fragments")
            parts.append(pend.pieces[off])
            pos += len(pend.pieces[off])
        if pos != pend.total:
            return None if pos < pend.total else self._ruin(key, pend, "fragments overrun the last")
        too_long = _too_long(pend.first, pos)
        if too_long:
            return self._ruin(key, pend, too_long)
        del self._pending[key]
        self._held -= pend.held
        payload = b"".join(parts)
        header = _rebuild_header(pend.first, pend.header, len(payload))
        return Completed(header + payload, tuple(pend.frames))

    def _ruin(self, key: _Key, pend: _Pending, why: str) -> Expired:
        del self._pending[key]
        self._held -= pend.held
        return Expired(tuple(pend.frames), why)

    def expire(self, now_ns: int) -> list[Expired]:
        """Datagrams older than the timeout, or beyond the memory limits."""
        out: list[Expired] = []
        while self._pending:
            key, pend = next(iter(self._pending.items()))
            if now_ns - pend.first_ts > self.timeout_ns:
                why = f"incomplete after {self.timeout_ns / 1e9:g} s of capture time"
            elif len(self._pending) > self.max_datagrams or self._held > self.max_bytes:
                why = "incomplete when the reassembly memory limit was reached"
            else:
                break
            out.append(self._ruin(key, pend, why))
        return out

    def expire_frame(self, frame: int, why: str) -> list[Expired]:
        """Give up the datagram that ``frame`` is a fragment of (to bound what waits)."""
        for key, pend in self._pending.items():
            if frame in pend.frames:
                return [self._ruin(key, pend, why)]
        return []

    def drain(self) -> list[Expired]:
        """Every datagram still waiting at the end of the capture."""
        out = []
        while self._pending:
            key, pend = next(iter(self._pending.items()))
            out.append(self._ruin(key, pend, "incomplete at the end of the capture"))
        return out
