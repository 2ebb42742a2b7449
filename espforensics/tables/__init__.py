"""The tables a run writes, and the one adapter to pyarrow.

packets.py: the packets table (records and the steady lane's columns as
Arrow row groups, written as packets.csv and packets.parquet by a writer
thread); small.py: the small tables (sas.csv, findings.csv,
finding_frames.csv/.parquet); arrow.py: Arrow arrays built from Python and
numpy values without pandas.
"""
