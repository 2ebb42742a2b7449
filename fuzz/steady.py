"""Long steady runs: the inputs the engine's steady lane takes, with faults inside the run.

In: a ``random.Random``. Out: ``steady_seeds`` (an AEAD and a cbc(aes)
transfer of ``STEADY_FRAMES`` frames each, built once per process) and
``steady_frames``, a window of 100 to 300 of their frames with 0 to 3
faults inside it: a duplicate, a reorder, a flipped byte, a cut frame, a
dropped frame, a replayed IV, frames inside a tunnel. Raises nothing.

The lane takes an SA's packets only once the SA has verified packets and
its IV scheme is settled (docs/architecture.md, "The steady lane"): the
short windows of the other seeds never get there. Here it takes most of
a window, and each fault is a case it must refuse (RFC 4303 s3.4.3: a
duplicate or a reorder is below the flow's top; a flipped byte fails the
ICV; a replayed IV is a reuse under the same key, RFC 4106 s3.1; a frame
in a tunnel takes the per-frame path, in its place among the lane's) or
a gap it must pass over (a dropped frame).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

from espforensics.keys.sa import CBC_AES, RFC4106
from espforensics.model.records import Frame
from espforensics.synth.builder import NO_FAULT, CaptureBuilder, Fault, TcpTalk, filler, ip, sa_pair
from espforensics.synth.esp import IvSeqOffset
from espforensics.synth.keytext import esp_sa_text, keys_yaml, xfrm_state_text
from espforensics.synth.packets import TCP_ACK, TCP_PSH
from espforensics.synth.tunnels import TUNNELS, in_tunnel
from fuzz.seeds import Seed

STEADY_FRAMES = 320  # windows of 100 to 300 of them
WINDOW = (100, 300)
REPLAY_BACK = 3  # a replayed IV is the one its SA gave the packet 3 sequence numbers before
DATA_SIZE = 160  # small segments: the run costs what its frames cost, not its bytes
A, B = ip("192.0.2.31"), ip("198.51.100.31")
# name -> (algorithm, integrity algorithm or None for an AEAD, ACKs on a second SA).
# The lane starts once every SA of the window has shown the IV derivation check its
# first WINDOW (64) packets, which it holds until then: frame 65 of a window of one
# SA, frame 129 of two SAs sending in turn.
STEADY: dict[str, tuple[str, str | None, bool]] = {
    "steady-gcm": (RFC4106, None, False),
    "steady-cbc": (CBC_AES, "hmac(sha256)", False),
    "steady-gcm-2sa": (RFC4106, None, True),
    "steady-cbc-2sa": (CBC_AES, "hmac(sha256)", True),
}
LANE_FROM = 128  # 3 faults in 4 go after this many frames of the window, where the lane runs
REPLAY = Fault(iv=IvSeqOffset(-REPLAY_BACK), tags=("iv_reuse",))
FAULTS = ("dup", "reorder", "flip", "cut", "drop", "replay", "tunnel")


@dataclass(frozen=True, slots=True)
class SteadySeed:
    """A steady transfer, and each of its frames again sealed with a replayed IV."""

    seed: Seed
    replayed: tuple[Frame, ...]  # frame k: the same packet, IV of its SA's seq - REPLAY_BACK


def _frames(name: str, replay: bool) -> tuple[Seed, tuple[Frame, ...]]:
    """The transfer (data a -> b, maybe an ACK b -> a after each); same keys either way."""
    algorithm, auth, acks = STEADY[name]
    rng, cb = random.Random(f"espforensics-fuzz-steady:{name}"), CaptureBuilder(1)
    ab, ba = sa_pair(rng, (0x2101, 0x2102), A, B, algorithm=algorithm, auth_algorithm=auth)
    talk = TcpTalk()
    for i in range(STEADY_FRAMES):
        flow, data = (ba, False) if acks and i % 2 else (ab, True)
        seg = talk.seg(data, TCP_PSH | TCP_ACK if data else TCP_ACK, filler(DATA_SIZE * data, i))
        fault = REPLAY if replay and flow.next_seq > REPLAY_BACK else NO_FAULT
        packet, truth = flow.send_tcp(seg, fault)
        cb.emit_ip(packet, truth, outgoing=data)
    sc = cb.scenario(name, f"steady {algorithm} transfer", (ab.sealer, ba.sealer))
    yaml, xfrm, esp_sa = keys_yaml(sc.sas), xfrm_state_text(sc.sas), esp_sa_text(sc.sas)
    seed = Seed(
        name, sc.frames, sc.linktypes, sc.format, sc.snaplen, sc.secrets, sc.sas, yaml, xfrm, esp_sa
    )
    return seed, sc.frames


@cache
def steady_seeds() -> tuple[SteadySeed, ...]:
    """Every steady seed, in the order of ``STEADY``."""
    return tuple(SteadySeed(_frames(n, False)[0], _frames(n, True)[1]) for n in STEADY)


def pick_steady(rng: random.Random) -> SteadySeed:
    return rng.choice(steady_seeds())


def _fault(rng: random.Random, st: SteadySeed, out: list[Frame], first: int, fault: str) -> None:
    """Apply one fault at a random place of the window ``out`` (``first``: its seed offset)."""
    late = len(out) - 1 > LANE_FROM and rng.random() < 0.75
    k = rng.randrange(LANE_FROM if late else 0, len(out) - 1)
    frame = out[k]
    if fault == "dup":  # the same packet again, at once or a few frames later
        out.insert(min(len(out), k + rng.randint(1, 4)), frame)
    elif fault == "reorder":
        j = min(len(out) - 1, k + rng.randint(1, 5))
        out[k], out[j] = out[j], out[k]
    elif fault == "flip":  # past Ethernet, IPv4 and the ESP header: IV, ciphertext or ICV
        at = rng.randrange(14 + 20 + 8, len(frame.data))
        data = bytearray(frame.data)
        data[at] ^= 1 << rng.randrange(8)
        out[k] = frame._replace(data=bytes(data))
    elif fault == "cut":  # captured short of its wire length (a snaplen)
        cut = rng.randrange(14 + 20 + 8, len(frame.data))
        out[k] = frame._replace(data=frame.data[:cut], caplen=cut)
    elif fault == "drop":
        del out[k]
    elif fault == "tunnel":  # 1 to 3 frames captured on an underlay (decode/tunnel.py)
        name = rng.choice(sorted(TUNNELS))
        for j in range(k, min(len(out), k + rng.randint(1, 3))):
            out[j] = in_tunnel(out[j], name)
    else:  # the packet sealed again with an IV its SA already used
        replayed = st.replayed[first + k] if first + k < len(st.replayed) else frame
        out[k] = replayed._replace(ts_ns=frame.ts_ns)


def steady_frames(rng: random.Random, st: SteadySeed) -> list[Frame]:
    """A window of 100 to 300 frames of a steady seed, with 0 to 3 faults inside it."""
    frames = st.seed.frames
    size = rng.randint(*WINDOW)
    first = rng.randrange(len(frames) - size + 1)
    out = list(frames[first : first + size])
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        _fault(rng, st, out, first, rng.choice(FAULTS))
    return [f._replace(number=i) for i, f in enumerate(out, 1)]
