"""The ``Summary`` of a run, to and from ``summary.json``.

In: what ``SummaryBuilder`` (results/builder.py) counted
from the record stream, and the capture's identity (``CaptureInfo``). Out: a
frozen ``Summary`` whose ``to_json()`` is ``summary.json`` (schema 1) and
from which every renderer works. Raises nothing; ``Summary.from_json``
raises ``KeyError``/``TypeError`` on a foreign document, which callers wrap.

All counting lives here, in results/builder.py and results/accounts.py, so renderers never count.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from fractions import Fraction
from operator import attrgetter
from typing import Any, TypeVar

from espforensics.bounded.frames import frame_runs, from_runs
from espforensics.model.enums import SEVERITY_RANK, FindingKind, Severity, UnusedReason
from espforensics.model.records import ANY_SPI, Finding, PlotOutcome, SaKey, UnusedSa
from espforensics.receiver.prediction import Observed, ReceiverHost, ReceiverSa
from espforensics.results.coverage import CheckCoverage, check_coverage
from espforensics.results.stored import stored_clear, stored_evidence

SCHEMA = 1


@dataclass(frozen=True, slots=True)
class CaptureInfo:
    """Which capture was analyzed."""

    path: str
    sha256: str
    size: int = 0  # bytes of the file as stored
    frames: int = 0
    first_time: float | None = None
    last_time: float | None = None
    # The decimal digits the capture's timestamps have: 9 (ns), 6 (us), 3 (ms) or 0, the
    # fewest that write every one exactly (sas.csv prints its times with as many).
    time_digits: int = 9


class SaMode(StrEnum):
    """An SA's mode, as summary.json and sas.csv write it: stated by a key file (iproute2's
    names, keys/validate.py MODES), or guessed from its payloads' next headers (RFC 4303
    s3.1: tunnel mode carries IP packets, as do ipip/ip6tnl over transport)."""

    UNKNOWN = ""  # no key file says, and no payload was decrypted
    TRANSPORT = "transport"
    TUNNEL = "tunnel"
    BEET = "beet"
    IPTFS = "iptfs"
    TRANSPORT_GUESS = "transport (guess)"  # only payloads other than IP
    TUNNEL_GUESS = "tunnel or IP-in-IP (guess)"  # only IP packets inside
    MIXED_GUESS = "mixed (guess)"  # both

    @property
    def guessed(self) -> bool:
        """Guessed from the payloads, not stated by a key file."""
        return self in _GUESSED

    @property
    def transport(self) -> bool:
        """Transport mode, stated or guessed (a guess that names both modes does not say)."""
        return self in (SaMode.TRANSPORT, SaMode.TRANSPORT_GUESS)


_GUESSED = frozenset({SaMode.TRANSPORT_GUESS, SaMode.TUNNEL_GUESS, SaMode.MIXED_GUESS})


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
    first_ns: int  # capture time of its first packet, ns since the epoch, exactly as captured
    last_ns: int
    wire_bytes: int
    leaked: int = 0  # packets with inner header bytes in clear
    iv_reused: int = 0  # packets whose IV was used before under the same key
    iv_deviating: int = 0  # packets whose IV was not built from their own seq
    duplicates: int = 0
    reordered: int = 0
    missing: int = 0  # sequence numbers never seen between first and last
    mode: SaMode = SaMode.UNKNOWN  # from the key file, else guessed from the next headers
    tfc_packets: int = 0  # packets with TFC padding after their inner IP packet (RFC 4303 s2.7)
    tfc_bytes: int = 0  # bytes of TFC padding in all
    # the payload lengths padded packets were padded to, with their packets: {"1400": 27}
    tfc_padded_to: dict[str, int] = field(default_factory=dict)
    # packets per inner_checksum value of the SA's decrypted packets: {"ok": 140, ...}
    inner_checksums: dict[str, int] = field(default_factory=dict)
    iv_scheme: str = ""  # how the sender builds its IVs (model.IvScheme), "" if not asked
    # ICMP/ICMPv6 errors in the capture quoting one of its packets (not among ``packets``)
    icmp_quoted: int = 0
    # Of verdicts["truncated"]: packets the capture cut (a snap length); of them, those
    # whose header it showed where it is read or found later by layout (the placement,
    # sequence and IV checks read them); of those, found later (the leak check read them).
    # In summary.json only when ``cut`` is not 0.
    cut: int = 0
    cut_read: int = 0
    cut_found: int = 0
    # Without a key: packets clear from their ESP header on (NULL encryption, or a leak),
    # which hold no IV for the IV checks to read. In summary.json only when not 0.
    no_iv: int = 0

    @property
    def key(self) -> SaKey:
        return SaKey(self.spi, self.src, self.dst)

    @property
    def ip_version(self) -> int:
        """The outer IP version: ``src`` is the text analyzer/flows.py made of the address
        (``ipaddress``), and only an IPv6 address's has a colon."""
        return 6 if ":" in self.src else 4

    @property
    def first_time(self) -> float:
        """``first_ns`` in seconds since the epoch (summary.json's ``first_time``)."""
        return self.first_ns / 1e9

    @property
    def last_time(self) -> float:
        """``last_ns`` in seconds since the epoch (summary.json's ``last_time``)."""
        return self.last_ns / 1e9

    @property
    def mbit_per_s(self) -> float | None:
        """Wire throughput between the SA's first and last packet (None for one instant)."""
        span = self.last_time - self.first_time
        return self.wire_bytes * 8 / span / 1e6 if span > 0 else None


