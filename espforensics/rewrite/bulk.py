"""``--decrypted`` in bulk: a batch of the capture and its rows, rebuilt as columns.

In: a ``FrameBatch`` of the capture (capture/batch.py), its rows of
packets.parquet (``RowSlice``, the same frames) and the ``Decryptor``
(rewrite/decrypted.py: the SAs, their contexts, each SA's last inner IPv4
header). Out: the batch's frames to write, as a ``FrameRun``
(capture/writer.py), each exactly what ``Decryptor.frame`` gives for it.
Raises what ``Decryptor.frame`` raises. ``DecryptedCopy`` writes the
copy a batch at a time in rewrite/onepass.py's pass (alone:
``write_decrypted``; or beside ``--annotate``).

The bulk rule takes the plain case and hands every other packet to the
per-frame writer (``Decryptor.frame``), the reference: a verified packet
(verdict ``ok``, not a fragment) in a common layout (engine/wire.py's
``steady``, no tunnel; an outer IPv4 header of 20 bytes or an IPv6 header
without extension headers, ESP on protocol 50 or in UDP) at the place the
analysis found it, of an SA with a usable key in tunnel or transport mode,
whose link header names the inner IP version (``relink``, once per
distinct header). Such packets are decrypted again per SA in one call
(``decrypt_many``: the ICVs the analysis verified are not computed
twice), their trailers read as columns (``trailer.parse_trailers``) and
held to the one the analysis read (its ``pad_len`` and ``next_header``),
and their packets built as rebuild.py's bulk forms build them
(``transport_heads``, ``ip_lengths``); a packet that does not open again,
whose trailer is not sound or not the analysis's, a dummy packet, or a
payload that is not the IP packet its next header names, goes to the
per-frame writer too, which verifies it again and says why it is kept.
Each SA's last inner IPv4 header (the GSO rebuild's template) is passed
on in capture order between the two.
Frames that are not ESP to decrypt are written as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from espforensics.capture.batch import FrameBatch
from espforensics.capture.writer import Data, FrameRun, Writable
from espforensics.crypto import CipherContext
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.decode.ip import PROTO_ESP, PROTO_UDP
from espforensics.decode.trailer import NO_NEXT_HEADER, parse_trailers
from espforensics.engine.plan import distinct_flows, flow_key
from espforensics.engine.wire import VLAN_DEPTHS, WireColumns, parse
from espforensics.keys import SaTable, SecurityAssociation
from espforensics.model.arrays import I64, Mask
from espforensics.model.enums import Verdict
from espforensics.model.records import DecryptionSecrets, Frame, PacketRecord
from espforensics.rewrite.decrypted import (
    COLUMNS,
    TRIED,
    DecryptionKeys,
    Decryptor,
    PcapngSink,
    decrypted_comment,
    sink_for,
)
from espforensics.rewrite.onepass import copy_alone
from espforensics.rewrite.rebuild import (
    PROTO_IPIP,
    PROTO_IPV6,
    ip_lengths,
    relink,
    transport_heads,
)
from espforensics.rewrite.rows import RowSlice

U8 = npt.NDArray[np.uint8]
BATCH = 4096  # frames a batch: the plaintexts of one in memory at a time
COPY_COLUMNS = (*COLUMNS, "udp_sport", "udp_dport", "pad_len", "next_header")
_NO_TUNNEL = ("", "vlan", "vlan vlan")  # ``carriers`` without a tunnel word
_MODES = (None, "tunnel", "transport")


@dataclass(frozen=True, slots=True)
class _Opened:
    """The candidates that opened again: their rows, plaintexts joined, SAs."""

    rows: I64
    view: U8  # the plaintexts joined, then 64 zero bytes
    start: I64
    size: I64
    sas: list[SecurityAssociation]
    block: I64
    trailer: I64  # the analysis's pad length and next header, as pad_len << 8 | next_header


def _candidates(batch: FrameBatch, rows: RowSlice, wire: WireColumns) -> Mask:
    """The verified packets in a common layout, at the place the analysis found them."""
    cand = rows.is_in("verdict", [Verdict.OK.value]) & rows.nulls("fragments")
    cand &= rows.is_in("carriers", _NO_TUNNEL) & wire.steady & (wire.carriers < VLAN_DEPTHS)
    cand &= (wire.esp_offset == rows.ints("esp_offset", -1)) & (wire.spi == rows.ints("spi", -1))
    cand &= wire.seq == rows.ints("seq", -1)
    view = np.frombuffer(batch.buf, np.uint8)
    l3 = np.where(cand, batch.start + wire.l3, 0)
    v4 = wire.ip_version == 4
    first, proto4, proto6 = view[l3], view[l3 + 9], view[l3 + 6]
    plain_v4 = v4 & (first == 0x45) & np.isin(proto4, (PROTO_ESP, PROTO_UDP))
    plain_v6 = ~v4 & np.isin(proto6, (PROTO_ESP, PROTO_UDP))
    taken: Mask = cand & (plain_v4 | plain_v6)
    return taken


def _ports(rows: RowSlice) -> frozenset[int]:
    """The UDP ports of the batch's ESP-in-UDP packets, as the analysis found them."""
    esp = rows.ints("esp_offset", -1) >= 0
    ports = np.concatenate([rows.ints("udp_sport", -1)[esp], rows.ints("udp_dport", -1)[esp]])
    return frozenset(np.unique(ports[ports >= 0]).tolist())


