"""No fact is parsed back from words: the SA mode, the clear bytes and the frames travel typed.

The summary's SA mode is a ``SaMode`` (guessed or stated), a misplaced
layout's clear bytes are numbers (None where they vary), the likely
causes' frames are the facts' numbers (``Shown``). Their words ("transport
(guess)", "45 00 LL LL", "4 5 6 ...") are made at the end, by
summary.json's writer and the report; summary.json's reader
(results/summary.py ``from_json``, results/stored.py) turns its own text
back into the same values.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from espforensics.analysis import summarize
from espforensics.keys.validate import MODES
from espforensics.report import facts as facts_module
from espforensics.report.causes import likely_causes
from espforensics.report.facts import ModeFact, Shown, sa_facts
from espforensics.results.summary import SaMode, Summary
from espforensics.synth import build_scenario, write_scenario


def _summary(tmp: Path, name: str, modes: bool = True) -> Summary:
    """A scenario analyzed with its keys; ``modes`` False: its key file states no mode."""
    paths = write_scenario(build_scenario(name, seed=1), tmp / name)
    keys = paths["keys"]
    if not modes:
        lines = keys.read_text().splitlines(keepends=True)
        keys.write_text("".join(x for x in lines if not x.strip().startswith("mode:")))
    return summarize(paths["capture"], [keys])


def test_every_key_file_mode_is_a_summary_mode() -> None:
    assert {m.value for m in SaMode if not m.guessed} == {"", *MODES}


@pytest.mark.parametrize(
    ("name", "modes", "mode", "fact"),
    [
        ("example", True, SaMode.TRANSPORT, ModeFact.TRANSPORT),
        ("example", False, SaMode.TRANSPORT_GUESS, ModeFact.TRANSPORT),
        # IPv4 inside a transport SA: only IP packets inside, so tunnel or IP-in-IP
        ("kernel-gso-v4", False, SaMode.TUNNEL_GUESS, ModeFact.UNKNOWN),
    ],
)
def test_the_sa_mode_is_typed_from_the_run_to_summary_json_and_back(
    tmp_path: Path, name: str, modes: bool, mode: SaMode, fact: ModeFact
) -> None:
    summary = _summary(tmp_path, name, modes)
    assert [sa.mode for sa in summary.sas] == [mode, mode]
    assert all(sa.mode is mode and sa.mode.guessed is not modes for sa in summary.sas)
    doc = json.loads(json.dumps(summary.to_json()))
    assert [sa["mode"] for sa in doc["sas"]] == [mode.value, mode.value]  # the words, as before
    again = Summary.from_json(doc)
    assert [sa.mode for sa in again.sas] == [mode, mode]
    assert all(type(sa.mode) is SaMode for sa in again.sas)
    if name == "kernel-gso-v4":  # its SAs have misplaced headers, so facts
        assert {f.mode for f in sa_facts(summary)} == {fact}


def test_the_facts_do_not_follow_the_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewording the clear bytes ("45 00 05 ac") changes the words of the evidence, not
    the facts a cause matches on, nor the frames it names."""
    summary = _summary(tmp_path, "kernel-gso-v6")
    (layout,) = summary.layouts
    assert layout.clear[:2] == (0x45, 0x00)  # the inner IPv4 header's first bytes
    before = {f.spi: f for f in sa_facts(summary)}
    monkeypatch.setattr(facts_module, "clear_bytes", lambda x: "xx yy")
    after = {f.spi: f for f in sa_facts(summary)}
    assert after[0x1001].clear_hex == "xx yy"
    assert after[0x1001].clear_version == before[0x1001].clear_version == 4
    shown = before[0x1001].misplaced_frames
    assert shown == Shown((4, 5, 6, 8, 9, 10, 12, 13, 14, 16), more=True)
    assert str(shown) == "4 5 6 8 9 10 12 13 14 16 ..."
    (cause,) = likely_causes(summary)
    assert cause.id == "transport-gso-inner-tunnel"
    assert cause.frames == shown.frames


def test_a_layout_s_clear_bytes_are_numbers_and_summary_json_keeps_their_hex(
    tmp_path: Path,
) -> None:
    summary = _summary(tmp_path, "kernel-gso-v6")
    (layout,) = summary.layouts
    assert all(b is None or 0 <= b <= 0xFF for b in layout.clear)
    (stored,) = summary.to_json()["layouts"]
    assert stored["clear_hex"] == " ".join(".." if b is None else f"{b:02x}" for b in layout.clear)
    assert list(stored)[8] == "clear_hex"  # where the field always was
    assert Summary.from_json(json.loads(json.dumps(summary.to_json()))).layouts == (layout,)
