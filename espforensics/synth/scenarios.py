"""The registry of named scenarios.

In: a scenario name and a seed. Out: ``SCENARIOS`` (name -> builder, one
dict literal, the only registry) and ``build_scenario``. Raises
``KeyError`` naming the known scenarios for an unknown name.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from espforensics.synth import scenarios_basic as basic
from espforensics.synth import scenarios_crypto as crypto
from espforensics.synth import scenarios_encauth as encauth
from espforensics.synth import scenarios_esn as esn
from espforensics.synth import scenarios_faults as faults
from espforensics.synth import scenarios_ivschemes as ivschemes
from espforensics.synth import scenarios_midstream as midstream
from espforensics.synth.truth import Scenario

ScenarioBuilder = Callable[[int], Scenario]


def _link(name: str) -> ScenarioBuilder:
    return partial(basic.links, names=(name,))


SCENARIOS: dict[str, ScenarioBuilder] = {
    "example": basic.example,
    "ipv4-transport-tcp": basic.ipv4_transport_tcp,
    "ipv6-tunnel": basic.ipv6_tunnel,
    "inner-protocols": basic.inner_protocols,
    "outer-headers": basic.outer_headers,
    "natt": basic.natt,
    "pcapng-dsb": basic.pcapng_dsb,
    "link-all": basic.links,
    "link-ethernet": _link("ethernet"),
    "link-vlan": _link("vlan"),
    "link-qinq": _link("qinq"),
    "link-sll": _link("sll"),
    "link-sll2": _link("sll2"),
    "link-raw": _link("raw"),
    "link-ipv4": _link("ipv4"),
    "link-ipv6": _link("ipv6"),
    "link-null-bsd": _link("null-bsd"),
    "link-null-freebsd": _link("null-freebsd"),
    "link-null-darwin": _link("null-darwin"),
    "fragments-v4": faults.fragments_v4,
    "fragments-v6": faults.fragments_v6,
    "corrupt-icv": faults.corrupt_icv,
    "unknown-spi": faults.unknown_spi,
    "snaplen": faults.snaplen,
    "bad-trailer": faults.bad_trailer,
    "malformed": faults.malformed,
    "kernel-gso-v4": faults.kernel_gso_v4,
    "kernel-gso-v6": faults.kernel_gso_v6,
    "esn-wrap": crypto.esn_wrap,
    "esn-fault-v4": esn.esn_fault_v4,
    "esn-fault-v6": esn.esn_fault_v6,
    "esn-fault-late-start": esn.esn_fault_late_start,
    "algorithms": crypto.algorithms,
    "aeads": crypto.aeads,
    "encauth": encauth.encauth,
    "encauth-faults": encauth.encauth_faults,
    "iv-reuse": crypto.iv_reuse,
    "iv-seq-minus-1": crypto.iv_seq_minus_1,
    "iv-policies": crypto.iv_policies,
    "sequence": crypto.sequence,
    "shared-key": crypto.shared_key,
    "midstream-even-2": partial(midstream.midstream, parity="even", lead=2),
    "midstream-even-10": partial(midstream.midstream, parity="even", lead=10),
    "midstream-even-100": partial(midstream.midstream, parity="even", lead=100),
    "midstream-odd-2": partial(midstream.midstream, parity="odd", lead=2),
    "midstream-odd-10": partial(midstream.midstream, parity="odd", lead=10),
    "midstream-odd-100": partial(midstream.midstream, parity="odd", lead=100),
    "iv-counter": ivschemes.iv_counter,
    "iv-random": ivschemes.iv_random,
    "iv-constant": ivschemes.iv_constant,
    "null-icmp": ivschemes.null_icmp,
    "esp-header-only": ivschemes.esp_header_only,
    "esn-below": ivschemes.esn_below,
}


def build_scenario(name: str, seed: int = 1) -> Scenario:
    """Build the scenario called ``name`` from ``seed``."""
    try:
        builder = SCENARIOS[name]
    except KeyError:
        known = ", ".join(SCENARIOS)
        raise KeyError(f"unknown scenario {name!r}; known: {known}") from None
    return builder(seed)
