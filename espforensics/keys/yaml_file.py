"""Read SAs from the project's own ``keys.yaml``; the only module importing yaml.

In: the text of a keys.yaml file and its name (for messages). Out: one
``SecurityAssociation`` per entry of the top-level ``sas`` list. Raises
``KeyFileError``: YAML syntax errors with their line and column, unknown
or repeated fields (typos must not pass silently), and every problem
``validate.build_sa`` finds, as "entry 3 (spi 0x00001001): <problem>".

YAML 1.1 reads unquoted ``0x3a5d...`` as an int (losing leading zero bytes)
and ``2001:0:0:0:0:0:0:1`` as a base-60 int, so ``key``, ``src`` and ``dst``
are taken from the text of the YAML node, exactly as written, quoted or not.
A plain scalar ends before a ``:`` that a space or the line's end follows
(YAML 1.1 s9.1.3), so an unquoted IPv6 address ending in ``::``
(``2001:db8:1a::``, ``::``) stops one colon short and its last colon reads
as a mapping's value indicator, a syntax error: ``_Loader`` gives the
scalar that colon back when the scalar with it is an IPv6 address (and
lets ``::1`` start a plain scalar in a flow mapping, as it does outside).

PyYAML quirks turned into ``KeyFileError`` before they can escape: its
composer recurses once per nesting level (RecursionError near 1,000), so the
event stream, which it parses without recursion, is checked for depth
first; it converts decimal ints with ``int()`` (ValueError beyond 4,300
digits), so the composed nodes are checked for long numbers before any is
built; and its messages quote tags, anchors and aliases as written, which
``_syntax_error`` passes through ``validate.shown``.
"""

from __future__ import annotations

import ipaddress
import re
from collections import deque

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from espforensics.errors import KeyFileError
from espforensics.keys.sa import SecurityAssociation
from espforensics.keys.validate import MAX_DIGITS, RawSa, Where, build_sa, check_spi, shown

