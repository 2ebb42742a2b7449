"""Flows of (SPI, outer source, outer destination), their SA states and address text.

In: the capture's ``SaTable`` (key files and Decryption Secrets Blocks).
Out: one ``Flow`` per (SPI, source, destination), made on first use, and
one ``SaState`` per SA shared by every flow the SA matches (RFC 4301 s4.4.2:
an SA is found by SPI, and the addresses where the SA names them). Raises
nothing.
"""

from __future__ import annotations

from espforensics.checks.context import Flow, KeyedSaState, SaState, flow_wire
from espforensics.decode.inner import ntop
from espforensics.keys import SaTable

MAX_NAMES = 65536  # address texts cached at the most (captures of scans hold millions)


class FlowTable:
    """The flows seen, the SA state of each SA used and the text of each address."""

    __slots__ = ("_by_sa", "_flows", "_names", "_sas")

    def __init__(self, sas: SaTable) -> None:
        self._sas = sas
        # By ``flow_wire``: the flow's key for the checks' state too (``Flow.wire``)
        self._flows: dict[bytes, Flow] = {}
        self._names: dict[bytes, str] = {}
        self._by_sa: dict[int, SaState] = {}

    def __len__(self) -> int:
        return len(self._flows)

    def flow_for(self, spi: int, src: bytes, dst: bytes) -> Flow:
        """The flow of (SPI, outer source, outer destination), made on first use."""
        key = flow_wire(spi, src, dst)
        flow = self._flows.get(key)
        if flow is None:
            sa = self._sas.lookup(spi, src, dst)
            if sa is None:
                state = SaState()
            else:
                state = self._by_sa.get(id(sa)) or KeyedSaState(sa)
                self._by_sa[id(sa)] = state
            flow = self._flows[key] = Flow(spi, self.name(src), self.name(dst), state, key)
        return flow

    def forget_flows(self) -> None:
        """New SAs were loaded: find each flow's SA again (the SA states stay)."""
        self._flows.clear()

    def name(self, addr: bytes) -> str:
        """Text of an address, cached (bounded by ``MAX_NAMES``)."""
        name = self._names.get(addr)
        if name is None:
            if len(self._names) > MAX_NAMES:
                self._names.clear()
            name = self._names[addr] = ntop(addr)
        return name
