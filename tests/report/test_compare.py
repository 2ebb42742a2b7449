"""compare: keys for one side only said first, changed findings first, no 0-0 rows,
names escaped in every format.

On the real ip6tnl captures of Linux 6.1 (TSO on: 94 misplaced ESP headers;
TSO off: none), each analyzed once, with and without its keys; the outputs
are compared whole.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.analysis import analyze_to_dir, summarize
from espforensics.cli import app
from espforensics.render.compare import (
    escape_name,
    md_escape,
    render_comparison,
    render_comparison_json,
    render_comparison_md,
)
from espforensics.report.compare import KeyCover, compare, key_cover
from espforensics.results.summary import Summary
from espforensics.synth import build_scenario, write_scenario
from tests.support import helpers

REAL = helpers.CAPTURES / "linux-6.1"
ON, OFF = REAL / "ip6tnl-transport-tso-on", REAL / "ip6tnl-transport-tso-off"
runner = CliRunner()


@pytest.fixture(scope="module")
def sides(captures: Path) -> dict[str, Summary]:
    return {
        "on": summarize(ON / "capture.pcap", [ON / "xfrm-state.txt"]),
        "off": summarize(OFF / "capture.pcap", [OFF / "xfrm-state.txt"]),
        "off-keyless": summarize(OFF / "capture.pcap", []),
    }


BOTH_KEYED = """\
before: ip6tnl-transport-tso-on/capture.pcap
after:  ip6tnl-transport-tso-off/capture.pcap

Findings that changed:
  esp_misplaced 94 -> 0
  cleartext_leak 94 -> 0
  iv_reuse 64 -> 0
  iv_derivation 94 -> 0

                              before         after     change
frames                           690           255       -435
ESP packets                      687           251       -436
verdict ok                       593           251       -342
verdict not_esp                    3             4         +1
verdict esp_misplaced             94             0        -94
finding esp_misplaced             94             0        -94
finding cleartext_leak            94             0        -94
finding iv_reuse                  64             0        -64
finding iv_derivation             94             0        -94
ESP Mbit/s                      7.45          3.94       -47%
25 rows 0 on both sides left out (--format json has every row).

What changed:
  Frames fell from 690 to 255.
  ESP packets fell from 687 to 251.
  Packets with verdict ok fell from 593 to 251.
  Packets with verdict not_esp rose from 3 to 4.
  Packets with verdict esp_misplaced fell from 94 to 0.
  Packets in esp_misplaced findings fell from 94 to 0.
  Packets in cleartext_leak findings fell from 94 to 0.
  Packets in iv_reuse findings fell from 64 to 0.
  Packets in iv_derivation findings fell from 94 to 0.
  ESP throughput fell from 7.45 to 3.94 Mbit/s (-47%).
"""

BEFORE_KEYED_ONLY = """\
before: ip6tnl-transport-tso-on/capture.pcap
after:  ip6tnl-transport-tso-off/capture.pcap

Keys for BEFORE only: AFTER had no key for 251 ESP packets in 2 SAs.
    Rows that depend on keys are marked not comparable: their change may
    be the keys, not the kernel. Give keys for both sides (--sa-before,
    --sa-after) to compare them.

Findings that changed:
  esp_misplaced 94 -> 0 (not comparable: keys differ)
  cleartext_leak 94 -> 0 (not comparable: keys differ)
  iv_reuse 64 -> 0 (not comparable: keys differ)
  iv_derivation 94 -> 0 (not comparable: keys differ)

                              before         after     change
frames                           690           255       -435
ESP packets                      687           251       -436
verdict ok                       593             0        n/c
verdict unknown_sa                 0           251        n/c
verdict not_esp                    3             4         +1
verdict esp_misplaced             94             0        n/c
finding esp_misplaced             94             0        n/c
finding cleartext_leak            94             0        n/c
finding iv_reuse                  64             0        n/c
finding iv_derivation             94             0        n/c
ESP Mbit/s                      7.45          3.94       -47%
24 rows 0 on both sides left out (--format json has every row).

What changed:
  Frames fell from 690 to 255.
  ESP packets fell from 687 to 251.
  Packets with verdict not_esp rose from 3 to 4.
  ESP throughput fell from 7.45 to 3.94 Mbit/s (-47%).

Not comparable (n/c, keys differ): verdict ok, verdict unknown_sa,
    verdict esp_misplaced, finding esp_misplaced, finding
    cleartext_leak, finding iv_reuse, finding iv_derivation.
