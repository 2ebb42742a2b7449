"""analyzer/flows.py: one Flow per (SPI, source, destination), one SaState per SA."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest

from espforensics.analyzer import flows
from espforensics.analyzer.flows import FlowTable
from espforensics.keys import SaTable
from espforensics.keys.sa import Secret, SecurityAssociation

A, B, C = (IPv4Address(f"192.0.2.{n}").packed for n in (1, 2, 3))


def _table() -> SaTable:
    table = SaTable()
    table.add(
        SecurityAssociation(
            spi=0x1001,
            algorithm="rfc4106(gcm(aes))",
            key=Secret(bytes(20)),
            icv_bits=128,
            esn=True,
            esn_hi=5,
            origin="test",
        )
    )
    return table


def test_a_flow_is_made_once_and_an_sa_has_one_state() -> None:
    table = FlowTable(_table())
    ab = table.flow_for(0x1001, A, B)
    assert (ab.spi, ab.src, ab.dst) == (0x1001, "192.0.2.1", "192.0.2.2")
    assert table.flow_for(0x1001, A, B) is ab
    ac = table.flow_for(0x1001, A, C)  # the SA names no addresses: the same SA
    assert ac is not ab and ac.state is ab.state
    assert ab.state.sa is not None and ab.state.tracker.infer(7) == 5 << 32 | 7
    assert len(table) == 2


def test_flows_of_unknown_spis_have_a_keyless_state_each() -> None:
    table = FlowTable(_table())
    one, other = table.flow_for(0x2002, A, B), table.flow_for(0x2002, B, A)
    assert one.state.sa is None and other.state.sa is None
    assert one.state is not other.state


def test_forget_flows_finds_the_sa_again_and_keeps_its_state() -> None:
    sas = SaTable()
    table = FlowTable(sas)
    before = table.flow_for(0x1001, A, B)
    assert before.state.sa is None
    sas.merge(_table())
    assert table.flow_for(0x1001, A, B) is before  # until told, the flow stays
    table.forget_flows()
    after = table.flow_for(0x1001, A, B)
    assert after is not before and after.state.sa is not None
    table.forget_flows()
    assert table.flow_for(0x1001, A, B).state is after.state


def test_address_names_are_cached_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flows, "MAX_NAMES", 2)
    table = FlowTable(SaTable())
    v6 = bytes.fromhex("20010db8000000000000000000000001")
    first = table.name(A)
    assert table.name(A) is first  # cached: the same text, not made again
    assert [table.name(a) for a in (B, C, v6)] == ["192.0.2.2", "192.0.2.3", "2001:db8::1"]
    again = table.name(A)  # the cache was cleared when it passed two names
    assert again == "192.0.2.1" and again is not first
