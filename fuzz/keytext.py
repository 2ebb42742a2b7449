"""Mutators of the three key formats: keys.yaml, ``ip xfrm state`` text, esp_sa lines.

In: a ``random.Random`` and a seed key text (as ``espforensics.synth``
writes it). Out: a mutated text: a field swapped with another, a key put
in every field, huge numbers, deep nesting, odd unicode, lines dropped,
repeated or cut. Keys inserted are always keys of the seed corpus, so the
leak scanner knows every key an output must not show. Raises nothing.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from fuzz.corpus import all_secrets

_ODD = (
    "\u0661\u0662\u0663",  # Arabic-Indic digits: int() accepts them
    "\uff11\uff12\uff18",  # full-width 128
    "\u202e",
    "\x00",
    "\ufeff",
    "\u0130",
    "\U0001f600",
    "\udcff",  # a lone surrogate: written as invalid UTF-8
    "e\u0301",
    "\r",
    "\t",
    "\x85",
)
_NUMBERS = (
    "0",
    "-1",
    "1",
    "4294967295",
    "4294967296",
    "0xffffffff",
    "0x100000000",
    "18446744073709551616",
    "1e309",
    "nan",
    ".inf",
    "0x",
    "",
    "0b101",
    "1_000",
    "1:20",
)
_ALGOS = (
    "rfc4106(gcm(aes))",
    "rfc4309(ccm(aes))",
    "rfc7539esp(chacha20,poly1305)",
    "rfc4543(gcm(aes))",
    "cbc(aes)",
    "ecb(cipher_null)",
    "hmac(sha256)",
    "RFC4106(GCM(AES))",
)


def key_hex(rng: random.Random) -> str:
    """A key of the corpus written one of the ways people write hex."""
    key = rng.choice(all_secrets()).hex()
    return rng.choice((f"0x{key}", key, key.upper(), f"0X{key.upper()}", key[: len(key) - 1]))


def huge_number(rng: random.Random) -> str:
    digits = rng.choice((4300, 4301, 5000, 20000))
    return rng.choice(("9" * digits, "0x" + "f" * digits, "-" + "1" * digits))


def value(rng: random.Random) -> str:
    """One interesting field value."""
    r = rng.randrange(7)
    if r == 0:
        return key_hex(rng)
    if r == 1:
        return huge_number(rng)
    if r == 2:
        return rng.choice(_ODD) + rng.choice(("", key_hex(rng), "128", "0x1001"))
    if r == 3:
        return rng.choice(_ALGOS)
    if r == 4:
        return "A" * rng.choice((256, 5000)) if rng.random() < 0.3 else rng.choice(_NUMBERS)
    return rng.choice(_NUMBERS)


def _lines(rng: random.Random, text: str) -> str:
    """A line dropped, repeated, swapped or cut; the text cut; lines of another SA mixed in."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return text
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    op = rng.randrange(5)
    if op == 0:
        del lines[i]
    elif op == 1:
        lines.insert(i, lines[j])
    elif op == 2:
        lines[i], lines[j] = lines[j], lines[i]
    elif op == 3:
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    else:
        return text[: rng.randrange(len(text) + 1)]
    return "".join(lines)


# keys.yaml ----------------------------------------------------------------
_YAML_FIELD = re.compile(r"^( *-? *)([a-z_<]+): (.*)$", re.M)
_YAML_FIELDS = ("spi", "src", "dst", "aead", "key", "icv", "esn", "esn_hi", "mode", "encap")


def _nested(rng: random.Random) -> str:
    # Past 1,000 levels Python's recursion limit; PyYAML's scanner is quadratic in depth.
    depth = rng.choice((30, 200, 1100))
    if rng.random() < 0.5:
        return "[" * depth + "]" * depth
    return "{a: " * depth + "1" + "}" * depth


_YAML_VALUES: tuple[Callable[[random.Random], str], ...] = (
    lambda rng: f'"{value(rng)}"',
    value,
    value,
    _nested,
    lambda rng: rng.choice(
        (
            "[1, 2]",
            "{a: 1}",
            "~",
            "true",
            "yes",
            "2001-01-01",
            "1.5",
            "!!binary AAAA",
            "!!python/name:os.system",
            "*nope",
            "&a 1",
            "|\n  x",
        )
    ),
)


def _yaml_field(rng: random.Random, text: str) -> str:
    fields = list(_YAML_FIELD.finditer(text))
    if not fields:
        return text
    m = rng.choice(fields)
    op = rng.randrange(4)
    if op == 0:  # a new value
        new = f"{m[1]}{m[2]}: {rng.choice(_YAML_VALUES)(rng)}"
    elif op == 1:  # swap the values of two fields
        other = rng.choice(fields)
        new = f"{m[1]}{m[2]}: {other[3]}"
    elif op == 2:  # a field renamed, repeated or unknown
        name = rng.choice((*_YAML_FIELDS, "icv_bits", "<<", "SPI", "k\u0435y"))
        new = f"{m[1]}{name}: {m[3]}"
    else:
        return _esn_edge(rng, text)
    return text[: m.start()] + new + text[m.end() :]