"""


def test_both_sides_keyed_leads_with_the_findings_that_changed(sides: dict[str, Summary]) -> None:
    cmp = compare(sides["on"], sides["off"])
    assert (cmp.keys_before, cmp.keys_after, cmp.notes) == (KeyCover.ALL, KeyCover.ALL, ())
    assert render_comparison(cmp) == BOTH_KEYED
    assert all(len(line) <= 72 for line in BOTH_KEYED.splitlines())


def test_keys_for_one_side_only_is_said_first_and_key_rows_are_not_comparable(
    sides: dict[str, Summary],
) -> None:
    """The keyless side's ok 0 is no fall from 593: the keys, not the kernel."""
    cmp = compare(sides["on"], sides["off-keyless"])
    assert (cmp.keys_before, cmp.keys_after) == (KeyCover.ALL, KeyCover.NONE)
    text = render_comparison(cmp)
    assert text == BEFORE_KEYED_ONLY
    assert "fell from 593 to 0" not in text
    doc = json.loads(render_comparison_json(cmp))
    assert doc["keys"] == {"before": "every SA", "after": "no SA"}
    assert doc["notes"][0].startswith("Keys for BEFORE only: AFTER had no key for 251 ESP")
    rows = {r["label"]: r for r in doc["rows"]}
    assert len(rows) == 35 == 12 + 23  # json keeps every row, 0-0 ones too
    assert (rows["verdict ok"]["comparable"], rows["verdict not_esp"]["comparable"]) == (
        False,
        True,
    )
    assert rows["verdict auth_fail"]["before"] == rows["verdict auth_fail"]["after"] == "0"
    assert doc["changed_findings"][0] == {
        "kind": "esp_misplaced",
        "before": "94",
        "after": "0",
        "comparable": False,
    }
    # the other way round, and partly keyed
    back = compare(sides["off-keyless"], sides["on"])
    assert back.notes[0].startswith("Keys for AFTER only: BEFORE had no key for 251 ESP")


def test_markdown_leads_the_same_way_without_0_0_rows(sides: dict[str, Summary]) -> None:
    md = render_comparison_md(compare(sides["on"], sides["off-keyless"])).splitlines()
    assert md[:9] == [
        "before: ip6tnl\\-transport\\-tso\\-on/capture\\.pcap, after: "
        "ip6tnl\\-transport\\-tso\\-off/capture\\.pcap",
        "",
        "> **Keys for BEFORE only: AFTER had no key for 251 ESP packets in 2 SAs\\. Rows "
        "that depend on keys are marked not comparable: their change may be the keys, not "
        "the kernel\\. Give keys for both sides \\(\\-\\-sa\\-before, \\-\\-sa\\-after\\) to "
        "compare them\\.**",
        "",
        "**Findings that changed:**",
        "- esp\\_misplaced 94 \\-\\> 0 \\(not comparable: keys differ\\)",
        "- cleartext\\_leak 94 \\-\\> 0 \\(not comparable: keys differ\\)",
        "- iv\\_reuse 64 \\-\\> 0 \\(not comparable: keys differ\\)",
        "- iv\\_derivation 94 \\-\\> 0 \\(not comparable: keys differ\\)",
    ]
    table = [line for line in md if line.startswith("|")]
    assert table[2:5] == [
        "| frames | 690 | 255 | \\-435 |",  # escaped as the list items are
        "| ESP packets | 687 | 251 | \\-436 |",
        "| verdict ok | 593 | 0 | n/c |",
    ]
    assert len(table) == 2 + 11 and "| verdict auth_fail |" not in "\n".join(table)


def test_key_cover_of_each_side(sides: dict[str, Summary]) -> None:
    assert [key_cover(sides[k]) for k in ("on", "off", "off-keyless")] == [
        KeyCover.ALL,
        KeyCover.ALL,
        KeyCover.NONE,
    ]


