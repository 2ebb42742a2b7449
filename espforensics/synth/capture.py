"""Writing synthetic captures and their companion files to disk.

In: frames (any iterable, streamed once), a scenario, paths. Out: pcap or
pcapng files through ``espforensics.capture``'s writers, optionally
compressed, plus keys.yaml, ``ip xfrm state`` text, esp_sa lines and
expected.json next to them. Raises ``ValueError`` for a request the format
cannot hold (several link types or decryption secrets in a pcap file) and
``OSError`` from the file system.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from espforensics.capture import open_compressed_writer, write_pcap, write_pcapng
from espforensics.model.records import DecryptionSecrets, Frame
from espforensics.synth.keytext import esp_sa_text, keys_yaml, xfrm_state_text
from espforensics.synth.truth import CaptureFormat, Scenario, expected_json

Compression = Literal["gzip", "bzip2", "xz", "zstd"]
SUFFIXES: dict[str, str] = {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstd": ".zst"}


def write_capture(
    path: str | os.PathLike[str],
    frames: Iterable[Frame],
    *,
    format: CaptureFormat = "pcap",
    compression: Compression | None = None,
    linktypes: Sequence[int] | None = None,
    secrets: Sequence[DecryptionSecrets] = (),
    snaplen: int = 262144,
    nanosecond: bool = True,
    byteorder: Literal["little", "big"] = "little",
) -> int:
    """Write ``frames`` to ``path``; returns the number of frames written.

    ``linktypes`` defaults to the first frame's link type; pcapng gets one
    interface per entry and pcap takes exactly one. ``secrets`` go first in
    a pcapng file, as Decryption Secrets Blocks.
    """
    stream = iter(frames)
    first = next(stream, None)
    chained: Iterable[Frame] = stream if first is None else itertools.chain((first,), stream)
    types = list(linktypes) if linktypes else [1 if first is None else first.linktype]
    with open_compressed_writer(os.fspath(path), compression) as out:
        if format == "pcapng":
            items = itertools.chain[Frame | DecryptionSecrets](secrets, chained)
            return write_pcapng(out, items, linktypes=types, byteorder=byteorder, snaplen=snaplen)
        if len(types) != 1 or secrets:
            raise ValueError("pcap holds one link type and no secrets; use pcapng")
        return write_pcap(
            out,
            chained,
            linktype=types[0],
            nanosecond=nanosecond,
            byteorder=byteorder,
            snaplen=snaplen,
        )


def companion_names(stem: str | None, capture_format: CaptureFormat) -> dict[str, str]:
    """File names of a scenario's outputs: capture, keys, xfrm, esp_sa, expected."""
    prefix = "" if stem is None else f"{stem}."
    return {
        "capture": f"{stem or 'capture'}.{capture_format}",
        "keys": f"{prefix}keys.yaml",
        "xfrm": f"{prefix}xfrm-state.txt",
        "esp_sa": f"{prefix}esp_sa",
        "expected": f"{prefix}expected.json",
    }


def write_scenario(
    scenario: Scenario,
    outdir: str | os.PathLike[str],
    *,
    stem: str | None = None,
    compression: Compression | None = None,
    capture_format: CaptureFormat | None = None,
) -> dict[str, Path]:
    """Write a scenario's capture and companion files into ``outdir``."""
    fmt = capture_format or scenario.format
    names = companion_names(stem, fmt)
    if compression is not None:
        names["capture"] += SUFFIXES[compression]
    folder = Path(outdir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {role: folder / name for role, name in names.items()}
    write_capture(
        paths["capture"],
        scenario.frames,
        format=fmt,
        compression=compression,
        linktypes=scenario.linktypes,
        secrets=scenario.secrets,
        snaplen=scenario.snaplen,
    )
    texts = {
        "keys": keys_yaml(scenario.sas),
        "xfrm": xfrm_state_text(scenario.sas),
        "esp_sa": esp_sa_text(scenario.sas),
        "expected": expected_json(scenario, names["capture"]),
    }
    for role, text in texts.items():
        paths[role].write_text(text, encoding="ascii")
    return paths