@dataclass(frozen=True, slots=True)
class MisplacedLayout:
    """One way misplaced ESP headers sat in the capture, and how many did."""

    ip_version: int
    proto: str  # "esp" or "esp-udp"
    expected_offset: int
    clear_offset: int  # where the clear bytes in front of the ESP header start
    clear_prefix: str  # their first (up to) two bytes, hex
    esp_offset: int
    spi: int
    packets: int
    # All the clear bytes; None for a byte that differs between the layout's packets
    # (summary.json's ``clear_hex`` writes it "..": "45 00 .. ..", IPv4 total length)
    clear: tuple[int | None, ...] = ()
    carriers: str = ""  # the packets' ``carriers`` column: "vlan", "pppoes", "mpls mpls", ...
    reassembled: bool = False  # datagrams rebuilt from outer fragments (``fragments`` set)

    @property
    def clear_hex(self) -> str:
        """The clear bytes as summary.json writes them: hex, space separated, ".." for one
        that varies; "" when none is known (a summary.json written before them)."""
        return " ".join(".." if b is None else f"{b:02x}" for b in self.clear)

    @property
    def first_clear(self) -> int | None:
        """The first clear byte (an inner IP header's version nibble), None when it varies
        or none was in clear; a summary.json without ``clear_hex`` has it in the prefix."""
        if self.clear:
            return self.clear[0]
        return int(self.clear_prefix[:2], 16) if self.clear_prefix else None


