"""What a synthetic capture holds: frames plus the truth about each one.

In: nothing of the capture path; the builder fills these. Out:
``FrameTruth`` (one per frame, with the ``Verdict`` a correct analyzer
gives it, taken from ``espforensics.model``),
``Scenario`` (frames, truth, SAs, facts) and ``expected_json`` (the
``expected.json`` text). Raises nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from espforensics.keys.sa import AEAD_KEY_LAYOUT, CIPHER_LAYOUT, SecurityAssociation
from espforensics.model.enums import Verdict
from espforensics.model.records import DecryptionSecrets, Frame


@dataclass(frozen=True, slots=True)
class FrameTruth:
    """The truth about one frame.

    Offsets count from the first byte of the outer IP header.
    ``next_header`` is given only where a reader with the key can see it
    (not for ``auth_fail``, ``unknown_sa`` or ``truncated`` frames).
    ``fragments``: on the frame that completes a reassembly, how many
    fragments made the datagram. ``reassembled_in``: on a fragment, the
    frame that completes its datagram (``None`` if one is missing).
    ``leaked``/``leaked_hex``: on a misplaced ESP packet, the inner bytes
    in clear right in front of the real ESP header (the 16-byte slot at
    the expected offset holds a stale ESP header and IV area and is not
    counted, see ``synth.kernel``). ``tags`` name the anomalies
    built into the frame (see docs/synth.md). ``iv_seq_delta``: where a
    scenario states it, d when the IV was built from seq64 + d (the
    ``iv_seq_delta`` column a correct analyzer fills).
    """

    frame: int
    verdict: Verdict
    spi: int | None = None
    seq64: int | None = None
    next_header: int | None = None
    esp_offset: int | None = None
    expected_offset: int | None = None
    leaked: int | None = None
    leaked_hex: str = ""
    fragments: int | None = None
    reassembled_in: int | None = None
    tags: tuple[str, ...] = ()
    iv_seq_delta: int | None = None

    @property
    def seq(self) -> int | None:
        """The low 32 bits, as on the wire."""
        return None if self.seq64 is None else self.seq64 & 0xFFFFFFFF


CaptureFormat = Literal["pcap", "pcapng"]


@dataclass(frozen=True, slots=True)
class Scenario:
    """A synthetic capture and everything known about it."""

    name: str
    description: str
    seed: int
    frames: tuple[Frame, ...]
    truth: tuple[FrameTruth, ...]
    sas: tuple[SecurityAssociation, ...]
    facts: dict[str, int] = field(default_factory=dict)
    format: CaptureFormat = "pcap"
    snaplen: int = 262144
    secrets: tuple[DecryptionSecrets, ...] = ()

    @property
    def linktypes(self) -> tuple[int, ...]:
        """Link types in order of first use (one pcapng interface each)."""
        return tuple(dict.fromkeys(f.linktype for f in self.frames))

    def verdict_counts(self) -> dict[str, int]:
        """Frames per expected verdict, in ``Verdict`` order, zeros left out."""
        counts = Counter(t.verdict for t in self.truth)
        return {v.value: counts[v] for v in Verdict if counts[v]}


def _truth_row(truth: FrameTruth) -> dict[str, Any]:
    row = {k: v for k, v in asdict(truth).items() if v is not None and v not in ((), "")}
    row["verdict"] = truth.verdict.value
    if truth.seq64 is not None:
        row["seq"] = truth.seq
    if "tags" in row:
        row["tags"] = list(truth.tags)
    return row


def _sa_row(sa: SecurityAssociation) -> dict[str, Any]:
    """An SA without its keys: key sizes without salt or nonce; ``enc``/``auth`` if not an AEAD."""
    if sa.auth_algorithm is None:
        extra = AEAD_KEY_LAYOUT.get(sa.algorithm, ((), 4))[1]
    else:
        extra = CIPHER_LAYOUT.get(sa.algorithm, ((), 0, 0, 0))[1]
    row: dict[str, Any] = {
        "spi": f"0x{sa.spi:08x}",
        "src": str(sa.src),
        "dst": str(sa.dst),
        "key_bits": (len(sa.key) - extra) * 8,
        "icv": sa.icv_bits,
        "esn": sa.esn,
        "mode": sa.mode,
        "encap": sa.encap_port,
    }
    if sa.auth_algorithm is not None:
        row["enc"], row["auth"] = sa.algorithm, sa.auth_algorithm
    return row


def expected_json(scenario: Scenario, capture_name: str) -> str:
    """The ``expected.json`` text: counts, facts, SAs (no keys), per frame."""
    doc = {
        "scenario": scenario.name,
        "description": scenario.description,
        "seed": scenario.seed,
        "capture": capture_name,
        "format": scenario.format,
        "linktypes": list(scenario.linktypes),
        "snaplen": scenario.snaplen,
        "frames": len(scenario.frames),
        "verdicts": scenario.verdict_counts(),
        "facts": dict(sorted(scenario.facts.items())),
        "sas": [_sa_row(sa) for sa in scenario.sas],
        "packets": [_truth_row(t) for t in scenario.truth],
    }
    return json.dumps(doc, indent=1) + "\n"
