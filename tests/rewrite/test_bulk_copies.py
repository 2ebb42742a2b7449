"""The copies in bulk write the bytes the per-frame writers write (issue 35).

``--decrypted`` (rewrite/bulk.py's ``write_decrypted``) and ``--annotate``
of a pcap (rewrite/annotate.py in batches) rebuild a batch's frames from its
columns; ``write_decrypted_frames`` and ``write_annotated(batch=0)`` write
a frame at a time and are the reference. Each is run on the same
packets.parquet, for every scenario of the fixture builder and every real
capture, analyzed with the steady lane off and on, in batches of the
default size and of 7 frames (a batch boundary inside every run of
packets), and the files must be byte-identical; so must both copies of a
pcap written together in one pass (rewrite/onepass.py), each ending with
the error it raises alone. The bulk forms of
rebuild.py are held equal to their per-packet forms row by row.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture, write_pcap
from espforensics.capture.writer import FrameRun, PcapngStream, PcapStream
from espforensics.decode.clear import internet_checksum
from espforensics.errors import CaptureError, OutputError
from espforensics.keys import SaTable, load_sas
from espforensics.model.options import Options
from espforensics.model.records import Finding, Frame
from espforensics.rewrite.annotate import AnnotatedCopy, write_annotated
from espforensics.rewrite.bulk import DecryptedCopy, write_decrypted
from espforensics.rewrite.decrypted import write_decrypted_frames
from espforensics.rewrite.onepass import BatchCopy, copy_batches
from espforensics.rewrite.rebuild import (
    checksums,
    ip_length,
    ip_lengths,
    transport,
    transport_heads,
)
from espforensics.synth import SCENARIOS, build_scenario, write_scenario
from tests.support import helpers

Copy = Callable[[io.BytesIO], int]
LANES = [pytest.param(helpers.PER_FRAME, id="per-frame"), pytest.param(helpers.STEADY, id="lane")]


def _written(copy: Copy) -> tuple[bytes, str]:
    """The bytes a writer wrote, and the one-line error it raised after them ("" for none)."""
    out = io.BytesIO()
    try:
        copy(out)
    except (OutputError, CaptureError) as exc:
        return out.getvalue(), f"{type(exc).__name__}: {exc}"
    return out.getvalue(), ""


def _assert_same_copies(
    capture: Path, parquet: Path, sas: SaTable, findings: Sequence[Finding], tmp: Path
) -> None:
    wants = {}
    for name in ("decrypted.pcap", "decrypted.pcapng"):
        target = tmp / name
        want = wants[name] = _written(
            partial(write_decrypted_frames, capture, parquet, sas, target)
        )
        for batch in (4096, 7):
            got = _written(partial(write_decrypted, capture, parquet, sas, target, batch=batch))
            assert got == want, f"{name} in batches of {batch}"
    want = wants["annotated"] = _written(
        partial(write_annotated, capture, parquet, findings, batch=0)
    )
    for batch in (4096, 7):
        got = _written(partial(write_annotated, capture, parquet, findings, batch=batch))
        assert got == want, f"annotated in batches of {batch}"
    with open_capture(capture) as cap:
        if cap.format == "pcapng":  # its annotated copy is copied block by block, alone
            return
    for name in ("decrypted.pcap", "decrypted.pcapng"):
        for batch in (4096, 7):
            outs = (io.BytesIO(), io.BytesIO())
            both: list[BatchCopy] = [
                AnnotatedCopy(findings, outs[0]),
                DecryptedCopy(capture, sas, tmp / name, outs[1]),
            ]
            ended = copy_batches(capture, parquet, both, batch)
            ends = [
                (out.getvalue(), f"{type(exc).__name__}: {exc}" if exc else "")
                for out, exc in zip(outs, ended, strict=True)
            ]
            assert ends[0] == wants["annotated"], f"annotated beside {name}, batches of {batch}"
            if wants["annotated"][1].startswith("OutputError"):  # not written alone after it
                assert ends[1][1] == wants["annotated"][1]
            else:
                assert ends[1] == wants[name], f"{name} beside annotated, batches of {batch}"


@pytest.mark.parametrize("options", LANES)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_bulk_copies_equal_the_per_frame_ones(
    tmp_path: Path, name: str, options: Options
) -> None:
    sc = build_scenario(name, seed=1)
    capture = write_scenario(sc, tmp_path / "in")["capture"]
    sas = SaTable(sc.sas)
    summary = analyze_to_dir(capture, sas, tmp_path / "out", plots=False, options=options)
    parquet = tmp_path / "out" / "packets.parquet"
    _assert_same_copies(capture, parquet, sas, summary.finding_list, tmp_path)


@pytest.mark.parametrize("options", LANES)
@pytest.mark.parametrize("name", helpers.capture_params())
def test_every_real_capture_bulk_copies_equal_the_per_frame_ones(
    tmp_path: Path, name: str, options: Options
) -> None:
    cap = helpers.real_capture(name)
    sas = load_sas([cap.keys])
    summary = analyze_to_dir(cap.pcap, sas, tmp_path / "out", plots=False, options=options)
    parquet = tmp_path / "out" / "packets.parquet"
    _assert_same_copies(cap.pcap, parquet, sas, summary.finding_list, tmp_path)


def test_a_damaged_capture_stops_both_forms_at_the_same_frame(tmp_path: Path) -> None:
    """The analysis stops inside the last record: the copies end where its table ends,
    and raise the same error after the same bytes."""
    sc = build_scenario("kernel-gso-v4", seed=1)
    files = write_scenario(sc, tmp_path / "in")
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(files["capture"].read_bytes()[:-100])
    sas = SaTable(sc.sas)
    with pytest.raises(CaptureError):
        analyze_to_dir(cut, sas, tmp_path / "out", plots=False)
    parquet = tmp_path / "out" / "packets.parquet"
    summary = analyze_to_dir(files["capture"], sas, tmp_path / "whole", plots=False)
    _assert_same_copies(cut, parquet, sas, summary.finding_list, tmp_path)


def test_a_capture_of_mixed_timestamps_and_lengths_writes_the_same_records(
    tmp_path: Path,
) -> None:
    """Frames of every length mod 4, microsecond timestamps and wire lengths above the
    captured ones: ``write_run`` gives ``write``'s records, pcap and pcapng alike."""
    rng = random.Random(7)
    frames = [
        Frame(k + 1, rng.randrange((1 << 32) * 10**9), n, n + rng.randrange(3), 1, rng.randbytes(n))
        for k, n in enumerate(rng.randrange(0, 70) for _ in range(50))
    ]
    comments = [tuple(f"c{k}" for k in range(rng.randrange(3))) for _ in frames]
    head = np.zeros((len(frames), 3), np.uint8)
    lens = np.array([min(2, f.caplen) for f in frames], np.int64)
    for k, f in enumerate(frames):
        head[k, : lens[k]] = np.frombuffer(f.data[: lens[k]], np.uint8)
    run = FrameRun(
        np.array([f.number for f in frames]),
        np.array([f.ts_ns for f in frames]),
        np.array([f.wirelen for f in frames]),
        np.array([f.linktype for f in frames]),
        [f.data[int(n) :] for f, n in zip(frames, lens, strict=True)],
        comments,
        head,
        lens,
    )
    for make in (
        lambda o: PcapStream(o, linktype=1, nanosecond=False),
        lambda o: PcapStream(o, linktype=1, byteorder="big"),
        PcapngStream,
        lambda o: PcapngStream(o, tsresol=6),
    ):
        one, bulk = io.BytesIO(), io.BytesIO()
        stream = make(one)
        for frame, said in zip(frames, comments, strict=True):
            if isinstance(stream, PcapngStream):
                stream.write(frame, said)
            else:
                stream.write(frame)
        make(bulk).write_run(run)
        assert bulk.getvalue() == one.getvalue()


