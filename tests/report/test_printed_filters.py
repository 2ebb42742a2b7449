"""Every filter the outputs print selects exactly its frames in Wireshark and tcpdump
(issue 34 s2).

The reports print two kinds of filter. After a finding's first frames, a
Wireshark display filter selecting all of them (``4 5 6 8 9 ... and 7 more
(Wireshark: frame.number in {4..6,8..10,12..14,16..18})``): report.txt and
report.md per finding kind, report.html per finding. Under the misplaced ESP
headers, the tcpdump filter selecting the misplaced packets. Each filter
printed in each of the three reports is run here as a user runs it, ``tshark
-r CAPTURE -Y FILTER`` and ``tcpdump -r CAPTURE FILTER``, on the synthetic
fixtures and real captures whose reports print one, and must select exactly
the frames its row names: those of its kind's findings in findings.csv (of
its finding in report.html), the frames it shows first and as many more as it
says; for tcpdump, the ``esp_misplaced`` rows of packets.csv. Wireshark 4.0
and later refuse the space-separated sets printed before (``"8" was
unexpected in this context``).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from espforensics.analysis import analyze_to_dir
from espforensics.bounded.frames import Frames, display_filter
from espforensics.report import filters as tcpdump
from espforensics.synth import build_scenario, write_capture, write_scenario
from tests.support import helpers

# "4 5 6 8 9 ... and 7 more (Wireshark: frame.number in {...})", whitespace collapsed.
SHOWN = re.compile(r"((?:\d+ )+)\.\.\. and (\d+) more \(Wireshark: (frame\.number in \{[^}]*\})\)")
GROUP = re.compile(r"^  (?:critical|high|medium|low|info) (\w+):", re.MULTILINE)
HTML_TABLE = re.compile(r'<table class="sortable" id="findings-(\w+)">(.*?)</table>', re.DOTALL)


class Printed(NamedTuple):
    """One display filter as a report prints it, with the row it stands in."""

    where: str  # "report.txt: seq_reorder"
    kind: str
    shown: tuple[int, ...]  # the frames listed before it
    more: int  # "... and N more"
    filter: str


def _printed(kind: str, where: str, text: str) -> Iterator[Printed]:
    for m in SHOWN.finditer(" ".join(text.split())):
        shown = tuple(int(n) for n in m.group(1).split())
        yield Printed(f"{where}: {kind}", kind, shown, int(m.group(2)), m.group(3))


def printed_display_filters(out: Path) -> list[Printed]:
    """Every Wireshark filter of report.txt, report.md and report.html, with its kind."""
    found: list[Printed] = []
    text = (out / "report.txt").read_text()
    findings = text[text.index("\nFindings:") : text.index("\nCoverage")]
    blocks = GROUP.split(findings)[1:]  # kind, its lines, kind, its lines, ...
    for kind, block in zip(blocks[::2], blocks[1::2], strict=True):
        found += _printed(kind, "report.txt", block)
    for line in (out / "report.md").read_text().splitlines():
        cells = line.split("|")
        if line.startswith("| ") and len(cells) > 3:
            found += _printed(cells[2].strip(), "report.md", line)
    for kind, table in HTML_TABLE.findall((out / "report.html").read_text()):
        for row in table.split("<tr>"):
            found += _printed(kind, "report.html", row)
    return found


def finding_frames(out: Path) -> list[tuple[str, frozenset[int]]]:
    """(kind, frames) of every row of findings.csv, its ``20-24 30`` runs read here."""
    rows = []
    with (out / "findings.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            frames: set[int] = set()
            for run in row["frames"].split():
                first, _, last = run.partition("-")
                frames.update(range(int(first), int(last or first) + 1))
            rows.append((row["kind"], frozenset(frames)))
    return rows


def printed_tcpdump_filters(out: Path) -> list[str]:
    """The tcpdump filter as report.txt, report.md and report.html print it."""
    txt = (out / "report.txt").read_text()
    if tcpdump.HEADING not in txt:
        return []
    md = (out / "report.md").read_text().splitlines()
    html = (out / "report.html").read_text()
    after_heading = html[html.index(tcpdump.HEADING) :]
    return [
        helpers.printed_filter(txt),
        md[md.index(tcpdump.HEADING) + 2].strip(),
        after_heading[after_heading.index("<pre>") + 5 : after_heading.index("</pre>")],
    ]


def check_every_filter(capture: Path, out: Path, tmp: Path) -> Counter[str]:
    """Run every printed filter; each selects exactly its row's frames. Returns how many
    filters each report printed (a case that prints none proves nothing)."""
    rows = finding_frames(out)
    of_kind: dict[str, set[int]] = {}
    for kind, listed in rows:
        of_kind.setdefault(kind, set()).update(listed)
    counts: Counter[str] = Counter()
    selected: dict[str, list[int]] = {}  # one tshark run per distinct filter
    for p in printed_display_filters(out):
        if p.filter not in selected:
            selected[p.filter] = helpers.tshark_frames(capture, p.filter)
        frames = selected[p.filter]
        assert frames[: len(p.shown)] == list(p.shown), p
        assert len(frames) == len(p.shown) + p.more, p
        if p.where.startswith("report.html"):  # a row per finding
            assert frozenset(frames) in {f for kind, f in rows if kind == p.kind}, p
        else:  # a row per kind
            assert set(frames) == of_kind[p.kind], p
        counts[p.where.split(":")[0]] += 1
    bpfs = printed_tcpdump_filters(out)
    if bpfs:
        assert len(set(bpfs)) == 1, bpfs  # all three print the same
        misplaced = [
            int(r["frame"]) for r in helpers.packet_rows(out) if r["verdict"] == "esp_misplaced"
        ]
        assert misplaced and set(misplaced) == of_kind["esp_misplaced"]
        assert helpers.tcpdump_frames(capture, bpfs[0], tmp) == misplaced
        counts["tcpdump"] += 1
    return counts


# Fixtures whose reports print filters, and how many each report prints: the
# Wireshark filters of report.txt, report.md and report.html, and tcpdump's.
SYNTHETIC = [
    ("kernel-gso-v4", {"report.txt": 2, "report.md": 2, "report.html": 2, "tcpdump": 1}),
    ("kernel-gso-v6", {"report.txt": 2, "report.md": 2, "report.html": 2, "tcpdump": 1}),
    ("iv-seq-minus-1", {"report.txt": 1, "report.md": 1}),
    ("iv-policies", {"report.txt": 1, "report.md": 1, "report.html": 1}),
    ("encauth-faults", {"report.txt": 1, "report.md": 1, "report.html": 1}),
    ("shared-key", {"report.txt": 1, "report.md": 1}),
]


@pytest.mark.parametrize(("name", "printed"), SYNTHETIC, ids=[n for n, _ in SYNTHETIC])
def test_every_printed_filter_of_a_fixture(
    tmp_path: Path, name: str, printed: dict[str, int]
) -> None:
    paths = write_scenario(build_scenario(name, seed=1), tmp_path / "in")
    out = tmp_path / "out"
    analyze_to_dir(paths["capture"], [paths["keys"]], out, plots=False)
    assert check_every_filter(paths["capture"], out, tmp_path) == Counter(printed)


def _real_keys(capture: Path) -> Path:
    """The sender's ``ip xfrm state`` for its captures, the receiver's for receiver.pcap."""
    theirs = capture.parent / "xfrm-state-b.txt"
    if capture.name == "receiver.pcap" and theirs.is_file():
        return theirs
    return capture.parent / "xfrm-state.txt"


def _real_params() -> list[object]:
    paths = sorted(helpers.CAPTURES.glob("*/*/*.pcap"))
    if not paths:
        return [
            pytest.param(None, id="no-captures", marks=pytest.mark.skip(reason=helpers.NO_CAPTURES))
        ]
    return [pytest.param(p, id=str(p.relative_to(helpers.CAPTURES))) for p in paths]


# The real captures whose reports print filters (as for SYNTHETIC); any other capture's
# reports are checked all the same, whatever they print.
REAL_PRINTED = {
    "linux-6.1/tcp-transport-v4/capture.pcap": {"report.txt": 1, "report.md": 1, "report.html": 1},
    "linux-7.3.4/netem-duplicate-v4/capture.pcap": {"report.txt": 1, "report.md": 1},
    "linux-6.1/ip6tnl-transport-tso-on/capture.pcap": {"tcpdump": 1},
}


@helpers.needs_captures
@pytest.mark.parametrize("capture", _real_params())
def test_every_printed_filter_of_a_real_capture(tmp_path: Path, capture: Path) -> None:
    out = tmp_path / "out"
    analyze_to_dir(capture, [_real_keys(capture)], out, plots=False)
    counts = check_every_filter(capture, out, tmp_path)
    name = str(capture.relative_to(helpers.CAPTURES))
    if name in REAL_PRINTED:
        assert counts == Counter(REAL_PRINTED[name])


# -- display_filter itself, over thousands of frames ----------------------------------------

MANY = 6000  # frames of the capture below


@pytest.fixture(scope="module")
def many_frames(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A capture of MANY frames: one ESP frame of a fixture again and again, 1 us apart."""
    one = build_scenario("kernel-gso-v4", seed=1).frames[0]
    path = tmp_path_factory.mktemp("many") / "many.pcap"
    write_capture(
        path, (one._replace(number=n, ts_ns=one.ts_ns + 1000 * n) for n in range(1, MANY + 1))
    )
    return path


