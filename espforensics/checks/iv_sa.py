"""The IV derivation check's state per SA, and the findings it makes of it.

In: the ``IvSa`` the check (iv_derivation.py) fills per flow. Out: the
``iv_derivation`` findings of one SA: ``deviating_finding`` (packets that
break their SA's counter scheme), ``chained_finding`` (CBC IVs that are the
previous packet's last cipher block), ``constant_finding`` (one IV on most
packets) and ``predictable_finding`` (CBC IVs that follow a counter on the
wire). Raises nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from espforensics.bounded.frames import frozen
from espforensics.bounded.intervals import IntervalSet
from espforensics.bounded.rare import Rare
from espforensics.checks.ivscheme import Candidate, Reading
from espforensics.model.enums import FindingKind, IvScheme, Severity
from espforensics.model.evidence import IvChained, IvConstant, IvDeviating, IvPredictable, SeqDelta
from espforensics.model.records import Finding

_MASK64 = (1 << 64) - 1


@dataclass(slots=True, eq=False)  # identity hash: a key of the probing queue
class IvSa:
    """One SA as the IV derivation check sees it: its scheme, counts and CBC tail (the
    packets held while its scheme is chosen are the check's ``_probing``).

    The counts of packets that break the SA's scheme, and their frames, are ``Rare``
    fields (bounded/rare.py): most SAs never have one, and plain fields would cost 80
    bytes per SA. So is ``cbc``: a CBC SA with its key keeps ``words`` there anyway.
    """

    mask: int = _MASK64  # _MASK32 for an SA whose high halves are not authenticated
    const: int | None = None  # seqiv's c; echainiv's packed inverse multipliers
    additive: bool = False  # const is an additive counter's: IV = seq64 + c
    reading: Reading | None = None  # its window's, once settled (``scheme``)
    packets: int = 0
    # CBC: the previous packet's last ciphertext block, and the IVs equal to it
    last: bytes = b""
    last_frame: int = 0
    last_head: int = 0  # keyless: where in ``last`` the previous packet's ciphertext may start
    rare_fields: dict[str, Any] | None = None

    cbc = Rare(False)  # CBC (RFC 3602 s2.1): IVs that follow a counter are predictable
    words = Rare(0)  # CBC with its key: echainiv, the IV decrypted to this many words
    alt = Rare[Candidate | None](None)  # another constant that reads every packet so far alike
    no_iv = Rare(0)  # packets of an algorithm without IV (NULL), or clear from the header on
    deviating = Rare(0)
    deltas = Rare[Counter[int] | None](None)  # made at the first deviating packet
    unrelated = Rare(0)
    frames = Rare[IntervalSet | None](None)  # every one
    chained = Rare(0)
    chained_frames = Rare[IntervalSet | None](None)
    repeated = Rare(0)  # packets of a constant-IV SA that carry its constant IV
    repeated_frames = Rare[IntervalSet | None](None)

    @property
    def scheme(self) -> IvScheme | None:
        """The SA's IV scheme, named when its window is settled (``reading``'s)."""
        reading = self.reading
        return None if reading is None else reading.scheme


def constant_finding(spi: int, src: str, dst: str, sa: IvSa) -> Finding:
    """One IV on most of the SA's packets (RFC 4106 s3.1, RFC 3602 s2.1)."""
    reading = sa.reading
    assert reading is not None and reading.constant_iv is not None
    return Finding(
        FindingKind.IV_DERIVATION,
        Severity.HIGH,
        spi,
        frozen(sa.repeated_frames),
        sa.repeated,
        f"{src} -> {dst}: a constant IV: {sa.repeated} of {sa.packets} packets carry IV "
        f"{reading.constant_iv:x} (an IV must not repeat under one key: RFC 4106 s3.1, "
        f"RFC 3602 s2.1)",
        src,
        dst,
        IvConstant(reading.constant_iv, sa.repeated, sa.packets),
    )


def predictable_finding(spi: int, src: str, dst: str, sa: IvSa) -> Finding:
    """CBC IVs that follow a counter on the wire: predictable (RFC 3602 s2.1)."""
    how = "seq64 xor c" if sa.scheme is IvScheme.SEQIV else "seq64 + c"
    return Finding(
        FindingKind.IV_DERIVATION,
        Severity.HIGH,
        spi,
        (),
        sa.packets,
        f"{src} -> {dst}: CBC IVs on the wire follow a counter (IV = {how}): the next IV "
        f"is known before the packet is sent (RFC 3602 s2.1 wants them unpredictable)",
        src,
        dst,
        IvPredictable(
            IvScheme.SEQIV if sa.scheme is IvScheme.SEQIV else IvScheme.COUNTER, sa.packets
        ),
    )


def chained_finding(spi: int, src: str, dst: str, sa: IvSa) -> Finding:
    """CBC IVs that are the previous packet's last cipher block (CVE-2022-46397)."""
    return Finding(
        FindingKind.IV_DERIVATION,
        Severity.HIGH,
        spi,
        frozen(sa.chained_frames),
        sa.chained,
        f"{src} -> {dst}: {sa.chained} of {sa.packets} CBC IVs are chained: each equals "
        f"the last ciphertext block of the SA's previous packet, so the next IV is known "
        f"before the packet is sent (predictable IVs, as in CVE-2022-46397; RFC 3602 s2.1 "
        f"wants them unpredictable)",
        src,
        dst,
        IvChained(sa.chained, sa.packets),
    )


def deviating_finding(spi: int, src: str, dst: str, sa: IvSa) -> Finding:
    """Packets whose IVs break their SA's counter scheme: the four most common deltas."""
    counts = sa.deltas or Counter[int]()
    deltas = tuple(SeqDelta(d, n) for d, n in counts.most_common(4))
    common = ", ".join(
        [f"seq{x.delta:+d} x{x.count}" for x in deltas]
        + ([f"no nearby seq x{sa.unrelated}"] if sa.unrelated else [])
    )
    return Finding(
        FindingKind.IV_DERIVATION,
        Severity.HIGH,
        spi,
        frozen(sa.frames),
        sa.deviating,
        f"{src} -> {dst}: {sa.deviating} of {sa.packets} IVs not built from their own "
        f"sequence number (IV built from {common})"
        + ("; the SA's IVs are an additive counter, IV = seq64 + c" if sa.additive else ""),
        src,
        dst,
        IvDeviating(sa.deviating, sa.packets, deltas, sa.unrelated, sa.additive),
    )