def test_cli_compare_with_keys_for_one_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI, on fixture captures: the note is the first thing after the names."""
    paths = write_scenario(build_scenario("kernel-gso-v4", seed=1), tmp_path / "a", stem="a")
    far = tmp_path / ("b" * 80)  # a long name, on a line of its own wherever tmp_path is
    other = write_scenario(build_scenario("kernel-gso-v4", seed=1), far, stem="b")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(
        app,
        ["compare", "a/a.pcap", str(other["capture"]), "--sa-before", str(paths["keys"])],
    )
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[:5] == [  # the sides named as typed (cli.md); a long one on a line of its own
        "before: a/a.pcap",
        "after:",
        f"  {other['capture']}",
        "",
        "Keys for BEFORE only: AFTER had no key for 25 ESP packets in 2 SAs. Rows",
    ]
    assert lines[9:] == [
        "No finding changed.",
        "",
        "                              before         after     change",
        "frames                            25            25",
        "ESP packets                       25            25",
        "verdict ok                        13             0        n/c",
        "verdict unknown_sa                 0            13        n/c",
        "verdict esp_misplaced             12            12",
        "finding esp_misplaced             12            12",
        "finding cleartext_leak            12            12",
        "ESP Mbit/s                     40.06         40.06",
        "27 rows 0 on both sides left out (--format json has every row).",
        "",
        "Nothing comparable changed.",
        "",
        "Not comparable (n/c, keys differ): verdict ok, verdict unknown_sa.",
    ]


def test_cli_labels_output_folders_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two output folders of one capture file name are named as typed, not by that name."""
    paths = write_scenario(build_scenario("kernel-gso-v4", seed=1), tmp_path / "a", stem="c")
    for name in ("on", "nokey-on"):
        keys = ["--sa", str(paths["keys"])] if name == "on" else []
        out = ["--out", str(tmp_path / name), "--no-plots", "-q"]
        res = runner.invoke(app, ["analyze", str(paths["capture"]), *keys, *out])
        assert res.exit_code in (1, 4), res.stderr  # findings; nothing verified without keys
    monkeypatch.chdir(tmp_path)
    text = runner.invoke(app, ["compare", "on", "nokey-on/"])
    md = runner.invoke(app, ["compare", "on", "nokey-on", "--format", "markdown"])
    js = runner.invoke(app, ["compare", "on", "nokey-on", "--format", "json"])
    assert text.stdout.splitlines()[:2] == ["before: on", "after:  nokey-on"]
    assert md.stdout.splitlines()[0] == "before: on, after: nokey\\-on"
    doc = json.loads(js.stdout)
    assert (doc["before"], doc["after"]) == ("on", "nokey-on")


NAME = "x\n|`<b>`.pcap"  # a newline, a table bar, backticks and a tag


def test_names_are_escaped_in_every_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file name with a newline, `|`, backticks and `<`: one line, shown literally."""
    paths = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), tmp_path / "in")
    odd = tmp_path / NAME
    shutil.copy(paths["capture"], odd)
    out = tmp_path / "out"
    analyze_to_dir(paths["capture"], [paths["keys"]], out, plots=False)
    monkeypatch.chdir(tmp_path)  # the sides are named as typed: NAME and "out"
    args = ["compare", odd.name, out.name, "--sa", str(paths["keys"])]
    text = runner.invoke(app, args).stdout
    assert text.splitlines()[:2] == ["before: x\\n|`<b>`.pcap", "after:  out"]
    md = runner.invoke(app, [*args, "--format", "markdown"]).stdout
    assert md.splitlines()[0] == "before: x\\\\n\\|\\`\\<b\\>\\`\\.pcap, after: out"
    js = runner.invoke(app, [*args, "--format", "json"]).stdout
    assert json.loads(js)["before"] == NAME
    assert js.splitlines()[1] == '  "before": "x\\n|`<b>`.pcap",'
    for output in (text, md, js):
        assert "\nNo finding changed." in output or '"changed_findings": []' in output


@pytest.mark.parametrize(
    ("name", "text", "md"),
    [
        ("a.pcap", "a.pcap", "a\\.pcap"),
        ("a\tb\x1b.pcap", "a\\tb\\x1b.pcap", "a\\\\tb\\\\x1b\\.pcap"),
        ("caf\u00e9\\.pcap", "caf\\xe9\\\\.pcap", "caf\\\\xe9\\\\\\\\\\.pcap"),
        ("a\udcffb", "a\\udcffb", "a\\\\udcffb"),  # an undecodable byte (surrogateescape)
        ("*_[x](y)#!", "*_[x](y)#!", "\\*\\_\\[x\\]\\(y\\)\\#\\!"),
    ],
)
def test_escape_name_and_md_escape(name: str, text: str, md: str) -> None:
    assert escape_name(name) == text
    assert md_escape(name) == md
