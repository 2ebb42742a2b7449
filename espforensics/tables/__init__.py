"""The tables a run writes, and the one adapter to pyarrow.

schema.py: the packets table's columns and schema; rows.py: its rows
(records and the steady lane's columns) as Arrow row groups; packets.py:
those written as packets.csv and packets.parquet by a writer thread, and
read back; small.py: the small tables (sas.csv, findings.csv,
finding_frames.csv/.parquet); arrow.py: Arrow arrays built from Python and
numpy values without pandas.
"""
