"""Text outputs never break a path or a number across lines (issue 19 s3):
``.../tso-on/captu`` + ``re.pcap`` broke grep and copy-paste."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from espforensics.cli import app
from espforensics.render.text import wrap
from espforensics.synth import build_scenario, write_scenario

runner = CliRunner()


def test_wrap_keeps_long_words_and_listed_paths_whole() -> None:
    path = "/srv/archive/linux-6.1/ip6tnl-transport-tso-on/a long run name/capture.pcap"
    assert len(path) > 72
    assert wrap(f"{path}: worst critical", "  ", whole=(path,)) == [
        f"  {path}:",
        "      worst critical",
    ]
    number = "1" * 80
    assert wrap(f"count {number} packets", "  ") == ["  count", f"      {number}", "      packets"]
    # Short words still wrap at 72 columns.
    lines = wrap("word " * 30, "  ")
    assert max(map(len, lines)) <= 72 and len(lines) == 3


def _deep(tmp_path: Path) -> Path:
    """A capture whose path is longer than a line, with spaces in it."""
    folder = tmp_path / "linux-6.1" / "ip6tnl-transport-tso-on with gso" / ("run-" + "x" * 40)
    paths = write_scenario(build_scenario("ipv4-transport-tcp", seed=1), folder, stem="capture")
    assert paths["keys"] == folder / "capture.keys.yaml"  # a sidecar, which batch takes
    return paths["capture"]


def test_summary_prints_a_long_capture_path_on_one_line(tmp_path: Path) -> None:
    cap = _deep(tmp_path)
    assert len(str(cap)) > 72
    res = runner.invoke(
        app, ["analyze", str(cap), "--sa", str(cap.with_suffix(".keys.yaml")), "--no-plots"]
    )
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[0] == str(cap)
    assert f"  outputs: {cap}.espforensics/" in res.stdout.splitlines()


def test_batch_report_prints_a_long_capture_path_on_one_line(tmp_path: Path) -> None:
    cap = _deep(tmp_path)
    out = tmp_path / "batch"
    res = runner.invoke(app, ["batch", str(cap.parent), "--out", str(out), "--no-plots", "-j", "1"])
    assert res.exit_code == 0, res.stderr
    text = (out / "report.txt").read_text()
    assert res.stdout == text
    lines = text.splitlines()
    assert lines[lines.index("Clean:") + 1] == f"  {cap}:"
    assert lines[lines.index("Clean:") + 2] == "      98 frames, 96 ESP packets"
