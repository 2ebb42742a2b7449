"""Every command the docs show is run, so that docs/*.md cannot drift from the program.

Taken from the code blocks of docs/*.md (indented or fenced, not Python):

- an example line, ``$ COMMAND`` or a line that starts with ``espforensics``
  or ``python -m espforensics``, is run with bash in a fresh folder holding
  the fixtures the docs name (``k4``: ``python -m espforensics.synth
  kernel-gso-v4 k4``, ``k6``: kernel-gso-v6; for the commands that read
  ``k4/annotated.pcapng`` or ``k4/decrypted.pcap`` (``-r FILE``), after the analyze of
  docs/cli.md that writes them). It must exit 0, or 1 where the docs say
  a finding makes it so; each output line the docs show under it must
  start an output line (a line cut with ``...`` up to the cut);
  ``$ echo $?`` checks the exit code of the command before it;
- a synopsis (``[...]`` or ``PATH...``) is not run: its command and every
  option in it must be in that command's ``--help``;
- a command of another tool (``tshark``) is run when that tool is
  installed, and skipped with the reason otherwise; the outputs shown
  were made with tshark 4.0.

To stay fast, ``synth bench N`` runs with 1,000 frames instead of N (the
command is the same otherwise); a file under ``/tmp/`` goes to the test's
own folder. ``python -m fuzz`` lines (docs/fuzzing.md)
are long runs, not examples: they are not taken.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from espforensics.cli import app
from tests.support import helpers

DOCS = Path(__file__).resolve().parents[2] / "docs"
OURS = re.compile(r"^(espforensics\s|python3? -m espforensics[.\s])")
TOOLS = {"tshark": "tshark 4.0 made the outputs shown"}  # other tools a docs command needs
# Folders of real captures the docs name by a short word (docs/cli.md's compare example).
_LINUX61 = helpers.CAPTURES / "linux-6.1"
REAL_FOLDERS = {
    "wire": helpers.CAPTURES / "linux-6.1-wire" / "reorder-window32",  # reconcile's example
    "on": _LINUX61 / "ip6tnl-transport-tso-on",
    "off": _LINUX61 / "ip6tnl-transport-tso-off",
}
ANALYZED = ("k4/annotated.pcapng", "k4/decrypted.pcap")  # written by docs/cli.md's example
SETUP = (
    "python -m espforensics.synth kernel-gso-v4 k4",
    "python -m espforensics.synth kernel-gso-v6 k6",
)
ANALYZE_K4 = (
    "espforensics analyze k4/capture.pcap --sa k4/keys.yaml --no-plots"
    " --annotate k4/annotated.pcapng --decrypted k4/decrypted.pcap -q"
)


@dataclass(frozen=True, slots=True)
class DocCommand:
    where: str  # docs/FILE.md:LINE
    command: str
    output: tuple[str, ...]  # lines shown under a `$` command
    synopsis: bool


def _blocks(text: str) -> list[list[tuple[int, str]]]:
    """Code blocks as (line number, text) lists: 4-space indented, or fenced and not Python."""
    blocks: list[list[tuple[int, str]]] = []
    fence: str | None = None
    current: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if fence is None:
                fence = line[3:].strip() or "sh"
            else:
                if fence not in ("python", "yaml", "json", "text"):
                    blocks.append(current)
                fence, current = None, []
            continue
        if fence is not None:
            current.append((number, line))
        elif line.startswith("    "):
            current.append((number, line[4:]))
        elif line.strip() == "" and current:
            current.append((number, ""))
        elif current:
            blocks.append(current)
            current = []
    if current and fence is None:
        blocks.append(current)
    return blocks


def _commands(path: Path) -> list[DocCommand]:
    found: list[DocCommand] = []
    for block in _blocks(path.read_text()):
        i = 0
        while i < len(block):
            number, line = block[i]
            prompt = line.startswith("$ ")
            command = line[2:] if prompt else line
            i += 1
            if not prompt and not OURS.match(command):
                continue
            while i < len(block) and (
                command.endswith("\\") or (not prompt and block[i][1].lstrip().startswith("["))
            ):  # a continued line, or a synopsis's next line of [options]
                command = command.removesuffix("\\") + " " + block[i][1].strip()
                i += 1
            output = []
            while prompt and i < len(block) and not block[i][1].startswith("$ "):
                if block[i][1].strip():
                    output.append(block[i][1])
                i += 1
            synopsis = "[" in command or re.search(r"\b[A-Z]+\.\.\.", command) is not None
            where = f"docs/{path.name}:{number}"
            found.append(DocCommand(where, command.strip(), tuple(output), synopsis))
    return found


ALL = [c for doc in sorted(DOCS.glob("*.md")) for c in _commands(doc)]
EXAMPLES = [c for c in ALL if not c.synopsis]
SYNOPSES = [c for c in ALL if c.synopsis]


def test_the_docs_show_commands_to_check() -> None:
    """The parser finds the examples this test exists for (it cannot pass on nothing)."""
    shown = {c.command.split()[0] for c in EXAMPLES}
    assert {"espforensics", "python", "tshark", "echo"} <= shown
    assert len(EXAMPLES) >= 10 and len(SYNOPSES) >= 4


@pytest.mark.parametrize("doc", SYNOPSES, ids=[c.where for c in SYNOPSES])
def test_synopsis_options_exist(doc: DocCommand) -> None:
    words = doc.command.split()
    assert words[0] == "espforensics", doc
    res = CliRunner().invoke(app, [words[1], "--help"])
    assert res.exit_code == 0, doc
    for option in re.findall(r"--[a-z][a-z-]*", doc.command):
        assert option in res.stdout, f"{doc.where}: {option} is not an option of {words[1]}"


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``fresh``: k4 and k6 as the docs make them; ``analyzed``: k4 after docs/cli.md's analyze."""
    fresh = tmp_path_factory.mktemp("fresh")
    for command in SETUP:
        _run(command, fresh, check=True)
    analyzed = tmp_path_factory.mktemp("analyzed")
    shutil.copytree(fresh, analyzed, dirs_exist_ok=True)
    assert _run(ANALYZE_K4, analyzed).returncode in (0, 1)
    return {"fresh": fresh, "analyzed": analyzed}


