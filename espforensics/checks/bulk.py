"""The bulk side of a check: what the engine's steady lane asks of it.

In: frozen views of a batch's candidate rows, one flow's (``FlowRows``) or
one shared scope's, such as a key group's (``ScopeRows``), in capture
order. Out: per check, whether it admits a flow at all, the rows it would
not treat as the plain case (``refuses``, and ``refuses_bytes`` for those
its bytes alone decide, with the columns those bytes give: ``BytesRule``),
the columns it fills for them (``columns``), and its bulk state update
once the lane takes them (``commit``). Raises nothing.

Once the lane's packets are opened and decoded (in the engine's process or
a worker's), each check with a rule over plaintexts says which rows it
refuses and fills its columns: a function of the ``Plaintexts`` alone, no
check state (``PlainRule``; the registry is ``PLAIN`` in checks/__init__.py).

The engine (engine/steady.py) knows only this protocol: a row is the
lane's when no check refuses it, nor any row before it in its unit (the
flows that share a scope), and every check's ``commit`` must then leave
the check's state as its per-packet ``observe`` would have for those rows
(tests/checks/test_bulk_*.py state it per check). Each check's bulk rules sit in
its own module beside ``observe``; the registry is ``BULK`` in
checks/__init__.py. ``BulkRules`` gives the "nothing to say" defaults.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from espforensics.bounded.intervals import I64, U8, U64
from espforensics.capture.batch import Buffer
from espforensics.checks.context import Flow
from espforensics.decode.digest import RowDigests
from espforensics.decode.inner import InnerColumns
from espforensics.model.arrays import SpacedHex, Strs, rows_at, strs

Mask = npt.NDArray[np.bool_]


class LeakWords(NamedTuple):
    """One row's leak columns: ``leaked_hex``, ``leaked_fields`` and ``leaked`` (the clear
    bytes proven; 0 for a possible leak, whose ``leaked`` stays empty)."""

    hex: str
    fields: str
    leaked: int


@dataclass(frozen=True, slots=True)
class Leaks:
    """The leak check's columns of some rows (``leaked_hex``, ``leaked_fields``, ``leaked``;
    every other row's are empty): ``at``, the rows (positions in their ``FlowRows``, in a
    plan, or in a steady run), each one's columns beside it: ``hex`` its clear bytes
    (written as text only into the table), ``fields`` an array of ``str``."""

    at: npt.NDArray[np.intp]
    hex: SpacedHex
    fields: Strs
    leaked: I64

    @staticmethod
    def of(at: npt.NDArray[np.intp], words: Sequence[LeakWords]) -> Leaks:
        """The rows ``at`` with their columns ``words`` (one each, in the same order)."""
        hexes, fields, leaked = zip(*words, strict=True) if words else ((), (), ())
        spaced = SpacedHex.of([bytes.fromhex(h) for h in hexes])
        return Leaks(at, spaced, strs(fields), np.array(leaked, np.int64))

    def take(self, keep: npt.NDArray[np.intp] | Mask) -> Leaks:
        """The rows ``keep`` (indices or a mask over ``at``) with their columns."""
        return Leaks(self.at[keep], self.hex.take(keep), self.fields[keep], self.leaked[keep])

    def at_rows(self, at: npt.NDArray[np.intp]) -> Leaks:
        """The same columns, of the rows ``at`` (one each, in the same order)."""
        return Leaks(at, self.hex, self.fields, self.leaked)

    @staticmethod
    def joined(parts: Sequence[Leaks]) -> Leaks | None:
        """``parts`` one after the other, in their order; None: none."""
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        return Leaks(
            np.concatenate([p.at for p in parts]),
            SpacedHex.joined([p.hex for p in parts]),
            np.concatenate([p.fields for p in parts]),
            np.concatenate([p.leaked for p in parts]),
        )

    def words(self) -> Iterator[LeakWords]:
        """Each row's columns as the per-packet rule writes them."""
        texts = self.hex.texts().tolist()
        return map(LeakWords, texts, self.fields.tolist(), self.leaked.tolist())


