"""Chained CBC IVs: is a packet's IV the last ciphertext block of its SA's previous packet?

In: an SA's ``IvSa`` state and, per packet, its ``PacketContext`` (the
per-packet rule, ``chaining`` and ``chaining_keyless``) or, per run of the
steady lane, its ``FlowRows`` (the bulk rule, ``chained`` and
``chained_keyless``, then ``keep_block`` and ``keep_tail`` for what the
SA keeps of the run's last packet). Out: the rows (or the packet) whose IV
chains; the per-packet rule counts and notes it in the SA's state and the
record's detail. Raises nothing. The IV derivation check
(iv_derivation.py) calls both rules; tests/checks/test_bulk_iv_derivation.py
holds them to the same answers.

RFC 3602 s2.1: CBC needs IVs no one can predict. An IV equal to the
previous packet's last ciphertext block is known before the packet is sent
(the chained IVs of CVE-2022-46397, as SSH and TLS 1.0 did), a finding; a
chance match of a 128-bit (3DES: 64-bit) block is not a possibility.

Without a key the IV and ICV lengths are unknown: the IV's first 8 bytes
are looked for where the previous packet's last cipher block (16 or 8
bytes) starts before an ICV of any length an unknown SA may use, never
inside its header and first 16 bytes (an IV of up to 16): 10 places
(``TAIL_PLACES``), so random IVs match by chance with a probability near
10 * 2^-64 per packet.
"""

from __future__ import annotations

import numpy as np

from espforensics.bounded.frames import with_frame
from espforensics.bounded.intervals import I64, U8, U64
from espforensics.checks.bulk import FlowRows, Mask
from espforensics.checks.context import PacketContext
from espforensics.checks.iv_sa import IvSa
from espforensics.decode.clear import KEYLESS_ICV_LENS
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.model.arrays import rows_at
from espforensics.model.records import PacketRecord

# Where the previous packet's last cipher block may start, counted back from its end (an
# ICV of any length an unknown SA may use, then a 16- or 8-byte block), and how many of
# its last bytes an SA keeps to look there.
TAIL_PLACES = tuple(icv + block for icv in KEYLESS_ICV_LENS for block in (16, 8))
_TAIL = max(KEYLESS_ICV_LENS) + 16
# the places once each, farthest first (the bulk rule)
_BACKS = np.array(sorted(set(TAIL_PLACES), reverse=True), np.int64)


# -- the per-packet rule ----------------------------------------------------------


def _count(sa: IvSa, rec: PacketRecord) -> None:
    """The packet's IV chains: count it, and say so in its record's detail."""
    sa.chained += 1
    note = f"IV is the last ciphertext block of frame {sa.last_frame} (chained)"
    rec.detail = f"{rec.detail}; {note}" if rec.detail else note
    sa.chained_frames = with_frame(sa.chained_frames, rec.frame)


def chaining(sa: IvSa, pkt: PacketContext, iv: bytes, icv_len: int) -> None:
    """A CBC packet under a key: count it if its IV is the SA's last ciphertext block,
    then keep its own last block."""
    rec, data = pkt.rec, pkt.data
    if sa.last and iv == sa.last:
        _count(sa, rec)
    end, body = len(data) - icv_len, (rec.esp_offset or 0) + ESP_HEADER_LEN + len(iv)
    if not pkt.cut and end - len(iv) >= body:
        sa.last, sa.last_frame = bytes(data[end - len(iv) : end]), rec.frame


def chaining_keyless(sa: IvSa, pkt: PacketContext, iv: int) -> None:
    """``chaining`` without a key: the IV's 8 bytes at the ``TAIL_PLACES`` of the tail
    the SA kept; then the packet's own tail kept."""
    rec, data = pkt.rec, pkt.data
    tail, head, ivb = sa.last, sa.last_head, iv.to_bytes(8)
    found = (
        ivb in tail[head:]
        and any(  # the search first: one C call per packet
            head <= len(tail) - back and tail[len(tail) - back : len(tail) - back + 8] == ivb
            for back in TAIL_PLACES
        )
    )
    if found:
        _count(sa, rec)
    if not pkt.cut:  # its last bytes are not the end of its ciphertext
        body = (rec.esp_offset or 0) + ESP_HEADER_LEN + 16  # past an IV of up to 16 bytes
        sa.last, sa.last_frame = bytes(data[-_TAIL:]), rec.frame
        sa.last_head = max(0, body - (len(data) - len(sa.last)))  # ciphertext from here on


