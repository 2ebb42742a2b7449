"""The IV derivation check's bulk rule is its per-packet rule (checks/bulk.py).

An SA settled on its scheme from its first 64 packets (seqiv's xor, an
additive counter, CBC with echainiv's IVs, CBC with random IVs), then a
generated batch: IVs built from the packet's own number, from a neighbour's,
from none, or (CBC) the previous packet's last ciphertext block. The first
row the bulk rule refuses is the first that ``observe`` notes in the
packet's detail; the rows before it get ``iv_seq_delta`` 0 from the bulk
columns exactly when ``observe`` gives them 0; committed in bulk, they
leave the SA as ``observe`` does: the same columns for the rest of the
batch, the same findings. The same without a key (the keyless lane): the
IV read as 8 bytes, the ICV's length unknown, and an SA that follows no
counter tested for IVs found where the previous packet's last cipher block
may lie (``_chaining_keyless``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st

from espforensics.checks.chains import TAIL_PLACES
from espforensics.checks.context import Flow, SaState
from espforensics.checks.iv_derivation import WINDOW, IvDerivationCheck
from espforensics.checks.perflow import Holds
from espforensics.keys.sa import CBC_AES, RFC4106
from espforensics.model.enums import IvScheme, Verdict
from espforensics.synth.esp import echainiv_block
from tests.support.bulk_batches import M64, Pkt, context, datagram, first, flow_rows, keyed, sa_of

KEY = bytes(range(16))
C = 0x0123456789ABCDEF
SALT = bytes(range(100, 116))
# ``seq``: IV = seq64 (c = 0), ``tied``: a constant whose low byte is zero: xor and add
# read every window packet alike (seqs 1..64), and the batch's too (up to 80) (issue 35).
TIED = 0x0123456789AB0100
SCHEMES = ("xor", "add", "seq", "tied", "echainiv", "random")
KEYLESS = ("xor", "add", "seq", "tied", "random")  # IVs as 8 bytes: echainiv's look random
# Where a keyless chained IV is taken from, back from the previous datagram's end: every
# place ``_chaining_keyless`` looks, and some it does not.
BACKS = sorted({*TAIL_PLACES, 8, 12, 44, 52, 56})
_COUNTERS = {"xor": (C, False), "add": (C, True), "seq": (0, False), "tied": (TIED, True)}


def _ecb(block: bytes) -> bytes:
    enc = Cipher(algorithms.AES(KEY), modes.ECB()).encryptor()
    return enc.update(block) + enc.finalize()


def _iv(scheme: str, seq64: int, noise: int) -> bytes:
    """The IV ``scheme`` builds for ``seq64`` (``noise`` for random IVs)."""
    if scheme in _COUNTERS:
        const, additive = _COUNTERS[scheme]
        return ((seq64 + const) & M64 if additive else seq64 ^ const).to_bytes(8)
    if scheme == "echainiv":
        return _ecb(echainiv_block(seq64, SALT))
    return _ecb(noise.to_bytes(16))  # random-looking


def _pkt(frame: int, seq64: int, iv: bytes, keyless: bool = False, blocks: int = 2) -> Pkt:
    """A packet of ``blocks`` ciphertext blocks: with 2, a keyless datagram is short enough
    that its farthest chaining places fall in its header and first 16 bytes (not looked at);
    with 4 or more, none do (the bulk rule's two ways)."""
    ct = b"".join(_ecb((frame + (i << 64)).to_bytes(16)) for i in range(blocks))
    if keyless:  # its ICV is part of what follows the IV, the ICV's length unknown
        tail = _ecb((frame + 2 << 64).to_bytes(16))
        return Pkt(frame, seq64, iv[:8], ct + tail, b"", verdict=Verdict.UNKNOWN_SA)
    return Pkt(frame, seq64, iv, ct, frame.to_bytes(16))


def _flow(scheme: str, keyless: bool = False) -> Flow:
    if keyless:
        return Flow(0x3001, "192.0.2.1", "192.0.2.2", SaState())
    if scheme in _COUNTERS:
        return keyed(sa_of(0x1001, RFC4106, KEY + bytes(4)))
    return keyed(sa_of(0x2001, CBC_AES, KEY, "hmac(sha256)"))


def _check(flow: Flow, history: list[Pkt]) -> IvDerivationCheck:
    check = IvDerivationCheck(Holds())
    for p in history:
        check.observe(context(flow, p))
    return check


@st.composite
def _batches(draw: st.DrawFn) -> tuple[str, bool, list[Pkt], list[Pkt]]:
    keyless = draw(st.booleans())
    scheme = draw(st.sampled_from(KEYLESS if keyless else SCHEMES))
    blocks = draw(st.sampled_from([2, 4]))
    history = [_pkt(n, n, _iv(scheme, n, n * 7919), keyless, blocks) for n in range(1, WINDOW + 1)]
    batch: list[Pkt] = []
    kinds = ["own", "own", "own", "next", "none"] + (["chained"] if scheme not in _COUNTERS else [])
    for n in range(WINDOW + 1, WINDOW + 1 + draw(st.integers(1, 16))):
        kind = draw(st.sampled_from(kinds))
        prev = batch[-1] if batch else history[-1]
        if kind == "chained" and keyless:  # 8 bytes from near the previous datagram's end
            before = datagram(_flow(scheme, keyless), prev)
            back = draw(st.sampled_from(BACKS))
            iv = before[len(before) - back : len(before) - back + 8]
        elif kind == "chained":  # the previous packet's last ciphertext block
            iv = prev.ct[-16:]
        elif kind == "none":
            iv = _iv("random", n, draw(st.integers(0, M64)))[: len(prev.iv)]
        else:
            iv = _iv(scheme, n + (kind == "next"), n * 7919)
        batch.append(_pkt(n, n, iv, keyless, blocks))
    return scheme, keyless, history, batch


@settings(max_examples=200, deadline=None)
@given(_batches())
def test_bulk_rule_is_the_per_packet_rule(case: tuple[str, bool, list[Pkt], list[Pkt]]) -> None:
    scheme, keyless, history, batch = case
    flow = _flow(scheme, keyless)
    lane, ref = _check(flow, history), _check(flow, history)
    assert lane.admits(flow), scheme  # settled on its scheme
    rows = flow_rows(flow, batch)
    taken = first(lane.refuses(rows))
    refs = [context(flow, p) for p in batch]
    for pkt in refs:
        ref.observe(pkt)
    assert taken == first([bool(c.rec.detail) for c in refs])  # row by row to the first refused
    counter = lane.columns(rows).counter
    delta0 = [c.rec.iv_seq_delta == 0 for c in refs[:taken]]
    if counter is None:
        assert not any(delta0)
    else:
        assert counter[:taken].tolist() == delta0
    if taken:
        lane.commit(flow_rows(flow, batch[:taken]))
    rest = [context(flow, p) for p in batch[taken:]]
    for pkt in rest:
        lane.observe(pkt)
    got = [(c.rec.iv_seq_delta, c.rec.detail) for c in rest]
    assert got == [(c.rec.iv_seq_delta, c.rec.detail) for c in refs[taken:]]
    assert list(lane.finish()) == list(ref.finish())
    assert lane.schemes() == ref.schemes()


def test_a_chained_cbc_iv_and_a_neighbours_iv_are_refused() -> None:
    flow = _flow("echainiv")
    history = [_pkt(n, n, _iv("echainiv", n, 0)) for n in range(1, WINDOW + 1)]
    check = _check(flow, history)
    own = _pkt(65, 65, _iv("echainiv", 65, 0))
    chained = _pkt(66, 66, own.ct[-16:])
    neighbour = _pkt(67, 67, _iv("echainiv", 68, 0))
    assert check.refuses(flow_rows(flow, [own, chained])).tolist() == [False, True]
    assert check.refuses(flow_rows(flow, [own, neighbour])).tolist() == [False, True]
    counter = check.columns(flow_rows(flow, [own])).counter
    assert counter is not None and counter.tolist() == [True]


def test_an_sa_still_choosing_its_constant_is_not_admitted() -> None:
    flow = _flow("xor")
    check = _check(flow, [_pkt(n, n, _iv("xor", n, 0)) for n in range(1, WINDOW)])
    assert not check.admits(flow)  # 63 packets: the window holds them
    check.observe(context(flow, _pkt(WINDOW, WINDOW, _iv("xor", WINDOW, 0))))
    assert check.admits(flow)


def test_a_tie_of_xor_and_add_is_admitted_and_the_row_that_breaks_it_refused() -> None:
    """A constant of zero low bits: xor and add read the window alike, so the SA is the
    lane's at once; the first row they read apart is refused, and decides, per frame."""
    flow = _flow("tied")
    check = _check(flow, [_pkt(n, n, _iv("tied", n, 0)) for n in range(1, WINDOW + 1)])
    assert check.admits(flow)
    sa = check._sas.known(flow)
    assert sa is not None and sa.alt is not None  # undecided
    rows = [_pkt(n, n, _iv("tied", n, 0)) for n in (65, 66, 0x100, 0x101)]
    assert check.refuses(flow_rows(flow, rows)).tolist() == [False, False, True, True]
    for p in rows:
        check.observe(context(flow, p))
    assert sa.alt is None and sa.additive and sa.deviating == 0  # told apart: the counter's


@pytest.mark.parametrize("blocks", [2, 4])
@pytest.mark.parametrize("row", [0, 1])
@pytest.mark.parametrize("back", BACKS)
def test_keyless_chaining_is_looked_for_where_observe_looks(
    back: int, row: int, blocks: int
) -> None:
    """An 8-byte IV taken ``back`` bytes before the previous datagram's end (the SA's kept
    tail for a batch's first row, the row before for the others): refused exactly where
    ``observe`` notes it chained, at the places after the header and first 16 bytes, in
    short datagrams and in long ones (every place after them)."""
    flow = _flow("random", keyless=True)
    history = [_pkt(n, n, _iv("random", n, n * 7919), True, blocks) for n in range(1, WINDOW + 1)]
    check = _check(flow, history)
    assert check.admits(flow)
    batch = [_pkt(65, 65, _iv("random", 65, 1), True, blocks)]
    before = datagram(flow, batch[0] if row else history[-1])
    iv = before[len(before) - back : len(before) - back + 8]
    batch.append(_pkt(66, 66, iv, True, blocks))
    if not row:
        batch = batch[1:]
    refused = check.refuses(flow_rows(flow, batch)).tolist()
    noted = []
    for p in batch:
        pkt = context(flow, p)
        check.observe(pkt)
        noted.append("(chained)" in pkt.rec.detail)
    assert refused == noted
    assert noted[-1] == (back in TAIL_PLACES and back <= len(before) - 44)


@pytest.mark.parametrize("settled", [False, True])
def test_rows_clear_from_their_header_on_are_counted_and_the_others_refused(
    settled: bool,
) -> None:
    """A keyless flow whose last whole packet was clear from its ESP header on (NULL):
    admitted, settled on a scheme or not. In a batch that starts with rows its bytes rules
    found clear from their header on (``FlowRows.clear``), every row from the first that
    is not is refused, and none gets ``iv_seq_delta``; committed, the clear rows are
    counted as packets without IV, as ``observe`` counts such packets. A batch without
    such rows: with no scheme settled, every row refused; settled, none. A batch that
    starts with rows with IVs: those judged by the scheme, every row from the first
    clear one refused."""
    flow = _flow("xor", keyless=True)
    history = [_pkt(n, n, _iv("xor", n, 0), True) for n in range(1, WINDOW + 1)] if settled else []
    check = _check(flow, history)
    flow.state.clear_whole = True
    assert check.admits(flow)
    batch = [_pkt(n, n, _iv("xor", n, 0), True) for n in range(WINDOW + 1, WINDOW + 5)]
    rows = replace(flow_rows(flow, batch), clear=np.array([True, True, False, True]))
    assert check.refuses(rows).tolist() == [False, False, True, True]  # from the switch on
    assert check.columns(rows).counter is None
    check.commit(replace(flow_rows(flow, batch[:2]), clear=np.array([True, True])))
    # no IV read: the settled scheme stays; an SA of no other packet has none
    assert set(check.schemes().values()) == {IvScheme.SEQIV if settled else IvScheme.NONE}
    assert check._sas.get(flow).no_iv == 2  # what ``observe`` counts
    plain = replace(flow_rows(flow, batch), clear=np.zeros(4, np.bool_))
    assert check.refuses(plain).tolist() == [not settled] * 4
    mixed = replace(flow_rows(flow, batch), clear=np.array([False, False, True, False]))
    assert check.refuses(mixed).tolist() == [not settled] * 2 + [True, True]
