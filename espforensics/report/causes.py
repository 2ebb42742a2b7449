"""Likely causes: a table of fault patterns and the kernel paths known to make them.

In: a ``Summary``. Out: ``likely_causes(summary)``, one ``LikelyCause``
per entry of ``CAUSES`` that some SA matches, with the evidence filled
from the summary (counts, frames, offsets) and what would rule it out.
Raises nothing; reads no clock and no environment.

The table is data: each entry names the facts it needs (``Condition``
over the fields of ``SaFacts``, report/facts.py) and templates over the same
fields for its evidence; every entry has a fixture test
(tests/report/test_causes.py). A match is a likelihood,
not a proof: the wording says "likely" and why, and names what to try
to rule it out.
"""

from __future__ import annotations

import operator
import string
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from espforensics.report.facts import ModeFact, SaFacts, as_dict, sa_facts, shown_frames
from espforensics.report.narrative import plural
from espforensics.results.summary import Summary


class Op(StrEnum):
    EQ = "=="
    GE = ">="
    LE = "<="
    IN = "in"


_OPS: dict[Op, Callable[[Any, Any], bool]] = {
    Op.EQ: operator.eq,
    Op.GE: operator.ge,
    Op.LE: operator.le,
    Op.IN: lambda fact, values: fact in values,
}


@dataclass(frozen=True, slots=True)
class Condition:
    """``fact op value``, e.g. ``Condition("shift", Op.EQ, 20)``."""

    fact: str
    op: Op
    value: int | str | frozenset[str]

    def holds(self, facts: SaFacts) -> bool:
        return _OPS[self.op](getattr(facts, self.fact), self.value)

    def __str__(self) -> str:
        value = sorted(self.value) if isinstance(self.value, frozenset) else self.value
        return f"{self.fact} {self.op.value} {value}"


@dataclass(frozen=True, slots=True)
class CauseEntry:
    """One row of the table: a fault pattern and the kernel path known to make it."""

    id: str
    title: str
    when: tuple[Condition, ...]  # all must hold for one SA
    evidence: str  # template over SaFacts fields: what matched, per SA
    frames: str  # the SaFacts field with the frames to look at
    kernel_path: str
    why: str  # why the pattern points there (the "likely")
    rule_out: str  # what would show it is not this
    confirm: str  # what would show it is this: a test on the sender


@dataclass(frozen=True, slots=True)
class LikelyCause:
    """An entry of the table that the capture matches, with its evidence."""

    id: str
    title: str
    kernel_path: str
    why: str
    rule_out: str
    confirm: str
    evidence: tuple[str, ...]  # one sentence per SA that matched
    spis: tuple[int, ...]
    frames: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """The ``likely_causes`` entry of summary.json."""
        return {
            "id": self.id,
            "title": self.title,
            "kernel_path": self.kernel_path,
            "why": self.why,
            "rule_out": self.rule_out,
            "confirm": self.confirm,
            "evidence": list(self.evidence),
            "spis": [f"{s:#010x}" for s in self.spis],
            "frames": list(self.frames),
        }


_NOT_TUNNEL = frozenset({ModeFact.TRANSPORT.value, ModeFact.UNKNOWN.value})
# A duplicated packet leaves at most one queue after its original: Linux's default
# txqueuelen and netem's default limit are 1,000 packets.
QUEUE_FRAMES = 1000

