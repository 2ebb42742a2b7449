"""The columnar engine: batches of frames in, rows in capture order out.

See docs/architecture.md for the stages and who owns which state:
wire.py (stateless, vectorised parse of the common layouts), steady.py
(the steady lane: plans and bulk commits to the checks), plain.py (its
plaintexts as columns), rows.py (what it hands on), run.py (the
loop over batches, the decryption thread pool, and the per-frame path
of analyzer/frame.py for every other frame).
"""

from espforensics.engine.rows import RowSink, SteadyRows
from espforensics.engine.run import Engine, Row, deliver

__all__ = ["Engine", "Row", "RowSink", "SteadyRows", "deliver"]
