"""The receiver model's results in the words reviewers use.

In: ``ReceiverHost`` and ``ReceiverSa`` values (prediction.py) and, when
given, the receiver's observed counters (``Observed``). Out: sentences for
the reports: "predicted at fd00:a::2: XfrmInStateProtoError +94 (94
misplaced ESP headers), XfrmInStateSeqError +0, XfrmInNoStates +0", one per
state with its window and reorder depth, and the comparison with what the
receiver counted. Pure; raises nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from espforensics.receiver.prediction import Observed, ReceiverHost, ReceiverSa
from espforensics.receiver.verdict import NO_STATES, PROTO_ERROR, SEQ_ERROR

ORDER = (PROTO_ERROR, SEQ_ERROR, NO_STATES)  # as the reviews say them


def _counter(host: ReceiverHost, name: str) -> str:
    text = f"{name} +{host.counters.get(name, 0)}"
    causes = [f"{n} {why}" for counter, why, n in host.causes if counter == name]
    return f"{text} ({', '.join(causes)})" if causes else text


def host_line(host: ReceiverHost) -> str:
    """``predicted at HOST: XfrmInStateProtoError +94 (94 misplaced ESP headers), ...``."""
    line = f"predicted at {host.dst}: " + ", ".join(_counter(host, n) for n in ORDER)
    if host.unchecked:
        line += (
            f"; {host.unchecked} packets whose ICV could not be checked taken as accepted"
            " (a lower bound)"
        )
    return line


def sa_line(sa: ReceiverSa) -> str:
    """``SPI 0x00001001 to 198.51.100.2, legacy window 32: accept 217, too_old 211; ...``."""
    counts = ", ".join(f"{k} {v}" for k, v in sa.verdicts.items())
    line = f"SPI {sa.spi:#010x} to {sa.dst}, {sa.window}: {counts}"
    if sa.reorder_depth:
        line += (
            f"; packets arrived up to {sa.reorder_depth} below the highest number:"
            f" a window of {sa.min_window} would have accepted every one that was no replay"
        )
    return line


def compare_lines(hosts: Sequence[ReceiverHost], observed: Observed) -> tuple[str, ...]:
    """Predicted against observed, per counter the model covers, for the observed host;
    each difference with what explains it, or that nothing in the capture does."""
    if not observed.deltas:
        return ()
    if not observed.host:
        names = ", ".join(h.dst for h in hosts)
        return (
            f"observed ({observed.before} -> {observed.after}): ESP goes to several hosts"
            f" ({names}); give --xfrm-stat-host to say whose counters these are",
        )
    host = next((h for h in hosts if h.dst == observed.host), None)
    lines = [f"observed at {observed.host} ({observed.before} -> {observed.after}):"]
    for name in ORDER:
        seen = observed.deltas.get(name)
        predicted = host.counters.get(name, 0) if host is not None else 0
        if seen is None:
            lines.append(f"  {name}: not in the files")
            continue
        lines.append(f"  {name}: predicted +{predicted}, observed +{seen}: {_why(predicted, seen)}")
    others = [
        f"{k} +{v}"
        for k, v in observed.deltas.items()
        if v and k.startswith("XfrmIn") and k not in ORDER
    ]
    if others:
        lines.append(f"  not predicted (the model does not cover them): {', '.join(others)}")
    if host is None:
        lines.append(f"  the capture holds no ESP packet to {observed.host}")
    return tuple(lines)


def stats_lines(sas: Sequence[ReceiverSa], observed: Observed) -> tuple[str, ...]:
    """Per state of ``ip -s xfrm state``, its ``stats:`` beside the model's counts:
    replay-window (too_old: below the window), replay (replay), failed (ICV
    failures: esp_input's -EBADMSG; a bad trailer is not one)."""
    if not observed.sa_stats:
        return ()
    model = {(sa.spi, sa.dst): sa for sa in sas}
    lines = [f"per state ({observed.states}, counted since each state was made):"]
    for spi, dst, window, replay, failed in observed.sa_stats:
        sa = model.get((spi, dst))
        if sa is None:
            lines.append(f"  SPI {spi:#010x} to {dst}: no packet of it in the capture")
            continue
        v = sa.verdicts
        want = (
            v.get("too_old", 0),
            v.get("replay", 0),
            v.get("icv_fail", 0) + v.get("icv_fail_seqhi", 0),
        )
        pairs = zip(
            ("replay-window", "replay", "failed"), want, (window, replay, failed), strict=True
        )
        said = ", ".join(f"{name} predicted {p}, observed {o}" for name, p, o in pairs)
        same = want == (window, replay, failed)
        lines.append(f"  SPI {spi:#010x} to {dst}: {said}: {'equal' if same else 'differ'}")
    return tuple(lines)


def _why(predicted: int, seen: int) -> str:
    if predicted == seen:
        return "equal"
    if seen > predicted:
        return (
            f"{seen - predicted} more than the capture explains: drops of packets the"
            " capture does not hold (taken before the capture point, or on another"
            " path), or states the key file does not describe"
        )
    return (
        f"{predicted - seen} fewer than predicted: packets the capture holds that the"
        " receiver did not get as captured (lost, reordered or repaired on the way), a"
        " window other than the key file's, or states the receiver lacks"
    )