def _open(
    batch: FrameBatch, rows: RowSlice, wire: WireColumns, cand: Mask, dec: Decryptor
) -> _Opened:
    """The candidates opened again, a ``decrypt_many`` per SA: the analysis verified
    their ICVs (verdict ``ok``), which are not computed again; ``_packets`` holds each
    plaintext's trailer to the one the analysis read."""
    idx = np.flatnonzero(cand)
    first, inverse = distinct_flows(wire, idx)  # the engine's flows: one SA lookup each
    l3 = batch.start[idx] + wire.l3[idx]
    body = l3 + wire.esp_offset[idx] + ESP_HEADER_LEN
    end = l3 + wire.total_len[idx]
    seq = opened_seq(rows)[idx]
    view, mem = np.frombuffer(batch.buf, np.uint8), memoryview(batch.buf)
    by_sa: dict[int, tuple[SecurityAssociation, CipherContext, list[int]]] = {}
    for f, row in enumerate(idx[first].tolist()):
        found = dec.keys.find_addrs(*flow_key(wire, row))
        if found is not None and found[0].mode in _MODES:
            by_sa.setdefault(id(found[0]), (*found, []))[2].append(f)
    done: list[I64] = []
    texts: list[bytes] = []
    sas: list[SecurityAssociation] = []
    blocks: list[int] = []
    for sa, ctx, own in by_sa.values():
        at = np.flatnonzero(np.isin(inverse, own))
        ivs = view[body[at, None] + np.arange(ctx.iv_len)]
        sealed_at = (body[at] + ctx.iv_len).tolist()
        sealed = [mem[a:b] for a, b in zip(sealed_at, end[at].tolist(), strict=True)]
        plains = ctx.decrypt_many(seq[at], ivs, sealed)
        del sealed
        good = [k for k, p in enumerate(plains) if p is not None]
        done.append(idx[at[good]])
        texts.extend(plains[k] or b"" for k in good)
        sas.extend([sa] * len(good))
        blocks.extend([ctx.block] * len(good))
    del mem
    opened = np.concatenate(done) if done else np.zeros(0, np.int64)
    order = np.argsort(opened, kind="stable")  # capture order
    trailer = rows.ints("pad_len", -1) << 8 | rows.ints("next_header", -1)
    texts = [texts[k] for k in order.tolist()]
    size = np.fromiter(map(len, texts), np.int64, len(texts))
    start = np.zeros(len(texts), np.int64)
    np.cumsum(size[:-1], out=start[1:])
    joined = np.frombuffer(b"".join([*texts, bytes(64)]), np.uint8)
    return _Opened(
        opened[order],
        joined,
        start,
        size,
        [sas[k] for k in order.tolist()],
        np.asarray(blocks, np.int64)[order],
        trailer[opened[order]],
    )


@dataclass(frozen=True, slots=True)
class _Built:
    """The opened packets the bulk forms rebuilt: frame i is ``head[i, :head_len[i]]``
    (its link header, then for transport mode its outer header) and ``payload[i]``."""

    rows: I64  # batch rows, capture order
    head: U8
    head_len: I64
    payload: list[memoryview]
    templates: list[int]  # those (of ``_Opened``) that carried an inner IPv4 header

    @classmethod
    def none(cls) -> _Built:
        return cls(np.zeros(0, np.int64), np.zeros((0, 0), np.uint8), np.zeros(0, np.int64), [], [])


