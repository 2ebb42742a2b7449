"""Captions of the plots: what each plot of plots.py shows and how to read it.

In: a plot's name (``PLOTS`` in plots.py). Out: ``caption(name)``, a
``Caption`` with the plot's title, what it shows and how to read it, for
the reports (report.md, report.html) to print under the image instead of
the file stem. Raises nothing; reads no clock and no environment.

Kept apart from plots.py so that the renderers need no matplotlib; a
test keeps the two registries the same (tests/plots/test_plots.py) and the
words agree with docs/plots.md, which says the same at length.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Caption:
    """One plot's title, what it shows and how to read it."""

    title: str  # the plot's own title, without its bin width
    shows: str
    reading: str


CAPTIONS: dict[str, Caption] = {
    "verdicts": Caption(
        "Packets per verdict over time",
        "One stacked bar per time bin, one fixed colour per verdict: ok green at "
        "the bottom, esp_misplaced red, auth_fail orange, unknown_sa grey, not_esp "
        "light grey on top.",
        "A healthy capture is a green band. Red on the green marks the bins in which "
        "ESP headers were misplaced; orange without red means wrong keys or real "
        "corruption; a wall of grey means keys are missing for an SA.",
    ),
    "offsets": Caption(
        "ESP header offset: expected vs found",
        "Packets per ESP header offset, in bytes from the outer IP header (as "
        "tcpdump's ip[] and ip6[] count): grey where the header belongs, blue where "
        "it was found.",
        "When every header is in place the bars pair up (20 for IPv4, 40 for IPv6, "
        "+8 in UDP). A blue bar without a grey partner is where misplaced headers "
        "sat: 60 for the Linux GSO fault over ip6tnl, 40 over ipip.",
    ),
    "iv_derivation": Caption(
        "Sequence number each ESP IV was built from",
        "One panel per SA, one point per ESP packet: x its 64-bit sequence number, "
        "y the n of 'IV built from seq + n'; a red cross marks an IV already used "
        "under the same key.",
        "A healthy SA is a flat line at 0. Points at +1 are IVs built from the next "
        "sequence number, and the red crosses after them the packets that repeat "
        "those IVs (a nonce reuse). On a symmetric log axis an ESN packet sealed "
        "with the next high half sits at +0x1:00000000 (2^32).",
    ),
    "throughput": Caption(
        "Throughput per SA",
        "Mbit/s of each SA per time bin, drawn at the middle of the bin; a log axis "
        "when one SA's peak is far below another's (bulk data one way, ACKs the "
        "other).",
        "Dips that line up with red in the verdicts plot are TCP backing off after "
        "the receiver dropped packets; a bulk SA at tens of Mbit/s where Gbit/s "
        "were expected is the GSO fault's cost.",
    ),
    "sequence": Caption(
        "Sequence number gaps, duplicates and reorders per SA",
        "One band per SA over time: gaps (red, pointing down), duplicates (orange "
        "squares) and reorders (purple, pointing up); a marker's area grows with "
        "its count.",
        "Scattered small gaps are capture or network loss; a gap with a reorder at "
        "the same time is a late packet; duplicates are a sender fault or a capture "
        "taken at two points.",
    ),
}


def caption(name: str) -> Caption:
    """The caption of the plot ``name``; a plot without one is named as it is."""
    return CAPTIONS.get(name, Caption(name, "", ""))
