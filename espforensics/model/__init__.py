"""The values every layer shares, and nothing else: no logic, no imports of ours but
each other (docs/architecture.md, "Layers").

enums.py (what the tables' string columns hold), records.py (a frame, a packet's row,
a finding), evidence.py (the typed facts a finding states), options.py (what a run is
asked), arrays.py (the numpy types and byte reads of the columnar engine), version.py
(the tool's version).
"""