@dataclass(frozen=True, slots=True)
class Summary:
    """Everything the reports say about one capture."""

    tool_version: str
    capture: CaptureInfo
    esp_packets: int
    verdicts: dict[str, int]
    sas: tuple[SaSummary, ...]
    findings: dict[str, int] = field(default_factory=dict)  # kind -> packets (or values) affected
    reused_ivs: int = 0  # distinct IVs used more than once under one key
    finding_list: tuple[Finding, ...] = ()
    layouts: tuple[MisplacedLayout, ...] = ()
    plots: tuple[PlotOutcome, ...] = ()
    error: str | None = None
    schema: int = SCHEMA
    # Key files' SAs no packet used, with the likely reason (checks/unused.py).
    unused_sas: tuple[UnusedSa, ...] = ()
    # Warnings of loading the key files: lines skipped, policy blocks ignored ("FILE: what").
    key_notes: tuple[str, ...] = ()
    coverage: tuple[CheckCoverage, ...] = ()  # one per check, in the order they run
    # ESP packets inside the frames' ESP packets' plaintexts (layer 2 on), not in esp_packets.
    inner_esp_packets: int = 0
    # ICMP/ICMPv6 errors quoting an ESP packet (frames, not in esp_packets): those quoting an
    # SA of ``sas`` count there too, in its ``icmp_quoted``.
    icmp_quoted: int = 0
    # The receiver model (checks/receiver.py): per destination the predicted XfrmIn*
    # counters, per receiving state its window; empty without a key file.
    receivers: tuple[ReceiverHost, ...] = ()
    receiver_sas: tuple[ReceiverSa, ...] = ()
    # The receiver's /proc/net/xfrm_stat increase, when the user gave it (--xfrm-stat-*).
    observed: Observed | None = None

    @property
    def esp_layers(self) -> int:
        """Every ESP packet the checks analyzed: each frame's outermost (``esp_packets``)
        and those inside their plaintexts, each a packet of its own SA. What the
        coverage, the tally of what keys proved and the ``--unchecked`` gate count."""
        return self.esp_packets + self.inner_esp_packets

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` document.

        Built field by field, not with ``dataclasses.asdict``: that deep-copies
        every value, 14 s for a capture of 60,000 SAs.
        """
        doc = _fields(self)
        doc["capture"] = _fields(self.capture)
        doc["verdicts"], doc["findings"] = dict(self.verdicts), dict(self.findings)
        doc["sas"] = [sa_json(sa) for sa in self.sas]
        doc["finding_list"] = [finding_json(f) for f in self.finding_list]
        doc["layouts"] = [_layout_json(x) for x in self.layouts]
        doc["plots"] = [{**_fields(p), "files": list(p.files)} for p in self.plots]
        doc["unused_sas"] = [
            {**_fields(u), "spi": "any" if u.spi == ANY_SPI else f"{u.spi:#010x}"}
            for u in self.unused_sas
        ]
        doc["key_notes"] = list(self.key_notes)
        doc["coverage"] = [_coverage_json(c) for c in self.coverage]
        doc["receivers"] = {h.dst: dict(h.counters) for h in self.receivers}
        doc["receiver_frames"] = {
            h.dst: {name: frame_runs(f) for name, f in h.frames.items()} for h in self.receivers
        }
        doc["receiver_unchecked"] = {h.dst: h.unchecked for h in self.receivers}
        doc["receiver_causes"] = {h.dst: [list(c) for c in h.causes] for h in self.receivers}
        observed = doc.pop("observed")
        doc["receiver_observed"] = None if observed is None else _observed_json(observed)
        doc["receiver_sas"] = [
            {**_fields(r), "spi": f"{r.spi:#010x}", "min_window": r.min_window}
            for r in self.receiver_sas
        ]
        return {"schema": doc.pop("schema"), **doc}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Summary:
        """Inverse of ``to_json``."""
        sas = tuple(_sa_from_json(s) for s in doc["sas"])
        return cls(
            tool_version=doc["tool_version"],
            capture=CaptureInfo(**doc["capture"]),
            esp_packets=doc["esp_packets"],
            verdicts=dict(doc["verdicts"]),
            sas=sas,
            findings=dict(doc["findings"]),
            reused_ivs=doc["reused_ivs"],
            finding_list=tuple(_finding_from_json(f) for f in doc["finding_list"]),
            layouts=tuple(_layout(x) for x in doc["layouts"]),
            plots=tuple(
                PlotOutcome(p["name"], tuple(p["files"]), p["skipped"]) for p in doc["plots"]
            ),
            error=doc.get("error"),
            schema=doc["schema"],
            unused_sas=tuple(
                UnusedSa(
                    **{
                        **u,
                        "spi": ANY_SPI if u["spi"] == "any" else int(u["spi"], 16),
                        "reason": UnusedReason(u["reason"]),
                    }
                )
                for u in doc.get("unused_sas", ())
            ),
            key_notes=tuple(doc.get("key_notes", ())),
            icmp_quoted=doc.get("icmp_quoted", 0),
            coverage=(
                tuple(
                    CheckCoverage(**{**c, "skipped": dict(c["skipped"])}) for c in doc["coverage"]
                )
                if "coverage" in doc  # else a summary.json written before coverage: derive it
                else check_coverage(sas, doc["esp_packets"] + doc.get("inner_esp_packets", 0))
            ),
            inner_esp_packets=doc.get("inner_esp_packets", 0),
            receivers=_receivers(doc),
            observed=_observed(doc.get("receiver_observed")),
            receiver_sas=tuple(
                ReceiverSa(
                    int(r["spi"], 16),
                    r["dst"],
                    r["window"],
                    dict(r["verdicts"]),
                    r["reorder_depth"],
                )
                for r in doc.get("receiver_sas", ())
            ),
        )


def _layout_json(x: MisplacedLayout) -> dict[str, Any]:
    """One misplaced layout in ``summary.json``: its clear bytes as ``clear_hex``, in their
    field's place."""
    doc = {("clear_hex" if name == "clear" else name): value for name, value in _fields(x).items()}
    doc["clear_hex"], doc["spi"] = x.clear_hex, f"{x.spi:#010x}"
    return doc


def _layout(doc: dict[str, Any]) -> MisplacedLayout:
    """``_layout_json`` read back (a summary.json written before ``clear_hex`` has none)."""
    rest = {name: value for name, value in doc.items() if name != "clear_hex"}
    clear = stored_clear(_typed(doc, "clear_hex", str)) if "clear_hex" in doc else ()
    return MisplacedLayout(**{**rest, "spi": int(doc["spi"], 16), "clear": clear})


def _observed_json(observed: Observed) -> dict[str, Any]:
    return {
        **_fields(observed),
        "sa_stats": [[f"{spi:#010x}", *rest] for spi, *rest in observed.sa_stats],
    }


def _observed(doc: dict[str, Any] | None) -> Observed | None:
    """The receiver's observed counters of a summary.json, if it has them."""
    if not doc:
        return None
    stats = tuple(
        (int(spi, 16), str(dst), int(w), int(r), int(f)) for spi, dst, w, r, f in doc["sa_stats"]
    )
    return Observed(**{**doc, "deltas": dict(doc["deltas"]), "sa_stats": stats})


def _receivers(doc: dict[str, Any]) -> tuple[ReceiverHost, ...]:
    """The ``receivers`` of a summary.json (none in one written before the receiver model)."""
    frames, unchecked = doc.get("receiver_frames", {}), doc.get("receiver_unchecked", {})
    causes = doc.get("receiver_causes", {})
    return tuple(
        ReceiverHost(
            dst,
            {name: _typed(counters, name, int) for name in counters},
            {name: from_runs(runs) for name, runs in frames.get(dst, {}).items()},
            unchecked.get(dst, 0),
            tuple((str(c), str(why), int(n)) for c, why, n in causes.get(dst, ())),
        )
        for dst, counters in doc.get("receivers", {}).items()
    )


def _sa_from_json(doc: dict[str, Any]) -> SaSummary:
    """One SA of ``summary.json`` (the inverse of ``sa_json``).

    Its times are the ns (``first_ns``, ``last_ns``); a summary.json of a version
    before them has the float seconds alone, read back here as the ns nearest
    them. An SA's mode is read back here only: its words are SaMode's values.
    """
    s = {**doc, "spi": int(doc["spi"], 16), "mode": SaMode(doc.get("mode", ""))}
    first, last = s.pop("first_time"), s.pop("last_time")
    if "first_ns" not in s:
        s["first_ns"], s["last_ns"] = _ns(first), _ns(last)
    return SaSummary(**s)


def _ns(seconds: float) -> int:
    """Float seconds as the ns nearest their exact value."""
    return round(Fraction(seconds) * 1_000_000_000)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # dataclasses.fields costs 6 us a call


def _fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields by name, values as they are (flat values only)."""
    cls = obj.__class__
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(obj))
    return {name: getattr(obj, name) for name in names}


_CUT_FIELDS = ("cut", "cut_read", "cut_found")
# An SA's keys in summary.json: its times in float seconds where the fields hold them in
# ns, and the ns again after ``icmp_quoted``, where the version that added them put them.
_SA_JSON_KEYS: tuple[str, ...] = tuple(
    name
    for f in fields(SaSummary)
    for name in {
        "first_ns": ("first_time",),
        "last_ns": ("last_time",),
        "icmp_quoted": ("icmp_quoted", "first_ns", "last_ns"),
    }.get(f.name, (f.name,))
)


# Each key's value as read from the SA in one call (its times replaced after): a scan's
# 60,000 rows read so cost a third of a dict of every field then reordered.
_SA_JSON_VALUES = attrgetter(
    *({"first_time": "first_ns", "last_time": "last_ns"}.get(k, k) for k in _SA_JSON_KEYS)
)


def sa_json(sa: SaSummary) -> dict[str, Any]:
    """One SA's row of ``summary.json`` (render/json.py streams them one at a time).

    The counts of packets the capture cut only when it cut one, and ``no_iv`` only
    when not 0: a whole capture's summary.json is what it was before they were
    counted, and so is a keyless SA's whose every packet had an IV.
    """
    doc = dict(zip(_SA_JSON_KEYS, _SA_JSON_VALUES(sa), strict=True))
    doc["first_time"], doc["last_time"] = sa.first_ns / 1e9, sa.last_ns / 1e9
    doc["spi"], doc["verdicts"] = f"{sa.spi:#010x}", dict(sa.verdicts)
    if not sa.cut:
        for name in _CUT_FIELDS:
            del doc[name]
    if not sa.no_iv:
        del doc["no_iv"]
    return doc


def _coverage_json(c: CheckCoverage) -> dict[str, Any]:
    """One check's coverage in ``summary.json``; ``cut`` only when not 0."""
    doc = {**_fields(c), "skipped": dict(c.skipped)}
    if not c.cut:
        del doc["cut"]
    return doc


def finding_json(f: Finding) -> dict[str, Any]:
    """One finding's row of ``summary.json``."""
    return _finding_json(f)


def _finding_json(f: Finding) -> dict[str, Any]:
    return {
        "kind": f.kind.value,
        "severity": f.severity.value,
        "spi": None if f.spi is None else f"{f.spi:#010x}",
        "src": f.src,
        "dst": f.dst,
        "count": f.count,
        "frames": frame_runs(f.frames),  # [[first, last], ...]: every frame, in runs
        "detail": f.detail,
    }


T = TypeVar("T")


def _typed(d: dict[str, Any], key: str, kind: type[T]) -> T:
    """``d[key]``, if it is a ``kind``; a TypeError naming the key if not (load_summary: exit 2)."""
    value = d[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"{key} is {value!r}, not {kind.__name__}")
    return value


def _finding_from_json(d: dict[str, Any]) -> Finding:
    count, detail = _typed(d, "count", int), _typed(d, "detail", str)
    return Finding(
        FindingKind(d["kind"]),
        Severity(d["severity"]),
        None if d["spi"] is None else int(d["spi"], 16),
        from_runs(d["frames"]),
        count,
        detail,
        _typed(d, "src", str),
        _typed(d, "dst", str),
        stored_evidence(FindingKind(d["kind"]), detail, count),
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
