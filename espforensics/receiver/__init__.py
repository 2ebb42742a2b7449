"""The receiver model: what a Linux receiver holding the key file's states does
with each ESP packet (docs/receiver.md).

replay.py holds the kernel's three anti-replay windows as pure state
machines (net/xfrm/xfrm_replay.c), config.py which one a state runs and its
size (``xfrm_init_replay``, iproute2), verdict.py the per-packet steps of
``xfrm_input`` and the counter each drop moves, prediction.py the results
the summary keeps. The check that feeds it, per frame and in the steady
lane, is checks/receiver.py. Imports only keys/ and bounded/frames.py of ours.
"""
