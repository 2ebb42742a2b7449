"""No key byte in any output, whatever field of a key file the key sits in.

A key pasted into the wrong field (columns swapped, a copy-paste slip) used
to come back whole in the one-line error, and for a capture's own
Decryption Secrets Block also in summary.json, report.txt and report.md.
Each case here takes a real key (the scenario's), swaps it with one field
of a valid key file (every field in turn, in each format), runs the whole
``analyze`` command and searches stdout, stderr and every file written for
the key: in hex (any case, any 8 bytes of it, so also with or without
0x), in base64 (standard and URL-safe, with or without padding), as raw
bytes and as the decimal number YAML would make of unquoted hex.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from espforensics.keys.wireshark import ESP_SA_SECRETS_TYPE
from espforensics.model.records import DecryptionSecrets
from espforensics.synth import build_scenario, write_capture
from tests.support.helpers import CliRun, run_cli

SCENARIO = build_scenario("ipv4-transport-tcp", seed=1)
SA = SCENARIO.sas[0]
KEY = SA.key.reveal()  # the crypto module's reveal, used here only to build inputs
HEX = KEY.hex()
GCM = "rfc4106(gcm(aes))"


def key_forms() -> tuple[set[str], set[bytes]]:
    """Text needles (searched lowercased) and byte needles that betray the key."""
    texts = {HEX[i : i + 16] for i in range(0, len(HEX) - 15, 2)}  # any 8 bytes, any case
    texts.add(str(int.from_bytes(KEY, "big")))  # YAML's int of unquoted 0x...
    raw = {KEY}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        raw |= {encode(KEY), encode(KEY).rstrip(b"=")}
    return texts, raw


TEXTS, RAW = key_forms()


def assert_no_key(res: CliRun, out: Path) -> None:
    blobs = [res.stdout_bytes, res.stderr_bytes]
    blobs += [p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()]
    for blob in blobs:
        lowered = blob.decode("latin-1").lower()
        assert not [t for t in TEXTS if t in lowered]
        assert not [r for r in RAW if r in blob]


def run(tmp: Path, capture: Path, *args: str) -> tuple[CliRun, Path]:
    out = tmp / "out"
    res = run_cli(*["analyze", str(capture), "--out", str(out), *args])
    assert res.code in (0, 2), res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    if res.code == 2:
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("espforensics: error: "), res.stderr
    return res, out


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cap") / "c.pcap"
    write_capture(path, SCENARIO.frames[:12])
    return path


def swapped(fields: dict[str, str], name: str, key_field: str) -> dict[str, str]:
    """``fields`` with the key and field ``name`` trading places."""
    out = dict(fields)
    out[name], out[key_field] = fields[key_field], fields[name]
    return out


# -- keys.yaml ---------------------------------------------------------------

YAML_FIELDS = {
    "spi": f'"0x{SA.spi:08x}"',
    "src": f'"{SA.src}"',
    "dst": f'"{SA.dst}"',
    "aead": GCM,
    "key": f'"0x{HEX}"',
    "icv": "128",
    "esn": "false",
    "esn_hi": "0",
    "mode": "transport",
    "encap": "null",
}


def yaml_text(fields: dict[str, str], extra: str = "") -> str:
    body = "\n".join(f"    {k}: {v}" for k, v in fields.items())
    return "sas:\n  - " + body.lstrip() + "\n" + extra


YAML_CASES = [
    *(pytest.param(yaml_text(swapped(YAML_FIELDS, f, "key")), id=f"yaml-{f}") for f in YAML_FIELDS),
    *(
        pytest.param(yaml_text({**YAML_FIELDS, f: f"0x{HEX}"}), id=f"yaml-{f}-unquoted")
        for f in YAML_FIELDS
    ),
    pytest.param(yaml_text({**YAML_FIELDS, f"0x{HEX}": "1"}), id="yaml-field-name"),
    pytest.param(yaml_text(YAML_FIELDS, f"0x{HEX}: 1\n"), id="yaml-top-level-name"),
    pytest.param(yaml_text({**YAML_FIELDS, "mode": f"!0x{HEX} x"}), id="yaml-tag"),
    pytest.param(yaml_text({**YAML_FIELDS, "mode": f"*k{HEX}"}), id="yaml-alias"),
]

# -- ip xfrm state -------------------------------------------------------------

XFRM_FIELDS = {
    "src": str(SA.src),
    "dst": str(SA.dst),
    "proto": "esp",
    "spi": f"0x{SA.spi:08x}",
    "reqid": "1",
    "mode": "transport",
    "flag": "af-unspec",
    "name": GCM,
    "key": f"0x{HEX}",
    "icv": "128",
    "etype": "espinudp",
    "sport": "4500",
    "dport": "4500",
    "addr": "0.0.0.0",
}


def xfrm_text(f: dict[str, str]) -> str:
    return (
        f"src {f['src']} dst {f['dst']}\n"
        f"\tproto {f['proto']} spi {f['spi']} reqid {f['reqid']} mode {f['mode']}\n"
        f"\treplay-window 0 flag {f['flag']}\n"
        f"\taead {f['name']} {f['key']} {f['icv']}\n"
        f"\tencap type {f['etype']} sport {f['sport']} dport {f['dport']} addr {f['addr']}\n"
        "\tsel src 0.0.0.0/0 dst 0.0.0.0/0\n"
    )


XFRM_CASES = [
    pytest.param(xfrm_text(swapped(XFRM_FIELDS, f, "key")), id=f"xfrm-{f}") for f in XFRM_FIELDS
]

# -- Wireshark esp_sa (also the body of a Decryption Secrets Block) -----------

ESP_SA_COLUMNS = {
    "protocol": "IPv4",
    "src": str(SA.src),
    "dst": str(SA.dst),
    "spi": f"0x{SA.spi:08x}",
    "encryption": "AES-GCM with 16 octet ICV [RFC4106]",
    "key": f"0x{HEX}",
    "authentication": "NULL",
    "auth_key": "",
    "sn": "32-bit",
    "esn_hi": "0x0",
}


def esp_sa_text(columns: dict[str, str]) -> str:
    return ",".join(f'"{v}"' for v in columns.values()) + "\n"


ESP_SA_CASES = [
    pytest.param(esp_sa_text(swapped(ESP_SA_COLUMNS, c, "key")), id=f"esp_sa-{c}")
    for c in ESP_SA_COLUMNS
]


# -- tcpdump -E secrets: the key in each place of an item, or a line around it ---------

AES_KEY = KEY[:16].hex()  # aes128-cbc takes 16 bytes
TCPDUMP_CASES = [
    pytest.param(f"0x{HEX}@{SA.dst} aes128-cbc:0x{AES_KEY}\n", id="tcpdump-spi"),
    pytest.param(f"0x{SA.spi:x}@0x{HEX} aes128-cbc:0x{AES_KEY}\n", id="tcpdump-address"),
    pytest.param(f"0x{SA.spi:x}@{SA.dst} {HEX}:0x{AES_KEY}\n", id="tcpdump-algorithm"),
    pytest.param(f"0x{SA.spi:x}@{SA.dst} aes256-cbc:0x{HEX}\n", id="tcpdump-key-length"),
    pytest.param(f"0x{SA.spi:x}@{SA.dst} aes128-cbc:0x{HEX}zz\n", id="tcpdump-bad-digit"),
    pytest.param(
        f"0x{SA.spi:x}@{SA.dst} aes128-cbc:0x{AES_KEY}\nbogus 0x{HEX}\n", id="tcpdump-bad-line"
    ),
    pytest.param(f"0x{SA.spi:x}@{SA.dst} aes128-cbc:0x{AES_KEY}, 0x{HEX}\n", id="tcpdump-item"),
]


@pytest.mark.parametrize("text", YAML_CASES + XFRM_CASES + ESP_SA_CASES + TCPDUMP_CASES)
def test_no_key_in_any_output_of_a_key_file(tmp_path: Path, capture: Path, text: str) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(text)
    res, out = run(tmp_path, capture, "--sa", str(keys))
    assert_no_key(res, out)


@pytest.mark.parametrize("text", ESP_SA_CASES)
def test_no_key_in_any_output_of_a_secrets_block(tmp_path: Path, text: str) -> None:
    capture = tmp_path / "dsb.pcapng"
    secrets = [DecryptionSecrets(ESP_SA_SECRETS_TYPE, text.encode())]
    write_capture(capture, SCENARIO.frames[:12], format="pcapng", secrets=secrets)
    res, out = run(tmp_path, capture)
    assert_no_key(res, out)
    if res.code == 2:  # the block's error is in the reports too, still without the key
        assert "decryption secrets block" in (out / "summary.json").read_text()


@pytest.mark.slow
def test_the_valid_files_decrypt(tmp_path: Path, capture: Path) -> None:
    """The unswapped files are good ones: a swap, not a broken template, makes each error."""
    truth = SCENARIO.truth[:12]
    ok = sum(t.spi == SA.spi and t.verdict == "ok" for t in truth)
    other = sum(t.spi not in (None, SA.spi) for t in truth)
    assert ok and other  # the other SA's packets have no key here
    for name, text in [
        ("keys.yaml", yaml_text(YAML_FIELDS)),
        ("xfrm", xfrm_text(XFRM_FIELDS)),
        ("esp_sa", esp_sa_text(ESP_SA_COLUMNS)),
    ]:
        (tmp_path / name).mkdir()
        keys = tmp_path / name / "keys.txt"
        keys.write_text(text)
        res, out = run(tmp_path / name, capture, "--sa", str(keys))
        assert res.code == 0, (name, res.stderr)
        verdicts = json.loads((out / "summary.json").read_text())["verdicts"]
        assert (verdicts["ok"], verdicts["unknown_sa"]) == (ok, other), name
        assert_no_key(res, out)


@pytest.mark.parametrize("suffix", [".pcap", ".pcapng"])
def test_no_key_in_the_annotated_and_decrypted_captures(tmp_path: Path, suffix: str) -> None:
    """The capture's secrets block decrypts the copies, and neither copy holds it."""
    capture = tmp_path / "dsb.pcapng"
    block = DecryptionSecrets(ESP_SA_SECRETS_TYPE, esp_sa_text(ESP_SA_COLUMNS).encode())
    write_capture(capture, SCENARIO.frames[:12], format="pcapng", secrets=[block])
    assert KEY.hex().encode() in capture.read_bytes()  # the input holds the key as text
    copies = tmp_path / "copies"
    copies.mkdir()
    annotated, decrypted = copies / "a.pcapng", copies / f"d{suffix}"
    res, out = run(tmp_path, capture, "--annotate", str(annotated), "--decrypted", str(decrypted))
    assert res.code == 0, res.stderr
    assert annotated.stat().st_size and decrypted.stat().st_size
    assert decrypted.read_bytes() != capture.read_bytes()
    assert_no_key(res, out)
    for blob in (annotated.read_bytes(), decrypted.read_bytes()):
        lowered = blob.decode("latin-1").lower()
        assert not [t for t in TEXTS if t in lowered]
        assert not [r for r in RAW if r in blob]


