"""espforensics: offline forensic analysis of IPsec ESP captures.

Public API::

    import espforensics
    result = espforensics.analyze("capture.pcap", ["keys.yaml"])
    result.packets      # pandas DataFrame, one row per frame
    result.summary      # Summary (verdict counts, per-SA lines)
"""

from espforensics.analysis import Analysis, analyze, analyze_to_dir, summarize
from espforensics.errors import (
    CaptureError,
    CaptureTruncated,
    EspForensicsError,
    InputError,
    KeyFileError,
    MalformedPacket,
    OutputExistsError,
    Truncated,
)
from espforensics.keys import SaTable, SecurityAssociation, load_sas
from espforensics.model import PacketRecord, Proto, Verdict
from espforensics.pipeline import Options
from espforensics.summary import Summary

__all__ = [
    "Analysis",
    "CaptureError",
    "CaptureTruncated",
    "EspForensicsError",
    "InputError",
    "KeyFileError",
    "MalformedPacket",
    "Options",
    "OutputExistsError",
    "PacketRecord",
    "Proto",
    "SaTable",
    "SecurityAssociation",
    "Summary",
    "Truncated",
    "Verdict",
    "analyze",
    "analyze_to_dir",
    "load_sas",
    "summarize",
]
