"""The IV reuse check's key groups: the IVs one key has carried, and the rules over them.

In: a key group's IVs (ints, or a steady batch's uint64 arrays) and seq64s.
Out: ``KeyGroup.seen`` (was this value used before: the per-packet rule,
which checks/iv_reuse.py's ``IvReuseCheck.observe`` applies), beside it
``KeyGroup.refuses`` and ``KeyGroup.commit`` (the same rule over a
steady batch, checks/bulk.py's scope), the uses each keeps for the
evidence (``Use``, ``Uses``), and a keyless group's first packet packed
(``pack``, ``unpack``). Raises nothing.

Memory: IVs are mapped through ``iv xor c`` or ``iv - c`` (c fixed per
group from its first packet, so that its IV maps to its sequence number),
which turns Linux seqiv IVs, and an additive counter's (primer s9), into
the sequence counter, so an ``IntervalSet`` holds one run per unbroken
stretch (bounded by runs, not packets). Both maps read a packet alike
while its number shares no bit with c's (``IV = seq64``, c = 0, forever):
the group takes one at the first packet they read apart, the one that
puts it nearer its own number (xor on a tie). Every map is a bijection, so
which one a group takes changes no reuse found, only how compact its runs
are. A group whose IVs do not follow a counter (random IVs: more than
``RUNS_BEFORE_HASH`` runs, more than half its packets) moves to a
``U64Set``, 8 bytes per packet the lane takes, 11-16 per packet taken per
frame; 16-byte CBC IVs go there at once as a 64-bit fold of the IV, and a
fold seen before counts as a reuse only when the window holds the earlier
IV itself (else it is a possible reuse, counted apart). The evidence of
each reuse (frames, sequence numbers, XOR of the plaintexts) comes from a
window of the last ``WINDOW`` IVs per group; a reuse of an older IV is
still detected and reported, with the first use's frame unknown.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from espforensics.bounded.intervals import I64, U8, U64, IntervalSet, U64Set
from espforensics.bounded.rare import Rare
from espforensics.bounded.window import RecentWindow
from espforensics.checks.bulk import Mask, Opened, ScopeRows
from espforensics.checks.context import HEAD_LEN
from espforensics.checks.ivmath import signed_delta
from espforensics.crypto import IV_LEN
from espforensics.decode.digest import RowDigests

WINDOW = 4096
EVIDENCE = HEAD_LEN  # leading bytes whose XOR is shown
RUNS_BEFORE_HASH = 64  # runs of a group before random IVs are hashed (and the lane's again)
_MASK64 = (1 << 64) - 1


@dataclass(slots=True)
class Use:
    """One packet's use of an IV, as a finding names it: its frame, IV, SPI and seq64,
    its digest (a replay is no reuse) and its first ``EVIDENCE`` bytes."""

    frame: int
    iv: int
    spi: int
    seq64: int
    digest: bytes
    ct: bytes
    pt: bytes | None


@dataclass(slots=True)
class KeyGroup:
    """The IVs of one key (or of one keyless SA): the values seen, the latest uses."""

    const: int  # iv xor seq64 of the group's first packet
    added: int = 0  # iv - seq64 (mod 2^64) of the first packet
    # The map IVs take to the sets: ``iv - added`` (True), ``iv xor const`` (False); None
    # while the two read every IV alike (docstring). Wide IVs are folded instead.
    additive: bool | None = None
    iv_len: int = IV_LEN
    counter: bool | None = True  # a counter-mode nonce (keystream reuse); None: no key says
    # The values seen as runs (``runs``), made at the second: until then the one is ``_lone``
    # (a capture of many one-packet SAs keeps one group per SA)
    _runs: IntervalSet | None = None
    _lone: int | None = None
    hashed: U64Set | None = None
    packets: int = 0
    # The window of uses (``recent``), made at the second use: until then the one is ``_first``.
    # Oldest first, by IV. An OrderedDict inside: evicting a plain dict's first key costs a
    # scan over the slots deleted before it (measured: 5 us per packet at a 4,096 window).
    _recent: RecentWindow[Use] | None = None
    _first: Use | None = None
    rare_fields: dict[str, Any] | None = None
    # Rare fields (bounded/rare.py): most groups of a capture of many SAs never have one.
    events = Rare[dict[int, list[Use]] | None](None)  # made at the first reuse
    dropped = Rare(0)
    unconfirmed = Rare(0)  # a wide IV's fold seen before, its earlier use out of the window

    @property
    def nonce(self) -> bool:
        """Is a repeat a nonce reuse? Known from the algorithm, else from the IVs' pattern."""
        if self.counter is not None:
            return self.counter
        runs = len(self._runs) if self._runs is not None else int(self._lone is not None)
        return self.hashed is None and 2 * runs <= self.packets

    @property
    def wide(self) -> bool:
        """IVs wider than 64 bits (CBC's 16 bytes): hashed as a fold, confirmed by the window."""
        return self.iv_len > IV_LEN

    def value(self, iv: int, seq64: int) -> int:
        """What the sets hold for an IV: ``iv xor const`` or ``iv - added`` (the group's
        map, taken at the first IV the two read apart), or a 64-bit fold of a wider IV."""
        if self.iv_len > IV_LEN:
            return (iv >> 64 ^ iv) & _MASK64
        if self.additive is None:
            xored, added = iv ^ self.const, (iv - self.added) & _MASK64
            if xored == added:
                return xored
            self.additive = abs(signed_delta(added, seq64)) < abs(signed_delta(xored, seq64))
        return (iv - self.added) & _MASK64 if self.additive else iv ^ self.const

    def values(self, ivs: U64) -> tuple[U64, Mask]:
        """``value`` of many IVs, and which of them would make the group take its map."""
        if self.additive is None:
            xored = ivs ^ np.uint64(self.const)
            with np.errstate(over="ignore"):
                added = ivs - np.uint64(self.added)
            return xored, xored != added
        if self.additive:
            with np.errstate(over="ignore"):
                return ivs - np.uint64(self.added), np.zeros(len(ivs), np.bool_)
        return ivs ^ np.uint64(self.const), np.zeros(len(ivs), np.bool_)

    @property
    def runs(self) -> IntervalSet:
        """The values seen, as runs (a hashing group's: those before it began to hash)."""
        runs = self._runs
        if runs is None:
            runs = self._runs = IntervalSet()
            if self._lone is not None:
                runs.add(self._lone)
                self._lone = None
        return runs

    @property
    def recent(self) -> RecentWindow[Use]:
        """The latest uses, by the window's key (``key``)."""
        recent = self._recent
        if recent is None:
            recent = self._recent = RecentWindow(WINDOW)
            first = self._first
            if first is not None:
                recent.put(self.key(first.iv, first.seq64), first)
                self._first = None
        return recent

    def key(self, iv: int, seq64: int) -> int:
        """A use's key in the window: its IV, or a wide IV's fold."""
        return self.value(iv, seq64) if self.wide else iv

    def keep_first(self, use: Use) -> bool:
        """Keep the group's first use in place of its window: True if it is the first."""
        if self._recent is not None or self._first is not None:
            return False
        self._first = use
        return True

    def seen(self, value: int) -> bool:
        if self.hashed is not None:
            return (self._runs is not None and value in self._runs) or self.hashed.add(value)
        if self._runs is None and self._lone is None:
            self._lone = value  # the group's first value: nothing before it
            return False
        runs = self.runs
        was = runs.add(value)
        if len(runs) > RUNS_BEFORE_HASH and len(runs) * 2 > self.packets:
            self.hashed = U64Set()  # not a counter: stop growing runs, hash from now on
        return was

    def refuses(self, rows: ScopeRows) -> Mask:
        """The bulk rule of ``IvReuseCheck.observe`` over the group's rows (``Scope``):
        rows whose IV may be a reuse: not above every value the group holds (and rising),
        or a wide IV's fold the group or an earlier row has; and counting rows past
        ``RUNS_BEFORE_HASH`` runs, where ``observe`` would start hashing."""
        if not len(rows):
            return np.zeros(0, np.bool_)
        if self.wide:
            assert self.hashed is not None  # a wide group hashes from its first packet
            return _hashed(self.hashed, rows.iv)
        value, bad = self.values(rows.iv)  # a row that makes the group take its map: per frame
        runs = self.runs
        if self.hashed is not None:  # random IVs: a hash of the values, not arithmetic
            return bad | _hashed(self.hashed, value) | runs.contains_many(value)
        bad |= value <= np.concatenate(([np.uint64(runs.top())], value[:-1]))
        fresh = np.concatenate(([int(value[0]) != runs.top() + 1], np.diff(value) != 1))
        # where ``seen`` would start hashing: past the runs cap, runs more than half the packets
        held = len(runs) + np.cumsum(fresh)
        bad |= (held > RUNS_BEFORE_HASH) & (2 * held > self.packets + np.arange(1, len(rows) + 1))
        return bad

    def commit(self, rows: ScopeRows, opened: Opened) -> None:
        """What ``IvReuseCheck.observe`` does for packets whose IVs are new to the group,
        in bulk (``iv_reused`` is False for each)."""
        width = 2 * IV_LEN if self.wide else IV_LEN
        uses = Uses(
            rows.frames,
            rows.iv_bytes[:, :width],
            rows.spi,
            rows.seq64,
            rows.digest,
            opened.cts,
            opened.heads,
        )
        self.packets += len(rows)
        if self.wide:
            assert self.hashed is not None
            self.hashed.add_new(rows.iv)  # the folds
        elif self.hashed is not None:
            self.hashed.add_new(self.values(rows.iv)[0])
        else:
            self.runs.extend_above(self.values(rows.iv)[0])
        self.recent.put_many(rows.iv, uses)