FIELDS = (
    *("spi", "src", "dst", "aead", "enc", "key", "auth", "auth_key"),
    *("icv", "esn", "esn_hi", "mode", "encap", "replay_window", "replay_esn"),
)
_TOP = re.compile(r"""^["']?sas["']?\s*:""", re.MULTILINE)
MAX_DEPTH = 20  # collections within collections; a keys.yaml needs 3 (sas, entry, value)
_INT_TAG = "tag:yaml.org,2002:int"
_QUOTED = re.compile(r"'([^']*)'")
# An entry's scalar fields as written (name: text), and the name of a field given twice.
_Entry = tuple[dict[str, str], str | None]


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a plain IPv6 address may end in a colon, and
    start with ``::`` inside ``{...}`` as it may outside (YAML 1.2 s7.3.3 allows both)."""

    def check_value(self) -> bool:  # inside {...}, PyYAML takes every ':' for one
        return not self._flow_colons() and bool(super().check_value())

    def check_plain(self) -> bool:
        return bool(super().check_plain()) or self._flow_colons()

    def _flow_colons(self) -> bool:
        return self.flow_level > 0 and self.prefix(2) == "::"

    def scan_plain(self) -> yaml.ScalarToken:
        token = super().scan_plain()
        if self.peek() == ":" and _ipv6(token.value + ":"):
            self.forward()  # the colon is the address's, not a value indicator
            token = yaml.ScalarToken(token.value + ":", True, token.start_mark, self.get_mark())
        return token


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def is_keys_yaml(text: str) -> bool:
    """True when a line starts with the top-level key ``sas:``."""
    return _TOP.search(text) is not None


def parse_keys_yaml(text: str, origin: str) -> list[SecurityAssociation]:
    """Every SA of a keys.yaml text; ``origin`` names the file."""
    data, nodes = _load(text, origin)
    if not isinstance(data, dict):
        raise KeyFileError(origin, "the top level must be a mapping with a `sas` list")
    for name in data:
        if name != "sas":
            why = f"unknown top-level field {shown(name)}; only `sas` is known"
            raise KeyFileError(origin, why)
    entries = data["sas"]
    if not isinstance(entries, list):
        raise KeyFileError(origin, "`sas` must be a list of SA entries")
    empty: _Entry = ({}, None)
    return [
        _parse_entry(entry, *(nodes[i] if i < len(nodes) else empty), i + 1, origin)
        for i, entry in enumerate(entries)
    ]


def _load(text: str, origin: str) -> tuple[object, list[_Entry]]:
    """The YAML value and, per entry of ``sas``, its fields as written (``_scalars``),
    or ``KeyFileError`` for what PyYAML refuses.

    The text is parsed once: its events are checked for depth, then composed into
    nodes and the nodes constructed into the value, as ``yaml.load`` does in one go
    (before, the text was parsed three times: 15 ms of a run of the example).
    """
    try:
        replay = _Replay(_events(text, origin))
        root = replay.get_single_node()
        _check_numbers(root, origin)
        pairs = _entry_pairs(root)  # as composed: constructing flattens merge keys (<<)
        data = None if root is None else replay.construct_document(root)
        return data, [_scalars(entry) for entry in pairs]
    except yaml.YAMLError as exc:  # its str() quotes the line, which may hold a key
        why = _syntax_error(exc)
    # Raised outside the handler, so that no chained YAMLError keeps the quoted text.
    raise KeyFileError(origin, why)


def _events(text: str, origin: str) -> list[yaml.Event]:
    """The text's events; nesting deeper than ``MAX_DEPTH`` refused before the recursive
    composer sees it."""
    depth = 0
    events = []
    for event in yaml.parse(text, Loader=_Loader):
        events.append(event)
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark  # the parser always sets it
                line = "?" if mark is None else mark.line + 1
                why = f"line {line}: nested more than {MAX_DEPTH} deep (a keys.yaml needs 3)"
                raise KeyFileError(origin, why)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return events


class _Replay(Composer, SafeConstructor, Resolver):
    """``_Loader``'s composer, constructor and resolver, fed the events already parsed
    (a ``Parser``'s ``check_event``, ``peek_event`` and ``get_event`` over a list)."""

    def __init__(self, events: list[yaml.Event]) -> None:
        self._events = deque(events)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)

    def check_event(self, *choices: type[yaml.Event]) -> bool:
        if not self._events:
            return False
        return not choices or isinstance(self._events[0], choices)

    def peek_event(self) -> yaml.Event | None:
        return self._events[0] if self._events else None

    def get_event(self) -> yaml.Event | None:
        return self._events.popleft() if self._events else None


def _check_numbers(root: yaml.Node | None, origin: str) -> None:
    """Refuse a plain decimal number longer than any field takes, naming its place."""
    long = [node for node in _walk(root) if _digits(node) > MAX_DIGITS]
    if not long:
        return
    first = min(long, key=lambda node: node.start_mark.index)
    what = f"a number of {_digits(first)} digits, too long"
    for number, (name, value) in _entry_fields(root):
        if value is first:
            label = name.value if name.value in FIELDS else f"field {shown(name.value)}"
            raise Where(origin, f"entry {number}").error(label, f"{label} is {what}")
    raise KeyFileError(origin, f"line {first.start_mark.line + 1}: {what}")