# -- key text given to --sa in place of a path, in every command ---------------------------
#
# Text that names no file was taken for a path, and the one-line error quoted it whole
# ("0x1001@... aes128-cbc:0x...: cannot open"), on two lines when it held a newline. Each
# notation here holds the key; each command must refuse it in one line (exit 2) that names
# the argument by its size, and write the key nowhere.

AES = KEY[:16].hex()  # an AES-128 key for tcpdump's aes128-cbc: 16 of the key's bytes
ARGUMENT_TEXTS = [
    pytest.param(f"0x1001@{SA.dst} aes128-cbc:0x{AES}, bogus", id="tcpdump-and-a-bad-item"),
    pytest.param(f"0x1001@{SA.dst} aes128-cbc:0x{AES}\nbogus", id="tcpdump-two-lines"),
    pytest.param(f"0x1001@{SA.dst} rc5-cbc:0x{AES}", id="tcpdump-unknown-cipher"),
    pytest.param(f"0x1001@{SA.dst} aes256-cbc:0x{AES}", id="tcpdump-short-secret"),
    pytest.param(f"aes128:0x{HEX}", id="tcpdump-long-secret"),
    pytest.param(esp_sa_text(ESP_SA_COLUMNS).strip(), id="esp_sa-line"),
    pytest.param(esp_sa_text(ESP_SA_COLUMNS), id="esp_sa-line-newline"),
    pytest.param(xfrm_text(XFRM_FIELDS), id="xfrm-state"),
    pytest.param(f"spi 0x{SA.spi:x} key 0x{HEX}", id="spi-key-words"),
    pytest.param(yaml_text(YAML_FIELDS), id="keys.yaml-text"),
    pytest.param(f"0x{HEX}", id="hex-key"),
    pytest.param(HEX, id="bare-hex-key"),
]
COMMANDS = ["analyze", "batch", "compare --sa", "compare --sa-before", "compare --sa-after"]


