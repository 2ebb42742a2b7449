"""``espforensics reconcile``: two captures of one run, what became of each packet.

run.py joins the sender's and the receiver's ESP packets as it reads both
captures (``reconcile``); wire.py reads a capture's ESP datagrams, clock.py
estimates the captures' clock offset and each SA's direction, join.py
decides each packet's fate, outer.py names the outer header's changes,
and out.py writes the folder and the report.
"""
