"""Both copies of a pcap in one pass (rewrite/onepass.py, issue 35).

``analyze --annotate A --decrypted D`` reads the capture and its
packets.parquet once for both copies, and each copy ends as it does
written alone, one after the other: the same bytes
(tests/rewrite/test_bulk_copies.py holds them equal for every scenario
and real capture), the same one-line error naming it, its ``.partial``
file discarded; a copy that fails does not stop the one before it, and
the one after it is not written (its old file stays).
"""

from __future__ import annotations

import builtins
import errno
import gzip
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
from typer.testing import CliRunner

from espforensics.capture import Capture
from espforensics.capture.writer import FrameRun, PcapngStream, PcapStream
from espforensics.cli import app
from espforensics.rewrite import rows as rows_module
from espforensics.synth import build_scenario, write_scenario

runner = CliRunner()


def _analyze(files: dict[str, Path], out: Path, *copies: str | Path) -> Any:
    args = ["analyze", str(files["capture"]), "--sa", str(files["keys"]), "--no-plots", "-q"]
    return runner.invoke(app, [*args, "--out", str(out), "--force", *map(str, copies)])


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A pcap of 55 frames, its copies written in batches of 7 (several batches)."""
    monkeypatch.setattr("espforensics.rewrite.bulk.BATCH", 7)
    sc = build_scenario("kernel-gso-v4", seed=1)
    assert len(sc.frames) > 3 * 7
    return write_scenario(sc, tmp_path / "in")


def _alone(files: dict[str, Path], tmp: Path) -> dict[str, bytes]:
    """Each copy written by a run that asks for it alone."""
    alone = {}
    for option, name in (("--annotate", "a.pcapng"), ("--decrypted", "d.pcap")):
        res = _analyze(files, tmp / "alone", option, tmp / name)
        assert res.exit_code in (0, 1), res.stderr  # 1: findings
        alone[name] = (tmp / name).read_bytes()
        (tmp / name).unlink()
    return alone


def test_both_copies_read_the_capture_and_the_table_once(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = _alone(files, tmp_path)
    reads: list[str] = []

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def counted(self: Capture, *args: Any) -> Any:
            if Path(self.path) == files["capture"]:
                reads.append(name)
            return real(self, *args)

        return counted

    for name in ("__iter__", "batches", "known_batches"):
        monkeypatch.setattr(Capture, name, spy(name, getattr(Capture, name)))
    tables: list[tuple[str, ...]] = []
    real_rows = rows_module.PacketRows.__init__

    def rows_spy(self: rows_module.PacketRows, parquet: Path, columns: Any) -> None:
        tables.append(tuple(columns))
        real_rows(self, parquet, columns)

    monkeypatch.setattr(rows_module.PacketRows, "__init__", rows_spy)
    a, d = tmp_path / "a.pcapng", tmp_path / "d.pcap"
    res = _analyze(files, tmp_path / "o", "--annotate", a, "--decrypted", d)
    assert res.exit_code in (0, 1), res.stderr  # 1: findings
    analysis = reads.index("batches")  # the analysis reads it first, in batches
    assert reads[analysis + 1 :] == ["known_batches"]  # then the copies: once, both
    assert len(tables) == 1 and {"iv", "seq_hi_verified", "carriers"} <= set(tables[0])
    assert a.read_bytes() == alone["a.pcapng"] and d.read_bytes() == alone["d.pcap"]


def _failing(real: Callable[..., None], frame: int) -> Callable[..., None]:
    """``write_run`` that refuses the run holding ``frame`` with a full disk."""

    def write_run(self: Any, run: FrameRun) -> None:
        if (run.number == frame).any():
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, run)

    return write_run


def test_the_second_copy_failing_keeps_the_first(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decrypted copy (a pcap: ``PcapStream``) fails at frame 20: the
    annotated copy, written before it one after the other, is whole and published."""
    alone = _alone(files, tmp_path)
    monkeypatch.setattr(PcapStream, "write_run", _failing(PcapStream.write_run, 20))
    a, d = tmp_path / "a.pcapng", tmp_path / "d.pcap"
    d.write_bytes(b"old")
    res = _analyze(files, tmp_path / "o", "--annotate", a, "--decrypted", d)
    assert res.exit_code == 2
    assert res.stderr == f"espforensics: error: {d}: cannot write: No space left on device\n"
    assert a.read_bytes() == alone["a.pcapng"]
    assert d.read_bytes() == b"old" and not Path(f"{d}.partial").exists()
    assert (tmp_path / "o" / "summary.json").exists()


