"""One capture that mixes what crosses batches, for the engine's and --jobs' tests.

The frames of ``MIXED``'s scenarios, round robin, renumbered, 1 ms apart:
an ESN wrap, IV reuse, fragments (v4 and v6), the kernel's misplaced
header, sequence anomalies, a failed ICV and unknown SPIs.
"""

from __future__ import annotations

from pathlib import Path

from espforensics.model.records import Frame
from espforensics.synth import build_scenario, keys_yaml, write_capture

MIXED = (
    "esn-wrap",
    "iv-reuse",
    "fragments-v4",
    "fragments-v6",
    "kernel-gso-v6",
    "sequence",
    "corrupt-icv",
    "unknown-spi",
)


def write_mixed(folder: Path) -> tuple[Path, Path, int]:
    """The mixed capture and its keys.yaml in ``folder``, and its number of frames."""
    scenarios = [build_scenario(name) for name in MIXED]
    queues = [list(sc.frames) for sc in scenarios]
    frames: list[Frame] = []
    while any(queues):
        for queue in queues:
            if queue:
                f = queue.pop(0)
                n = len(frames) + 1
                frames.append(f._replace(number=n, ts_ns=1_700_000_000_000_000_000 + n * 1_000_000))
    cap, keys = folder / "mixed.pcap", folder / "mixed.keys.yaml"
    written = write_capture(cap, frames)
    keys.write_text(keys_yaml([sa for sc in scenarios for sa in sc.sas]))
    assert written == len(frames) == sum(len(sc.frames) for sc in scenarios)
    return cap, keys, len(frames)
