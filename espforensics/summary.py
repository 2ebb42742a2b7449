"""Reduction of the record stream to a ``Summary``; and back from JSON.

In: ``PacketRecord`` values (``SummaryBuilder.observe``) and the capture's
identity (``CaptureInfo``). Out: a frozen ``Summary`` whose ``to_json()``
is ``summary.json`` (schema 1) and from which every renderer works.
Raises nothing; ``Summary.from_json`` raises ``KeyError``/``TypeError`` on
a foreign document, which callers wrap.

All counting lives here, so renderers never count.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from espforensics.model import (
    SEVERITY_RANK,
    Finding,
    FindingKind,
    PacketRecord,
    Proto,
    Severity,
    Verdict,
)

SCHEMA = 1
try:
    TOOL_VERSION = version("espforensics")
except PackageNotFoundError:  # running from a source tree that was never installed
    TOOL_VERSION = "0+unknown"


@dataclass(frozen=True, slots=True)
class CaptureInfo:
    """Which capture was analyzed."""

    path: str
    sha256: str
    frames: int = 0
    first_time: float | None = None
    last_time: float | None = None


@dataclass(frozen=True, slots=True)
class SaSummary:
    """One SA (one SPI between two addresses) as seen in the capture."""

    spi: int
    src: str
    dst: str
    algorithm: str
    packets: int
    verdicts: dict[str, int]
    first_seq64: int | None
    last_seq64: int | None
    first_time: float
    last_time: float
    wire_bytes: int
    leaked: int = 0  # packets with inner header bytes in clear
    iv_reused: int = 0  # packets whose IV was used before under the same key
    iv_deviating: int = 0  # packets whose IV was not built from their own seq
    duplicates: int = 0
    reordered: int = 0
    missing: int = 0  # sequence numbers never seen between first and last

    @property
    def key(self) -> tuple[int, str, str]:
        return (self.spi, self.src, self.dst)


@dataclass(frozen=True, slots=True)
class Summary:
    """Everything the reports say about one capture."""

    tool_version: str
    capture: CaptureInfo
    esp_packets: int
    verdicts: dict[str, int]
    sas: tuple[SaSummary, ...]
    findings: dict[str, int] = field(default_factory=dict)  # kind -> packets (or values) affected
    finding_list: tuple[Finding, ...] = ()
    error: str | None = None
    schema: int = SCHEMA

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` document."""
        doc = asdict(self)
        doc["sas"] = [{**asdict(sa), "spi": f"{sa.spi:#010x}"} for sa in self.sas]
        doc["finding_list"] = [_finding_json(f) for f in self.finding_list]
        return {"schema": doc.pop("schema"), **doc}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Summary:
        """Inverse of ``to_json``."""
        sas = tuple(SaSummary(**{**s, "spi": int(s["spi"], 16)}) for s in doc["sas"])
        return cls(
            tool_version=doc["tool_version"],
            capture=CaptureInfo(**doc["capture"]),
            esp_packets=doc["esp_packets"],
            verdicts=dict(doc["verdicts"]),
            sas=sas,
            findings=dict(doc["findings"]),
            finding_list=tuple(_finding_from_json(f) for f in doc["finding_list"]),
            error=doc.get("error"),
            schema=doc["schema"],
        )


def _finding_json(f: Finding) -> dict[str, Any]:
    return {
        "kind": f.kind.value,
        "severity": f.severity.value,
        "spi": None if f.spi is None else f"{f.spi:#010x}",
        "src": f.src,
        "dst": f.dst,
        "count": f.count,
        "frames": list(f.frames),
        "detail": f.detail,
    }


def _finding_from_json(d: dict[str, Any]) -> Finding:
    return Finding(
        FindingKind(d["kind"]),
        Severity(d["severity"]),
        None if d["spi"] is None else int(d["spi"], 16),
        tuple(d["frames"]),
        d["count"],
        d["detail"],
        d["src"],
        d["dst"],
    )


def sort_findings(findings: list[Finding]) -> tuple[Finding, ...]:
    """Most severe first, then by kind, SPI and first frame: a stable order for reports."""
    return tuple(
        sorted(
            findings,
            key=lambda f: (
                -SEVERITY_RANK[f.severity],
                f.kind.value,
                -1 if f.spi is None else f.spi,
                f.frames[:1],
                f.detail,
            ),
        )
    )


@dataclass(slots=True)
class _SaAcc:
    algorithm: str
    first_time: float
    last_time: float
    first_seq64: int | None = None
    last_seq64: int | None = None
    packets: int = 0
    wire_bytes: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    leaked: int = 0
    iv_reused: int = 0
    iv_deviating: int = 0
    duplicates: int = 0
    reordered: int = 0


class SummaryBuilder:
    """Counts records as they stream past."""

    def __init__(self) -> None:
        self.frames = 0
        self.esp_packets = 0
        self.first_time: float | None = None
        self.last_time: float | None = None
        self.verdicts: Counter[str] = Counter()
        self._sas: dict[tuple[int, str, str], _SaAcc] = {}

    def observe(self, rec: PacketRecord) -> None:
        """Count one record."""
        self.frames += 1
        if self.first_time is None:
            self.first_time = rec.time
        self.last_time = rec.time
        self.verdicts[rec.verdict] += 1
        if rec.proto is Proto.OTHER:
            return
        self.esp_packets += 1
        if rec.spi is None:
            return
        key = (rec.spi, rec.src, rec.dst)
        acc = self._sas.get(key)
        if acc is None:
            acc = self._sas[key] = _SaAcc(rec.algorithm, rec.time, rec.time)
        acc.packets += 1
        acc.wire_bytes += rec.len
        acc.last_time = rec.time
        acc.verdicts[rec.verdict] += 1
        if rec.seq64 is not None:
            if acc.first_seq64 is None:
                acc.first_seq64 = rec.seq64
            acc.last_seq64 = rec.seq64
        acc.leaked += bool(rec.leaked)
        acc.iv_reused += bool(rec.iv_reused)
        acc.iv_deviating += bool(rec.iv_seq_delta)
        acc.duplicates += rec.seq_anomaly.startswith("duplicate")
        acc.reordered += rec.seq_anomaly == "reordered"

    def finish(
        self, path: str, sha256: str, findings: list[Finding], error: str | None = None
    ) -> Summary:
        """The summary of everything observed, with the checks' findings."""
        missing: Counter[tuple[int, str, str]] = Counter()
        per_kind: Counter[str] = Counter()
        for f in findings:
            per_kind[f.kind.value] += f.count
            if f.kind is FindingKind.SEQ_GAP and f.spi is not None:
                missing[(f.spi, f.src, f.dst)] += f.count
        sas = tuple(
            SaSummary(
                spi,
                src,
                dst,
                a.algorithm,
                a.packets,
                {v.value: a.verdicts[v] for v in Verdict if a.verdicts[v]},
                a.first_seq64,
                a.last_seq64,
                a.first_time,
                a.last_time,
                a.wire_bytes,
                a.leaked,
                a.iv_reused,
                a.iv_deviating,
                a.duplicates,
                a.reordered,
                missing[(spi, src, dst)],
            )
            for (spi, src, dst), a in sorted(self._sas.items())
        )
        return Summary(
            tool_version=TOOL_VERSION,
            capture=CaptureInfo(path, sha256, self.frames, self.first_time, self.last_time),
            esp_packets=self.esp_packets,
            verdicts={v.value: self.verdicts[v] for v in Verdict},
            sas=sas,
            findings={k.value: per_kind[k.value] for k in FindingKind},
            finding_list=sort_findings(findings),
            error=error,
        )
