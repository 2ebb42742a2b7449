"""The short human summary printed after ``analyze``.

In: a ``Summary``. Out: plain ASCII text, lines of at most 72 columns.
Raises nothing; reads no clock and no environment.
"""

from __future__ import annotations

from espforensics.summary import SaSummary, Summary


def _verdicts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v)


def _sa_line(sa: SaSummary) -> list[str]:
    algo = sa.algorithm or "no key"
    return [
        f"  SPI {sa.spi:#010x} {sa.src} -> {sa.dst} ({algo})",
        f"    {sa.packets} packets: {_verdicts(sa.verdicts)}",
    ]


def render_summary(summary: Summary) -> str:
    """A few lines saying what the capture holds and how it verified."""
    cap = summary.capture
    lines = [
        f"{cap.path}",
        f"  {cap.frames} frames, {summary.esp_packets} ESP packets, {len(summary.sas)} SAs",
        f"  verdicts: {_verdicts(summary.verdicts) or 'none'}",
    ]
    for sa in summary.sas:
        lines.extend(_sa_line(sa))
    if summary.error:
        lines.append(f"  stopped early: {summary.error}")
    return "\n".join(lines) + "\n"