# -- the bulk rule (the steady lane, checks/bulk.py) ---------------------------------


def chained(sa: IvSa, rows: FlowRows, width: int) -> Mask:
    """Which rows carry the previous packet's last ciphertext block as their IV."""
    before = np.empty((len(rows), width), np.uint8)
    before[1:] = rows.last_blocks(width)[:-1]
    before[0] = np.frombuffer(sa.last.ljust(width, b"\0"), np.uint8)
    same: Mask = (rows.iv_bytes == before).all(axis=1)
    if len(sa.last) != width:
        same[0] = False  # no packet of the flow had a whole block yet
    return same


def keep_block(sa: IvSa, rows: FlowRows, width: int) -> None:
    """What ``chaining`` keeps of the run's last packet: its last block only."""
    end = int(rows.ct_end[-1])
    sa.last = rows.buf[end - width : end].tobytes()
    sa.last_frame = int(rows.frames[-1])


def chained_keyless(sa: IvSa, rows: FlowRows) -> Mask:
    """``chaining_keyless`` over a flow's rows (no key: ``ct_end`` is each datagram's
    end): the first row against the tail the SA kept, each later one against the last
    ``_TAIL`` bytes of the row before it, at the same places and never in front of that
    packet's header and first 16 bytes."""
    found = np.zeros(len(rows), np.bool_)
    ivs = rows.iv_bytes[:, :8]
    first = ivs[0].tobytes()
    tail, head = sa.last, sa.last_head
    found[0] = any(
        head <= len(tail) - back and tail[len(tail) - back : len(tail) - back + 8] == first
        for back in TAIL_PLACES
    )
    if len(rows) > 1:
        end = rows.ct_end[:-1]
        floor = np.maximum(np.maximum(rows.ip_at[:-1], end - _TAIL), rows.esp_at[:-1] + 24)
        # every place of every row at once (some places are two ICV-block pairs'), the
        # 8 bytes at each read as one word; a place below the floor reads offset 0 and
        # is never compared
        at = end[:, None] - _BACKS
        ok = at >= floor[:, None]
        want = np.ascontiguousarray(ivs[1:]).view(np.uint64)
        if ok.all():  # every place of every row past its floor, as in long packets
            found[1:] = (_window_words(rows.buf, end) == want).any(axis=1)
        else:
            words = _words_at(rows.buf, np.where(ok, at, 0))
            found[1:] = (ok & (words == want)).any(axis=1)
    return found


def keep_tail(sa: IvSa, rows: FlowRows) -> None:
    """What ``chaining_keyless`` keeps of the run's last packet: its last ``_TAIL``
    bytes, and where its ciphertext starts in them."""
    start = max(int(rows.ip_at[-1]), int(rows.ct_end[-1]) - _TAIL)
    sa.last, sa.last_frame = bytes(rows.raw[start : int(rows.ct_end[-1])]), int(rows.frames[-1])
    sa.last_head = max(0, int(rows.esp_at[-1]) + ESP_HEADER_LEN + 16 - start)


def _words_at(view: U8, at: I64) -> U64:
    """The 8 bytes at each offset of ``at`` (any shape) as one native word each.

    A word view of ``view`` that steps one byte (every 8-byte window a word) is
    gathered once per offset: 1.6 times faster than gathering the windows' bytes.
    """
    words = np.ndarray((max(0, len(view) - 7),), np.uint64, view, 0, (1,))
    found: U64 = words[at]
    return found


def _window_words(view: U8, end: I64) -> U64:
    """``_words_at(view, end[:, None] - _BACKS)`` (every place at or after 0): each row's
    bytes from its farthest place to its nearest place's end copied once (``rows_at``),
    then read as words at the places' columns: twice as fast as a gather per place."""
    far = int(_BACKS[0])
    span = far - int(_BACKS[-1]) + 8
    window = rows_at(view, end - far, span)
    words = np.ndarray((len(window), span - 7), np.uint64, window, 0, (span, 1))
    found: U64 = words[:, far - _BACKS]
    return found