def _walk(root: yaml.Node | None) -> list[yaml.ScalarNode]:
    """Every scalar node, without recursion (the depth is bounded, but cheaply so).

    Each node is visited once: an anchor that holds its own alias makes the
    node graph cyclic (``base: &b {key: *b}``), which walked for ever.
    """
    stack, scalars = [] if root is None else [root], []
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack += [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
        elif isinstance(node, yaml.ScalarNode):
            scalars.append(node)
    return scalars


def _digits(node: yaml.ScalarNode) -> int:
    """The longest run of decimal digits PyYAML would give to ``int()`` (not 0x, 0o, 0b)."""
    text = node.value.replace("_", "").lstrip("+-")
    if node.tag != _INT_TAG or text.startswith("0"):
        return 0
    return max((len(run) for run in re.findall(r"[0-9]+", text)), default=0)


def _entry_fields(root: yaml.Node | None) -> list[tuple[int, tuple[yaml.Node, yaml.Node]]]:
    """(entry number, (field name node, value node)) of every entry of ``sas``."""
    if not isinstance(root, yaml.MappingNode):
        return []
    return [
        (number, pair)
        for name, value in root.value
        if name.value == "sas" and isinstance(value, yaml.SequenceNode)
        for number, item in enumerate(value.value, 1)
        if isinstance(item, yaml.MappingNode)
        for pair in item.value
    ]


def _syntax_error(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "not valid YAML"
    # PyYAML quotes what it read ("undefined alias 'a1b2...'"); its token names stay
    problem = _QUOTED.sub(lambda m: m[0] if m[1].startswith("<") else shown(m[1]), problem)
    if mark is None:
        return f"YAML syntax error: {problem}"
    return f"YAML syntax error at line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _entry_pairs(root: yaml.Node | None) -> list[list[tuple[yaml.Node, yaml.Node]]]:
    """Per entry of ``sas``, its (name, value) nodes as composed: copies of the lists,
    which constructing the value rewrites where a merge key (``<<``) is flattened."""
    if not isinstance(root, yaml.MappingNode):
        return []
    for name, value in root.value:
        if name.value == "sas" and isinstance(value, yaml.SequenceNode):
            return [
                list(item.value) if isinstance(item, yaml.MappingNode) else []
                for item in value.value
            ]
    return []


def _scalars(pairs: list[tuple[yaml.Node, yaml.Node]]) -> _Entry:
    """An entry's scalar fields as written, and the first field given twice."""
    texts: dict[str, str] = {}
    seen: set[str] = set()
    twice = None
    for name, value in pairs:
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
    unknown = [name for name in entry if name not in FIELDS]
    if unknown and "spi" in entry:  # name the entry by its SPI when it has one
        where = Where(origin, f"entry {number} (spi {check_spi(entry['spi'], where):#010x})")
    if unknown:
        why = f"unknown field {shown(unknown[0])}; known: {', '.join(FIELDS)}"
        raise where.error("entry", why)
    spi = check_spi(entry.get("spi"), where)
    where = Where(origin, f"entry {number} (spi {spi:#010x})")
    if twice is not None:
        raise where.error(twice, f"field {twice!r} is given twice")
    algorithm, aead = _algorithm(entry, where)
    if entry.get("key") is None:
        raise where.error("key", "key is missing")
    auth = entry.get("auth")
    if auth is not None and not isinstance(auth, str):
        raise where.error("auth_algorithm", "auth must be an algorithm name such as hmac(sha256)")
    return build_sa(
        RawSa(
            spi=spi,
            algorithm=algorithm,
            aead=aead,
            key=_as_written(entry, texts, "key", where),
            auth_algorithm=auth,
            auth_key=_as_written(entry, texts, "auth_key", where),
            src=_as_written(entry, texts, "src", where),
            dst=_as_written(entry, texts, "dst", where),
            icv_bits=entry.get("icv"),
            esn=entry.get("esn", False),
            esn_hi=entry.get("esn_hi", 0),
            mode=entry.get("mode"),
            encap_port=entry.get("encap"),
            origin=f"{origin}:entry {number}",
            replay_window=entry.get("replay_window"),
            replay_esn=entry.get("replay_esn"),
        ),
        where,
    )


def _algorithm(entry: dict[object, object], where: Where) -> tuple[str, bool]:
    """The entry's algorithm and whether it is an AEAD: ``aead``, or ``enc`` (with ``auth``)."""
    aead, enc = entry.get("aead"), entry.get("enc")
    if aead is not None and enc is not None:
        raise where.error("algorithm", "an SA has aead or enc (with auth), not both")
    if aead is None and enc is None:
        raise where.error("aead", "aead (or enc with auth) is missing")
    if aead is not None:
        if not isinstance(aead, str):
            why = "aead must be an algorithm name such as rfc4106(gcm(aes))"
            raise where.error("algorithm", why)
        if entry.get("auth") is not None or entry.get("auth_key") is not None:
            raise where.error("auth_algorithm", "an AEAD takes no separate integrity algorithm")
        return aead, True
    if not isinstance(enc, str):
        raise where.error("algorithm", "enc must be an algorithm name such as cbc(aes)")
    return enc, False


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
