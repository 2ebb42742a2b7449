"""Read SAs from ``ip xfrm state`` / ``ip -s xfrm state`` text, pasted as is.

In: the text and the name of its file (for messages). Out: one
``SecurityAssociation`` per ESP block; blocks of other protocols (ah, comp,
route2, hao) are skipped. Raises ``KeyFileError`` naming the line.

The text is what iproute2 prints (ip/ipxfrm.c, ``xfrm_state_info_print``):
a block per SA that starts at column 0 with ``src A dst B`` and goes on
with indented lines. We read ``proto ... spi ... mode ...``, ``flag ...``
(only the ``esn`` flag means ESN), ``aead`` or ``enc`` + ``auth``/
``auth-trunc``, ``encap``, and the receiver's window: ``replay-window N``
and the ``replay_window N, bitmap-length M`` line of an ``anti-replay esn
context:`` (receiver/config.py says how they choose the kernel's variant);
every other line (``sel``, ``lifetime``, ``stats``, ...) is ignored. The
anti-replay esn context is printed for any SA with a replay window larger
than 32, ESN or not, so it says nothing about ESN.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from espforensics.errors import KeyFileError
from espforensics.keys.sa import SecurityAssociation
from espforensics.keys.validate import LoadLog, RawSa, Where, build_sa

_DETECT = re.compile(r"^src \S+ dst \S+", re.MULTILINE)
# ``ip xfrm policy`` selectors may go on: "src A/16 dst B/16 proto udp dport 500".
_SRC_LINE = re.compile(r"src (\S+) dst (\S+)(?P<extra> .*)?")
# Lines only an ``ip xfrm policy`` block has (ip/xfrm_policy.c): its direction (or a
# socket policy's), and the templates of the SAs it asks for.
_POLICY_WORDS = frozenset({"dir", "socket", "tmpl"})
# With ``ip -s`` each key is followed by its size, e.g. "(160 bits)".
_BITS = r"(?:\s+\(\d+ bits\))?"
_LINE_FORMS = {
    "aead": re.compile(rf"aead\s+(?P<name>\S+)\s+(?P<key>\S+){_BITS}\s+(?P<icv>\d+)"),
    # iproute2 prints ecb(cipher_null)'s empty key as nothing: "enc ecb(cipher_null) "
    "enc": re.compile(rf"enc\s+(?P<name>\S+)(?:\s+(?P<key>\S+){_BITS})?"),
    "auth-trunc": re.compile(rf"auth-trunc\s+(?P<name>\S+)\s+(?P<key>\S+){_BITS}\s+(?P<icv>\d+)"),
    "auth": re.compile(rf"auth\s+(?P<name>\S+)\s+(?P<key>\S+){_BITS}"),
    "encap": re.compile(r"encap type \S+ sport (?P<sport>\d+) dport (?P<dport>\d+)(?: addr \S+)?"),
}
_KINDS = {"proto": "proto", "aead": "aead", "enc": "enc", "auth": "auth", "encap": "encap"}
_KINDS["auth-trunc"] = "auth"  # one integrity line per SA, whichever form
_ESN_BIT = 0x80  # XFRM_STATE_ESN in include/uapi/linux/xfrm.h


@dataclass(frozen=True, slots=True)
class _Algorithms:
    """What the aead line, or the enc and auth lines, say (text as printed)."""

    name: str
    key: str = field(repr=False)
    aead: bool
    icv_bits: str | None = None
    auth_name: str | None = None
    auth_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class _Block:
    """One SA block: its ``src``/``dst`` line and its indented lines."""

    number: int  # line number of the ``src ... dst ...`` line
    src: str
    dst: str
    lines: tuple[tuple[int, str], ...]  # (line number, stripped text)
    extra: bool = False  # words after ``dst B``: only a policy's selector has them


def is_xfrm_text(text: str) -> bool:
    """True when some line starts with ``src A dst B``."""
    return _DETECT.search(text) is not None


def parse_xfrm_text(
    text: str, origin: str, log: LoadLog | None = None
) -> list[SecurityAssociation]:
    """Every ESP SA in ``ip xfrm state`` text; ``origin`` names the file.

    ``ip xfrm policy`` blocks pasted with the states hold no keys: they are
    skipped, and ``log`` (if given) gets a note saying how many and where.
    """
    sas, policies = [], []
    for block in _blocks(text, origin):
        if any(line.split(maxsplit=1)[0] in _POLICY_WORDS for _, line in block.lines):
            policies.append(block.number)
            continue
        if block.extra:
            where = f"line {block.number}"
            raise KeyFileError(origin, f"{where}: expected a `src ADDRESS dst ADDRESS` line")
        sa = _parse_block(block, origin)
        if sa is not None:
            sas.append(sa)
    if policies and not sas:
        raise KeyFileError(
            origin,
            f"line {policies[0]}: `ip xfrm policy` output, which holds no keys "
            "(give `ip xfrm state` output)",
        )
    if policies and log is not None:
        lines = ", ".join(str(n) for n in policies[:5]) + (", ..." if len(policies) > 5 else "")
        blocks = "block" if len(policies) == 1 else "blocks"
        log.notes.append(
            f"{origin}: skipped {len(policies)} `ip xfrm policy` {blocks} "
            f"(line{'s' if len(policies) > 1 else ''} {lines}): a policy holds no keys"
        )
    return sas


def _blocks(text: str, origin: str) -> Iterator[_Block]:
    head: _Block | None = None  # the block's ``src ... dst ...`` line, its lines to come
    lines: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = None if line[0] in " \t" else _SRC_LINE.fullmatch(line.rstrip())
        if match is not None:
            if head is not None:
                yield replace(head, lines=tuple(lines))
            head = _Block(number, match[1], match[2], (), bool(match["extra"]))
            lines = []
        elif head is not None and line[0] in " \t":
            lines.append((number, line.strip()))
        else:
            raise KeyFileError(origin, f"line {number}: expected a `src ADDRESS dst ADDRESS` line")
    if head is not None:
        yield replace(head, lines=tuple(lines))


def _parse_block(block: _Block, origin: str) -> SecurityAssociation | None:
    found = _collect(block, origin)
    if "proto" not in found:
        raise KeyFileError(
            origin,
            f"line {block.number}: no `proto` line in this block (is it `ip xfrm policy` output?)",
        )
    proto_at, proto = found["proto"]
    words = proto.split()
    if _after(words, "proto") != "esp":
        return None
    fields = {"spi": f"line {proto_at}", "mode": f"line {proto_at}"}
    algo = _algorithms(block, found, fields, origin)
    spi = _after(words, "spi")
    replay = _replay(block, fields)
    raw = RawSa(
        spi=None if spi is None else re.sub(r"\(\d+\)$", "", spi),  # ip -s: 0x..(4097)
        algorithm=algo.name,
        key=algo.key,
        aead=algo.aead,
        icv_bits=algo.icv_bits,
        auth_algorithm=algo.auth_name,
        auth_key=algo.auth_key,
        mode=_after(words, "mode"),
        src=block.src,
        dst=block.dst,
        esn=any(_esn_flag(text.split()) for _, text in block.lines),
        encap_port=_encap_port(found, fields, origin),
        origin=f"{origin}:line {block.number}",
        replay_window=replay[0],
        replay_esn=replay[1],
    )
    return build_sa(raw, Where(origin, f"line {block.number}", fields))


_ESN_WINDOW = re.compile(r"replay_window (\d+), bitmap-length \d+")


def _replay(block: _Block, fields: dict[str, str]) -> tuple[str | None, bool | None]:
    """``replay_window`` and ``replay_esn`` as the block prints them (ip/ipxfrm.c).

    An ``anti-replay esn context`` holds the ``replay_esn`` window; without one,
    ``replay-window N`` is the legacy window. An ESN SA printed without the
    context (an old iproute2) says nothing certain: both stay unknown.
    """
    legacy = None
    for number, text in block.lines:
        words = text.split()
        esn_window = _ESN_WINDOW.fullmatch(text)
        if esn_window is not None:
            fields["replay_window"] = f"line {number}"
            return esn_window[1], True
        if words[0] == "replay-window" and len(words) > 1:
            legacy = (number, words[1])
    if legacy is None or any(_esn_flag(text.split()) for _, text in block.lines):
        return None, None
    fields["replay_window"] = f"line {legacy[0]}"
    return legacy[1], False


def _collect(block: _Block, origin: str) -> dict[str, tuple[int, str]]:
    """The lines we read, by kind; a kind given twice is an error."""
    found: dict[str, tuple[int, str]] = {}
    for number, text in block.lines:
        kind = _KINDS.get(text.split(maxsplit=1)[0])
        if kind is None:
            continue
        if kind in found:
            raise KeyFileError(origin, f"line {number}: a second {kind} line for this SA")
        found[kind] = (number, text)
    return found


def _algorithms(
    block: _Block, found: dict[str, tuple[int, str]], fields: dict[str, str], origin: str
) -> _Algorithms:
    """The aead line, or the enc line and its auth line; fills ``fields``."""
    if "aead" in found and "enc" in found:
        at = found["enc"][0]
        raise KeyFileError(origin, f"line {at}: an SA has an aead or an enc line, not both")
    kind = "aead" if "aead" in found else "enc"
    if kind not in found:
        raise KeyFileError(origin, f"line {block.number}: no aead or enc line for this ESP SA")
    at, line = found[kind]
    main = _match(kind, line, at, origin)
    fields.update(algorithm=f"line {at}", key=f"line {at}", icv_bits=f"line {at}")
    key = main["key"] or ""  # no key printed: ecb(cipher_null)'s, empty
    algo = _Algorithms(main["name"], key, kind == "aead", main.groupdict().get("icv"))
    if "auth" not in found:
        return algo
    at, line = found["auth"]
    form = "auth-trunc" if line.startswith("auth-trunc") else "auth"
    auth = _match(form, line, at, origin)
    fields.update(auth_algorithm=f"line {at}", auth_key=f"line {at}")
    if not algo.aead:  # the ICV length is the integrity algorithm's
        fields["icv_bits"] = f"line {at}"
        algo = replace(algo, icv_bits=auth.groupdict().get("icv"))
    return replace(algo, auth_name=auth["name"], auth_key=auth["key"])


def _match(form: str, line: str, at: int, origin: str) -> re.Match[str]:
    match = _LINE_FORMS[form].fullmatch(line)
    if match is None:  # never quote the line: it holds a key
        raise KeyFileError(origin, f"line {at}: cannot read this {form} line")
    return match


def _encap_port(
    found: dict[str, tuple[int, str]], fields: dict[str, str], origin: str
) -> str | None:
    if "encap" not in found:
        return None
    at, line = found["encap"]
    fields["encap_port"] = f"line {at}"
    # RFC 3948 s2: the receiver finds ESP-in-UDP by its destination port.
    return _match("encap", line, at, origin)["dport"]


def _after(words: list[str], word: str) -> str | None:
    """The word after ``word`` in ``words``, if both are there."""
    try:
        return words[words.index(word) + 1]
    except (ValueError, IndexError):
        return None


def _esn_flag(words: list[str]) -> bool:
    """True when a ``flag ...`` list says ESN.

    Current iproute2 prints the name ``esn``; older versions print flags they
    cannot name as hex (``flag af-unspec 80``); ``ip -s`` adds the flag byte
    as bits, most significant first (``(0x10100000)``).
    """
    if "flag" not in words:
        return False
    for word in words[words.index("flag") + 1 :]:
        if word == "esn":
            return True
        if re.fullmatch(r"\(0x[01]{8}\)", word):
            return word[3] == "1"
        if re.fullmatch(r"[0-9a-f]+", word) and int(word, 16) & _ESN_BIT:
            return True
    return False
