"""The fuzz harness on a short deterministic budget, and the harness's own parts.

Every kind of input (pcap, pcapng, the three key formats, compare, batch)
runs a fixed budget of inputs from a fixed seed through the library entry
points: no internal error, rows == frames, no key byte in any output.
Classes still open are listed in ``KNOWN_OPEN`` with the inputs that show
them; those inputs are left out of the budget and replayed by a strict
xfail test, so a fix shows up as an unexpected pass and the entry must go.
No timing: the harness's time-out is off and nothing here sleeps.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fuzz.oracle
from espforensics.analysis import Analysis, KeysArg, analyze
from espforensics.engine.plan import Plan
from espforensics.engine.rows import SteadyRows
from espforensics.engine.steady import SteadyLane
from espforensics.engine.wire import FrameBatch, WireColumns
from espforensics.keys import SaTable
from espforensics.model.options import Options
from espforensics.model.records import PacketRecord
from espforensics.synth import SCENARIOS, build_scenario, write_capture
from espforensics.synth.truth import CaptureFormat
from fuzz import lanecount
from fuzz.campaign import Tally, prepare_process, run_block, schedule
from fuzz.corpus import all_secrets
from fuzz.inputs import KINDS, FuzzInput, make_input
from fuzz.leaks import find_leak
from fuzz.minimize import minimize
from fuzz.oracle import OK, Oracle, Verdict
from fuzz.run import load_finding, main, replay, save_finding
from fuzz.seeds import secret_bytes
from fuzz.steady import STEADY, steady_seeds
from fuzz.walker import walk

SEED = 2026
BUDGET = {
    "pcap": 120,
    "pcapng": 120,
    "yaml": 80,
    "xfrm": 200,
    "esp_sa": 300,
    "compare": 40,
    "batch": 16,
    "steady": 12,
}

# Failure classes still open: issue -> (class pattern, kind, the budget's inputs showing
# it). Empty when every class the budget reaches is fixed; an entry looks like
#   "deep YAML nesting": (r"RecursionError in espforensics/keys/yaml_file\.py:.*",
#                         "yaml", (9, 16, 59)),
KNOWN_OPEN: dict[str, tuple[str, str, tuple[int, ...]]] = {}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    prepare_process(0)  # no address-space cap in the test process
    return Oracle(tmp_path_factory.mktemp("fuzz"))


def _known(kind: str) -> set[int]:
    return {i for _, k, hits in KNOWN_OPEN.values() if k == kind for i in hits}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(BUDGET))
def test_budget_has_no_failures(oracle: Oracle, kind: str) -> None:
    failed = {}
    for index in sorted(set(range(BUDGET[kind])) - _known(kind)):
        verdict = oracle.run(make_input(SEED, index, kind))
        if verdict.failures:
            failed[index] = [(f.cls, f.detail) for f in verdict.failures]
    assert failed == {}


@pytest.mark.parametrize(
    ("issue", "pattern", "kind", "hits"),
    [
        pytest.param(
            issue,
            pattern,
            kind,
            hits,
            marks=pytest.mark.xfail(
                strict=True, raises=AssertionError, reason=f"open: {issue} ({pattern})"
            ),
        )
        for issue, (pattern, kind, hits) in KNOWN_OPEN.items()
    ],
)
def test_known_open_class(
    oracle: Oracle, issue: str, pattern: str, kind: str, hits: tuple[int, ...]
) -> None:
    classes = set()
    for index in hits:
        verdict = oracle.run(make_input(SEED, index, kind))
        classes |= {f.cls for f in verdict.failures}
    unexpected = {c for c in classes if not re.fullmatch(pattern, c)}
    if unexpected:  # another class: a real failure, not the expected one
        raise RuntimeError(f"{issue}: inputs now fail otherwise: {sorted(unexpected)}")
    assert not classes, f"{issue}: still open"


def test_inputs_are_deterministic() -> None:
    for kind in KINDS:
        assert make_input(SEED, 7, kind) == make_input(SEED, 7, kind)
    assert make_input(SEED, 7, "pcap") != make_input(SEED + 1, 7, "pcap")


def test_blocks_add_up_whatever_the_split(tmp_path: Path) -> None:
    """--jobs splits the indices into blocks: the tally does not depend on the split."""
    kinds = ("xfrm", "esp_sa")
    whole = run_block(SEED, kinds, range(60), tmp_path / "a", 0)
    parts = Tally()
    for r in (range(25), range(25, 60)):
        parts.merge(run_block(SEED, kinds, r, tmp_path / "b", 0))
    assert (parts.tried, parts.outcomes, parts.failures) == (
        whole.tried,
        whole.outcomes,
        whole.failures,
    )
    assert sum(whole.tried.values()) == 60
    assert schedule(kinds) == ["xfrm", "esp_sa"] * 3


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_walker_counts_every_fixture_frame(tmp_path: Path, fmt: CaptureFormat) -> None:
    for name in SCENARIOS:
        sc = build_scenario(name, seed=1)
        path = tmp_path / f"{name}.{fmt}"
        if fmt == "pcap" and (len(sc.linktypes) > 1 or sc.secrets):
            continue
        write_capture(path, sc.frames, format=fmt, linktypes=sc.linktypes, secrets=sc.secrets)
        walked = walk(path.read_bytes())
        assert (walked.complete, walked.frames) == (True, len(sc.frames)), name
        data = path.read_bytes()
        assert not walk(data[:-1]).complete


def test_leak_scanner_sees_every_spelling() -> None:
    key = all_secrets()[0]
    spellings = [
        key.hex(),
        key.hex().upper(),
        "0x" + key.hex()[:20],
        ":".join(f"{b:02x}" for b in key),
        " ".join(f"{b:02X}" for b in key[4:14]),
    ]
    for text in spellings:
        assert find_leak(f"spi {text} is bad") is not None, text
    assert find_leak(b"raw " + key[3:20] + b" bytes") is not None
    assert find_leak("iv 0x0011223344556677 seq 0x00000001, sha " + "ab" * 32) is None


def test_an_output_parquet_is_scanned_for_what_its_values_show(
    oracle: Oracle, tmp_path: Path
) -> None:
    """Campaign 4444, batch #1961 (session 11): packets.parquet's Snappy bytes put a tag
    byte after 15 hex digits of a public IV, and so showed 8 "key bytes" of another
    scenario's key that no value holds. A key in a value is still a leak."""
    assert oracle.run(make_input(4444, 1961, "batch")).failures == []
    key = all_secrets()[0]
    folder = tmp_path / "out"
    folder.mkdir()
    pq.write_table(pa.table({"detail": ["ok", f"key {key.hex()}"]}), folder / "t.parquet")
    verdict = Verdict()
    fuzz.oracle._scan_dir(verdict, folder)
    assert [f.cls for f in verdict.failures] == ["invariant: key bytes in an output file"]


