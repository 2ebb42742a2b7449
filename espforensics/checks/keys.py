"""Keys that checked nothing: a wrong key, and algorithms not decrypted yet.

In: ``PacketContext`` of ESP packets of SAs whose key was given. Out: one
``key_mismatch`` finding (high) per SA of which no packet, or almost none,
verifies, naming the usual mistake that makes them verify when one does;
one ``unsupported`` finding (high) per SA whose algorithm this version
does not decrypt. Both make a run exit 1 at the default ``--fail-on``:
a run that checked nothing must not look clean. Raises nothing.

The key doctor keeps the first ``SAMPLES`` packets of an SA that failed
and tries the variants of ``variants`` on them, in that order. A variant
is proven by a verifying ICV (a chance match is 2^-64 or less), never
guessed; once one verified, every later failing packet of the SA is tried
with it too, so the finding counts how many it makes verify. Key bytes
are never shown: a variant is named by what it changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from espforensics.bounded.frames import frozen, with_frame
from espforensics.bounded.intervals import IntervalSet
from espforensics.checks import coverage as coverage_reasons
from espforensics.checks.bulk import BulkRules, FlowRows
from espforensics.checks.context import Flow, PacketContext, SaState
from espforensics.checks.coverage import Seen
from espforensics.checks.unused import UnusedSaTracker
from espforensics.crypto import context_for, leading_zero, salt_first
from espforensics.decode.esn import EsnTracker
from espforensics.decode.esp import ESP_HEADER_LEN
from espforensics.keys.sa import (
    AEAD_KEY_LAYOUT,
    CTR_AES,
    HMAC_DIGESTS,
    ICV_BITS,
    SaTable,
    SecurityAssociation,
)
from espforensics.model.enums import FindingKind, KeyFix, Severity, Verdict
from espforensics.model.evidence import CipherMismatch, HmacKeySize, KeyMismatch, Unsupported
from espforensics.model.records import Finding, UnusedSa

SAMPLES = 4
MISMATCH = 0.1  # an SA of which fewer than this share of the packets verify has a wrong key
START_HIGH_HALVES = 4  # ESN high halves tried at the start: 0 .. 3 (and esn_hi +- 1)
_VERIFIED = frozenset(
    {Verdict.OK, Verdict.BAD_TRAILER, Verdict.ESP_MISPLACED, Verdict.ESN_MISMATCH}
)


@dataclass(frozen=True, slots=True)
class Variant:
    """One usual mistake in a key file, and the SA as it would be without it."""

    what: str  # e.g. "a 128-bit ICV (the key file says 96)"
    sa: SecurityAssociation
    fix: KeyFix  # the mistake it undoes, ``what`` in words


@dataclass(frozen=True, slots=True)
class _Sample:
    seq: int  # the low 32 bits, as on the wire
    body: bytes  # after the ESP header: IV || ciphertext || ICV


class _Cure:
    """A variant that verified, with its own ESN state for the packets that follow."""

    __slots__ = ("ctx", "tracker", "variant")

    def __init__(self, variant: Variant) -> None:
        self.variant = variant
        self.ctx = context_for(variant.sa)
        self.tracker = EsnTracker(variant.sa.esn_hi)

    def verifies(self, s: _Sample) -> bool:
        seq64 = self.tracker.infer(s.seq) if self.ctx.esn else s.seq
        iv_len = self.ctx.iv_len
        if self.ctx.open(seq64, s.body[:iv_len], s.body[iv_len:]) is None:
            return False
        self.tracker.commit(seq64)
        return True


@dataclass(slots=True)
class _Sa:
    sa: SecurityAssociation
    packets: int = 0
    verified: int = 0
    failed: int = 0
    garbled: int = 0  # verified ICV, unsound trailer: with enc + auth, a wrong cipher key
    frames: IntervalSet | None = None  # every one
    garbled_frames: IntervalSet | None = None
    samples: list[_Sample] = field(default_factory=list)
    cure: _Cure | None = None
    cured: int = 0  # failed packets that verify with the cure
    diagnosed: bool = False


# How each variant's words begin: the one table ``fix_named`` reads a stored cure back by.
FIX_WORDS: dict[KeyFix, str] = {
    KeyFix.LEADING_ZERO: "a 00 byte in front of the key: it is",
    KeyFix.ICV_LENGTH: "a ",  # "a 128-bit ICV (...)": after LEADING_ZERO in ``fix_named``
    KeyFix.ESN_OFF: "ESN off (the key file says ESN on)",
    KeyFix.ESN_START: "ESN on with high half",
    KeyFix.SALT_FIRST: "the 4-byte salt read from the start of the key material, not its end",
    KeyFix.OTHER_DIRECTION: "the key given for SPI",
}


def fix_named(what: str) -> KeyFix | None:
    """The mistake a variant's words name (a summary.json read back: results/stored.py)."""
    return next((fix for fix, words in FIX_WORDS.items() if what.startswith(words)), None)


