"""cli/coercion.py: every parameter's values come out as typer's own coercion makes them.

typer coerces with a pydantic ``TypeAdapter`` per parameter; cli/coercion.py
does the plain cases without it and hands the rest to typer. For every
parameter of every command (and the group's), each value of a table of the
plain and the odd (signs, spaces, underscores, fractions, out of range, not a
choice, NUL bytes, undecodable bytes, files and folders) is coerced both ways:
the same value of the same type, or the same error message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import typer
from typer._click import Context
from typer._click.exceptions import ClickException
from typer._coercion import build_runtime_param
from typer.core import TyperCommand, TyperGroup, _TyperParameter

from espforensics.cli import app
from espforensics.cli.coercion import lightened


def _commands() -> list[TyperCommand | TyperGroup]:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    commands = [c for c in group.commands.values() if isinstance(c, TyperCommand)]
    assert len(commands) == len(group.commands)
    return [group, *commands]


def _parameters() -> list[tuple[str, _TyperParameter, Context]]:
    found = []
    for command in _commands():
        ctx = Context(command, info_name=command.name)
        for param in command.get_params(ctx):
            assert isinstance(param, _TyperParameter)
            found.append((f"{command.name} {param.name}", param, ctx))
    return found


PARAMETERS = _parameters()
INTS: list[Any] = ["1", "0", "2", "-1", "+3", "007", " 2", "2 ", "1_0", "1.0", "1.5", "1e3"]
INTS += ["abc", ""]
INTS += ["65535", "65536", "4294967296", "99999999999999999999", "١٢", 1, 0, 70000, True, 2.0]
STRS: list[Any] = ["", "x", " a ", "tcp://h:8786", "0x1001", "caf\udce9", "a\x00b", "-", b"x", 5]


def _paths(tmp: Path) -> list[Any]:
    (tmp / "file").write_bytes(b"")
    (tmp / "dir").mkdir()
    os.symlink(tmp / "nowhere", tmp / "dangling")
    names = ["file", "dir", "dangling", "absent", "a//b/", "./file"]
    return [*(str(tmp / n) for n in names), "", "-", "~", "a\x00b", "caf\udce9", tmp / "file", 3]


def _choices(annotation: type[Enum]) -> list[Any]:
    values = [m.value for m in annotation]
    return [*values, *(v.upper() for v in values), *annotation, "bogus", "", " " + values[0], 1]


def _values(leaf: Any, tmp: Path) -> list[Any]:
    if isinstance(leaf, type) and issubclass(leaf, Enum):
        return _choices(leaf)
    table: dict[Any, list[Any]] = {
        int: INTS,
        str: STRS,
        Path: _paths(tmp),
        bool: [True, False, "true", "0", "", None, 1],
    }
    return table[leaf]


def _outcome(run: Any) -> tuple[str, Any, Any]:
    try:
        value = run()
    except ClickException as exc:
        return ("error", type(exc), exc.format_message())
    return ("value", type(value), [(type(v), v) for v in value] if type(value) is list else value)


@pytest.mark.parametrize(("name", "param", "ctx"), PARAMETERS, ids=[p[0] for p in PARAMETERS])
def test_each_value_is_coerced_as_typer_coerces_it(
    name: str, param: _TyperParameter, ctx: Context, tmp_path: Path
) -> None:
    annotation: Any = param.type_descriptor.annotation
    is_list = get_origin(annotation) is list
    leaves = _values(get_args(annotation)[0] if is_list else annotation, tmp_path)
    values: list[Any] = [None]
    if is_list:
        values += [(), *((v,) for v in leaves), tuple(leaves[:2]), list(leaves[:3]), leaves[0]]
    else:
        values += leaves
    typers = build_runtime_param(param.type_descriptor)  # pydantic's, as typer builds it
    ours = lightened([param])[0].get_runtime_param()
    assert type(ours).__name__ == "_PlainFirst"  # every parameter has its plain coercion
    for value in values:
        expected = _outcome(lambda v=value: typers.coerce(v, param=param, ctx=ctx))
        got = _outcome(lambda v=value: ours.coerce(v, param=param, ctx=ctx))
        assert got == expected, (name, value)


def test_every_command_is_in_the_table() -> None:
    names = {name.split()[0] for name, _, _ in PARAMETERS}
    assert {"analyze", "batch", "compare", "completion", "reconcile", "report"} <= names
    kinds = {str(p.type_descriptor.annotation) for _, p, _ in PARAMETERS}
    assert {"<class 'int'>", "list[int]", "list[str]", "<class 'pathlib.Path'>"} <= kinds


WITHOUT_HOOKS = """
import sys
sys.modules["espforensics.cli.coercion"] = None  # as when typer has no typer._coercion
sys.argv = ["espforensics", *ARGS]
from espforensics.__main__ import main
main()
"""


def test_a_typer_without_the_hooks_keeps_its_own_coercion(tmp_path: Path) -> None:
    """Where cli/coercion.py cannot be imported (a typer without ``typer._coercion``, 0.26
    to 0.28) the commands run with typer's own coercion (cli/options.py ``lightened``): the
    example is analyzed, a bad value is typer's one-line error."""
    root = Path(__file__).resolve().parents[2]
    example = [str(root / "fixtures" / "example.pcap"), "--sa"]
    example.append(str(root / "fixtures" / "example.keys.yaml"))
    runs = {
        "ok": ["analyze", *example, "--no-plots", "--quiet", "--out", str(tmp_path / "o")],
        "bad": ["analyze", *example, "--jobs", "zero"],
    }
    done = {
        name: subprocess.run(
            [sys.executable, "-c", WITHOUT_HOOKS.replace("ARGS", repr(args))],
            capture_output=True,
            text=True,
            check=False,
        )
        for name, args in runs.items()
    }
    assert done["ok"].returncode == 0, done["ok"].stderr
    assert (tmp_path / "o" / "packets.csv").is_file()
    assert done["bad"].returncode == 2
    assert done["bad"].stderr.count("\n") == 1
    assert "Invalid value for '--jobs'" in done["bad"].stderr
