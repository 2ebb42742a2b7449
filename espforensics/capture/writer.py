"""Write pcap and pcapng files (for tests, the fixture builder and the rewrites).

In: ``Frame`` (and ``DecryptionSecrets``) values and a binary stream.
Out: the file bytes written to the stream; each writer returns the number of
frames written. ``PcapStream`` and ``PcapngStream`` write a frame at a
time (the latter with packet comments, opt_comment, and an interface per
link type added as it meets them), or a ``FrameRun`` (frames as columns)
at once, its record headers built as numpy rows and every record joined
in one write: ``write_run`` beside ``write``, the same bytes (a run they
cannot take whole, a frame out of the format's range say, is written by
``write`` frame by frame, which raises where it would); ``encode_options``
encodes any block's options. ``open_compressed_writer`` gives a stream that compresses into a
file with gzip, bzip2, xz or zstd.

Raises ``ValueError`` when asked to write something the format cannot hold
faithfully: a frame whose link type has no interface, ``caplen`` differing
from ``len(data)``, a timestamp out of the format's range, simple packet
blocks with several interfaces or a captured length they cannot express.
These are mistakes of the calling program, not of an input file, hence not
part of the ``EspForensicsError`` tree; except ``Unwritable`` (a
``ValueError`` too): a frame a capture may well hold that this format
cannot (a timestamp past pcap's year 2106 or pcapng's 64-bit count, a link
type past pcapng's 16 bits), which a caller copying a capture reports to
its user.

Formats: draft-ietf-opsawg-pcap s4-s5; draft-ietf-opsawg-pcapng s3-s4.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Literal, Protocol, cast

import numpy as np
import numpy.typing as npt

from espforensics.capture.compression import open_zstd_writer
from espforensics.model.records import DecryptionSecrets, Frame

I64 = npt.NDArray[np.int64]
Data = bytes | memoryview
Bytes = bytes | bytearray | memoryview  # what a stream's ``write`` takes


class Writable(Protocol):
    """Where the streams write: an open binary file, or capture/aside.py's ``Aside``."""

    def write(self, data: Bytes, /) -> int:
        """Write ``data`` whole; the number of bytes."""
        ...


_NS = 1_000_000_000
_U32 = 1 << 32
_ORDERS = {"little": "<", "big": ">"}

# pcapng block types (pcapng s10.1) and IDB options (s4.2).
_SHB, _IDB, _SPB, _EPB, _DSB = 0x0A0D0D0A, 1, 3, 6, 0x0A
_OPT_ENDOFOPT, OPT_COMMENT, _OPT_IF_TSRESOL = 0, 1, 9


class Unwritable(ValueError):  # what a file cannot hold, not an error of ours
    """A frame of a capture that this format cannot hold, said with the frame's number."""


def _order(byteorder: str) -> str:
    if byteorder not in _ORDERS:
        raise ValueError(f"byteorder must be 'little' or 'big', not {byteorder!r}")
    return _ORDERS[byteorder]


def _pad(length: int) -> bytes:
    """pcapng s3.1: block bodies are padded to 32 bits."""
    return b"\x00" * (-length % 4)


def _check_frame(frame: Frame) -> None:
    if frame.caplen != len(frame.data):
        raise ValueError(
            f"frame {frame.number}: caplen {frame.caplen} != len(data) {len(frame.data)}"
        )
    if not 0 <= frame.wirelen < _U32:
        raise Unwritable(f"frame {frame.number}: wirelen {frame.wirelen} does not fit 32 bits")


