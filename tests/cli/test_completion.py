"""Shell completion and help pages complete enough to be the manual page.

``espforensics completion SHELL`` prints typer's script for bash, zsh or
fish; a run with ``_ESPFORENSICS_COMPLETE`` set (as the script makes it)
prints the completions of the line typed: commands, options, and the
choices of an option. Each command's ``--help`` gives every option with
its meaning and ends with the exit codes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer.main
from typer.core import TyperGroup
from typer.testing import CliRunner

from espforensics.cli import app
from tests.support.helpers import ROOT

runner = CliRunner()
COMMANDS = ("analyze", "report", "compare", "batch", "completion")
# The console script's name: completions are asked of `espforensics`, the command on PATH.
AS_INSTALLED = "import sys; sys.argv[0] = 'espforensics'; from espforensics.cli import main; main()"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_script_of_the_shell(shell: str) -> None:
    res = runner.invoke(app, ["completion", shell])
    assert (res.exit_code, res.stderr) == (0, "")
    assert f"_ESPFORENSICS_COMPLETE=complete_{shell}" in res.stdout
    assert "espforensics" in res.stdout.splitlines()[-1]  # the command it completes


def test_completion_of_another_shell_is_a_usage_error() -> None:
    res = runner.invoke(app, ["completion", "tcsh"])
    assert res.exit_code == 2
    assert res.stderr.startswith("espforensics: error: completion: Invalid value for 'SHELL'")


def _complete(env: dict[str, str]) -> list[str]:
    """What a run asked for completions prints, one line each."""
    run = subprocess.run(
        [sys.executable, "-c", AS_INSTALLED],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stderr == ""
    return run.stdout.splitlines()


def test_bash_completes_a_command_and_an_option() -> None:
    def bash(line: str) -> list[str]:
        words = line.split(" ")
        env = {"COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
        return _complete({**env, "_ESPFORENSICS_COMPLETE": "complete_bash"})

    assert bash("espforensics an") == ["analyze"]
    assert bash("espforensics co") == ["compare", "completion"]
    assert bash("espforensics analyze --for") == ["--force", "--format"]


def test_zsh_completes_the_choices_of_an_option() -> None:
    lines = _complete(
        {
            "_ESPFORENSICS_COMPLETE": "complete_zsh",
            "_TYPER_COMPLETE_ARGS": "espforensics report out --fail-on ",
        }
    )
    assert "\n".join(lines) == (
        '_arguments \'*: :(("critical"\n"high"\n"medium"\n"low"\n"info"\n"never"))\''
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_help_gives_every_option_its_meaning_and_the_exit_codes(command: str) -> None:
    res = runner.invoke(app, [command, "--help"], prog_name="espforensics", terminal_width=100)
    assert res.exit_code == 0
    assert "\n  Exit codes" in res.stdout
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    for param in group.commands[command].params:
        assert getattr(param, "help", None), f"{command} {param.name} has no help"
