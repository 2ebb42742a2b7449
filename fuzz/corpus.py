"""The whole corpus: the scenarios' seeds (fuzz/seeds.py) and the long steady ones
(fuzz/steady.py), and every key byte string of it for the leak scanner.

In: nothing. Out: ``seed_named`` and ``all_secrets``. Raises nothing.
"""

from __future__ import annotations

from functools import cache

from fuzz.seeds import Seed, secret_bytes, seeds
from fuzz.steady import steady_seeds


def _every_seed() -> tuple[Seed, ...]:
    """The scenarios' seeds and the long steady ones."""
    return (*seeds(), *(st.seed for st in steady_seeds()))


@cache
def all_secrets() -> tuple[bytes, ...]:
    """Every key of the corpus, longest first, without repeats."""
    keys = {k for s in _every_seed() for sa in s.sas for k in secret_bytes(sa)}
    return tuple(sorted(keys, key=lambda k: (-len(k), k)))


@cache
def seed_named(name: str) -> Seed:
    """The seed of the scenario (or the steady seed) called ``name``."""
    return next(s for s in _every_seed() if s.name == name)
