"""(key, IV) reuse: the same explicit IV twice under one key.

In: ``PacketContext`` of ESP packets. Out: ``iv_reused`` (True when this
packet's IV was already used under the same key earlier in the capture),
one ``iv_reuse`` finding per reused IV, and one ``shared_key`` finding
per set of SAs given the same key. Raises nothing.

RFC 4106 s3.1 / primer s3: a repeated (key, nonce) leaks the XOR of two
plaintexts and the GHASH key: with a counter-mode algorithm (the AEADs,
AES-CTR) a reuse is critical. With CBC (RFC 3602) a repeated IV under one
key shows which packets start with equal plaintext blocks, and as Linux's
echainiv computes the IV from the sequence number, a repeat means two
packets were built from one sequence number: high. Without a key the
algorithm is unknown: a group whose IVs follow a counter (seqiv) is taken
as counter mode, critical; one whose IVs look random (CBC's do) is high.
IVs are in clear, so reuse is visible without keys: packets are grouped
by key material when the key is known (two SAs with one key are one
group) and by (destination, SPI) when not.

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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from espforensics.bounded.frames import Frames
from espforensics.bounded.intervals import I64, U8, U64, IntervalSet, U64Set
from espforensics.bounded.rare import Rare
from espforensics.bounded.window import RecentWindow
from espforensics.checks import coverage as coverage_reasons
from espforensics.checks.bulk import BulkRules, Mask, Opened, Scope, ScopeRows
from espforensics.checks.context import HEAD_LEN, Flow, PacketContext, SaState
from espforensics.checks.coverage import Seen
from espforensics.checks.ivmath import signed_delta
from espforensics.crypto import IV_LEN, key_fingerprint
from espforensics.decode.digest import RowDigests
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.keys.sa import NULL_CIPHER, SaTable
from espforensics.model.enums import FindingKind, Severity
from espforensics.model.evidence import IvReuse, IvReuseMore, IvReuseUnproven, IvUse, SharedKey
from espforensics.model.records import Finding

WINDOW = 4096
MAX_EVENTS = 10_000  # reuse events kept for the report; more are counted only
EVIDENCE = HEAD_LEN  # leading bytes whose XOR is shown
RUNS_BEFORE_HASH = 64  # runs of a group before random IVs are hashed (and the lane's again)
_MASK64 = (1 << 64) - 1


@dataclass(slots=True)
class _Use:
    frame: int
    iv: int
    spi: int
    seq64: int
    digest: bytes
    ct: bytes
    pt: bytes | None


@dataclass(slots=True)
class _Group:
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
    _recent: RecentWindow[_Use] | None = None
    _first: _Use | None = None
    rare_fields: dict[str, Any] | None = None
    # Rare fields (bounded/rare.py): most groups of a capture of many SAs never have one.
    events = Rare[dict[int, list[_Use]] | None](None)  # made at the first reuse
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
    def recent(self) -> RecentWindow[_Use]:
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

    def keep_first(self, use: _Use) -> bool:
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

    def __call__(self, i: int) -> _Use:
        return _Use(
            int(self.frames[i]),
            int.from_bytes(self.ivs[i].tobytes()),
            int(self.spis[i]),
            int(self.seq64s[i]),
            self.digests(i),
            self.cts[i].tobytes(),
            None if self.pts is None else self.pts[i].tobytes(),
        )


def _xor(a: bytes, b: bytes) -> str:
    return bytes(x ^ y for x, y in zip(a, b, strict=False)).hex()


USES_SHOWN = 6  # uses of one IV a finding names (its detail and its evidence)


def _evidence(group: _Group, iv: int, uses: list[_Use]) -> IvReuse:
    """The finding's evidence: the uses it names, the XOR of the first two uses' bytes."""
    shown = tuple(IvUse(u.frame, u.seq64) for u in uses[:USES_SHOWN])
    if len(uses) < 2:  # the first use was before the evidence window
        return IvReuse(iv, group.iv_len, shown, b"", None)
    a, b = uses[0], uses[1]
    pt = None if a.pt is None or b.pt is None else bytes.fromhex(_xor(a.pt, b.pt))
    return IvReuse(iv, group.iv_len, shown, bytes.fromhex(_xor(a.ct, b.ct)), pt)


class IvReuseCheck(BulkRules):
    """Tracks IVs per key group and reports every one used twice."""

    name = "iv_reuse"

    def __init__(self, sas: SaTable) -> None:
        self._sas = sas
        self._groups: dict[bytes, _Group] = {}  # by key material, else by SPI and destination
        self._by_state: dict[SaState, _Group] = {}  # the groups of the key files' SAs
        # Keyless groups of one packet, the latest of each SPI by its SPI (the flow's own
        # int: no key object): its use and destination packed (``_pack``), a ``_Group``
        # made at the group's next read (``_of``). A capture of many one-packet SAs keeps
        # one per SA: about 140 bytes with its entry, 510 as a group with its first use.
        self._lone: dict[int, bytes] = {}

    def observe(self, pkt: PacketContext) -> None:
        rec = pkt.rec
        iv, seq64 = pkt.iv, rec.seq64
        if iv is None or seq64 is None or not pkt.header_is_evidence or pkt.clear_from_header:
            return
        group = self._of(pkt.flow)
        if group is None and self._first_alone(pkt, iv, seq64):
            rec.iv_reused = False  # a keyless group's first packet: nothing before it
            return
        group = group or self._group(pkt, iv, seq64)
        group.packets += 1
        value = group.value(iv, seq64)
        reused = group.seen(value)
        start = (rec.esp_offset or 0) + ESP_HEADER_LEN + group.iv_len
        use = _Use(
            rec.frame,
            iv,
            rec.spi or 0,
            seq64,
            pkt.digest,
            pkt.data[start : start + EVIDENCE],
            pkt.plain_head,  # already the first EVIDENCE bytes
        )
        if not reused and group.keep_first(use):  # its first packet: no window to read yet
            rec.iv_reused = False
            return
        recent = group.recent
        key = value if group.wide else iv  # the window's key
        if reused:
            first = recent.get(key)
            if group.wide and (first is None or first.iv != iv):
                group.unconfirmed += 1  # the fold matched: the IV itself is not proven seen
                reused = False
            # A byte-identical replay repeats the IV with the same plaintext: no keystream
            # is reused (the sequence check reports it as a duplicate).
            reused = reused and (first is None or first.digest != use.digest)
            if reused:
                self._event(group, iv, use, first)
        rec.iv_reused = reused
        recent.put(key, use)  # the newest use

    # -- the steady lane's rules (checks/bulk.py): its scope is the key group -----
    def admits(self, flow: Flow) -> bool:
        """Counter-mode IVs (the AEADs, AES-CTR) or CBC's 16-byte ones, of a known group,
        counting in runs or hashing; not 3DES's 8-byte CBC IVs (random, yet too narrow
        to fold), nor NULL (no IV). Without a key: 8-byte IVs, as ``observe`` reads them."""
        ctx, group = flow.state.ctx, self._of(flow)
        if group is None:
            return False
        if ctx is None:  # no usable key: keyless, not an algorithm the tool cannot open
            return flow.state.sa is None and not group.wide
        return bool((ctx.counter and ctx.iv_len == IV_LEN) or ctx.iv_len == 2 * IV_LEN)

    def scope(self, flow: Flow) -> Scope | None:
        """The flow's key group: its ``refuses`` and ``commit`` are this check's rules over
        the rows of every flow of the key."""
        return self._of(flow)

    def _of(self, flow: Flow) -> _Group | None:
        """The flow's key group, if a packet made it: an SA of the key files by its state,
        a flow without one by its SPI and destination (each such flow has a state of
        its own: no entry per state for a capture of many keyless SAs)."""
        if flow.state.sa is not None:
            return self._by_state.get(flow.state)
        key = _sa_key(flow)
        group = self._groups.get(key)
        if group is None and flow.spi in self._lone:
            packed = self._lone[flow.spi]
            if _lone_dst(packed) == flow.dst:
                del self._lone[flow.spi]
                group = self._groups[key] = _unpack(packed)
        return group

    def _first_alone(self, pkt: PacketContext, iv: int, seq64: int) -> bool:
        """Keep a keyless group's first packet packed (``_lone``), if it is one: what
        ``observe`` would keep of it (its use; the group's constants and first value
        follow from its IV and seq64, ``_unpack``). A lone group of another destination
        with the same SPI becomes a ``_Group`` first."""
        flow = pkt.flow
        if flow.state.sa is not None or pkt.plain_head is not None:
            return False
        other = self._lone.get(flow.spi)
        if other is not None:
            self._groups[b"s" + flow.spi.to_bytes(4) + _lone_dst(other).encode()] = _unpack(other)
        rec = pkt.rec
        start = (rec.esp_offset or 0) + ESP_HEADER_LEN + IV_LEN
        ct = pkt.data[start : start + EVIDENCE]
        use = _pack(rec.frame, iv, rec.spi or 0, seq64, pkt.digest, ct, flow.dst)
        self._lone[flow.spi] = use
        return True

    def _group(self, pkt: PacketContext, iv: int, seq64: int) -> _Group:
        """The key group of the packet's SA: by key material if known, else (dst, SPI)."""
        sa = pkt.flow.state.sa
        key = b"k" + key_fingerprint(sa) if sa is not None and sa.supported else _sa_key(pkt.flow)
        group = self._groups.get(key)
        if group is None:
            ctx = pkt.flow.state.ctx
            iv_len = IV_LEN if ctx is None else ctx.iv_len
            wide = iv_len > IV_LEN
            group = self._groups[key] = _Group(
                const=0 if wide else iv ^ seq64,
                added=0 if wide else (iv - seq64) & _MASK64,
                additive=False if wide else None,
                iv_len=iv_len,
                counter=None if ctx is None else ctx.counter,
            )
            if iv_len > IV_LEN:
                group.hashed = U64Set()  # random 16-byte IVs: no runs to grow
        if sa is not None:
            self._by_state[pkt.flow.state] = group
        return group

    def _event(self, group: _Group, iv: int, use: _Use, first: _Use | None) -> None:
        if group.events is None:
            group.events = {}
        uses = group.events.get(iv)
        if uses is None:
            if len(group.events) >= MAX_EVENTS:
                group.dropped += 1
                return
            uses = group.events[iv] = [first] if first is not None else []
        uses.append(use)

    def finish(self) -> Iterator[Finding]:
        for group in self._groups.values():
            for iv, uses in (group.events or {}).items():
                yield self._finding(group, iv, uses)
            if group.unconfirmed:
                yield Finding(
                    FindingKind.IV_REUSE,
                    Severity.LOW,
                    None,
                    (),
                    group.unconfirmed,
                    f"{group.unconfirmed} IVs match an earlier IV in 64 of their "
                    f"{8 * group.iv_len} bits, the earlier one older than the last {WINDOW} "
                    f"packets: possible reuse, not proven",
                    evidence=IvReuseUnproven(group.unconfirmed, 8 * group.iv_len, WINDOW),
                )
            if group.dropped:
                yield Finding(
                    FindingKind.IV_REUSE,
                    Severity.CRITICAL if group.nonce else Severity.HIGH,
                    None,
                    (),
                    group.dropped,
                    f"{group.dropped} more reused IVs in this key group, not itemised",
                    evidence=IvReuseMore(group.dropped),
                )
        yield from self._shared_keys()

    @staticmethod
    def _finding(group: _Group, iv: int, uses: list[_Use]) -> Finding:
        frames = ", ".join(f"frame {u.frame} seq {u.seq64}" for u in uses[:USES_SHOWN])
        text = f"IV {iv:0{2 * group.iv_len}x} used {len(uses)} times: {frames}"
        if len(uses) >= 2:
            a, b = uses[0], uses[1]
            text += f"; ciphertext XOR {_xor(a.ct, b.ct)}"
            if a.pt is not None and b.pt is not None and group.nonce:
                text += f"; plaintext XOR {_xor(a.pt, b.pt)} (equal: same keystream)"
            elif a.pt is not None and b.pt is not None:
                text += f"; plaintext XOR {_xor(a.pt, b.pt)}"
        else:
            text += " (first use before the evidence window)"
        if group.counter is False:
            text += (
                "; CBC: equal leading plaintext blocks give equal ciphertext blocks, and "
                "echainiv IVs come from the sequence number, so two packets were built from "
                "one sequence number"
            )
        elif not group.nonce:
            text += (
                "; no key: the SA's IVs follow no counter (as CBC's do), so a repeated IV, "
                "a nonce reuse only if the SA is an AEAD or CTR"
            )
        return Finding(
            FindingKind.IV_REUSE,
            Severity.CRITICAL if group.nonce else Severity.HIGH,
            uses[-1].spi,
            Frames.of(u.frame for u in uses),  # every use the check kept
            len(uses),
            text,
            evidence=_evidence(group, iv, uses),
        )

    def _shared_keys(self) -> Iterator[Finding]:
        by_key: dict[bytes, list[str]] = {}
        spis: dict[bytes, int] = {}
        shared: dict[bytes, list[int]] = {}
        for sa in self._sas:
            if sa.supported and len(sa.key):  # ecb(cipher_null) has no key to share
                fp = key_fingerprint(sa)
                by_key.setdefault(fp, []).append(f"SPI {sa.spi_text} ({sa.origin})")
                spis.setdefault(fp, sa.spi)
                shared.setdefault(fp, []).append(sa.spi)
        for fp, names in by_key.items():
            if len(names) > 1:
                yield Finding(
                    FindingKind.SHARED_KEY,
                    Severity.HIGH,
                    spis[fp],
                    (),
                    len(names),
                    f"{len(names)} SAs share one key; their IVs are checked as one "
                    f"group: {'; '.join(names)}",
                    evidence=SharedKey(tuple(shared[fp])),
                )