class Uses:
    """The uses of a steady batch's packets, each built only if the window is read.

    Arrays with one row per packet: frames, IVs (rows of their bytes), SPIs,
    seq64s, the digests (``PacketContext.digest``, each made when its use is), and
    the ciphertext's and plaintext's first ``EVIDENCE`` bytes (no plaintext: None,
    packets without a key).
    """

    __slots__ = ("cts", "digests", "frames", "ivs", "pts", "seq64s", "spis")

    def __init__(
        self,
        frames: I64,
        ivs: U8,
        spis: I64,
        seq64s: U64,
        digests: RowDigests,
        cts: U8,
        pts: U8 | None,
    ) -> None:
        self.frames, self.ivs, self.spis, self.seq64s = frames, ivs, spis, seq64s
        self.digests = digests
        self.cts, self.pts = cts, pts

    def __call__(self, i: int) -> Use:
        return Use(
            int(self.frames[i]),
            int.from_bytes(self.ivs[i].tobytes()),
            int(self.spis[i]),
            int(self.seq64s[i]),
            self.digests(i),
            self.cts[i].tobytes(),
            None if self.pts is None else self.pts[i].tobytes(),
        )


# frame, IV, SPI, seq64, and the lengths of the digest, the ciphertext and the destination
_LONE = struct.Struct("<QQIQBBB")


