"""Read SAs from the project's own ``keys.yaml``; the only module importing yaml.

In: the text of a keys.yaml file and its name (for messages). Out: one
``SecurityAssociation`` per entry of the top-level ``sas`` list. Raises
``KeyFileError``: YAML syntax errors with their line and column, unknown
or repeated fields (typos must not pass silently), and every problem
``validate.build_sa`` finds, as "entry 3 (spi 0x00001001): <problem>".

YAML 1.1 reads unquoted ``0x3a5d...`` as an int (losing leading zero bytes)
and ``2001:0:0:0:0:0:0:1`` as a base-60 int, so ``key``, ``src`` and ``dst``
are taken from the text of the YAML node, exactly as written, quoted or not.
"""

from __future__ import annotations

import re

import yaml

from espforensics.errors import KeyFileError
from espforensics.keys.sa import SecurityAssociation
from espforensics.keys.validate import RawSa, Where, build_sa, check_spi

FIELDS = ("spi", "src", "dst", "aead", "key", "icv", "esn", "esn_hi", "mode", "encap")
_AS_WRITTEN = ("key", "src", "dst")  # read from the node text, not YAML's value
_TOP = re.compile(r"""^["']?sas["']?\s*:""", re.MULTILINE)


def is_keys_yaml(text: str) -> bool:
    """True when a line starts with the top-level key ``sas:``."""
    return _TOP.search(text) is not None


def parse_keys_yaml(text: str, origin: str) -> list[SecurityAssociation]:
    """Every SA of a keys.yaml text; ``origin`` names the file."""
    try:
        data = yaml.safe_load(text)
        nodes = _entry_nodes(yaml.compose(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:  # its str() quotes the line, which may hold a key
        raise KeyFileError(origin, _syntax_error(exc)) from None
    if not isinstance(data, dict):
        raise KeyFileError(origin, "the top level must be a mapping with a `sas` list")
    for name in data:
        if name != "sas":
            raise KeyFileError(origin, f"unknown top-level field {name!r}; only `sas` is known")
    entries = data["sas"]
    if not isinstance(entries, list):
        raise KeyFileError(origin, "`sas` must be a list of SA entries")
    empty: tuple[dict[str, str], str | None] = ({}, None)
    return [
        _parse_entry(entry, *(nodes[i] if i < len(nodes) else empty), i + 1, origin)
        for i, entry in enumerate(entries)
    ]


def _syntax_error(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "not valid YAML"
    if mark is None:
        return f"YAML syntax error: {problem}"
    return f"YAML syntax error at line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _entry_nodes(root: yaml.Node | None) -> list[tuple[dict[str, str], str | None]]:
    """Per entry of ``sas``: the text of its scalar fields, and a field given twice."""
    if not isinstance(root, yaml.MappingNode):
        return []
    for name, value in root.value:
        if name.value == "sas" and isinstance(value, yaml.SequenceNode):
            return [_scalars(item) for item in value.value]
    return []


def _scalars(node: yaml.Node) -> tuple[dict[str, str], str | None]:
    texts: dict[str, str] = {}
    seen: set[str] = set()
    twice = None
    if isinstance(node, yaml.MappingNode):
        for name, value in node.value:
            if name.value in seen and twice is None:
                twice = str(name.value)
            seen.add(name.value)
            if isinstance(value, yaml.ScalarNode):
                texts[name.value] = value.value
    return texts, twice


def _parse_entry(
    entry: object, texts: dict[str, str], twice: str | None, number: int, origin: str
) -> SecurityAssociation:
    where = Where(origin, f"entry {number}")
    if not isinstance(entry, dict):
        raise where.error("entry", "an entry must be a mapping of fields")
    unknown = [str(name) for name in entry if name not in FIELDS]
    if unknown and "spi" in entry:  # name the entry by its SPI when it has one
        where = Where(origin, f"entry {number} (spi {check_spi(entry['spi'], where):#010x})")
    if unknown:
        raise where.error(unknown[0], f"unknown field {unknown[0]!r}; known: {', '.join(FIELDS)}")
    spi = check_spi(entry.get("spi"), where)
    where = Where(origin, f"entry {number} (spi {spi:#010x})")
    if twice is not None:
        raise where.error(twice, f"field {twice!r} is given twice")
    for name in ("aead", "key"):
        if entry.get(name) is None:
            raise where.error(name, f"{name} is missing")
    if not isinstance(entry["aead"], str):
        raise where.error("algorithm", "aead must be an algorithm name such as rfc4106(gcm(aes))")
    return build_sa(
        RawSa(
            spi=spi,
            algorithm=entry["aead"],
            key=_as_written(entry, texts, "key", where),
            src=_as_written(entry, texts, "src", where),
            dst=_as_written(entry, texts, "dst", where),
            icv_bits=entry.get("icv"),
            esn=entry.get("esn", False),
            esn_hi=entry.get("esn_hi", 0),
            mode=entry.get("mode"),
            encap_port=entry.get("encap"),
            origin=f"{origin}:entry {number}",
        ),
        where,
    )


def _as_written(
    entry: dict[object, object], texts: dict[str, str], name: str, where: Where
) -> object:
    """A scalar field as written in the file; other values pass on to be refused."""
    value = entry.get(name)
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return value
    if name in texts:
        return texts[name]
    if isinstance(value, int):  # e.g. from a merge key (<<): its text is elsewhere
        raise where.error(name, f'{name} must be quoted, e.g. {name}: "0x..."')
    return value