@dataclass(frozen=True, slots=True)
class BytesRule:
    """What a check says of a flow's rows by their bytes alone: the rows it would not
    treat as the plain case whatever its state, the leak columns it fills for rows it
    takes that are the plain case but for those columns (None: none), and the rows whose
    bytes are clear from right after their ESP header on (``clear``, None: none), which
    hold no IV (``PacketContext.clear_from_header``)."""

    refused: Mask
    leaks: Leaks | None = None
    clear: Mask | None = None


@dataclass(frozen=True, slots=True)
class FlowRows:
    """One flow's candidate rows of a batch, capture order.

    ``iv``: an 8-byte IV as a number, or a 16-byte IV's 64-bit fold (its
    halves xored); ``iv_bytes``: rows of the IV's bytes (the context's
    IV length; without a key, 8); ``digest``: each packet's digest
    (``PacketContext.digest``: its ICV, or without a key a hash of its ESP
    bytes), made when asked (decode/digest.py); ``buf``: the batch's bytes
    (``raw``: the same, to search), in which ``ip_at`` is where each row's
    datagram starts, ``esp_at`` its ESP
    header and ``ct_end`` where its ciphertext ends, its ICV after it
    (without a key the ICV's length is unknown: the datagram's end);
    ``leaks``: the leak columns the checks' bytes rules gave the rows
    (``BytesRule.leaks``; None before those rules ran, or none), which
    ``commit`` counts as ``observe`` would; ``clear``: the rows clear from
    right after their ESP header on, which hold no IV (``BytesRule.clear``;
    None before those rules ran, or none).
    """

    flow: Flow
    frames: I64
    seq64: U64
    iv: U64
    iv_bytes: U8
    digest: RowDigests
    buf: U8
    ct_end: I64
    ip_at: I64
    esp_at: I64
    raw: Buffer
    leaks: Leaks | None = None
    clear: Mask | None = None

    def __len__(self) -> int:
        return len(self.frames)

    def no_iv(self) -> Mask | None:
        """``clear`` if any row is clear from its header on (no IV to read), else None."""
        clear = self.clear
        return clear if clear is not None and clear.any() else None

    def head(self, n: int) -> FlowRows:
        """The first ``n`` rows (``digest`` as it is: its row ``i`` is still row ``i``)."""
        leaks = self.leaks
        if leaks is not None:
            leaks = leaks.take(leaks.at < n)
        return FlowRows(
            self.flow,
            self.frames[:n],
            self.seq64[:n],
            self.iv[:n],
            self.iv_bytes[:n],
            self.digest,
            self.buf,
            self.ct_end[:n],
            self.ip_at[:n],
            self.esp_at[:n],
            self.raw,
            leaks if leaks is not None and len(leaks.at) else None,
            None if self.clear is None else self.clear[:n],
        )

    def last_blocks(self, width: int) -> U8:
        """Per row, the last ``width`` bytes of its ciphertext (CBC: its last block)."""
        return rows_at(self.buf, self.ct_end - width, width)


@dataclass(frozen=True, slots=True)
class ScopeRows:
    """The candidate rows of the flows that share one scope (a key group), capture order.

    ``iv`` as in ``FlowRows``; ``iv_bytes`` rows of 16 bytes (an 8-byte
    IV and what follows it); ``digest`` as in ``FlowRows``.
    """

    frames: I64
    spi: I64
    seq64: U64
    iv: U64
    iv_bytes: U8
    digest: RowDigests

    def __len__(self) -> int:
        return len(self.frames)


@dataclass(frozen=True, slots=True)
class Opened:
    """What opening the rows of a ``ScopeRows`` showed: the first bytes of each row's
    ciphertext and of its plaintext (checks/context.py's ``HEAD_LEN``; None: the rows
    have no key, nothing was opened)."""

    cts: U8
    heads: U8 | None


@dataclass(frozen=True, slots=True)
class BulkColumns:
    """The packet columns a check fills for a flow's rows, when the lane takes them.

    ``counter``: the IV was built from the packet's own seq64 (``iv_seq_delta`` 0).
    """

    counter: Mask | None = None


NOTHING = BulkColumns()


@dataclass(frozen=True, slots=True)
class Outer:
    """Per row, what a transport-mode checksum takes from the outer header."""

    words: I64  # the sum of the outer addresses' 16-bit words (RFC 1071)
    v4: Mask  # the outer header is IPv4
    natt: Mask  # ESP in UDP: NAT-T transport checksums are not checked (RFC 3948 s3.1.2)


