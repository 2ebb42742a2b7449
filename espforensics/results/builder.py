"""Reduction of the record stream to a ``Summary``: ``SummaryBuilder``.

In: ``PacketRecord`` values (``observe``) and the steady lane's runs of
``ok`` rows (``observe_rows``), then the checks' findings and the capture's
identity (``finish``). Out: the frozen ``Summary`` of results/summary.py. Raises
nothing. Per-SA counts live in ``SaAcc``, misplaced layouts in
``LayoutAcc``; ``espforensics.results.summary`` re-exports ``SummaryBuilder``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from espforensics.engine import SteadyRows
from espforensics.model.enums import FindingKind, Proto, Verdict
from espforensics.model.records import Finding, PacketRecord, SaKey, UnusedSa
from espforensics.model.version import TOOL_VERSION
from espforensics.receiver.prediction import ReceiverHost, ReceiverSa
from espforensics.results.accounts import (
    FirstPackets,
    LayoutAcc,
    LayoutKey,
    SaAcc,
    misplaced_layout,
)
from espforensics.results.coverage import check_coverage
from espforensics.results.summary import (
    CaptureInfo,
    SaMode,
    SaSummary,
    Summary,
    sort_findings,
)

_SECOND = 10**9
_DIGITS = {_SECOND: 0, 10**6: 3, 10**3: 6, 1: 9}  # decimal digits of a time unit, in ns


def _unit_of(times_ns: npt.NDArray[np.int64] | int, unit: int) -> int:
    """The largest of s, ms, us and ns, at most ``unit``, that divides every time: the
    resolution the timestamps show (a microsecond pcap's are multiples of 1,000 ns)."""
    while unit > 1 and (
        times_ns % unit if isinstance(times_ns, int) else np.any(np.remainder(times_ns, unit))
    ):  # a record's time is a Python int: it may lie beyond what int64 holds
        unit //= 1000
    return unit


class SummaryBuilder:
    """Counts records as they stream past."""

    def __init__(self) -> None:
        self.frames = 0
        self.esp_packets = 0
        self.inner_esp_packets = 0  # layer 2 on: ESP packets inside an ESP packet's plaintext
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.time_unit = _SECOND  # the largest of s, ms, us, ns dividing every timestamp
        self.verdicts: Counter[str] = Counter()
        # Per SA: the first SA of each SPI by its SPI (the record's own int: no key object
        # per SA, 64 bytes for a tuple of the three), its addresses in the accumulator;
        # another SA of an SPI already seen by (spi, src, dst) (``_acc``). The keys leave
        # as SaKey values (``sa_keys``, ``finish``).
        self._sas: dict[int, SaAcc] = {}
        self._more_sas: dict[tuple[int, str, str], SaAcc] = {}
        # The first SA of an SPI after its first packet, when that is all it holds: a row
        # of ``_once`` by its SPI, made an accumulator again at its next packet (``_acc``)
        self._once = FirstPackets()
        self._first: dict[int, int] = {}
        self._layouts: dict[LayoutKey, LayoutAcc] = {}
        # ICMP errors quoting an ESP packet, per quoted (spi, src, dst): no packet of the SA
        self._quoted: Counter[SaKey] = Counter()

    def observe(self, rec: PacketRecord) -> None:
        """Count one record."""
        if rec.layer == 1:  # an ESP packet inside another (layer 2 on) is no frame of its own
            self.frames += 1
            if self.first_time is None:
                self.first_time = rec.time / 1e9
            self.last_time = rec.time / 1e9
            if rec.time % self.time_unit:
                self.time_unit = _unit_of(rec.time, self.time_unit)
            self.verdicts[rec.verdict] += 1
        if rec.quoted_spi is not None:
            self._quoted[SaKey(rec.quoted_spi, rec.quoted_src, rec.quoted_dst)] += 1
        if rec.proto is Proto.OTHER:
            return
        if rec.layer == 1:
            self.esp_packets += 1
        else:
            self.inner_esp_packets += 1
        if rec.spi is None:
            return
        acc = self._acc(rec.spi, rec.src, rec.dst, rec.algorithm, rec.time)
        acc.observe(rec)
        if acc.packets == 1 and self._sas.get(rec.spi) is acc:  # an SPI's first SA, new
            row = self._once.add(acc)
            if row is not None:
                del self._sas[rec.spi]
                self._first[rec.spi] = row
        if rec.misplaced:  # esp_misplaced, or a cut packet's header found by layout
            self._layout(rec)

    def observe_rows(self, rows: SteadyRows) -> None:
        """Count a run of the steady lane: its records, then its ``ok`` packets per SA."""
        recs, frame, ts_ns = rows.records, rows.frame, rows.ts_ns
        first_time = self.first_time
        for rec in recs:
            self.observe(rec)
        if not len(frame):
            return
        if first_time is None and (not recs or int(frame[0]) < recs[0].frame):
            self.first_time = int(ts_ns[0]) / 1e9
        if not recs or int(frame[-1]) > recs[-1].frame:
            self.last_time = int(ts_ns[-1]) / 1e9
        if self.time_unit > 1 and np.any(ts_ns % self.time_unit):
            self.time_unit = _unit_of(ts_ns, self.time_unit)
        n = len(frame)
        self.frames += n
        self.esp_packets += n
        keyed = int(np.count_nonzero(rows.keyed))
        self.verdicts[Verdict.OK] += keyed
        if keyed < n:
            self.verdicts[Verdict.UNKNOWN_SA] += n - keyed
        leaked = rows.leaked()
        for f in np.unique(rows.flow).tolist():
            idx = np.flatnonzero(rows.flow == f)  # capture order per flow
            self._steady_sa(rows, f, idx, 0 if leaked is None else int(leaked[idx].sum()))

    def _steady_sa(self, rows: SteadyRows, f: int, idx: npt.NDArray[np.intp], leaked: int) -> None:
        flow = rows.flows[f]
        acc = self._acc(flow.spi, flow.src, flow.dst, rows.algorithm[f], int(rows.ts_ns[idx[0]]))
        acc.packets += len(idx)
        if leaked:  # a Rare field: written only when it counts
            acc.leaked += leaked
        acc.wire_bytes += int(rows.wirelen[idx].sum())
        acc.last_ns = int(rows.ts_ns[idx[-1]])
        keyed = bool(rows.keyed[idx[0]])  # a flow's rows are all keyed or all keyless
        acc.count_verdict(Verdict.OK if keyed else Verdict.UNKNOWN_SA, len(idx))
        if acc.first_seq64 is None:
            acc.first_seq64 = int(rows.seq64[idx[0]])
        acc.last_seq64 = int(rows.seq64[idx[-1]])
        if not keyed:
            return  # no trailer, inner packet nor checksum was read
        nh = rows.next_header[idx]
        ip = int(np.count_nonzero((nh == 4) | (nh == 41)))
        acc.ip_payloads += ip
        acc.l4_payloads += len(idx) - ip - int((nh == 59).sum())
        tfc = rows.tfc_len[idx]
        padded = tfc > 0
        if padded.any():
            acc.tfc_packets += int(padded.sum())
            acc.tfc_bytes += int(tfc[padded].sum())
            lengths, counts = np.unique(rows.payload_len[idx][padded], return_counts=True)
            acc.padded_to().update(dict(zip(lengths.tolist(), counts.tolist(), strict=True)))
        seen = Counter(rows.inner_checksum[idx].tolist())
        acc.checksum_counts().update({value: seen[value] for value in sorted(seen)})

    def _acc(self, spi: int, src: str, dst: str, algorithm: str, first_ns: int) -> SaAcc:
        """The SA's accumulator, made (of its first packet's algorithm and time) on first use,
        or again from its row of ``_once``."""
        acc = self._sas.get(spi)
        if acc is not None and acc.src == src and acc.dst == dst:
            return acc
        row = None if acc is not None else self._row(spi, src, dst)
        if row is not None:
            del self._first[spi]
            acc = self._sas[spi] = self._once.acc(row)
            return acc
        key = (spi, src, dst)
        found = self._more_sas.get(key) if self._more_sas else None
        if found is not None:
            return found
        made = SaAcc(src, dst, algorithm, first_ns, first_ns)
        if acc is None and spi not in self._first:  # the SPI's first SA
            self._sas[spi] = made
        else:
            self._more_sas[key] = made
        return made

    def _row(self, spi: int, src: str, dst: str) -> int | None:
        """The SA's row of ``_once``, if it is kept there."""
        row = self._first.get(spi)
        return row if row is not None and self._once.names(row) == (src, dst) else None

    def sa_keys(self) -> list[SaKey]:
        """The (spi, src, dst) of every SA seen so far (not in order)."""
        keys = [SaKey(spi, acc.src, acc.dst) for spi, acc in self._sas.items()]
        keys += [SaKey(spi, *self._once.names(row)) for spi, row in self._first.items()]
        keys += [SaKey._make(key) for key in self._more_sas]
        return keys

    def acc_of(self, key: SaKey) -> SaAcc:
        """The accumulator of an SA seen (a row of ``_once`` made one anew: not kept)."""
        row = self._row(*key)
        if row is not None:
            return self._once.acc(row)
        acc = self._sas.get(key.spi)
        if acc is not None and acc.src == key.src and acc.dst == key.dst:
            return acc
        return self._more_sas[key]

    def _layout(self, rec: PacketRecord) -> None:
        if rec.esp_offset is None or rec.expected_offset is None or rec.spi is None:
            return
        leaked = rec.leaked or 0
        clear = bytes.fromhex(rec.leaked_hex)
        key = LayoutKey(
            ip_version=rec.ip_version or 0,
            proto=rec.proto.value,
            expected_offset=rec.expected_offset,
            clear_offset=rec.esp_offset - leaked,
            clear_prefix=clear[:2].hex(),
            esp_offset=rec.esp_offset,
            spi=rec.spi,
            carriers=rec.carriers,
            reassembled=rec.fragments is not None,
        )
        acc = self._layouts.get(key)
        if acc is None:
            self._layouts[key] = LayoutAcc(clear)
        else:
            acc.observe(clear)

    def finish(
        self,
        capture: CaptureInfo,
        findings: Sequence[Finding],
        modes: dict[SaKey, SaMode] | None = None,
        error: str | None = None,
        unused_sas: tuple[UnusedSa, ...] = (),
        key_notes: tuple[str, ...] = (),
        iv_schemes: dict[SaKey, str] | None = None,
        no_ivs: dict[SaKey, int] | None = None,
        receivers: tuple[tuple[ReceiverHost, ...], tuple[ReceiverSa, ...]] = ((), ()),
    ) -> Summary:
        """The summary of everything observed, with the checks' findings.

        ``capture`` gives path, sha256 and size; frames and times are counted
        here. ``modes`` are the SA modes the key files state; ``iv_schemes`` each SA's
        IV scheme as the IV derivation check named it (an SA it did not name: "unknown"),
        ``no_ivs`` the packets it had no IV to read from (a keyless SA's are its
        ``no_iv``);
        ``unused_sas`` the key files' SAs that no packet matched (checks/unused.py);
        ``receivers`` the receiver model's prediction (checks/receiver.py).
        """
        missing: Counter[SaKey] = Counter()
        per_kind: Counter[str] = Counter()
        for f in findings:
            per_kind[f.kind.value] += f.count
            if f.kind is FindingKind.SEQ_GAP and f.spi is not None:
                missing[SaKey(f.spi, f.src, f.dst)] += f.count
        modes = modes or {}
        sas = tuple(  # the keys sorted, each SA's accumulator asked for its row in turn
            self.acc_of(key).summary(
                key,
                missing[key],
                modes.get(key, SaMode.UNKNOWN),
                "" if iv_schemes is None else iv_schemes.get(key, "unknown"),
                self._quoted[key],
                0 if no_ivs is None else no_ivs.get(key, 0),
            )
            for key in sorted(self.sa_keys())
        )
        return Summary(
            tool_version=TOOL_VERSION,
            capture=replace(
                capture,
                frames=self.frames,
                first_time=self.first_time,
                last_time=self.last_time,
                time_digits=_DIGITS[self.time_unit],
            ),
            esp_packets=self.esp_packets,
            verdicts={v.value: self.verdicts[v] for v in Verdict},
            sas=sas,
            findings={k.value: per_kind[k.value] for k in FindingKind},
            reused_ivs=sum(
                1 if f.frames else f.count for f in findings if f.kind is FindingKind.IV_REUSE
            ),
            finding_list=sort_findings(_addressed(findings, sas)),
            layouts=tuple(misplaced_layout(k, a) for k, a in sorted(self._layouts.items())),
            error=error,
            unused_sas=unused_sas,
            key_notes=key_notes,
            coverage=check_coverage(sas, self.esp_packets + self.inner_esp_packets),
            inner_esp_packets=self.inner_esp_packets,
            icmp_quoted=self._quoted.total(),
            receivers=receivers[0],
            receiver_sas=receivers[1],
        )


def _addressed(findings: Sequence[Finding], sas: tuple[SaSummary, ...]) -> list[Finding]:
    """Findings about one SPI carry their SA's outer addresses where sas.csv knows them: the
    only SA of that SPI (an SPI two SAs share is left without, as it cannot say which)."""
    by_spi: dict[int, list[SaSummary]] = {}
    for sa in sas:
        by_spi.setdefault(sa.spi, []).append(sa)
    out = []
    for f in findings:
        owners = by_spi.get(f.spi, []) if f.spi is not None else []
        known = not (f.src or f.dst) and len(owners) == 1
        out.append(replace(f, src=owners[0].src, dst=owners[0].dst) if known else f)
    return out