def test_the_first_copy_failing_leaves_the_second_unwritten(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The annotated copy (``PcapngStream``) fails at frame 20: its error, and the
    decrypted copy, which would have been written after it, is not: both old files stay."""
    monkeypatch.setattr(PcapngStream, "write_run", _failing(PcapngStream.write_run, 20))
    a, d = tmp_path / "a.pcapng", tmp_path / "d.pcap"
    a.write_bytes(b"old a")
    d.write_bytes(b"old d")
    res = _analyze(files, tmp_path / "o", "--annotate", a, "--decrypted", d)
    assert res.exit_code == 2
    assert res.stderr == f"espforensics: error: {a}: cannot write: No space left on device\n"
    assert a.read_bytes() == b"old a" and d.read_bytes() == b"old d"
    assert not Path(f"{a}.partial").exists() and not Path(f"{d}.partial").exists()


class _Full:
    """A file that refuses every write past its first ``room`` bytes: a full disk (None:
    room for every write, its last bytes, kept in its buffer, refused by ``close``)."""

    def __init__(self, real: IO[Any], room: int | None) -> None:
        self.real, self.room = real, room

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        if self.room is not None:
            size = len(memoryview(data).cast("B"))
            if size > self.room:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.room -= size
        return self.real.write(data)

    def close(self) -> None:
        self.real.close()
        if self.room is None:
            raise OSError(errno.ENOSPC, "No space left on device")

    def __enter__(self) -> _Full:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _full_disk(monkeypatch: pytest.MonkeyPatch, target: Path, room: int | None) -> None:
    """The copy into ``target`` meets a full disk after ``room`` bytes: refused by its
    file, not by the copy's code (beside another copy: on the thread that writes it,
    capture/aside.py)."""

    def opener(path: Any, mode: str = "r", *args: Any) -> Any:
        real = builtins.open(path, mode, *args)  # noqa: SIM115 (closed by the copy)
        return _Full(real, room) if Path(path) == Path(f"{target}.partial") else real

    monkeypatch.setattr("espforensics.rewrite.open", opener, raising=False)


@pytest.mark.parametrize("both", [True, False], ids=["beside-annotate", "alone"])
def test_a_write_the_file_refuses_is_the_copys_error(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, both: bool
) -> None:
    alone = _alone(files, tmp_path)
    a, d = tmp_path / "a.pcapng", tmp_path / "d.pcap"
    d.write_bytes(b"old")
    _full_disk(monkeypatch, d, 1000)
    res = _analyze(files, tmp_path / "o", *(("--annotate", a) if both else ()), "--decrypted", d)
    assert res.exit_code == 2
    assert res.stderr == f"espforensics: error: {d}: cannot write: No space left on device\n"
    assert d.read_bytes() == b"old" and not Path(f"{d}.partial").exists()
    assert a.read_bytes() == alone["a.pcapng"] if both else not a.exists()


@pytest.mark.parametrize("room", [1000, None], ids=["while-written", "on-close"])
def test_a_write_refused_before_the_damage_discards_the_copy(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, room: int | None
) -> None:
    """A damaged capture ends both copies where the analysis ended; the decrypted copy's
    file refused a write (while written, or its last bytes on close): that copy is
    discarded, not published short, and the run's one error is the capture's, as when
    the copy's own code meets the full disk."""
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(files["capture"].read_bytes()[:-100])  # inside the last record
    a, d = tmp_path / "a.pcapng", tmp_path / "d.pcap"
    _full_disk(monkeypatch, d, room)
    res = _analyze({**files, "capture": cut}, tmp_path / "o", "--annotate", a, "--decrypted", d)
    assert res.exit_code == 2
    assert res.stderr.startswith(f"espforensics: error: {cut}: capture ends inside frame ")
    assert not d.exists() and not Path(f"{d}.partial").exists()
    assert a.stat().st_size > 1000  # written to the damage, as alone


def test_a_damaged_capture_ends_both_copies_where_each_ends_alone(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(files["capture"].read_bytes()[:-100])  # inside the last record
    damaged = {**files, "capture": cut}
    alone: dict[str, bytes] = {}
    for option, name in (("--annotate", "a.pcapng"), ("--decrypted", "d.pcap")):
        res = _analyze(damaged, tmp_path / "alone", option, tmp_path / name)
        assert res.exit_code == 2, res.stderr
        alone[name] = (tmp_path / name).read_bytes()
    a, d = tmp_path / "both.pcapng", tmp_path / "both.pcap"
    res = _analyze(damaged, tmp_path / "o", "--annotate", a, "--decrypted", d)
    assert res.exit_code == 2
    assert res.stderr.startswith(f"espforensics: error: {cut}: ")
    assert a.read_bytes() == alone["a.pcapng"] and d.read_bytes() == alone["d.pcap"]
    assert len(alone["d.pcap"]) > 24  # frames were written before the damage


def test_a_compressed_capture_is_decompressed_once_for_both_copies(
    tmp_path: Path, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compressed capture is read as a stream, decompressed by each read of it: the
    analysis's, then one for both copies."""
    packed = tmp_path / "capture.pcap.gz"
    packed.write_bytes(gzip.compress(files["capture"].read_bytes()))
    compressed = {**files, "capture": packed}
    alone = _alone(compressed, tmp_path)
    reads: list[Path] = []
    real = Capture.batches

    def batches(self: Capture, sizes: Any) -> Any:
        reads.append(Path(self.path))
        return real(self, sizes)

    monkeypatch.setattr(Capture, "batches", batches)
    a, d = tmp_path / "a.pcapng", tmp_path / "d.pcap"
    res = _analyze(compressed, tmp_path / "o", "--annotate", a, "--decrypted", d)
    assert res.exit_code in (0, 1), res.stderr  # 1: findings
    assert reads == [packed, packed]  # the analysis, then both copies
    assert a.read_bytes() == alone["a.pcapng"] and d.read_bytes() == alone["d.pcap"]