def _run(command: str, cwd: Path, check: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)  # the venv's espforensics and python first on PATH
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=check,
        timeout=600,  # a bound for a broken command, not a timing assumption
    )


def _shown_lines_match(shown: tuple[str, ...], actual: str) -> None:
    lines = [line.rstrip() for line in actual.splitlines()]
    for want in shown:
        head = want.split("...")[0].rstrip()
        if not head.strip():
            continue
        norm = " ".join(head.split())
        assert any(" ".join(line.split()).startswith(norm) for line in lines), (
            f"{want!r} not in the output:\n{actual}"
        )


def _real_folders(command: str) -> list[str]:
    """The docs' short names of real capture folders (``on/``, ``off/``) ``command`` reads."""
    return [name for name in REAL_FOLDERS if re.search(rf"(^|\s){name}/", command)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(
            c, id=c.where, marks=[helpers.needs_captures] if _real_folders(c.command) else []
        )
        for c in EXAMPLES
    ],
)
def test_documented_command_runs(
    doc: DocCommand, templates: dict[str, Path], tmp_path: Path
) -> None:
    tool = doc.command.split()[0]
    if tool in TOOLS and shutil.which(tool) is None:
        pytest.skip(f"{doc.where} needs {tool} ({TOOLS[tool]}), which is not installed")
    if tool == "echo":
        return  # checked with the command before it
    reads = any(f"-r {name}" in doc.command for name in ANALYZED)  # tshark -r FILE
    source = "analyzed" if reads else "fresh"
    shutil.copytree(templates[source], tmp_path, dirs_exist_ok=True)
    command = re.sub(r"(synth bench )\d+", r"\g<1>1000", doc.command)
    command = command.replace(" /tmp/", " tmp/")  # into this test's folder, not the machine's
    (tmp_path / "tmp").mkdir(exist_ok=True)
    for name in _real_folders(command):  # the docs' `on` and `off` (docs/cli.md)
        (tmp_path / name).symlink_to(REAL_FOLDERS[name])
    result = _run(command, tmp_path)
    expected = _expected_exit(doc)
    assert result.returncode in expected, f"{doc.where}: {result.stderr}"
    assert "Traceback (most recent call last)" not in result.stderr, doc.where  # exit 1 too
    _shown_lines_match(doc.output, result.stdout)


def _expected_exit(doc: DocCommand) -> tuple[int, ...]:
    """The exit code a following ``$ echo $?`` shows, else 0 or 1 (1: a finding at --fail-on)."""
    index = ALL.index(doc)
    after = ALL[index + 1] if index + 1 < len(ALL) else None
    if after is not None and after.command == "echo $?" and after.where[:-4] == doc.where[:-4]:
        return (int(after.output[0]),)
    return (0, 1)