def _sets() -> list[tuple[str, Frames]]:
    gaps = Frames.of(n for n in range(1, MANY + 1) if n % 1000 != 0)  # 6 long runs
    singles = Frames.of(range(1, MANY + 1, 3))  # 2000 frames, no two adjacent
    mixed = Frames.of(n for n in range(1, MANY + 1) if n % 7 in (0, 1, 2) or n % 11 == 0)
    return [("gaps", gaps), ("singles", singles), ("mixed", mixed),
            ("one", Frames.of([MANY])), ("none", Frames())]  # fmt: skip


@pytest.mark.parametrize("tshark", ["tshark", "tshark44"])  # 4.0 (Debian 12), 4.4 if on PATH
@pytest.mark.parametrize(("name", "frames"), _sets(), ids=[n for n, _ in _sets()])
def test_display_filter_selects_exactly_its_frames(
    many_frames: Path, name: str, frames: Frames, tshark: str
) -> None:
    """Any set, thousands of elements long, is one filter tshark takes and that selects
    exactly its frames: comma-separated elements, ``a..b`` runs."""
    text = display_filter(frames)
    assert len(frames.runs) < 2 or "," in text
    assert helpers.tshark_frames(many_frames, text, tshark) == list(frames)


def test_ci_installs_tshark_and_tcpdump_and_runs_the_readme_command() -> None:
    """CI runs these checks instead of skipping them: .ci/run installs both tools without a
    prompt (wireshark-common's debconf question answered first) and ends with the README's
    test command, verbatim."""
    ci = (helpers.ROOT / ".ci" / "run").read_text().splitlines()
    readme = (helpers.ROOT / "README.md").read_text().splitlines()
    command = readme[readme.index("## Run the tests") + 2].strip()
    assert command.startswith("python3 -m venv .venv") and ci[-1] == command
    install = next(line for line in ci if "apt-get install" in line)
    assert install.lstrip().startswith("DEBIAN_FRONTEND=noninteractive apt-get install -y")
    assert {"missing+=(tcpdump)", "missing+=(tshark)"} <= {w for line in ci for w in line.split()}
    assert any("wireshark-common/install-setuid boolean false" in line for line in ci)