def decrypted_run(
    batch: FrameBatch, rows: RowSlice, views: Sequence[Data], dec: Decryptor, comments: bool
) -> FrameRun:
    """The batch's frames as ``Decryptor.frame`` gives them; ``views``: each frame's bytes
    as captured (``FrameBatch.views``, not changed); ``comments``: the pcapng comments
    too."""
    n = len(batch)
    wire = parse(batch, _ports(rows))
    opened = _open(batch, rows, wire, _candidates(batch, rows, wire), dec)
    built = _build(batch, wire, opened)
    data = list(views)
    head = np.zeros((n, built.head.shape[1]), np.uint8)
    head_len = np.zeros(n, np.int64)
    head[built.rows], head_len[built.rows] = built.head, built.head_len
    wirelen = batch.wirelen.copy()
    wirelen[built.rows] = built.head_len + np.fromiter(map(len, built.payload), np.int64)
    notes: list[tuple[str, ...]] = [()] * n
    rebuilt = built.rows.tolist()
    for r, payload in zip(rebuilt, built.payload, strict=True):
        data[r] = payload
    if comments:
        spi, seq = rows.ints("spi", 0).tolist(), opened_seq(rows).tolist()
        for r in rebuilt:
            notes[r] = (decrypted_comment(int(batch.number[r]), spi[r], seq[r], ""),)
    tried = rows.is_in("verdict", [v.value for v in TRIED]) & rows.nulls("fragments")
    tried[built.rows] = False
    slow = np.flatnonzero(tried).tolist()  # the per-frame writer's
    pending, at = built.templates, 0
    for i, rec in zip(slow, rows.records(slow), strict=True):
        while at < len(pending) and opened.rows[pending[at]] < i:  # the template at row i
            _remember(dec, opened, pending[at])
            at += 1
        frame, comment = dec.frame(batch.frame(i), rec)
        data[i], wirelen[i] = frame.data, frame.wirelen
        notes[i] = (comment,) if comment and comments else ()
    for k in pending[at:]:
        _remember(dec, opened, k)
    return FrameRun(
        batch.number,
        batch.ts_ns,
        wirelen,
        batch.linktype,
        data,
        notes if comments else None,
        head,
        head_len,
    )


def opened_seq(rows: RowSlice) -> npt.NDArray[np.uint64]:
    """``_verified_seq`` of each row: the seq64 its ICV verified with."""
    hi = rows.ints("seq_hi_verified", -1)
    low = rows.ints("seq", 0).astype(np.uint64)
    return np.where(hi >= 0, (hi.astype(np.uint64) << np.uint64(32)) | low, rows.u64("seq64"))


def _remember(dec: Decryptor, opened: _Opened, k: int) -> None:
    """Row ``k`` of ``opened`` carried an inner IPv4 header: its SA's template now."""
    at = int(opened.start[k])
    dec.remember(opened.sas[k], opened.view[at : at + 20].tobytes())


def _packets(opened: _Opened) -> tuple[Mask, I64, Mask, I64]:
    """Which opened packets the bulk forms rebuild (before their link header); their
    next header, whether each is tunnel mode's, and its packet's length: the inner IP
    packet's (tunnel mode) or the payload's (transport)."""
    view, start, size = opened.view, opened.start, opened.size
    blk = opened.block
    long = size >= 2
    pad = np.where(long, view[np.where(long, start + size - 2, 0)], 0).astype(np.int64)
    trailers = parse_trailers(view, start, size)
    nh, payload = trailers.next_header, size - 2 - pad
    ok = trailers.sound & ~((blk > 4) & (size % np.maximum(blk, 1) != 0))  # parse_trailer's
    ok &= nh != NO_NEXT_HEADER
    ok &= (pad << 8 | nh) == opened.trailer  # the trailer the analysis read from it
    first = view[start]
    iplen = ip_lengths(view[start[:, None] + np.arange(6)], np.where(ok, payload, 0))
    ip_next = np.isin(nh, (PROTO_IPIP, PROTO_IPV6))
    tunnel = np.array([sa.mode == "tunnel" for sa in opened.sas], np.bool_)
    tunnel |= np.array([sa.mode is None for sa in opened.sas], np.bool_) & ip_next
    version = np.where(nh == PROTO_IPIP, 4, 6)
    ok &= ~ip_next | (iplen >= 0)  # Decryptor._packet: "no IP packet"
    ok &= ~tunnel | (ip_next & (first >> 4 == version) & (iplen <= payload))  # rebuild.tunnel
    return ok, nh, tunnel, np.where(tunnel, iplen, payload)