def _esn_edge(rng: random.Random, text: str) -> str:
    """One entry turned to ESN with a high half at the edge (RFC 4303 s2.2.1)."""
    esn = list(re.finditer(r"esn: (true|false)", text))
    high = list(re.finditer(r"esn_hi: \S+", text))
    if not esn or len(esn) != len(high):
        return text
    j = rng.randrange(len(esn))
    e, h = esn[j], high[j]
    edge = f"esn_hi: {rng.choice(_ESN_HI)}"
    return text[: e.start()] + "esn: true" + text[e.end() : h.start()] + edge + text[h.end() :]


_ESN_HI = ("0xffffffff", "0xfffffffe", "4294967295", "0x100000000", "0x80000000")


def _yaml_structure(rng: random.Random, text: str) -> str:
    op = rng.randrange(5)
    if op == 0:
        return f"sas: {_nested(rng)}\n"
    if op == 1:
        top = rng.choice(("sas: 5", "sas: []", "sas: {}", "sa:", "sas: &x"))
        return text.replace("sas:", top, 1)
    if op == 2:  # anchors and a merge key
        key = key_hex(rng)
        return f'base: &b\n  key: "{key}"\n' + text.replace("  - spi:", "  - <<: *b\n    spi:", 1)
    return text + rng.choice(("---\nsas: []\n", "...\n", "\n\t\n", "sas:\n  - spi: 0x1\n"))


def mutate_yaml(rng: random.Random, text: str) -> str:
    """keys.yaml with one to three changes."""
    for _ in range(rng.randint(1, 3)):
        op = rng.choice((_yaml_field, _yaml_field, _yaml_field, _yaml_structure, _lines, _chars))
        text = op(rng, text)
    return text


# ip xfrm state --------------------------------------------------------------
_XFRM_EXTRA = (
    "\tenc cbc(aes) {k}\n\tauth-trunc hmac(sha256) {k} 128\n",
    "\taead rfc4106(gcm(aes)) {k} 128\n",
    "\tencap type espinudp sport {n} dport {n} addr 0.0.0.0\n",
    "\tproto esp spi {n} reqid {n} mode {w}\n",
    "\treplay-window {n} flag esn\n\tanti-replay esn context:\n\t seq-hi {n}, seq 0x0\n",
    "src {w} dst {w}\n",
)


def _xfrm_token(rng: random.Random, text: str) -> str:
    tokens = list(re.finditer(r"[^\s,]+", text))
    if not tokens:
        return text
    m = rng.choice(tokens)
    new = rng.choice(tokens)[0] if rng.random() < 0.3 else value(rng)
    return text[: m.start()] + new + text[m.end() :]


def _xfrm_line(rng: random.Random, text: str) -> str:
    line = rng.choice(_XFRM_EXTRA).format(k=key_hex(rng), n=value(rng), w=value(rng))
    lines = text.splitlines(keepends=True)
    lines.insert(rng.randrange(len(lines) + 1), line)
    return "".join(lines)


def mutate_xfrm(rng: random.Random, text: str) -> str:
    """``ip xfrm state`` text with one to three changes."""
    for _ in range(rng.randint(1, 3)):
        text = rng.choice((_xfrm_token, _xfrm_token, _xfrm_line, _lines, _chars))(rng, text)
    return text


# esp_sa -------------------------------------------------------------------
_ESP_SA_VALUES = (
    "IPv4",
    "IPv6",
    "Any",
    "*",
    "NULL",
    "AES-GCM [RFC4106]",
    "AES-CBC [RFC3602]",
    "ANY 128 bit authentication [no checking]",
    "HMAC-SHA-256-128 [RFC4868]",
    "\\x22",
    "\\",
    '"',
    "::ffff:192.0.2.1",
    "192.0.2.0/24",
    "0x*",
)


def _esp_sa_field(rng: random.Random, text: str) -> str:
    fields = list(re.finditer(r'"((?:[^"\\]|\\.)*)"', text))
    if not fields:
        return text
    m = rng.choice(fields)
    op = rng.randrange(4)
    if op == 0:
        new = value(rng)
    elif op == 1:
        new = rng.choice(_ESP_SA_VALUES)
    elif op == 2:
        new = rng.choice(fields)[1]  # another field's value: swapped fields
    else:
        new = m[1] + '","' + value(rng)  # one field more
    return text[: m.start()] + f'"{new}"' + text[m.end() :]


def mutate_esp_sa(rng: random.Random, text: str) -> str:
    """Wireshark esp_sa lines with one to three changes."""
    for _ in range(rng.randint(1, 3)):
        text = rng.choice((_esp_sa_field, _esp_sa_field, _lines, _chars))(rng, text)
    return text


def _chars(rng: random.Random, text: str) -> str:
    """Bytes-level noise: an odd character, a BOM, CRLF line ends."""
    op = rng.randrange(4)
    if op == 0 and text:
        at = rng.randrange(len(text))
        return text[:at] + rng.choice(_ODD) + text[at + 1 :]
    if op == 1:
        return "\ufeff" + text
    if op == 2:
        return text.replace("\n", "\r\n")
    return text.replace('"', "", 1) if rng.random() < 0.5 else "# " + value(rng) + "\n" + text


MUTATORS: dict[str, Callable[[random.Random, str], str]] = {
    "yaml": mutate_yaml,
    "xfrm": mutate_xfrm,
    "esp_sa": mutate_esp_sa,
}