CAUSES: tuple[CauseEntry, ...] = (
    CauseEntry(
        id="transport-gso-inner-tunnel",
        title="transport-mode GSO of an inner tunnel",
        when=(
            Condition("misplaced", Op.GE, 1),
            Condition("shift", Op.EQ, 20),
            Condition("clear_len", Op.EQ, 4),
            Condition("clear_version", Op.EQ, 4),
            Condition("mode", Op.IN, _NOT_TUNNEL),
        ),
        evidence="{misplaced:packet} of SPI {spi_hex} ({src} -> {dst}, {mode_text}) carry "
        "the ESP header at byte {esp_offset} instead of {expected_offset} (+{shift}), "
        "behind {clear_len} bytes of an inner IPv{clear_version} header in clear at byte "
        "{clear_offset} ({clear_hex}); frames {misplaced_frames}",
        frames="misplaced_frames",
        kernel_path="SKB_GSO_ESP: with esp4_offload/esp6_offload loaded, GSO packets of an "
        "inner ipip or ip6tnl tunnel over a transport-mode SA with software crypto are "
        "segmented by xfrm4_transport_gso_segment / xfrm6_transport_gso_segment (since "
        'commit 0aae2867aa60 "xfrm_output: Force software GSO only in tunnel mode")',
        why="that path writes the real ESP header at offset 4 of the inner IPv4 header and "
        "encrypts from the inner TCP header on: a 16-byte slot where the header belongs, 4 "
        "inner bytes in clear, the ESP header 20 bytes late: this layout exactly, as measured "
        "on the kernels that carry the commit; receivers drop these packets "
        "(XfrmInStateProtoError)",
        rule_out="misplaced headers that stay with TSO and GSO off on the tunnel device "
        "(ethtool -K DEV tso off gso off) or without esp4_offload/esp6_offload loaded, or "
        "on a kernel without commit 0aae2867aa60",
        confirm="the misplaced packets vanish with TSO and GSO off on the tunnel device and "
        "come back with them on, and the receiver's XfrmInStateProtoError "
        "(/proc/net/xfrm_stat) rises by their count",
    ),
    CauseEntry(
        id="esp6-iv-after-gso-increment",
        title="esp6_xmit builds the IV from xo->seq.low after the GSO increment",
        when=(
            Condition("ip_version", Op.EQ, 6),
            Condition("reused_ivs", Op.GE, 1),
            Condition("reuse_span", Op.EQ, 1),
            Condition("delta_min", Op.GE, 0),
            Condition("delta_max", Op.LE, 1),
        ),
        evidence="{reused_ivs:IV} of SPI {spi_hex} ({src} -> {dst}, IPv6) used again by the "
        "next sequence number; {iv_counter}; frames {reuse_frames}",
        frames="reuse_frames",
        kernel_path="esp6_xmit (net/ipv6/esp6_offload.c) takes the IV's sequence number from "
        "xo->seq.low after the GSO code has advanced it, so a GSO-sized packet is sealed "
        "with the IV of seq+1, which the next packet then uses too",
        why="seqiv makes every IV from its packet's own sequence number; IVs that fit seq+1 "
        "and nothing else, on an IPv6 SA, each followed by a packet repeating it, are what "
        "every IPv6 SA measured on Linux 6.1 to 7.3 showed",
        rule_out="the same deviations on IPv4 SAs of the same host and traffic, IVs still "
        "repeated with GSO off (ethtool -K DEV gso off tso off), or deviations other than "
        "seq+1",
        confirm="the repeated IVs vanish with GSO off (ethtool -K DEV gso off tso off) "
        "while IPv4 SAs of the same host and traffic never show them",
    ),
    CauseEntry(
        id="gso-segments-share-xo-seq",
        title="segments of one GSO packet share one xfrm_offload sequence under a queueing qdisc",
        when=(
            Condition("mode", Op.EQ, "tunnel"),
            Condition("reused_ivs", Op.GE, 1),
            Condition("reuse_span", Op.GE, 1),
            Condition("reuse_span", Op.LE, 4),
            Condition("delta_min", Op.GE, 0),
            Condition("delta_max", Op.LE, 4),
        ),
        evidence="{reused_ivs:IV} of SPI {spi_hex} ({src} -> {dst}, {mode_text}) used by "
        "packets at most {reuse_span} sequence numbers apart, each with its own sequence "
        "number; {iv_counter}; frames {reuse_frames}",
        frames="reuse_frames",
        kernel_path="xfrm_output_gso (net/xfrm/xfrm_output.c): the segments of one GSO "
        "packet share one xfrm_offload extension; while they wait in a queueing qdisc, a "
        "later segment overwrites the shared xo->seq before an earlier one is encrypted",
        why="several segments sealed with one shared sequence number give repeated IVs 1 to "
        "4 packets ahead while the ESP sequence numbers stay distinct, as measured with "
        "vxlan over a tunnel-mode SA under netem or tbf (and never with noqueue); "
        "receivers accept them, only a capture shows it",
        rule_out="repeated IVs that stay with a noqueue qdisc on the underlay (tc qdisc "
        "replace dev DEV root noqueue), or IVs more than 4 sequence numbers ahead",
        confirm="the repeated IVs vanish with a noqueue qdisc on the underlay and come back "
        "with netem or tbf",
    ),
    CauseEntry(
        id="esn-gso-wrap-early",
        title="ESN high half advanced one packet early at the 32-bit wrap (GSO ESN wrap)",
        when=(Condition("esn_early", Op.GE, 1),),
        evidence="{esn_early:packet} of SPI {spi_hex} ({src} -> {dst}) with seq low "
        "0xffffffff, verified only with the next ESN high half; frames {esn_frames}",
        frames="esn_frames",
        kernel_path="the GSO ESN wrap code (commits 4b549ccce941 and c05c5e5aa163) advances "
        "the high half before the last low value 0xffffffff is sent, so that packet's AAD "
        "and IV carry hi+1",
        why="the packet's place in the sequence says high half hi, its ICV verifies only "
        "with hi+1, and its IV encodes hi+1 too: sealed with the next high half one packet "
        "early, on IPv4 and IPv6 alike; a receiver drops it, and its IV is one "
        "the SA reaches again",
        rule_out="the packet with seq low 0xffffffff still verifying only with hi+1 when "
        "the SA crosses the wrap with GSO off (ethtool -K DEV gso off tso off); packets that "
        "verify with hi-1 after the wrap are another fault",
        confirm="the packet with seq low 0xffffffff verifies with hi, and a receiver keeps "
        "it, when the SA crosses the wrap with GSO off (ethtool -K DEV gso off tso off)",
    ),
    CauseEntry(
        id="first-seq-zero",
        title="a packet sealed with sequence number 0",
        when=(Condition("first_seq64", Op.EQ, 0),),
        evidence="the first packet of SPI {spi_hex} ({src} -> {dst}) in the capture carries "
        "sequence number 0",
        frames="",
        kernel_path="a send path that sealed a packet without taking a number from the SA's "
        "output counter: Linux takes it with ++x->replay.oseq (xfrm_replay_overflow and its "
        "ESN and offload variants), which never yields 0, so look for a path that reads "
        "XFRM_SKB_CB(skb)->seq.output or xo->seq before they are set",
        why="RFC 4303 s3.3.3: the counter starts at 0 and is incremented before each packet, "
        "so the first packet carries 1 and 0 is never sent",
        rule_out="a capture from the SA's first packet on that shows 1 there; or, without "
        "a key, an ESN SA whose guessed high half makes a low half 0 after a wrap look like 0",
        confirm="with a key, the packet verifies with sequence number 0 in its AAD; a capture "
        "from the SA's installation on (ip xfrm monitor) shows it as the first packet",
    ),
    CauseEntry(
        id="qdisc-duplicate-after-seq",
        title="a qdisc duplicated packets after their ESP sequence number was assigned",
        when=(
            Condition("dup_same_iv", Op.GE, 1),
            Condition("dup_new_iv", Op.EQ, 0),
            Condition("dup_lag", Op.LE, QUEUE_FRAMES),
        ),
        evidence="{dup_same_iv:sequence number} of SPI {spi_hex} ({src} -> {dst}) sent "
        "again by a different packet under the same IV as the first (one nonce twice), at "
        "most {dup_lag} frames later; no repeat under another IV; frames {dup_iv_frames}",
        frames="dup_iv_frames",
        kernel_path="with ESP offload (esp4_offload/esp6_offload) xfrm_output takes the "
        "sequence number (xo->seq) before the qdisc and esp_xmit seals the packet after it "
        "(validate_xmit_xfrm); a qdisc that duplicates (netem duplicate clones the skb and "
        "enqueues the copy again) hands over a second packet with the same xo->seq, which "
        "is sealed with the same IV over whatever data the copy holds by then",
        why="the repeats carry their original's IV as well as its number, so one transform "
        "sealed both (seqiv draws its IV constant at random per transform: a reinstalled SA "
        "or a second sender would use other IVs), and each repeat follows its original "
        "within one queue's length",
        rule_out="no qdisc that duplicates on the sender's egress (tc -s qdisc show dev "
        "DEV), repeats that stay without one, or an output counter that went back (ip xfrm "
        "state -s showing oseq below the highest number captured)",
        confirm="tc -s qdisc show dev DEV on the sender listing netem with duplicate, and "
        "the repeats vanishing with it removed (tc qdisc replace dev DEV root noqueue)",
    ),
    CauseEntry(
        id="seq-duplicate-new-ciphertext",
        title="one sequence number sealed twice with different contents under another IV",
        when=(Condition("dup_new_iv", Op.GE, 1),),
        evidence="{dup_new_iv:sequence number} of SPI {spi_hex} ({src} -> {dst}) sent "
        "again by a different packet with another IV (not a retransmission of the same "
        "bytes); frames {dup_frames}",
        frames="dup_frames",
        kernel_path="no single kernel path: a second transform numbering the SA's packets, "
        "e.g. the SA installed again with the same SPI and key (an IKE daemon restart, an "
        "HA failover without its replay state), or two senders using one SA",
        why="a sender takes every sequence number once (RFC 4303 s3.3.3); one number under "
        "two IVs means two transforms (seqiv and echainiv draw their IV constant at random "
        "for each), so two counters, or one that started again",
        rule_out="repeats that are byte-identical (a replay, or a frame captured twice), a "
        "counter that restarts at 1 under a new SPI (a rekey), or an SA whose IVs follow no "
        "per-transform constant (IV = seq), where two senders give the same IVs",
        confirm="ip xfrm monitor on the sender showing the SA deleted and added again at the "
        "time of the repeats, or ip xfrm state on a second host holding the same SPI and key",
    ),
    CauseEntry(
        id="cbc-iv-chained",
        title="CBC IVs chained from the previous packet's ciphertext",
        when=(Condition("chained", Op.GE, 1),),
        evidence="{chained:CBC IV} of SPI {spi_hex} ({src} -> {dst}) equal the last "
        "ciphertext block of the SA's previous packet: {chained} of {packets}; frames "
        "{chained_frames}",
        frames="chained_frames",
        kernel_path="no current Linux path: ESP's CBC IVs come from echainiv, which derives "
        "them from the sequence number; chained IVs are the old chaining IV generator's "
        "behaviour, or another IPsec stack's or a crypto offload's",
        why="an IV that is the previous ciphertext block is known before the packet is "
        "sent, and RFC 3602 s2.1 wants CBC IVs unpredictable",
        rule_out="a single match (by chance one in 2^128 per packet for AES, 2^64 for "
        "3DES); or the sender's /proc/crypto naming echainiv for the SA's algorithm, which "
        "moves the fault from the IV generator's choice to its code",
        confirm="the sender's IV generator for the SA's algorithm (/proc/crypto, or the IPsec "
        "stack's or offload's documentation) chaining from the previous ciphertext",
    ),
)


def likely_causes(summary: Summary) -> tuple[LikelyCause, ...]:
    """Every entry of ``CAUSES`` some SA of the summary matches, in table order."""
    facts = sa_facts(summary)
    out = []
    for entry in CAUSES:
        matched = [f for f in facts if all(c.holds(f) for c in entry.when)]
        if not matched:
            continue
        frames = {n for f in matched if entry.frames for n in shown_frames(f, entry.frames)}
        out.append(
            LikelyCause(
                entry.id,
                entry.title,
                entry.kernel_path,
                entry.why,
                entry.rule_out,
                entry.confirm,
                tuple(_TEMPLATE.vformat(entry.evidence, (), as_dict(f)) for f in matched),
                tuple(sorted({f.spi for f in matched})),
                tuple(sorted(frames)),
            )
        )
    return tuple(out)


class _Template(string.Formatter):
    """str.format where a spec that is a noun counts it: ``{n:packet}`` -> "1 packet"."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec[:1].isalpha():
            return plural(value, format_spec)
        return str(format(value, format_spec))


_TEMPLATE = _Template()
