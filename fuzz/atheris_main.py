"""An optional libFuzzer entry point through atheris (coverage-guided, not deterministic).

In: ``python -m fuzz.atheris_main [libFuzzer options]`` with atheris
installed (a cp311 manylinux wheel exists on PyPI; it is not a dependency
of the project or of its tests). Each libFuzzer input either picks a
structure-aware input of the deterministic harness (first byte even) or
is used raw as a capture or key file (first byte odd). Out: libFuzzer's
own report; an internal error or a broken invariant raises
``AssertionError`` so libFuzzer saves the crashing input. The tests and
the long run use ``fuzz.run`` instead.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

# A raw input as (file name, kind, use the example's SAs as a table).
_RAW = (
    ("a.pcap", "pcap", True),
    ("a.pcapng", "pcapng", True),
    ("a.keys.yaml", "yaml", False),
    ("a.xfrm", "xfrm", False),
    ("a.esp_sa", "esp_sa", False),
)


def _one(oracle: Any, fuzz_input: Any) -> None:
    verdict = oracle.run(fuzz_input)
    if verdict.failures:
        raise AssertionError("; ".join(f"{f.cls}: {f.detail}" for f in verdict.failures))


def main() -> None:
    """Hand the harness to libFuzzer."""
    atheris: Any = importlib.import_module("atheris")
    with atheris.instrument_imports(include=["espforensics"]):
        from fuzz.campaign import prepare_process  # noqa: PLC0415
        from fuzz.inputs import KINDS, FuzzInput, make_input  # noqa: PLC0415
        from fuzz.oracle import Oracle  # noqa: PLC0415
        from fuzz.run import scratch_dir  # noqa: PLC0415
    prepare_process(4096)
    oracle = Oracle(scratch_dir())

    def test_one(data: bytes) -> None:
        if len(data) < 5:
            return
        if data[0] % 2 == 0:
            index = int.from_bytes(data[1:5], "big")
            _one(oracle, make_input(data[0] // 2, index, KINDS[index % len(KINDS)]))
            return
        name, kind, table = _RAW[data[1] % len(_RAW)]
        _one(oracle, FuzzInput(kind, 0, "example", ((name, (data[2:],)),), table=table))

    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
