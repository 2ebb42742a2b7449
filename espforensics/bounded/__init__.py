"""Per-SA containers whose memory stays bounded, whatever the capture's length.

intervals.py: sets of numbers kept as runs (``IntervalSet``) and a set of
any 64-bit values (``U64Set``: a hash table and sorted levels); window.py:
the latest entries by key (``RecentWindow``), taking the steady lane's
rows in bulk; frames.py: frame numbers as runs, frozen for findings;
rare.py: fields kept only once written (``Rare``).
"""