def test_a_frame_out_of_range_raises_where_write_does(tmp_path: Path) -> None:
    """A timestamp past pcap's 2106 in the middle of a run: the frames before it are
    written and the same error raised."""
    frames = [Frame(k + 1, (1 << 32) * 10**9 if k == 3 else k, 4, 4, 1, b"abcd") for k in range(6)]
    data: list[bytes | memoryview] = [f.data for f in frames]
    run = FrameRun(
        np.array([f.number for f in frames]),
        np.array([f.ts_ns for f in frames]),
        np.array([f.wirelen for f in frames]),
        np.array([f.linktype for f in frames]),
        data,
    )
    one, bulk = io.BytesIO(), io.BytesIO()
    with pytest.raises(ValueError, match="frame 4") as first:
        write_pcap(one, frames, linktype=1)
    with pytest.raises(ValueError, match="frame 4") as second:
        PcapStream(bulk, linktype=1).write_run(run)
    assert str(first.value) == str(second.value) and bulk.getvalue() == one.getvalue()


def test_bulk_forms_equal_the_per_packet_forms() -> None:
    """``checksums``, ``ip_lengths`` and ``transport_heads`` row by row, on generated
    headers and payloads (IPv4 and IPv6 outer headers, every next header)."""
    rng = random.Random(35)
    rows = np.frombuffer(rng.randbytes(500 * 20), np.uint8).reshape(500, 20).copy()
    rows[:5] = 0  # the all-zero sum: 0xFFFF
    rows[5:10] = 0xFF  # a sum of 0 mod 0xFFFF that is not 0
    assert checksums(rows).tolist() == [internet_checksum(r.tobytes()) for r in rows]
    chains, payloads, nhs = [], [], []
    for k in range(400):
        v6 = k % 2
        raw = bytearray(rng.randbytes(40 if v6 else 20))
        raw[0] = 0x60 if v6 else 0x45
        chain = bytes(raw)
        payload = rng.randbytes(rng.randrange(0, 90))
        if k % 3 == 0 and len(payload) >= 40:  # an inner IP packet
            payload = bytes([0x45 if k % 6 else 0x60]) + payload[1:]
        chains.append(chain)
        payloads.append(payload)
        nhs.append(rng.randrange(256))
    heads = np.zeros((400, 40), np.uint8)
    firsts = np.zeros((400, 6), np.uint8)
    for k, (chain, payload) in enumerate(zip(chains, payloads, strict=True)):
        heads[k, : len(chain)] = np.frombuffer(chain, np.uint8)
        firsts[k, : min(6, len(payload))] = np.frombuffer(payload[:6], np.uint8)
    sizes = np.array([len(p) for p in payloads], np.int64)
    want_len = [ip_length(p) for p in payloads]
    assert ip_lengths(firsts, sizes).tolist() == [-1 if n is None else n for n in want_len]
    fixed = transport_heads(heads, np.array(nhs, np.int64), sizes)
    for k, (chain, payload) in enumerate(zip(chains, payloads, strict=True)):
        want = transport(chain, payload, nhs[k])
        assert fixed[k, : len(chain)].tobytes() + payload == want