@dataclass(frozen=True, slots=True)
class FrameRun:
    """Frames to write, in order, as columns: what ``write`` takes a ``Frame`` at a time.

    Frame i's bytes are the first ``head_len[i]`` bytes of row i of ``head``
    (headers built as numpy rows: none when ``head`` is None), then
    ``data[i]``. ``comments``: each frame's packet comments (pcapng), or
    None for none at all.
    """

    number: I64
    ts_ns: I64
    wirelen: I64
    linktype: I64
    data: list[Data]
    comments: list[tuple[str, ...]] | None = None
    head: npt.NDArray[np.uint8] | None = None
    head_len: I64 | None = None

    def __len__(self) -> int:
        return len(self.data)

    def heads(self) -> tuple[npt.NDArray[np.uint8], I64]:
        """``head`` and ``head_len`` (a row of no bytes each when there are none)."""
        if self.head is None or self.head_len is None:
            return np.zeros((len(self), 0), np.uint8), np.zeros(len(self), np.int64)
        return self.head, self.head_len

    def caplen(self) -> I64:
        sizes = np.fromiter(map(len, self.data), np.int64, len(self.data))
        return sizes + self.heads()[1]

    def frames(self) -> Iterator[tuple[Frame, tuple[str, ...]]]:
        """Each frame and its comments: the run for ``write``, a frame at a time."""
        head, head_len = self.heads()
        columns = (self.number, self.ts_ns, self.wirelen, self.linktype, head_len)
        rows = zip(*(c.tolist() for c in columns), self.data, strict=True)
        for k, (number, ts_ns, wirelen, linktype, size, data) in enumerate(rows):
            raw = head[k, :size].tobytes() + bytes(data)
            frame = Frame(number, ts_ns, len(raw), wirelen, linktype, raw)
            yield frame, self.comments[k] if self.comments is not None else ()


def _prefixes(run: FrameRun, fields: npt.NDArray[np.uint8]) -> list[memoryview]:
    """Each frame's record or block fields (rows of bytes), then its head."""
    head, head_len = run.heads()
    rows = np.concatenate([fields, head], axis=1) if head.shape[1] else fields
    return _rows_packed(rows, fields.shape[1] + head_len)