def pack(frame: int, iv: int, spi: int, seq64: int, digest: bytes, ct: bytes, dst: str) -> bytes:
    """A keyless group's first use and its destination as one bytes value (its 8-byte
    IV: ``IV_LEN``)."""
    where = dst.encode()
    head = _LONE.pack(frame, iv, spi, seq64, len(digest), len(ct), len(where))
    return head + digest + ct + where


def lone_dst(packed: bytes) -> str:
    """The destination of a ``pack``ed group (``IvReuseCheck._lone`` keeps them by SPI)."""
    return packed[len(packed) - packed[_LONE.size - 1] :].decode()


def unpack(packed: bytes) -> KeyGroup:
    """The group ``observe`` makes of a keyless SA's first packet, from ``pack``: its
    constants map that IV to its seq64, which is the one value it holds (``value``)."""
    frame, iv, spi, seq64, digest_len, ct_len, _ = _LONE.unpack_from(packed)
    at = _LONE.size + digest_len
    use = Use(frame, iv, spi, seq64, packed[_LONE.size : at], packed[at : at + ct_len], None)
    return KeyGroup(
        const=iv ^ seq64,
        added=(iv - seq64) & _MASK64,
        counter=None,
        packets=1,
        _lone=seq64,
        _first=use,
    )


def _hashed(hashed: U64Set, values: U64) -> Mask:
    """Which values may be a reuse: in the hash set, or again after an earlier row."""
    return again(values) | hashed.contains_many(values)


def again(values: U64) -> Mask:
    """Which values an earlier row has too. Random values have none: a sort tells, a
    tenth of the time of finding each value's first row (np.unique's return_index)."""
    out = np.zeros(len(values), np.bool_)
    ordered = np.sort(values)
    if len(values) and (ordered[1:] == ordered[:-1]).any():
        out[:] = True
        out[np.unique(values, return_index=True)[1]] = False
    return out