def test_minimizer_keeps_the_header_and_the_culprit() -> None:
    chunks = (b"HEAD", *(bytes([i]) * 4 for i in range(40)))
    culprit = bytes([23]) * 4
    fuzz_input = FuzzInput("pcap", 0, "example", (("a.pcap", chunks), ("a.xfrm", (b"x\ny\n",))))

    def fails(candidate: FuzzInput) -> bool:
        return culprit in dict(candidate.files)["a.pcap"]

    small = minimize(fuzz_input, fails)
    assert small.files == (("a.pcap", (b"HEAD", culprit)),)


def test_verdict_outcomes() -> None:
    verdict = Verdict()
    verdict.input_error()
    assert verdict.outcome == "input_error"
    verdict.fail("X in y", "z")
    verdict.input_error()
    assert (verdict.outcome, [f.cls for f in verdict.failures]) == ("internal_error", ["X in y"])
    assert Verdict().outcome == OK


def test_command_line_prints_the_tally(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "--inputs",
        "40",
        "--seed",
        str(SEED),
        "--kinds",
        "keys",
        "--timeout",
        "0",
        "--memory-mib",
        "0",
        "--findings",
        str(tmp_path / "findings"),
    ]
    code = main(args)
    out = capsys.readouterr().out
    assert "inputs: 40 in" in out
    assert re.search(r"^yaml +\d+", out, re.M)
    assert code == (1 if "failure classes: 0" not in out else 0)


def test_a_saved_finding_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fuzz_input = make_input(SEED, 3, "pcapng")
    save_finding(tmp_path / "f", "a class", fuzz_input, "what was seen", SEED)
    again = load_finding(tmp_path / "f")
    assert {n: b"".join(c) for n, c in again.files} == {n: b"".join(c) for n, c in fuzz_input.files}
    assert again.with_files(dict(fuzz_input.files)) == fuzz_input
    assert replay(tmp_path / "f", 0, 0) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'f'}: ")
    save_finding(tmp_path / "g", "another class", make_input(SEED, 4, "yaml"), "seen", SEED)
    assert replay(tmp_path, 0, 0) == 0  # the --findings folder: each finding in it
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in out if not line.startswith(" ")] == [
        str(tmp_path / "f"),
        str(tmp_path / "g"),
    ]
    assert replay(tmp_path / "f" / "none", 0, 0) == 2  # was a traceback
    assert "no finding.json in it or in its folders" in capsys.readouterr().err


