"""sas.csv's first_time and last_time keep the capture's own precision.

A float of epoch seconds cannot hold a nanosecond (its ulp is about
2.4e-7 s), so the times are kept as integer ns and printed with the digits
the capture's timestamps have: 6 for a microsecond pcap, 9 for a
nanosecond one, on both lanes of the engine.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.capture.writer import write_pcap
from espforensics.model.options import Options
from espforensics.model.records import Frame
from espforensics.synth import build_scenario, write_scenario
from espforensics.tables.small import seconds

EPOCH_2026 = 1_795_993_350 * 10**9  # the capture of issue 38's sas.csv row


def _times(out: Path) -> list[tuple[str, str]]:
    with (out / "sas.csv").open(newline="") as fh:
        return [(r["first_time"], r["last_time"]) for r in csv.DictReader(fh)]


def _written(tmp: Path, nanosecond: bool) -> tuple[Path, Path, list[Frame]]:
    """kernel-gso-v4 moved to 2026, each frame 343,337,059 ns past a second and on."""
    sc = build_scenario("kernel-gso-v4", seed=1)
    keys = write_scenario(sc, tmp)["keys"]
    frames = [
        f._replace(ts_ns=EPOCH_2026 + 343_337_059 + 1_000_003 * i) for i, f in enumerate(sc.frames)
    ]
    capture = tmp / ("ns.pcap" if nanosecond else "us.pcap")
    with capture.open("wb") as fh:
        write_pcap(fh, frames, linktype=frames[0].linktype, nanosecond=nanosecond)
    return capture, keys, frames


@pytest.mark.parametrize("steady", [False, True])
@pytest.mark.parametrize(
    ("nanosecond", "first"),
    [(False, "1795993350.343337"), (True, "1795993350.343337059")],
)
def test_sa_times_have_the_captures_digits(
    tmp_path: Path, nanosecond: bool, first: str, steady: bool
) -> None:
    capture, keys, frames = _written(tmp_path, nanosecond)
    out = tmp_path / "out"
    options = Options(batch_frames=4) if steady else Options(steady_lane=False)
    analyze_to_dir(capture, [keys], out, options=options, plots=False)
    times = _times(out)
    assert times[0][0] == first  # SPI 0x1001 opens the capture
    # every time exactly as written: a us capture keeps whole microseconds
    unit = 1 if nanosecond else 1000
    written = {seconds(f.ts_ns // unit * unit, 9 if nanosecond else 6) for f in frames}
    assert {t for row in times for t in row} <= written
    assert max(last for _, last in times) == seconds(
        frames[-1].ts_ns // unit * unit, 9 if nanosecond else 6
    )


@pytest.mark.parametrize(
    ("ns", "digits", "text"),
    [
        (1_795_993_350_343_337_000, 6, "1795993350.343337"),
        (1_795_993_350_343_337_059, 9, "1795993350.343337059"),
        (1_795_993_350_343_000_000, 3, "1795993350.343"),
        (1_795_993_350_000_000_000, 0, "1795993350"),
        (-1_500_000_000, 3, "-1.500"),
    ],
)
def test_seconds_prints_exact_digits(ns: int, digits: int, text: str) -> None:
    assert seconds(ns, digits) == text