def _views(packed: bytes, lengths: I64) -> list[memoryview]:
    """``packed`` cut into consecutive pieces of ``lengths``."""
    view = memoryview(packed)
    ends = np.cumsum(lengths).tolist()
    return [view[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def _rows_packed(rows: npt.NDArray[np.uint8], lengths: I64) -> list[memoryview]:
    """The first ``lengths[i]`` bytes of each row, one piece a row."""
    keep = np.arange(rows.shape[1]) < lengths[:, None]
    return _views(rows[keep].tobytes(), lengths)


def _interleaved(*columns: Sequence[Data]) -> bytes:
    """The pieces of every row, row after row: one file write for a run."""
    pieces: list[Data] = [b""] * (len(columns) * len(columns[0]))
    for k, column in enumerate(columns):
        pieces[k :: len(columns)] = list(column)
    return b"".join(pieces)


def _wirelen_fits(run: FrameRun) -> bool:
    return bool(((run.wirelen >= 0) & (run.wirelen < _U32)).all())


class PcapStream:
    """A pcap file written a frame at a time: the file header at once, one link type."""

    def __init__(
        self,
        out: Writable,
        *,
        linktype: int,
        nanosecond: bool = True,
        byteorder: Literal["little", "big"] = "little",
        snaplen: int = 262144,
    ) -> None:
        order = _order(byteorder)
        magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4  # draft-ietf-opsawg-pcap s4
        out.write(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
        self._out, self.linktype = out, linktype
        self._record = struct.Struct(order + "IIII")
        self._unit = 1 if nanosecond else 1000
        self.frames = 0

    def write(self, frame: Frame) -> None:
        """One record; the frame must have the file's link type."""
        _check_frame(frame)
        if frame.linktype != self.linktype:
            raise ValueError(
                f"frame {frame.number}: link type {frame.linktype}, file has {self.linktype}"
            )
        sec, ns = divmod(frame.ts_ns, _NS)
        if not 0 <= sec < _U32:
            raise Unwritable(
                f"frame {frame.number}: timestamp {frame.ts_ns} ns outside pcap's range"
            )
        self._out.write(self._record.pack(sec, ns // self._unit, frame.caplen, frame.wirelen))
        self._out.write(frame.data)
        self.frames += 1

    def write_run(self, run: FrameRun) -> None:
        """``write`` of each frame of ``run``, its record headers as numpy rows."""
        if not len(run):
            return
        sec, ns = np.divmod(run.ts_ns, _NS)
        if not (
            _wirelen_fits(run)
            and (run.linktype == self.linktype).all()
            and ((sec >= 0) & (sec < _U32)).all()
        ):
            for frame, _ in run.frames():  # raises at the frame it cannot write
                self.write(frame)
            return
        heads = np.empty((len(run), 4), self._record.format[0] + "u4")
        heads[:, 0], heads[:, 1], heads[:, 3] = sec, ns // self._unit, run.wirelen
        heads[:, 2] = run.caplen()
        fields = heads.view(np.uint8).reshape(len(run), 16)
        self._out.write(_interleaved(_prefixes(run, fields), run.data))
        self.frames += len(run)


def write_pcap(
    out: Writable,
    frames: Iterable[Frame],
    *,
    linktype: int,
    nanosecond: bool = True,
    byteorder: Literal["little", "big"] = "little",
    snaplen: int = 262144,
) -> int:
    """Write a pcap file header and one record per frame; return the frame count.

    With ``nanosecond=False`` timestamps are cut to whole microseconds.
    """
    stream = PcapStream(
        out, linktype=linktype, nanosecond=nanosecond, byteorder=byteorder, snaplen=snaplen
    )
    for frame in frames:
        stream.write(frame)
    return stream.frames


def _pcapng_header(order: str, linktypes: Sequence[int], tsresol: int, snaplen: int) -> bytes:
    """One SHB (pcapng s4.1) and one IDB per link type with if_tsresol (s4.2)."""
    shb = struct.pack(order + "IIIHHqI", _SHB, 28, 0x1A2B3C4D, 1, 0, -1, 28)
    idb = struct.Struct(order + "IIHHIHHB3xHHI")  # ..., if_tsresol, opt_endofopt, length
    idbs = [
        idb.pack(_IDB, 32, lt, 0, snaplen, _OPT_IF_TSRESOL, 1, tsresol, 0, 0, 32)
        for lt in linktypes
    ]
    return shb + b"".join(idbs)


def _ticks(frame: Frame, tsresol: int) -> int:
    """The frame's timestamp in units of 10^-tsresol s, as a 64-bit count."""
    scale: int = 10 ** abs(9 - tsresol)
    ticks = frame.ts_ns // scale if tsresol <= 9 else frame.ts_ns * scale
    if not 0 <= ticks < 1 << 64:
        raise Unwritable(f"frame {frame.number}: timestamp {frame.ts_ns} ns outside pcapng's range")
    return ticks


def _check_pcapng_args(linktypes: Sequence[int], simple: bool, tsresol: int) -> None:
    if not linktypes:
        raise ValueError("write_pcapng needs at least one link type")
    if simple and len(linktypes) != 1:
        raise ValueError("simple packet blocks carry no interface id: give exactly one link type")
    if not 0 <= tsresol <= 0x7F:
        raise ValueError(f"tsresol {tsresol} is not in 0..127")
    for lt in linktypes:
        if not 0 <= lt <= 0xFFFF:
            raise Unwritable(f"link type {lt} does not fit pcapng's 16 bits")


def write_pcapng(
    out: Writable,
    items: Iterable[Frame | DecryptionSecrets],
    *,
    linktypes: Sequence[int],
    byteorder: Literal["little", "big"] = "little",
    simple: bool = False,
    tsresol: int = 9,
    snaplen: int = 262144,
) -> int:
    """Write one pcapng section; return the number of frames written.

    One SHB, one IDB per entry of ``linktypes`` (with if_tsresol 10^-tsresol);
    each frame goes to the first interface of its link type, as an Enhanced
    Packet Block, or a Simple Packet Block (no timestamp) if ``simple``;
    secrets become Decryption Secrets Blocks where they stand in ``items``.
    """
    _check_pcapng_args(linktypes, simple, tsresol)
    order = _order(byteorder)
    out.write(_pcapng_header(order, linktypes, tsresol, snaplen))
    interface: dict[int, int] = {}
    for index, lt in enumerate(linktypes):
        interface.setdefault(lt, index)
    u32 = struct.Struct(order + "I")
    count = 0
    for item in items:
        if isinstance(item, DecryptionSecrets):
            out.write(_dsb(order, item))
            continue
        _check_frame(item)
        if item.linktype not in interface:
            raise ValueError(f"frame {item.number}: no interface has link type {item.linktype}")
        if simple:
            head = _spb_head(order, item, snaplen)
        else:
            head = _epb_head(order, item, interface[item.linktype], _ticks(item, tsresol))
        block = head + item.data + _pad(item.caplen)
        out.write(block + u32.pack(len(block) + 4))
        count += 1
    return count


def _epb_head(order: str, frame: Frame, if_id: int, ticks: int, options_len: int = 0) -> bytes:
    """pcapng s4.3: everything of an EPB before the packet data."""
    blen = 32 + frame.caplen + (-frame.caplen % 4) + options_len
    high, low = divmod(ticks, _U32)
    return struct.pack(order + "IIIIIII", _EPB, blen, if_id, high, low, frame.caplen, frame.wirelen)


def encode_options(order: str, options: Sequence[tuple[int, bytes]]) -> bytes:
    """pcapng s3.5: each option as code, length, value padded to 32 bits, then opt_endofopt.

    No options: no bytes at all (the end-of-options marker is then omitted).
    """
    if not options:
        return b""
    head = struct.Struct(order + "HH")
    parts = []
    for code, value in options:
        if not 0 < code <= 0xFFFF or len(value) > 0xFFFF:
            raise ValueError(f"option {code} of {len(value)} bytes does not fit pcapng's fields")
        parts.append(head.pack(code, len(value)) + value + _pad(len(value)))
    return b"".join(parts) + head.pack(_OPT_ENDOFOPT, 0)


def comment_options(comments: Sequence[str]) -> list[tuple[int, bytes]]:
    """One opt_comment (pcapng s3.5, code 1, UTF-8) per comment, in order."""
    return [(OPT_COMMENT, text.encode()) for text in comments]


class PcapngStream:
    """One pcapng section written a frame at a time, with packet comments.

    The SHB is written at once; an IDB (if_tsresol 10^-tsresol) the first
    time a link type is met (pcapng s4.2 lets IDBs come anywhere in a
    section before the packets that name them), so the caller need not know
    the capture's link types in advance. Memory: one entry per link type.
    """

    def __init__(
        self,
        out: Writable,
        *,
        byteorder: Literal["little", "big"] = "little",
        tsresol: int = 9,
        snaplen: int = 0,
    ) -> None:
        _check_pcapng_args([1], False, tsresol)
        self._out, self._order = out, _order(byteorder)
        self._tsresol, self._snaplen = tsresol, snaplen
        self._interfaces: dict[int, int] = {}
        self._u32 = struct.Struct(self._order + "I")
        out.write(_pcapng_header(self._order, [], tsresol, snaplen))
        self.frames = 0

    def _interface(self, linktype: int) -> int:
        if_id = self._interfaces.get(linktype)
        if if_id is None:
            _check_pcapng_args([linktype], False, self._tsresol)
            self._out.write(
                _pcapng_header(self._order, [linktype], self._tsresol, self._snaplen)[28:]
            )
            if_id = self._interfaces[linktype] = len(self._interfaces)
        return if_id

    def write(self, frame: Frame, comments: Sequence[str] = ()) -> None:
        """One Enhanced Packet Block on the interface of the frame's link type."""
        _check_frame(frame)
        if not 0 <= frame.linktype <= 0xFFFF:
            raise Unwritable(
                f"frame {frame.number}: link type {frame.linktype} does not fit pcapng's 16 bits"
            )
        if_id = self._interface(frame.linktype)
        options = encode_options(self._order, comment_options(comments))
        head = _epb_head(self._order, frame, if_id, _ticks(frame, self._tsresol), len(options))
        block = head + frame.data + _pad(frame.caplen) + options
        self._out.write(block + self._u32.pack(len(block) + 4))
        self.frames += 1

    def write_run(self, run: FrameRun) -> None:
        """``write`` of each frame of ``run``: the Enhanced Packet Blocks' heads and tails as
        numpy rows, the comments' options encoded for the frames that have any."""
        if not len(run):
            return
        types = np.unique(run.linktype).tolist()
        if len(types) == 1 and 0 <= types[0] <= 0xFFFF:
            self._interface(types[0])  # its IDB before the run, as ``write`` would
        if not (
            _wirelen_fits(run)
            and all(lt in self._interfaces for lt in types)
            and 0 <= self._tsresol <= 9
            and (run.ts_ns >= 0).all()
        ):
            for frame, comments in run.frames():  # raises at the frame it cannot write
                self.write(frame, comments)
            return
        n, order = len(run), self._order
        caplen = run.caplen()
        options = [
            encode_options(order, comment_options(c)) if c else b""
            for c in (run.comments or [()] * n)
        ]
        opt_len = np.fromiter(map(len, options), np.int64, n)
        pad = -caplen % 4
        blen = 32 + caplen + pad + opt_len
        ticks = run.ts_ns // 10 ** (9 - self._tsresol)
        ids = np.array([self._interfaces.get(lt, 0) for lt in types], np.int64)
        heads = np.empty((n, 7), order + "u4")
        heads[:, 0], heads[:, 1] = _EPB, blen
        heads[:, 2] = ids[np.searchsorted(types, run.linktype)]
        heads[:, 3], heads[:, 4] = ticks >> 32, ticks & (_U32 - 1)
        heads[:, 5], heads[:, 6] = caplen, run.wirelen
        tails = np.zeros((n, 8), np.uint8)  # padding, then the block's length again
        at = pad[:, None] + np.arange(4)
        tails[np.arange(n)[:, None], at] = blen.astype(order + "u4").view(np.uint8).reshape(n, 4)
        ends = _rows_packed(tails, pad + 4)
        for k in np.flatnonzero(opt_len).tolist():
            ends[k] = memoryview(_pad(int(caplen[k])) + options[k] + bytes(ends[k][-4:]))
        fields = heads.view(np.uint8).reshape(n, 28)
        self._out.write(_interleaved(_prefixes(run, fields), run.data, ends))
        self.frames += n


def _spb_head(order: str, frame: Frame, snaplen: int) -> bytes:
    """pcapng s4.4: an SPB's captured length is min(original, snaplen, block bytes)."""
    padded = frame.caplen + (-frame.caplen % 4)
    if min(frame.wirelen, snaplen or frame.wirelen, padded) != frame.caplen:
        raise ValueError(
            f"frame {frame.number}: a simple packet block cannot say caplen {frame.caplen} "
            f"(wirelen {frame.wirelen}, snaplen {snaplen})"
        )
    return struct.pack(order + "III", _SPB, 16 + padded, frame.wirelen)


def _dsb(order: str, secrets: DecryptionSecrets) -> bytes:
    """pcapng s4.7: secrets type, length, data padded, no options."""
    length = len(secrets.data)
    blen = 20 + length + (-length % 4)
    head = struct.pack(order + "IIII", _DSB, blen, secrets.secrets_type, length)
    return head + secrets.data + _pad(length) + struct.pack(order + "I", blen)


def open_compressed_writer(
    path: str | os.PathLike[str], kind: Literal["gzip", "bzip2", "xz", "zstd"] | None
) -> BinaryIO:
    """A binary stream into ``path``, compressed as ``kind`` (None: plain).

    gzip is written with mtime 0 so that fixture files are reproducible.
    """
    name = os.fspath(path)
    if kind is None:
        return open(name, "wb")
    if kind == "gzip":
        return cast(BinaryIO, gzip.GzipFile(name, "wb", mtime=0))
    if kind == "bzip2":
        return cast(BinaryIO, bz2.BZ2File(name, "wb"))
    if kind == "xz":
        return cast(BinaryIO, lzma.LZMAFile(name, "wb", format=lzma.FORMAT_XZ))
    if kind == "zstd":
        return open_zstd_writer(name)
    raise ValueError(f"unknown compression {kind!r}")
