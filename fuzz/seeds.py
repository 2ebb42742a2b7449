"""The seed corpus: every fixture scenario, built once per process.

In: nothing (the builder's ``SCENARIOS``, seed 1). Out: ``Seed`` values
(frames, link types, format, DSBs, SAs and their key texts in the three
formats) and ``secret_bytes``, the key byte strings of one SA. Raises nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

from espforensics.keys import SecurityAssociation
from espforensics.model.records import DecryptionSecrets, Frame
from espforensics.synth import SCENARIOS, build_scenario
from espforensics.synth.keytext import esp_sa_text, keys_yaml, xfrm_state_text

# Scenarios too large to be a quick seed (1,000 frames): cut to their first frames.
MAX_SEED_FRAMES = 64


@dataclass(frozen=True, slots=True)
class Seed:
    """One scenario as the mutators need it."""

    name: str
    frames: tuple[Frame, ...]
    linktypes: tuple[int, ...]
    format: str
    snaplen: int
    secrets: tuple[DecryptionSecrets, ...]
    sas: tuple[SecurityAssociation, ...]
    yaml: str
    xfrm: str
    esp_sa: str


def _seed(name: str) -> Seed:
    sc = build_scenario(name, seed=1)
    frames = sc.frames[:MAX_SEED_FRAMES]
    return Seed(
        name,
        frames,
        sc.linktypes,
        sc.format,
        sc.snaplen,
        sc.secrets,
        sc.sas,
        keys_yaml(sc.sas),
        xfrm_state_text(sc.sas),
        esp_sa_text(sc.sas),
    )


# The scenarios of the registry when the harness was written, in its order. Inputs
# are drawn from these 9 times in 10 (so a teammate's new scenario does not
# change the inputs of a fixed seed); the others, if any, the tenth time.
STABLE = (
    "example",
    "ipv4-transport-tcp",
    "ipv6-tunnel",
    "inner-protocols",
    "outer-headers",
    "natt",
    "pcapng-dsb",
    "link-all",
    "link-ethernet",
    "link-vlan",
    "link-qinq",
    "link-sll",
    "link-sll2",
    "link-raw",
    "link-ipv4",
    "link-ipv6",
    "link-null-bsd",
    "link-null-freebsd",
    "link-null-darwin",
    "fragments-v4",
    "fragments-v6",
    "corrupt-icv",
    "unknown-spi",
    "snaplen",
    "bad-trailer",
    "malformed",
    "kernel-gso-v4",
    "kernel-gso-v6",
    "esn-wrap",
    "algorithms",
    "iv-reuse",
    "iv-seq-minus-1",
    "iv-policies",
    "sequence",
    "shared-key",
)


@cache
def seeds() -> tuple[Seed, ...]:
    """The stable scenarios that still exist, then every other one of the registry."""
    names = [n for n in STABLE if n in SCENARIOS] + [n for n in SCENARIOS if n not in STABLE]
    return tuple(_seed(name) for name in names)


@cache
def _split() -> tuple[tuple[Seed, ...], tuple[Seed, ...]]:
    stable = tuple(s for s in seeds() if s.name in STABLE)
    return stable, tuple(s for s in seeds() if s.name not in STABLE)


def pick_seed(rng: random.Random) -> Seed:
    """A seed scenario: a stable one 9 times in 10, a newer one (if any) otherwise."""
    stable, newer = _split()
    if rng.random() < 0.9 or not newer:
        return stable[rng.randrange(len(stable))]
    return newer[rng.randrange(len(newer))]


def secret_bytes(sa: SecurityAssociation) -> list[bytes]:
    """The key material of one SA (the harness is allowed to look)."""
    out = [sa.key.reveal()]
    if sa.auth_key is not None:
        out.append(sa.auth_key.reveal())
    return [k for k in out if len(k) >= 8]
