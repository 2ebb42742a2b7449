"""typer's coercion of the options' values, without pydantic where the answer is plain.

In: a command's parameters (typer's ``TyperOption``/``TyperArgument``). Out:
``lightened`` gives each a ``RuntimeParam`` that coerces the values a command line usually
holds (a str, a path, an int in its range, a choice of an Enum, a bool,
lists of these, a value not given) exactly as typer does, and hands any
other value, valid or not, to typer's own coercion, built then. Raises what
typer's coercion raises (``BadParameter``), from typer's own code.

Why: typer (0.2x) builds a pydantic ``TypeAdapter`` for every parameter of
the command it runs, given or not, and importing pydantic and building them
took about 0.1 s of CPU of a 0.5 s run of the bundled example
(docs/performance.md, start-up). typer's pydantic coercion stays the
reference: a value this module is not sure of goes to it, so every error
message is typer's, and tests/cli/test_coercion.py checks that both give the
same value for every kind handled here. It hooks into typer's own classes
(``typer._coercion.RuntimeParam``, a parameter's ``_runtime_param``, as
typer 0.29 names them; cli/options.py already reads ``typer._click``): a
typer without that module keeps its own coercion (``cli.options.lightened``), and
one that renames the rest fails that test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_origin

from typer._click.exceptions import ClickException
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
from typer._param_types import coerce_cli_choice, coerce_cli_path, routes_to_path
from typer.core import _TyperParameter

if TYPE_CHECKING:
    from typer._click import Context


class _Unsure(Exception):
    """The value is not one this module coerces: typer's own coercion decides."""


# A plain decimal int: what pydantic's lax int parsing turns into int(value) (no sign,
# space, underscore, exponent or fraction: those go to pydantic); 18 digits fit in 63 bits.
_DECIMAL = re.compile(r"[0-9]{1,18}")
_Fast = Callable[[Any, "_TyperParameter", "Context"], Any]
_P = TypeVar("_P")


def _as_str(value: Any, param: _TyperParameter, ctx: Context) -> Any:
    if type(value) is str:
        return value
    raise _Unsure


def _as_bool(value: Any, param: _TyperParameter, ctx: Context) -> Any:
    if type(value) is bool:
        return value
    raise _Unsure


def _as_int(descriptor: TypeDescriptor) -> _Fast:
    low, high = descriptor.parameter_info.min, descriptor.parameter_info.max

    def coerce(value: Any, param: _TyperParameter, ctx: Context) -> Any:
        if type(value) is str and _DECIMAL.fullmatch(value):
            value = int(value)
        if type(value) is not int:
            raise _Unsure
        if (low is not None and value < low) or (high is not None and value > high):
            raise _Unsure  # out of range: typer's message
        return value

    return coerce


def _as_choice(choices: tuple[Any, ...], case_sensitive: bool) -> _Fast:
    def coerce(value: Any, param: _TyperParameter, ctx: Context) -> Any:
        try:
            return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
        except ValueError:
            raise _Unsure from None  # not a choice: typer's message

    return coerce


def _as_path(descriptor: TypeDescriptor) -> _Fast:
    info = descriptor.parameter_info

    def coerce(value: Any, param: _TyperParameter, ctx: Context) -> Any:
        if type(value) is str:
            path = Path(value)  # what pydantic makes of it
        elif isinstance(value, Path):  # a default: typer checks it as it is
            path = value
        else:
            raise _Unsure
        try:  # typer's own checks of the path
            return coerce_cli_path(path, info, path_type=Path, param=param, ctx=ctx)
        except (ClickException, ValueError, OSError):  # typer's message, from the str
            raise _Unsure from None

    return coerce


def _leaf(annotation: Any, descriptor: TypeDescriptor) -> _Fast | None:
    """The plain coercion of one value of ``annotation``, None when there is none."""
    info = descriptor.parameter_info
    if info.parser is not None or info.clamp:
        return None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _as_choice(tuple(annotation), info.case_sensitive)
    if annotation is bool:
        return _as_bool
    if annotation is int:
        return _as_int(descriptor)
    if annotation is str:
        return _as_str
    if annotation is Path and info.path_type is None and not info.resolve_path:
        return _as_path(descriptor) if routes_to_path(annotation, info) else None
    return None


def _plain(descriptor: TypeDescriptor) -> _Fast | None:
    if descriptor.file_annotation is not None:
        return None
    annotation: Any = descriptor.annotation
    if get_origin(annotation) is not list:
        return _leaf(annotation, descriptor)
    (item,) = get_args(annotation)
    each = _leaf(item, descriptor)
    if each is None:
        return None

    def coerce(value: Any, param: _TyperParameter, ctx: Context) -> Any:
        if not isinstance(value, list | tuple):
            raise _Unsure
        return [each(one, param, ctx) for one in value]

    return coerce


@dataclass(frozen=True)
class _PlainFirst(RuntimeParam):
    """The plain coercion, else typer's (built when first needed, as typer does)."""

    descriptor: TypeDescriptor
    plain: _Fast

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
        try:
            return self.plain(value, param, ctx)
        except _Unsure:
            pass
        return build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)


def lightened(params: list[_P]) -> list[_P]:
    """``params``, each typer parameter given the plain coercion where one applies (once)."""
    for param in params:
        if not isinstance(param, _TyperParameter) or param._runtime_param is not None:
            continue
        descriptor = param.type_descriptor
        plain = _plain(descriptor)
        if plain is not None:
            param._runtime_param = _PlainFirst(
                parameter_info=descriptor.parameter_info,
                annotation=descriptor.annotation,
                descriptor=descriptor,
                plain=plain,
            )
    return params
