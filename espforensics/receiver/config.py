"""Which of the kernel's replay windows a receiver holding an SA runs, and its size.

In: a ``SecurityAssociation`` (its ``esn``, ``replay_window`` and
``replay_esn``, as its key file gave them). Out: ``ReplayConfig``, which
makes the window (replay.py). Raises nothing.

net/xfrm/xfrm_replay.c ``xfrm_init_replay``: a state with the
``XFRMA_REPLAY_ESN_VAL`` attribute (``replay_esn``) runs the ESN window when
it has ``XFRM_STATE_ESN``, else the bitmap window; a state without it runs
the legacy window. iproute2 (ip/xfrm_state.c, ``xfrm_state_modify``) sends
``replay_esn`` when ``flag esn`` is given or ``replay-window`` exceeds 32,
and then leaves ``replay-window`` (``xsinfo.replay_window``) at 0: so
``ip xfrm state`` prints ``replay-window 0`` and an ``anti-replay esn
context`` with the real window, or ``replay-window N`` and an
``anti-replay context`` for the legacy window.

Where the key file says nothing (a keys.yaml without ``replay_window``,
an esp_sa or tcpdump file), the window is assumed to be ``DEFAULT_WINDOW``
(strongSwan's ``charon.replay_window``), chosen as iproute2 and strongSwan
choose: ``replay_esn`` for ESN SAs or windows over 32.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from espforensics.keys.sa import SecurityAssociation
from espforensics.receiver.replay import BmpWindow, EsnWindow, LegacyWindow, Window

DEFAULT_WINDOW = 32
LEGACY_BITS = 32  # sizeof(x->replay.bitmap) * 8


class Variant(StrEnum):
    """The kernel's replay variant (``x->repl_mode``)."""

    LEGACY = "legacy"
    BMP = "bmp"
    ESN = "esn"


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """The window a receiver of the SA runs: variant, size, and whether it is assumed."""

    variant: Variant
    window: int  # x->props.replay_window (legacy) or replay_esn->replay_window
    assumed: bool = False  # the key file did not say: DEFAULT_WINDOW

    def make(self, seq_hi: int = 0) -> Window:
        """A new state's window (seq 0, empty bitmap; ESN: ``seq_hi``, the SA's start)."""
        if self.variant is Variant.ESN:
            return EsnWindow(self.window, seq_hi)
        if self.variant is Variant.BMP:
            return BmpWindow(self.window)
        return LegacyWindow(self.window)

    @property
    def checked(self) -> int:
        """How far below the top the check reaches: the legacy check caps it at 32."""
        return min(self.window, LEGACY_BITS) if self.variant is Variant.LEGACY else self.window

    def describe(self) -> str:
        """``legacy window 32``, ``esn window 128 (assumed: the key file says none)``."""
        text = f"{self.variant} window {self.window}"
        if self.variant is Variant.LEGACY and self.window > LEGACY_BITS:
            text += f" (checked to {LEGACY_BITS})"
        if self.variant is Variant.LEGACY and self.window == 0:
            text += " (replay check off)"
        return text + (" (assumed: the key file says none)" if self.assumed else "")


def replay_config(sa: SecurityAssociation) -> ReplayConfig:
    """The window ``xfrm_init_replay`` gives a state made from ``sa``."""
    window = sa.replay_window
    assumed = window is None
    if window is None:
        window = DEFAULT_WINDOW
    replay_esn = sa.replay_esn
    if replay_esn is None:  # as iproute2 and strongSwan decide
        replay_esn = sa.esn or window > LEGACY_BITS
    if not replay_esn:
        return ReplayConfig(Variant.LEGACY, window, assumed)
    return ReplayConfig(Variant.ESN if sa.esn else Variant.BMP, window, assumed)
