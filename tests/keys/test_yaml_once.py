"""keys.yaml is parsed once (keys/yaml_file.py ``_load``), with the outcome of the three
parses it replaced: the depth check's, ``yaml.compose``'s and ``yaml.load``'s.

The reference below is the former ``_load``, pass for pass. Both run over every keys.yaml
text of the tests (the error table, the cyclic aliases, the fixtures) and texts that
reach each stage's own errors (a second document, an undefined alias, a bad tag, a
merge key, nesting past the limit, a long number, an empty file): the same value and
fields as written, or the same one-line error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from espforensics.errors import KeyFileError
from espforensics.keys import yaml_file
from espforensics.keys.yaml_file import _check_numbers, _events, _load, _Loader
from tests.keys.test_keys import YAML_ERRORS, YAML_FULL, yaml_entry

ROOT = Path(__file__).resolve().parents[2]


def _three_passes(text: str, origin: str) -> tuple[object, object]:
    """The former ``_load``: the depth check's pass, then compose, then load, each parsing."""
    try:
        _events(text, origin)
        root = yaml.compose(text, Loader=_Loader)
        _check_numbers(root, origin)
        data = yaml.load(text, Loader=_Loader)
        return data, _entry_nodes(root)
    except yaml.YAMLError as exc:
        why = yaml_file._syntax_error(exc)
    raise KeyFileError(origin, why)


def _entry_nodes(root: yaml.Node | None) -> list[tuple[dict[str, str], str | None]]:
    """The former ``_entry_nodes``: per entry of ``sas``, its scalar fields' text, and the
    first field given twice, read from the tree ``yaml.compose`` made."""
    if not isinstance(root, yaml.MappingNode):
        return []
    for name, value in root.value:
        if name.value == "sas" and isinstance(value, yaml.SequenceNode):
            return [_fields(item) for item in value.value]
    return []


def _fields(node: yaml.Node) -> tuple[dict[str, str], str | None]:
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


def _outcome(load: object, text: str) -> tuple[str, str]:
    try:
        data, nodes = load(text, "k")  # type: ignore[operator]
    except KeyFileError as exc:
        return ("error", str(exc))
    return ("value", repr((data, nodes)))  # repr: a cyclic value compares without recursing


TEXTS = [text for text, _ in YAML_ERRORS]
TEXTS += [
    YAML_FULL,
    'base: &b\n  key: *b\nsas:\n  - <<: *b\n    spi: "0x1001"\n',
    "sas: &s\n  - *s\n",
    "sas:\n  - &e\n    spi: 0x1001\n    key: *e\n    aead: rfc4106(gcm(aes))\n",
    "base: &b {key: '0x01', mode: tunnel}\nsas:\n  - <<: *b\n    spi: 0x1001\n    mode: beet\n",
    "sas: []\n---\nsas: []\n",
    "sas: []\n---\nsas: [\n",
    "sas:\n  - *nowhere\n",
    "sas: !!python/object:os.system x\n",
    "sas: " + "[" * 25 + "]" * 25 + "\n",
    "sas: " + "[" * 25 + "\n",
    "sas:\n  - spi: " + "9" * 5000 + "\n",
    "sas: [{spi: 0x1001, key: 0x00ff}, {spi: 2001:db8::, dst: ::1}]\n",
    "sas:\n  - {spi: 1, spi: 2}\n  - {? [a, b] : c}\n",
    "sas: 2001-12-14t21:59:43.10-05:00\n",
    "",
    "# nothing\n",
    "sas:\n  - spi: 0x1001\n\tkey: 1\n",
    yaml_entry(mode="transport"),
]
TEXTS += [
    path.read_text()
    for folder in (ROOT / "fixtures", ROOT / "tests" / "data")
    for path in sorted(folder.rglob("*.yaml"))
]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_one_parse_gives_what_three_gave(text: str) -> None:
    assert _outcome(_load, text) == _outcome(_three_passes, text)


def test_the_text_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One loader (a reader, scanner and parser over the text) per key file, not three."""
    made: list[object] = []
    start = _Loader.__init__

    def counted(self: _Loader, stream: str) -> None:
        made.append(self)
        start(self, stream)

    monkeypatch.setattr(_Loader, "__init__", counted)
    sas = yaml_file.parse_keys_yaml((ROOT / "fixtures" / "example.keys.yaml").read_text(), "k")
    assert len(sas) == 2
    assert len(made) == 1