@dataclass(frozen=True, slots=True)
class Payloads:
    """Many decrypted payloads joined in one buffer: where each starts, its length, next header."""

    view: U8  # with at least 64 bytes after the last payload's end
    start: I64
    payload: I64
    nh: I64

    def body(self, row: int) -> bytes:
        """Row ``row``'s payload (its plaintext up to the padding)."""
        at = int(self.start[row])
        return self.view[at : at + int(self.payload[row])].tobytes()


@dataclass(frozen=True, slots=True)
class Plaintexts:
    """The plaintexts of a batch's packets that verified, decoded by the lane, row for row.

    ``plain``: the rows that are the plain case before the checks' own rules
    (at least ``HEAD_LEN`` bytes, a sound trailer, inner headers that decode:
    by the bulk parser where ``inner.decoded``, else one by one); ``heads``
    and ``cipher_heads``: rows of each plaintext's and ciphertext's first
    ``HEAD_LEN`` bytes; ``clear``: the payload is clear by design (GMAC,
    RFC 4543 s3.2).
    """

    payloads: Payloads
    inner: InnerColumns
    heads: U8
    cipher_heads: U8
    clear: Mask
    outer: Outer
    plain: Mask


@dataclass(frozen=True, slots=True)
class InnerChecks:
    """The ``inner_checksum``, its detail and the ``tfc_len`` columns (-1: empty) of rows."""

    status: Strs
    detail: Strs
    tfc_len: I64


@dataclass(frozen=True, slots=True)
class PlainRule:
    """What a check says of a batch's plaintexts: the rows it would not treat as the plain
    case (None: none), and the inner checksum columns if it fills them."""

    refused: Mask | None = None
    inner_checks: InnerChecks | None = None


class Scope(Protocol):
    """State a check shares between flows (the IV reuse check's key group), with the
    check's bulk rules over the rows of all of them, in capture order."""

    def refuses(self, rows: ScopeRows) -> Mask:
        """``BulkCheck.refuses`` over the scope's rows."""
        ...

    def commit(self, rows: ScopeRows, opened: Opened) -> None:
        """``observe`` for the scope's rows the lane took, in bulk."""
        ...


class BulkCheck(Protocol):
    """A check's bulk rules (``BulkRules`` has the defaults)."""

    def admits(self, flow: Flow) -> bool: ...

    def scope(self, flow: Flow) -> Scope | None: ...

    def refuses(self, rows: FlowRows) -> Mask: ...

    def refuses_bytes(self, rows: FlowRows) -> BytesRule: ...

    def columns(self, rows: FlowRows) -> BulkColumns: ...

    def commit(self, rows: FlowRows) -> None: ...


class BulkRules:
    """The defaults: every flow admitted, no shared scope, no row refused, nothing kept."""

    def admits(self, flow: Flow) -> bool:
        """Is the flow (its SA) in this check's steady state?"""
        return True

    def scope(self, flow: Flow) -> Scope | None:
        """The state this check shares between this flow and others (a key group), if any.

        The lane plans the rows of flows that share a scope as one unit: from
        the first row refused, the rest of the unit goes per frame. The scope's
        own ``refuses`` and ``commit`` are the check's rules over its rows.
        """
        return None

    def refuses(self, rows: FlowRows) -> Mask:
        """The rows this check would not treat as the plain case, each row judged from the
        check's state and the rows before it only, as ``observe`` would: the lane asks
        about the rows up to the first one refused by its bytes, not past it."""
        return np.zeros(len(rows), np.bool_)

    def refuses_bytes(self, rows: FlowRows) -> BytesRule:
        """The rows this check would not treat as the plain case whatever its state, by
        their bytes alone, and the columns it fills from those bytes for the others:
        asked once per batch (``refuses`` again after a refused row)."""
        return BytesRule(np.zeros(len(rows), np.bool_))

    def columns(self, rows: FlowRows) -> BulkColumns:
        """The columns this check fills for a flow's rows."""
        return NOTHING

    def commit(self, rows: FlowRows) -> None:
        """``observe`` for a flow's rows the lane took, in bulk."""


def first_refused(refused: Mask) -> int:
    """How many rows pass: the index of the first refused row, or all of them."""
    return int(np.argmax(refused)) if refused.any() else len(refused)
