"""The receiver's window as the key files state it, and which kernel variant it picks
(receiver/config.py: xfrm_init_replay and iproute2's choice)."""

from __future__ import annotations

import pytest

from espforensics.errors import KeyFileError
from espforensics.keys.xfrm_text import parse_xfrm_text
from espforensics.keys.yaml_file import parse_keys_yaml
from espforensics.receiver.config import ReplayConfig, Variant, replay_config

KEY = "0x" + "11" * 20

# As iproute2 prints them: a tab before each line, a space after some (ip/ipxfrm.c).
LEGACY = "\n\t".join(
    [
        "src 198.51.100.2 dst 192.0.2.1",
        "proto esp spi 0x00001002 reqid 2 mode transport",
        "replay-window 32 ",
        f"aead rfc4106(gcm(aes)) {KEY} 128",
        "anti-replay context: seq 0x17, oseq 0x0, bitmap 0x007fffff",
        "sel src 0.0.0.0/0 dst 0.0.0.0/0 \n",
    ]
)
ESN = "\n\t".join(
    [
        "src 192.0.2.1 dst 198.51.100.2",
        "proto esp spi 0x00001001 reqid 1 mode transport",
        "replay-window 0 flag esn",
        f"aead rfc4106(gcm(aes)) {KEY} 128",
        "anti-replay esn context:",
        " seq-hi 0x0, seq 0x0, oseq-hi 0x0, oseq 0x1ad",
        " replay_window 32, bitmap-length 1",
        " 00000000 ",
        "sel src 0.0.0.0/0 dst 0.0.0.0/0 \n",
    ]
)
BMP = ESN.replace(" flag esn", "").replace(
    "replay_window 32, bitmap-length 1", "replay_window 128, bitmap-length 4"
)
NOTHING = "\n".join(line for line in LEGACY.splitlines() if "replay" not in line) + "\n"


@pytest.mark.parametrize(
    ("text", "window", "replay_esn", "config"),
    [
        (LEGACY, 32, False, ReplayConfig(Variant.LEGACY, 32)),
        (ESN, 32, True, ReplayConfig(Variant.ESN, 32)),
        (BMP, 128, True, ReplayConfig(Variant.BMP, 128)),
        (NOTHING, None, None, ReplayConfig(Variant.LEGACY, 32, assumed=True)),
    ],
)
def test_ip_xfrm_state_says_the_window(
    text: str, window: int | None, replay_esn: bool | None, config: ReplayConfig
) -> None:
    (sa,) = parse_xfrm_text(text, "x.txt")
    assert (sa.replay_window, sa.replay_esn) == (window, replay_esn)
    assert replay_config(sa) == config


def _yaml(extra: str) -> str:
    return (
        f'sas:\n  - spi: 0x1001\n    aead: rfc4106(gcm(aes))\n    key: "{KEY}"\n    icv: 128\n'
        + extra
    )


@pytest.mark.parametrize(
    ("extra", "config"),
    [
        ("", ReplayConfig(Variant.LEGACY, 32, assumed=True)),
        ("    esn: true\n", ReplayConfig(Variant.ESN, 32, assumed=True)),
        ("    replay_window: 64\n", ReplayConfig(Variant.BMP, 64)),
        ("    replay_window: 64\n    replay_esn: false\n", ReplayConfig(Variant.LEGACY, 64)),
        ("    replay_window: 0\n", ReplayConfig(Variant.LEGACY, 0)),
        ("    replay_window: 16\n    replay_esn: true\n", ReplayConfig(Variant.BMP, 16)),
    ],
)
def test_keys_yaml_replay_fields(extra: str, config: ReplayConfig) -> None:
    (sa,) = parse_keys_yaml(_yaml(extra), "k")
    assert replay_config(sa) == config


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "    replay_window: 5000\n",
            "k: entry 1 (spi 0x00001001): replay_window 0x1388 is not in 0..0x1000",
        ),
        ("    replay_esn: 1\n", "k: entry 1 (spi 0x00001001): replay_esn must be true or false"),
        (
            "    esn: true\n    replay_esn: false\n",
            "k: entry 1 (spi 0x00001001): an ESN SA has the replay_esn window "
            "(xfrm_init_replay); replay_esn is false",
        ),
        (
            "    esn: true\n    replay_window: 0\n",
            "k: entry 1 (spi 0x00001001): an ESN SA needs a replay window of at least 1",
        ),
    ],
)
def test_keys_yaml_replay_errors(extra: str, message: str) -> None:
    with pytest.raises(KeyFileError) as info:
        parse_keys_yaml(_yaml(extra), "k")
    assert str(info.value) == message