def variants(sa: SecurityAssociation, table: SaTable) -> Iterator[Variant]:
    """The usual mistakes, most common first: ICV length, ESN, salt, the other direction.

    A key one byte short of what its algorithm takes has one variant only: the
    00 byte in front that a copy-paste dropped.
    """
    if not sa.key_usable:
        yield Variant(
            f"{FIX_WORDS[KeyFix.LEADING_ZERO]} {len(sa.key)} bytes, one short "
            f"(a leading zero dropped by a copy-paste?)",
            leading_zero(sa),
            KeyFix.LEADING_ZERO,
        )
        return
    for bits in sorted(_icv_choices(sa) - {sa.icv_bits}, reverse=True):
        yield Variant(
            f"a {bits}-bit ICV (the key file says {sa.icv_bits})",
            replace(sa, icv_bits=bits),
            KeyFix.ICV_LENGTH,
        )
    if sa.esn:
        yield Variant(FIX_WORDS[KeyFix.ESN_OFF], replace(sa, esn=False, esn_hi=0), KeyFix.ESN_OFF)
    highs = sorted(
        {*range(START_HIGH_HALVES), sa.esn_hi - 1, sa.esn_hi + 1} - {sa.esn_hi if sa.esn else -1}
    )
    for hi in (h for h in highs if 0 <= h <= 0xFFFFFFFF):
        was = f"esn_hi {sa.esn_hi:#x}" if sa.esn else "ESN off"
        yield Variant(
            f"{FIX_WORDS[KeyFix.ESN_START]} {hi:#x} at the start (the key file says {was})",
            replace(sa, esn=True, esn_hi=hi),
            KeyFix.ESN_START,
        )
    if sa.auth_algorithm is None or sa.algorithm == CTR_AES:  # a salt or nonce at the end
        yield Variant(FIX_WORDS[KeyFix.SALT_FIRST], salt_first(sa), KeyFix.SALT_FIRST)
    for other in table:  # a key one byte short is no key to try (AESGCM refuses it)
        if (
            other.supported
            and other.key_usable
            and (other.algorithm, other.auth_algorithm) == (sa.algorithm, sa.auth_algorithm)
            and not other.key.same_as(sa.key)
        ):
            yield Variant(
                f"{FIX_WORDS[KeyFix.OTHER_DIRECTION]} {other.spi_text} ({other.src or 'any'} -> "
                f"{other.dst or 'any'}): the directions' keys swapped?",
                replace(sa, key=other.key, auth_key=other.auth_key),
                KeyFix.OTHER_DIRECTION,
            )


