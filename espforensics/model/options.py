"""What a run is asked to do, as values the command line and the library share.

In: nothing. Out: ``Options`` (how a capture is analyzed), ``Selection`` (``--spi``,
``--frames``) and ``CSV_ROWS``, kept here so that the command line declares them without
loading the analysis. Raises nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Selection:
    """What a run analyzes (``--spi``, ``--frames``); every other frame is a row of its
    own with verdict ``not_selected``. Empty ``spis`` and no ``frames``: everything."""

    spis: frozenset[int] = frozenset()
    frames: tuple[int, int] | None = None  # first and last frame number, both included

    @property
    def everything(self) -> bool:
        return not self.spis and self.frames is None

    def frame(self, number: int) -> bool:
        """Is frame ``number`` selected (by ``frames``)?"""
        return self.frames is None or self.frames[0] <= number <= self.frames[1]

    def spi(self, spi: int) -> bool:
        """Is an ESP packet of ``spi`` selected (by ``spis``)?"""
        return not self.spis or spi in self.spis

    def words(self) -> str:
        """The selection as the command line said it: ``--spi 0x00001001 --frames 10-20``."""
        said = [f"--spi {spi:#010x}" for spi in sorted(self.spis)]
        if self.frames is not None:
            said.append(f"--frames {self.frames[0]}-{self.frames[1]}")
        return " ".join(said)


# packets.csv by default only up to this many frames: 2M frames make a 433 MB CSV beside
# a Parquet file that holds the same rows; past it the CSV is dropped (``--csv`` keeps it).
# Here, not in tables/packets.py, for ``analyze --help``, which names it without loading pyarrow.
CSV_ROWS = 1_000_000


@dataclass(frozen=True, slots=True)
class Options:
    """How to analyze a capture."""

    natt_ports: frozenset[int] = frozenset({4500})  # RFC 3948 s2
    reassembly_timeout_s: float = 30.0
    # The engine's steady lane (engine/steady.py) takes the packets whose checks it can
    # run over a batch's columns; False sends every frame down the per-frame path, the
    # reference the steady lane is tested against. The outputs are the same either way.
    steady_lane: bool = True
    # Frames per batch of the engine (tests use small ones). A batch's numpy calls cost
    # some milliseconds whatever its size: at 8,192 frames most bench profiles ran up to
    # 20% faster than at 4,096, none slower; 16,384 was no faster (docs/performance.md,
    # "Larger batches").
    batch_frames: int = 8192
    select: Selection = field(default_factory=Selection)  # --spi, --frames: what is analyzed
