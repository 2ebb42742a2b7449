"""One fuzz input per (campaign seed, index): its kind, its files, how to run it.

In: the campaign seed, the input's index and its kind. Out: a ``FuzzInput``
whose files are lists of chunks (capture records or blocks, key-file
lines), so the minimizer can drop chunks and keep the rest well formed.
The same (seed, index, kind) always gives the same input. Raises nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from espforensics.model.records import DecryptionSecrets
from fuzz.captures import ESPS, pcap_chunks, pcapng_chunks
from fuzz.keytext import MUTATORS
from fuzz.packets import mutate_frames
from fuzz.seeds import Seed, pick_seed
from fuzz.steady import pick_steady, steady_frames

CAPTURE_KINDS = ("pcap", "pcapng")
KEY_KINDS = ("yaml", "xfrm", "esp_sa")
KINDS = (*CAPTURE_KINDS, *KEY_KINDS, "compare", "batch", "steady")
KEY_NAMES = {"yaml": "keys.yaml", "xfrm": "xfrm", "esp_sa": "esp_sa"}
COMPRESSIONS = ("gz", "bz2", "xz", "zst")


@dataclass(frozen=True, slots=True)
class FuzzInput:
    """Files (name -> chunks) and what the oracle does with them."""

    kind: str
    index: int
    seed: str  # the scenario the input grew from
    files: tuple[tuple[str, tuple[bytes, ...]], ...]
    compress: str | None = None  # applied to every capture when written
    table: bool = False  # the seed's SAs given as an SaTable (no key file to parse)
    full: bool = False  # analyze (the DataFrame) and every renderer, not only summarize
    to_dir: bool = False  # also run analyze_to_dir
    plots: bool = False  # ... with plots (a second each: rare)

    def with_files(self, files: dict[str, tuple[bytes, ...]]) -> FuzzInput:
        return replace(self, files=tuple(files.items()))


def rng_for(campaign: int, index: int) -> random.Random:
    """The generator of one input: independent of every other input and of --jobs."""
    return random.Random(f"espforensics-fuzz:{campaign}:{index}")


def _keys_file(rng: random.Random, seed: Seed, stem: str, mutate: bool) -> tuple[str, bytes]:
    kind = rng.choice(KEY_KINDS)
    text = {"yaml": seed.yaml, "xfrm": seed.xfrm, "esp_sa": seed.esp_sa}[kind]
    if mutate:
        text = MUTATORS[kind](rng, text)
    return f"{stem}.{KEY_NAMES[kind]}", text.encode("utf-8", "surrogatepass")


def capture_file(
    rng: random.Random, seed: Seed, fmt: str, stem: str, rate: float
) -> tuple[str, tuple[bytes, ...]]:
    """A mutated capture of the seed's frames as (file name, chunks)."""
    frames = mutate_frames(rng, seed.frames, rate)
    if fmt == "pcap":
        chunks = pcap_chunks(rng, frames, seed.linktypes, rate)
    else:
        secrets = seed.secrets
        if not secrets and rng.random() < 0.2:  # any capture may carry its keys in a DSB
            secrets = (DecryptionSecrets(ESPS, seed.esp_sa.encode()),)
        chunks = pcapng_chunks(rng, frames, seed.linktypes, secrets, rate)
    r = rng.random()
    if r < rate / 8 and len(chunks) > 1:  # the file ends inside the last record
        last = chunks[-1]
        chunks[-1] = last[: rng.randrange(len(last))]
    elif r < rate / 6:
        chunks.append(rng.randbytes(rng.randint(1, 40)))
    return f"{stem}.{fmt}", tuple(chunks)


def _capture_input(rng: random.Random, kind: str, index: int, seed: Seed) -> FuzzInput:
    rate = rng.choice((0.05, 0.2, 0.5, 1.0))
    files = dict([capture_file(rng, seed, kind, "a", rate)])
    table = rng.random() < 0.85  # a key file (keys.yaml parses at 30-80 ms) 3 times in 20
    if not table and rng.random() < 0.7:
        name, text = _keys_file(rng, seed, "a", mutate=rng.random() < 0.1)
        files[name] = (text,)
    compress = rng.choice(COMPRESSIONS) if rng.random() < 0.02 else None
    return FuzzInput(kind, index, seed.name, tuple(files.items()), compress, table)


def _steady_input(rng: random.Random, index: int) -> FuzzInput:
    """A long steady run with faults inside (fuzz/steady.py), analyzed with both lanes."""
    st = pick_steady(rng)
    frames = steady_frames(rng, st)
    fmt = rng.choice(CAPTURE_KINDS)
    if fmt == "pcap":
        chunks = pcap_chunks(rng, frames, st.seed.linktypes, 0.0)
    else:
        chunks = pcapng_chunks(rng, frames, st.seed.linktypes, (), 0.0)
    files = {f"a.{fmt}": tuple(chunks)}
    table = rng.random() < 0.9  # else the keys in a file of any format, unmutated
    if not table:
        name, text = _keys_file(rng, st.seed, "a", mutate=False)
        files[name] = (text,)
    return FuzzInput("steady", index, st.seed.name, tuple(files.items()), None, table, True)


def _key_input(rng: random.Random, kind: str, index: int, seed: Seed) -> FuzzInput:
    text = {"yaml": seed.yaml, "xfrm": seed.xfrm, "esp_sa": seed.esp_sa}[kind]
    lines = MUTATORS[kind](rng, text).encode("utf-8", "surrogatepass").splitlines(keepends=True)
    files = {f"a.{KEY_NAMES[kind]}": tuple(lines)}
    if rng.random() < 0.15:  # the keys used on the seed's capture: decryption with odd SAs
        files.update([capture_file(rng, seed, "pcap", "a", rng.choice((0.0, 0.2)))])
    return FuzzInput(kind, index, seed.name, tuple(files.items()))


def _multi_input(rng: random.Random, kind: str, index: int, seed: Seed) -> FuzzInput:
    files: dict[str, tuple[bytes, ...]] = {}
    for stem in ("a", "b", "c")[: 2 if kind == "compare" else rng.randint(1, 3)]:
        other = seed if rng.random() < 0.5 else pick_seed(rng)
        rate = rng.choice((0.0, 0.2, 0.5))
        files.update([capture_file(rng, other, rng.choice(CAPTURE_KINDS), stem, rate)])
        if rng.random() < 0.7:
            name, text = _keys_file(rng, other, stem, mutate=rng.random() < 0.2)
            files[name] = (text,)
    return FuzzInput(kind, index, seed.name, tuple(files.items()))


def make_input(campaign: int, index: int, kind: str) -> FuzzInput:
    """The input number ``index`` of the campaign ``campaign``."""
    rng = rng_for(campaign, index)
    if kind == "steady":  # always analyze(), to compare the lanes; to a folder 1 in 23
        return replace(_steady_input(rng, index), to_dir=rng.random() < 1 / 23)
    seed = pick_seed(rng)
    if kind in CAPTURE_KINDS:
        fuzz_input = _capture_input(rng, kind, index, seed)
    elif kind in KEY_KINDS:
        fuzz_input = _key_input(rng, kind, index, seed)
    else:
        fuzz_input = _multi_input(rng, kind, index, seed)
    to_dir = rng.random() < 1 / 23
    plots = to_dir and rng.random() < 1 / 200  # a plot run costs a second or more
    return replace(fuzz_input, full=rng.random() < 0.25, to_dir=to_dir, plots=plots)