def command_line(command: str, capture: Path, out: Path, text: str) -> list[str]:
    if command == "analyze":
        return ["analyze", str(capture), "--out", str(out), "--sa", text]
    if command == "batch":
        return ["batch", str(capture), "--out", str(out), "--jobs", "1", "--sa", text]
    option = command.split()[1]  # compare writes no folder: stdout and stderr are searched
    return ["compare", str(capture), str(capture), "--format", "json", option, text]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("text", ARGUMENT_TEXTS)
def test_key_text_given_to_sa_is_never_quoted(
    tmp_path: Path, capture: Path, command: str, text: str
) -> None:
    assert not (tmp_path / text).exists()
    out = tmp_path / "out"
    out.mkdir()
    res = run_cli(*command_line(command, capture, out, text))
    assert res.code == 2, (res.code, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("espforensics: error: --sa "), res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert_no_key(res, out)


def test_key_text_is_described_by_its_size_and_lines(capture: Path, tmp_path: Path) -> None:
    """The words of the message, for the issue's own example and its two-line form."""
    texts = (f"0x1001@192.0.2.2 aes128-cbc:0x{AES}, bogus", f"spi 1\nkey 0x{HEX}\n")
    assert [len(t) for t in texts] == [69, 53]
    messages = []
    for text in texts:
        res = run_cli("analyze", capture, "--out", tmp_path / "out", "--sa", text)
        messages.append(res.stderr)
    assert messages == [
        "espforensics: error: --sa (69 characters): no such file, nor key text "
        "espforensics reads in place of a path\n",
        "espforensics: error: --sa (53 characters on 2 lines): no such file, nor key text "
        "espforensics reads in place of a path\n",
    ]


def test_a_missing_path_is_still_named(capture: Path, tmp_path: Path) -> None:
    """A name with a path's shape and no run of hex digits cannot be a key: it is quoted."""
    missing = tmp_path / "no-such" / "gateway-1.keys.yaml"
    res = run_cli("analyze", capture, "--out", tmp_path / "out", "--sa", missing)
    assert (res.code, res.stderr) == (
        2,
        f"espforensics: error: {missing}: cannot open: No such file or directory\n",
    )


def test_batch_takes_tcpdump_text_and_writes_no_key(tmp_path: Path, capture: Path) -> None:
    """A batch given tcpdump -E text in place of a key file stopped with an internal
    error (the manifest hashed the text as a file); now it decrypts with it, names it
    ``--sa (tcpdump -E text)`` in captures.csv and the manifest, and the rerun takes it."""
    text = f"0x{SA.spi:x}@{SA.dst} aes128-cbc:0x{AES}"
    out = tmp_path / "out"
    first = run_cli("batch", capture, "--out", out, "--jobs", "1", "--sa", text)
    assert first.code in (0, 1), first.stderr
    assert "taken from an earlier run" not in first.stderr
    keys = {row.split(",")[-3] for row in (out / "captures.csv").read_text().splitlines()[1:]}
    assert keys == {"--sa (tcpdump -E text)"}
    assert_no_key(first, out)
    again = run_cli("batch", capture, "--out", out, "--jobs", "1", "--sa", text)
    assert again.code == first.code
    assert "1 of 1 captures taken from an earlier run" in again.stderr  # not in report.txt
    assert_no_key(again, out)
