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
group) and by (destination, SPI) when not. What a group keeps of its IVs,
and the rule over them per packet and in bulk: checks/iv_groups.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from espforensics.bounded.frames import Frames
from espforensics.bounded.intervals import U64Set
from espforensics.checks import coverage as coverage_reasons
from espforensics.checks.bulk import BulkRules, FlowRows, Mask, Scope
from espforensics.checks.context import Flow, PacketContext, SaState
from espforensics.checks.iv_groups import (
    EVIDENCE,
    WINDOW,
    KeyGroup,
    Use,
    lone_dst,
    pack,
    unpack,
)
from espforensics.crypto import IV_LEN, key_fingerprint
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.keys.sa import SaTable
from espforensics.model.enums import FindingKind, Severity
from espforensics.model.evidence import IvReuse, IvReuseMore, IvReuseUnproven, IvUse, SharedKey
from espforensics.model.records import Finding

MAX_EVENTS = 10_000  # reuse events kept for the report; more are counted only
_MASK64 = (1 << 64) - 1


def _xor(a: bytes, b: bytes) -> str:
    return bytes(x ^ y for x, y in zip(a, b, strict=False)).hex()


USES_SHOWN = 6  # uses of one IV a finding names (its detail and its evidence)


def _evidence(group: KeyGroup, iv: int, uses: list[Use]) -> IvReuse:
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
        self._groups: dict[bytes, KeyGroup] = {}  # by key material, else by SPI and destination
        self._by_state: dict[SaState, KeyGroup] = {}  # the groups of the key files' SAs
        # Keyless groups of one packet, the latest of each SPI by its SPI (the flow's own
        # int: no key object): its use and destination packed (``pack``), a ``KeyGroup``
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
        use = Use(
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
        to fold). NULL (no IV) has no group and nothing to keep: ``observe`` returns at
        once. Without a key: 8-byte IVs, as ``observe`` reads them."""
        if flow.state.no_iv:
            return True  # NULL: no scope, no rule (``BulkRules``' defaults)
        ctx, group = flow.state.ctx, self._of(flow)
        if group is None:  # keyless, its last whole packet clear from its header on: ``refuses``
            return ctx is None and bool(flow.state.clear_whole)
        if ctx is None:  # no usable key: keyless, not an algorithm the tool cannot open
            return flow.state.sa is None and not group.wide
        return bool((ctx.counter and ctx.iv_len == IV_LEN) or ctx.iv_len == 2 * IV_LEN)

    def refuses(self, rows: FlowRows) -> Mask:
        """A flow without a group (admitted for its rows clear from their header on, which
        ``observe`` leaves alone): every row with an IV, whose first use makes the group
        (rows clear from their header on are in no scope: engine/plan.py ``scopes``)."""
        if rows.flow.state.no_iv or self._of(rows.flow) is not None:
            return np.zeros(len(rows), np.bool_)
        return ~rows.clear if rows.clear is not None else np.ones(len(rows), np.bool_)

    def scope(self, flow: Flow) -> Scope | None:
        """The flow's key group: its ``refuses`` and ``commit`` are this check's rules over
        the rows of every flow of the key."""
        return self._of(flow)

    def _of(self, flow: Flow) -> KeyGroup | None:
        """The flow's key group, if a packet made it: an SA of the key files by its state,
        a flow without one by its SPI and destination (each such flow has a state of
        its own: no entry per state for a capture of many keyless SAs)."""
        if flow.state.sa is not None:
            return self._by_state.get(flow.state)
        key = _sa_key(flow)
        group = self._groups.get(key)
        if group is None and flow.spi in self._lone:
            packed = self._lone[flow.spi]
            if lone_dst(packed) == flow.dst:
                del self._lone[flow.spi]
                group = self._groups[key] = unpack(packed)
        return group

    def _first_alone(self, pkt: PacketContext, iv: int, seq64: int) -> bool:
        """Keep a keyless group's first packet packed (``_lone``), if it is one: what
        ``observe`` would keep of it (its use; the group's constants and first value
        follow from its IV and seq64, ``unpack``). A lone group of another destination
        with the same SPI becomes a ``KeyGroup`` first."""
        flow = pkt.flow
        if flow.state.sa is not None or pkt.plain_head is not None:
            return False
        other = self._lone.get(flow.spi)
        if other is not None:
            self._groups[b"s" + flow.spi.to_bytes(4) + lone_dst(other).encode()] = unpack(other)
        rec = pkt.rec
        start = (rec.esp_offset or 0) + ESP_HEADER_LEN + IV_LEN
        ct = pkt.data[start : start + EVIDENCE]
        use = pack(rec.frame, iv, rec.spi or 0, seq64, pkt.digest, ct, flow.dst)
        self._lone[flow.spi] = use
        return True

    def _group(self, pkt: PacketContext, iv: int, seq64: int) -> KeyGroup:
        """The key group of the packet's SA: by key material if known, else (dst, SPI)."""
        sa = pkt.flow.state.sa
        key = b"k" + key_fingerprint(sa) if sa is not None and sa.supported else _sa_key(pkt.flow)
        group = self._groups.get(key)
        if group is None:
            ctx = pkt.flow.state.ctx
            iv_len = IV_LEN if ctx is None else ctx.iv_len
            wide = iv_len > IV_LEN
            group = self._groups[key] = KeyGroup(
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

    def _event(self, group: KeyGroup, iv: int, use: Use, first: Use | None) -> None:
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
    def _finding(group: KeyGroup, iv: int, uses: list[Use]) -> Finding:
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


coverage = coverage_reasons.of_ivs  # the IV derivation check's too