def _links(batch: FrameBatch, wire: WireColumns, rows: I64, version: I64) -> tuple[U8, Mask]:
    """Each row's link header naming its packet's IP ``version`` (``relink``, once per
    distinct header), as rows; and which rows have one."""
    length = wire.l3[rows]
    width = int(length.max(initial=0))
    view = np.frombuffer(batch.buf, np.uint8)
    link = view[batch.start[rows][:, None] + np.arange(width)]
    link[np.arange(width) >= length[:, None]] = 0
    fields = np.stack([batch.linktype[rows], length, version], axis=1).astype(">u4")
    key = np.concatenate([fields.view(np.uint8).reshape(len(rows), 12), link], axis=1)
    packed = key.view(np.dtype((np.void, key.shape[1]))).ravel()
    _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
    out = np.zeros((len(first), width), np.uint8)
    has = np.zeros(len(first), np.bool_)
    for u, k in enumerate(first.tolist()):
        size = int(length[k])
        header = relink(int(batch.linktype[rows[k]]), link[k, :size].tobytes(), int(version[k]))
        if header is not None and len(header) == size:
            out[u, :size] = np.frombuffer(header, np.uint8)
            has[u] = True
    inverse = inverse.ravel()
    return out[inverse], has[inverse]


def _build(batch: FrameBatch, wire: WireColumns, opened: _Opened) -> _Built:
    """The opened packets the bulk forms rebuild, as ``_Built``."""
    if not len(opened.rows):
        return _Built.none()
    ok, nh, tunnel, size = _packets(opened)
    take = np.flatnonzero(ok)
    if not len(take):
        return _Built.none()
    rows = opened.rows[take]
    tunnel, nh, size = tunnel[take], nh[take], size[take]
    start = opened.start[take]
    first = opened.view[start]
    v4 = wire.ip_version[rows] == 4
    inner_version = np.where(tunnel, first >> 4, wire.ip_version[rows])
    link, has = _links(batch, wire, rows, inner_version)
    l3 = batch.start[rows] + wire.l3[rows]
    chains = np.frombuffer(batch.buf, np.uint8)[l3[:, None] + np.arange(40)]
    fixed = transport_heads(chains, nh, size)
    chain_len = np.where(tunnel, 0, np.where(v4, 20, 40))
    link_len = wire.l3[rows]
    head = np.concatenate([link, np.zeros((len(rows), 40), np.uint8)], axis=1)
    cols = link_len[:, None] + np.arange(40)
    put = np.arange(40) < chain_len[:, None]
    head[np.nonzero(put)[0], cols[put]] = fixed[put]
    keep = np.flatnonzero(has)
    pmem = memoryview(opened.view.data)
    payload = [
        pmem[s : s + n] for s, n in zip(start[keep].tolist(), size[keep].tolist(), strict=True)
    ]
    carried = (nh == PROTO_IPIP) & (first == 0x45)  # Decryptor's template
    templates = take[keep[carried[keep]]].tolist()
    return _Built(rows[keep], head[keep], (link_len + chain_len)[keep], payload, templates)


class DecryptedCopy:
    """``--decrypted`` written a batch at a time (rewrite/onepass.py's ``BatchCopy``)."""

    columns = COPY_COLUMNS

    def __init__(self, capture: Path, sas: SaTable, target: Path, out: Writable) -> None:
        self._keys = DecryptionKeys(sas, str(capture))
        self._dec = Decryptor(self._keys)
        self._sink = sink_for(target, out)
        self._comments = isinstance(self._sink, PcapngSink)
        self.frames = 0

    def secrets(self, item: DecryptionSecrets) -> None:
        self._keys.add_secrets(item)

    def frame(self, frame: Frame, rec: PacketRecord) -> None:
        self._sink.write(*self._dec.frame(frame, rec))
        self.frames += 1

    def run(self, batch: FrameBatch, rows: RowSlice, views: Sequence[Data]) -> None:
        self._sink.write_run(decrypted_run(batch, rows, views, self._dec, self._comments))
        self.frames += len(batch)

    def close(self) -> None:
        self._sink.close()


def write_decrypted(
    capture: Path, parquet: Path, sas: SaTable, target: Path, out: Writable, batch: int = BATCH
) -> int:
    """Write the decrypted copy of ``capture`` to ``out`` in batches of ``batch`` frames;
    the number of frames written. The same bytes as ``write_decrypted_frames``."""
    return copy_alone(capture, parquet, DecryptedCopy(capture, sas, target, out), batch)
