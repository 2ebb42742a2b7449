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
rebuild.py are held equal to their per-packet forms row by row. The bulk
copy computes no ICV the analysis verified, and hands the per-frame writer
a packet whose trailer is not the one the analysis read.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.capture import open_capture, write_pcap
from espforensics.capture.writer import FrameRun, PcapngStream, PcapStream
from espforensics.crypto.encauth import EncAuthContext
from espforensics.decode.clear import internet_checksum
from espforensics.errors import CaptureError, OutputError
from espforensics.keys import SaTable, load_sas
from espforensics.model.options import Options
from espforensics.model.records import Finding, Frame, PacketRecord
from espforensics.rewrite.annotate import AnnotatedCopy, write_annotated
from espforensics.rewrite.bulk import DecryptedCopy, write_decrypted
from espforensics.rewrite.decrypted import Decryptor, write_decrypted_frames
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


def _encauth(tmp: Path) -> tuple[Path, Path, SaTable]:
    """The encauth scenario (CBC, CTR and NULL with every HMAC) analyzed: capture, table, SAs."""
    sc = build_scenario("encauth", seed=1)
    capture = write_scenario(sc, tmp / "in")["capture"]
    sas = SaTable(sc.sas)
    analyze_to_dir(capture, sas, tmp / "out", plots=False)
    return capture, tmp / "out" / "packets.parquet", sas


def _per_frame_rebuilds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The frames the per-frame writer is asked to rebuild, from now on."""
    asked: list[int] = []
    real = Decryptor.rebuild

    def rebuild(self: Decryptor, frame: Frame, rec: PacketRecord) -> Frame:
        asked.append(frame.number)
        return real(self, frame, rec)

    monkeypatch.setattr(Decryptor, "rebuild", rebuild)
    return asked


def test_the_bulk_copy_computes_no_icv_the_analysis_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The packets the analysis verified (verdict ok) are decrypted again in bulk without
    their ICVs: no bulk ICV loop runs; only the packets handed to the per-frame writer
    are verified again, there."""
    capture, parquet, sas = _encauth(tmp_path)
    loops: list[int] = []
    real = EncAuthContext._verify_chunk

    def verify_chunk(self: EncAuthContext, *args: Any) -> Any:
        loops.append(len(args[3]))
        return real(self, *args)

    monkeypatch.setattr(EncAuthContext, "_verify_chunk", verify_chunk)
    asked = _per_frame_rebuilds(monkeypatch)
    out = io.BytesIO()
    write_decrypted(capture, parquet, sas, tmp_path / "d.pcapng", out)
    decrypted = out.getvalue().count(b"espforensics: decrypted from frame")
    verdicts = pq.read_table(parquet, columns=["verdict"]).column("verdict").to_pylist()
    assert loops == []
    assert decrypted == verdicts.count("ok") == len(verdicts) and asked == []
    assert (out.getvalue(), "") == _written(
        partial(write_decrypted_frames, capture, parquet, sas, tmp_path / "d.pcapng")
    )


def test_a_trailer_other_than_the_analysis_read_goes_to_the_per_frame_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each packet decrypted in bulk without its ICV must end in the trailer the analysis
    read from its verified plaintext (pad_len, next_header): a row that says otherwise
    is handed to the per-frame writer, which verifies the ICV again."""
    capture, parquet, sas = _encauth(tmp_path)
    table = pq.read_table(parquet)
    rows = table.to_pydict()
    planted = {
        rows["frame"][k]: k
        for k in range(len(rows["frame"]))
        if rows["verdict"][k] == "ok" and rows["seq"][k] in (3, 4)
    }
    nh, pad = list(rows["next_header"]), list(rows["pad_len"])
    frames = sorted(planted)
    nh[planted[frames[0]]] ^= 1  # a next header the plaintext does not end in
    pad[planted[frames[1]]] += 1  # a pad length it does not end in
    changed = table.set_column(
        table.schema.get_field_index("next_header"),
        table.schema.field("next_header"),
        pa.array(nh, table.schema.field("next_header").type),
    )
    changed = changed.set_column(
        table.schema.get_field_index("pad_len"),
        table.schema.field("pad_len"),
        pa.array(pad, table.schema.field("pad_len").type),
    )
    pq.write_table(changed, parquet)
    asked = _per_frame_rebuilds(monkeypatch)
    out = io.BytesIO()
    write_decrypted(capture, parquet, sas, tmp_path / "d.pcap", out)
    assert asked == frames[:2]
    assert (out.getvalue(), "") == _written(
        partial(write_decrypted_frames, capture, parquet, sas, tmp_path / "d.pcap")
    )