def test_the_lanes_are_compared(oracle: Oracle, monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-frame path that read one frame otherwise than the steady lane breaks the
    'both lanes alike' invariant (docs/fuzzing.md); the same input is ok without it."""
    index = next(i for i in range(BUDGET["pcap"]) if make_input(SEED, i, "pcap").full)
    fuzz_input = make_input(SEED, index, "pcap")
    assert oracle.run(fuzz_input).failures == []
    real = analyze

    def otherwise(capture: Path, keys: KeysArg, options: Options | None = None) -> Analysis:
        result = real(capture, keys, options)
        if options is fuzz.oracle.PER_FRAME:
            result.packets.loc[0, "detail"] = "read otherwise"
        return result

    monkeypatch.setattr(fuzz.oracle, "analyze", otherwise)
    failed = [f.cls for f in oracle.run(fuzz_input).failures]
    assert failed == ["invariant: the steady lane's packets differ"]


@pytest.mark.slow
def test_steady_inputs_feed_the_lane_and_make_it_refuse(oracle: Oracle) -> None:
    """The steady kind's inputs of a fixed seed: the lane takes frames of them, and
    refuses some (the faults inside the runs), with no failure."""
    verdicts = [oracle.run(make_input(SEED, i, "steady")) for i in range(BUDGET["steady"])]
    assert [v.failures for v in verdicts] == [[]] * BUDGET["steady"]
    assert sum(v.lane_taken > 0 for v in verdicts) > 0
    assert sum(v.lane_refused for v in verdicts) > 0


@pytest.mark.parametrize("name", list(STEADY))
def test_a_clean_steady_window_goes_to_the_lane_after_the_iv_window(
    tmp_path: Path, name: str
) -> None:
    """Without a fault, the lane takes every frame once each SA of the window has shown
    the IV derivation check its first 64 packets (docs/architecture.md), refusing none."""
    st = next(s for s in steady_seeds() if s.seed.name == name)
    path = tmp_path / "w.pcap"
    sending = 2 if STEADY[name][2] else 1  # the SAs the window's frames use
    lanecount.install()
    for first, size in ((0, 100), (13, 233), (20, 300)):
        write_capture(path, list(st.seed.frames[first : first + size]), linktypes=(1,))
        lanecount.take()
        analyze(path, SaTable(st.seed.sas), fuzz.oracle.LANE)
        count = lanecount.take()
        assert (count.taken, count.refused) == (max(0, size - 64 * sending), 0)


def test_a_batch_whose_every_planned_packet_fails_its_icv(tmp_path: Path) -> None:
    """The fuzzer's steady #2582 of campaign 1111 (session 11): the lane planned a batch
    whose packets all failed their ICV, so none decoded, and settling the plan read row 0
    of no rows (IndexError). Now those frames go per frame: auth_fail, as without the lane."""
    st = next(s for s in steady_seeds() if s.seed.name == "steady-gcm")
    frames = list(st.seed.frames[:200])
    for k in range(100, 200):  # past the IV window: whole batches of 16, every ICV flipped
        f = frames[k]
        frames[k] = f._replace(data=f.data[:-1] + bytes([f.data[-1] ^ 1]))
    path = tmp_path / "w.pcap"
    write_capture(path, frames, linktypes=(1,))
    lanecount.install()
    lanecount.take()
    lane = analyze(path, SaTable(st.seed.sas), fuzz.oracle.LANE)
    assert lanecount.take().taken == 100 - 64  # frames 65 to 100, before the flipped ones
    alone = analyze(path, SaTable(st.seed.sas), fuzz.oracle.PER_FRAME)
    assert lane.packets.equals(alone.packets)
    assert lane.packets["verdict"].tolist() == ["ok"] * 100 + ["auth_fail"] * 100


def test_a_replayed_iv_is_one_its_sa_used(tmp_path: Path) -> None:
    """The steady seeds' replay frames carry the IV of their SA's packet 3 numbers back."""
    for st in steady_seeds():
        ivs = {f.data[34:42]: f.data[42:50] for f in st.seed.frames}  # (SPI, seq) -> IV
        for clean, again in zip(st.seed.frames[40:60], st.replayed[40:60], strict=True):
            spi, seq = again.data[34:38], int.from_bytes(again.data[38:42], "big")
            assert again.data[34:42] == clean.data[34:42]
            assert again.data[42:50] == ivs[spi + (seq - 3).to_bytes(4, "big")] != clean.data[42:50]


def test_the_leak_scanner_knows_the_steady_keys() -> None:
    keys = {k for st in steady_seeds() for sa in st.seed.sas for k in secret_bytes(sa)}
    assert len(keys) == 12  # 4 seeds of 2 SAs: the AEAD key, or CBC's key and HMAC key
    assert keys <= set(all_secrets())


def test_a_lane_difference_on_a_steady_run_is_caught(
    oracle: Oracle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lane that committed a wrong sequence number for the frames it took breaks the
    'both lanes alike' invariant on a steady input that was ok."""
    index = next(
        i for i in range(BUDGET["steady"]) if oracle.run(make_input(SEED, i, "steady")).lane_taken
    )
    fuzz_input = make_input(SEED, index, "steady")
    assert oracle.run(fuzz_input).failures == []
    real = SteadyLane.apply

    def off_by_one(
        self: SteadyLane,
        batch: FrameBatch,
        wire: WireColumns,
        plan: Plan,
        rows: list[int],
        records: tuple[PacketRecord, ...],
    ) -> SteadyRows:
        out = real(self, batch, wire, plan, rows, records)
        return dataclasses.replace(out, seq=out.seq + 1)

    monkeypatch.setattr(SteadyLane, "apply", off_by_one)
    failed = [f.cls for f in oracle.run(fuzz_input).failures]
    assert failed == ["invariant: the steady lane's packets differ"]