def _icv_choices(sa: SecurityAssociation) -> frozenset[int]:
    """ICV lengths a key file may have got wrong: an AEAD's, or an HMAC's usual truncations.

    For an HMAC: 96 bits (RFC 2404, and Linux's default for ``auth hmac(sha256)``), half
    the hash (RFC 4868 s2.3) and the whole hash.
    """
    digest = HMAC_DIGESTS.get(sa.auth_algorithm or "")
    if digest is None:
        return ICV_BITS
    full = digest[1] * 8
    return frozenset({96, full // 2, full})


class KeyCheck(BulkRules):
    """Counts what verified per keyed SA and diagnoses the SAs where nothing did."""

    name = "keys"

    def __init__(self, sas: SaTable) -> None:
        self._table = sas
        self._sas: dict[SaState, _Sa] = {}
        self._unsupported: dict[SaState, _Sa] = {}
        self._usage = UnusedSaTracker(sas)
        self.unused: tuple[UnusedSa, ...] = ()  # set by ``finish``

    def observe_udp(self, spi: int, sport: int | None, dport: int | None) -> None:
        """A UDP payload on a port not taken as ESP-in-UDP starts with a key file's SPI."""
        self._usage.observe_udp(spi, sport, dport)

    def observe_flow(self, flow: Flow, src: bytes, dst: bytes) -> None:
        """A packet of ``flow`` too short for the checks (no whole ESP header): its SA's
        SPI is in the capture all the same."""
        self._usage.observe(flow, src, dst)

    def observe(self, pkt: PacketContext) -> None:
        state, rec = pkt.flow.state, pkt.rec
        self._usage.observe(pkt.flow, pkt.ip.src, pkt.ip.dst)
        if state.sa is None:
            return
        if rec.verdict is Verdict.UNSUPPORTED:
            acc = self._unsupported.get(state) or self._unsupported.setdefault(state, _Sa(state.sa))
            acc.packets += 1
            acc.frames = with_frame(acc.frames, rec.frame)
            return
        acc = self._sas.get(state) or self._sas.setdefault(state, _Sa(state.sa))
        acc.packets += 1
        if rec.verdict is Verdict.AUTHENTIC_NOT_DECRYPTED:  # its ICV verified: no plaintext
            acc.verified += 1
        elif rec.verdict in _VERIFIED and pkt.plain_head is not None:  # not by layout only
            acc.verified += 1
            if rec.verdict is Verdict.BAD_TRAILER and state.sa.auth_algorithm is not None:
                acc.garbled += 1
                acc.garbled_frames = with_frame(acc.garbled_frames, rec.frame)
        elif rec.verdict is Verdict.AUTH_FAIL and rec.esp_offset is not None:
            acc.failed += 1
            acc.frames = with_frame(acc.frames, rec.frame)
            self._doctor(acc, pkt, rec.esp_offset)

    # -- the steady lane's rules (checks/bulk.py) ------------------------------
    def admits(self, flow: Flow) -> bool:
        """Has a packet of this SA been observed (the lane adds only to known SAs)? Without
        a key: a flow seen, of an SPI no entry names (``observe`` counts nothing then)."""
        if flow.state.sa is None:
            return self._usage.knows(flow) and flow.spi not in self._table.spis
        return flow.state in self._sas

    def commit(self, rows: FlowRows) -> None:
        """What ``observe`` does for packets of the SA that verified (without a key: nothing
        more than for the flow's first packet, already observed)."""
        acc = self._sas.get(rows.flow.state)
        if acc is None:
            return
        acc.packets += len(rows)
        acc.verified += len(rows)

    def _doctor(self, acc: _Sa, pkt: PacketContext, at: int) -> None:
        sample = _Sample(pkt.rec.seq or 0, pkt.data[at + ESP_HEADER_LEN :])
        if acc.cure is not None:
            acc.cured += acc.cure.verifies(sample)
        elif not acc.diagnosed:
            acc.samples.append(sample)
            if len(acc.samples) >= SAMPLES:
                self._diagnose(acc)

    def _diagnose(self, acc: _Sa) -> None:
        """Try every variant on the samples; keep the one that verifies the most."""
        acc.diagnosed = True
        best, best_n = None, 0
        for variant in variants(acc.sa, self._table):
            cure = _Cure(variant)
            n = sum(cure.verifies(s) for s in acc.samples)
            if n > best_n:
                best, best_n = cure, n
        acc.cure, acc.cured, acc.samples = best, best_n, []

    def finish(self) -> Iterator[Finding]:
        yield from self._key_notes()
        for acc in self._sas.values():
            if acc.failed and acc.verified < MISMATCH * acc.packets:
                if not acc.diagnosed:
                    self._diagnose(acc)
                yield _mismatch(acc)
            elif acc.garbled and acc.garbled >= (1 - MISMATCH) * acc.verified:
                yield _cipher_mismatch(acc)
        for acc in self._unsupported.values():
            sa = acc.sa
            why = (
                "its ICV has no key (the key file gives only its length), and "
                if sa.icv_unchecked
                else ""
            )
            yield Finding(
                FindingKind.UNSUPPORTED,
                Severity.HIGH,
                sa.spi,
                frozen(acc.frames),
                acc.packets,
                f"{acc.packets} ESP packets of SPI {sa.spi:#010x} not checked: {why}{sa.suite} "
                "is not decrypted by this version, so nothing was proven about them",
                str(sa.src or ""),
                str(sa.dst or ""),
                Unsupported(acc.packets, sa.suite, bool(sa.icv_unchecked)),
            )
        # Not findings: they are facts of the key files, not of the capture (a batch
        # gives every capture the whole archive's keys); summary.json and the reports
        # name them (narrative.unused_sentences).
        self.unused = self._usage.unused()

    def _key_notes(self) -> Iterator[Finding]:
        """An HMAC key not of its RFC's length: used as given (RFC 2104 s3), and said."""
        for sa in self._table:
            wanted = sa.rfc_hmac_key_len
            if wanted is None or sa.auth_key is None:
                continue
            yield Finding(
                FindingKind.HMAC_KEY_SIZE,
                Severity.INFO,
                None if sa.any_spi else sa.spi,
                (),
                1,
                f"SPI {sa.spi_text} ({sa.origin}): the {sa.auth_algorithm} key is "
                f"{len(sa.auth_key)} bytes; {_HMAC_RFC[sa.auth_algorithm or '']} asks for "
                f"{wanted} (RFC 2104 s3 takes any length: it is used as given)",
                str(sa.src or ""),
                str(sa.dst or ""),
                HmacKeySize(sa.auth_algorithm or "", len(sa.auth_key), wanted),
            )


def _mismatch(acc: _Sa) -> Finding:
    sa = acc.sa
    text = f"{acc.verified} of {acc.packets} packets verify with the given key"
    if acc.cure is None and not sa.key_usable:
        text += (
            f"; the key is {len(sa.key)} bytes where {sa.algorithm} needs {_key_lengths(sa)}, "
            "and a 00 byte put in front (a leading zero lost in a copy-paste) does not make "
            "them verify either: is a byte missing elsewhere in the key?"
        )
    elif acc.cure is None:
        text += (
            "; none of the usual mistakes makes them verify (ICV length 64/96/128, ESN off/on "
            "and high halves near the start, the salt at the other end, the other SAs' keys): "
            "is the key file of this capture?"
        )
    else:
        n = "all" if acc.cured == acc.failed else f"{acc.cured} of the"
        text += f"; {n} {acc.failed} that fail verify with {acc.cure.variant.what}"
    return Finding(
        FindingKind.KEY_MISMATCH,
        Severity.HIGH,
        sa.spi,
        frozen(acc.frames),
        acc.failed,
        f"SPI {sa.spi:#010x}: {text}",
        str(sa.src or ""),
        str(sa.dst or ""),
        KeyMismatch(
            acc.verified,
            acc.packets,
            acc.failed,
            "" if acc.cure is None else acc.cure.variant.what,
            0 if acc.cure is None else acc.cured,
            acc.cure is None and not sa.key_usable,
            None if acc.cure is None else acc.cure.variant.fix,
        ),
    )


def _cipher_mismatch(acc: _Sa) -> Finding:
    """An enc + auth SA whose ICVs verify but whose plaintexts are garbage.

    The HMAC proves the integrity key and the packets; a trailer that is not
    RFC 4303's in (nearly) every one of them says the cipher's key, not the
    sender, is likely what is wrong.
    """
    sa = acc.sa
    if sa.integrity_checked:
        text = (
            f"{acc.verified} of {acc.packets} packets verify their {sa.auth_algorithm} ICV, but "
            f"{acc.garbled} of them decrypt to no sound ESP trailer: the integrity key is right "
            f"and the {sa.algorithm} key is likely wrong"
        )
    else:  # nothing verified: the ICV's length is as open a question as the key
        text = (
            f"{acc.garbled} of {acc.packets} packets decrypt to no sound ESP trailer, and no ICV "
            f"was checked (no integrity key): the {sa.algorithm} key, or the ICV length the key "
            f"file gives ({sa.icv_bits} bits), is likely wrong"
        )
    return Finding(
        FindingKind.KEY_MISMATCH,
        Severity.HIGH,
        sa.spi,
        frozen(acc.garbled_frames),
        acc.garbled,
        f"SPI {sa.spi:#010x}: {text}",
        str(sa.src or ""),
        str(sa.dst or ""),
        CipherMismatch(acc.verified, acc.packets, acc.garbled, sa.integrity_checked),
    )


def _key_lengths(sa: SecurityAssociation) -> str:
    """The key lengths an AEAD takes, for a message: "20, 28 or 36 (AES key + 4-byte salt)"."""
    sizes, salt = AEAD_KEY_LAYOUT.get(sa.algorithm, ((), 0))
    lengths = [str(n + salt) for n in sizes]
    if not lengths:
        return "another length"
    words = lengths[0] if len(lengths) == 1 else f"{', '.join(lengths[:-1])} or {lengths[-1]}"
    return f"{words} ({salt}-byte salt included)" if salt else words


# The RFC that gives each verified HMAC its key length.
_HMAC_RFC = {
    "hmac(md5)": "RFC 2403 s3",
    "hmac(sha1)": "RFC 2404 s3",
    "hmac(sha256)": "RFC 4868 s2.1.1",
    "hmac(sha384)": "RFC 4868 s2.1.1",
    "hmac(sha512)": "RFC 4868 s2.1.1",
}


def coverage(seen: Seen) -> str | None:
    """Examined: packets its SA's key was tried on; nothing without a key."""
    if seen.verified or seen.decrypted:
        return None
    return (
        None if seen.keyed and seen.whole and seen.why != coverage_reasons.UNSUPPORTED else seen.why
    )