def _sa_key(flow: Flow) -> bytes:
    """The group key of an SA without key material: its SPI and destination, one bytes
    value (a tuple holding them costs 60 bytes more per group)."""
    return b"s" + flow.spi.to_bytes(4) + flow.dst.encode()


# frame, IV, SPI, seq64, and the lengths of the digest, the ciphertext and the destination
_LONE = struct.Struct("<QQIQBBB")


def _pack(frame: int, iv: int, spi: int, seq64: int, digest: bytes, ct: bytes, dst: str) -> bytes:
    """A keyless group's first use and its destination as one bytes value (its 8-byte
    IV: ``IV_LEN``)."""
    where = dst.encode()
    head = _LONE.pack(frame, iv, spi, seq64, len(digest), len(ct), len(where))
    return head + digest + ct + where


def _lone_dst(packed: bytes) -> str:
    """The destination of a ``_pack``ed group (of an SPI the key of ``_lone``)."""
    return packed[len(packed) - packed[_LONE.size - 1] :].decode()


def _unpack(packed: bytes) -> _Group:
    """The group ``observe`` makes of a keyless SA's first packet, from ``_pack``: its
    constants map that IV to its seq64, which is the one value it holds (``value``)."""
    frame, iv, spi, seq64, digest_len, ct_len, _ = _LONE.unpack_from(packed)
    at = _LONE.size + digest_len
    use = _Use(frame, iv, spi, seq64, packed[_LONE.size : at], packed[at : at + ct_len], None)
    return _Group(
        const=iv ^ seq64,
        added=(iv - seq64) & _MASK64,
        counter=None,
        packets=1,
        _lone=seq64,
        _first=use,
    )


def _hashed(hashed: U64Set, values: U64) -> Mask:
    """Which values may be a reuse: in the hash set, or again after an earlier row."""
    return _again(values) | hashed.contains_many(values)


def _again(values: U64) -> Mask:
    """Which values an earlier row has too. Random values have none: a sort tells, a
    tenth of the time of finding each value's first row (np.unique's return_index)."""
    again = np.zeros(len(values), np.bool_)
    ordered = np.sort(values)
    if len(values) and (ordered[1:] == ordered[:-1]).any():
        again[:] = True
        again[np.unique(values, return_index=True)[1]] = False
    return again


def coverage(seen: Seen) -> str | None:
    """Examined: packets whose clear IV is evidence (keyless ones too, taken as AEAD-shaped)."""
    if seen.algorithm.split(" + ")[0] == NULL_CIPHER:
        return coverage_reasons.NO_IV
    return None if seen.evidence else seen.why
