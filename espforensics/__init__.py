"""espforensics: offline forensic analysis of IPsec ESP captures.

Public API::

    import espforensics
    result = espforensics.analyze("capture.pcap", ["keys.yaml"])
    result.packets      # pandas DataFrame, one row per frame
    result.summary      # Summary (verdict counts, per-SA lines)
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from espforensics.analysis import Analysis, analyze, analyze_to_dir, summarize
    from espforensics.keys import SaTable, SecurityAssociation, load_sas
    from espforensics.model.enums import Proto, Verdict
    from espforensics.model.options import Options
    from espforensics.model.records import PacketRecord
    from espforensics.results.summary import Summary

# Where each name that is not an error lives; imported on first use (PEP 562).
_LAZY = {
    "Analysis": "espforensics.analysis",
    "analyze": "espforensics.analysis",
    "analyze_to_dir": "espforensics.analysis",
    "summarize": "espforensics.analysis",
    "SaTable": "espforensics.keys",
    "SecurityAssociation": "espforensics.keys",
    "load_sas": "espforensics.keys",
    "PacketRecord": "espforensics.model.records",
    "Proto": "espforensics.model.enums",
    "Verdict": "espforensics.model.enums",
    "Options": "espforensics.model.options",
    "Summary": "espforensics.results.summary",
}


def __getattr__(name: str) -> Any:
    """The library's names, each imported on first use (PEP 562).

    The analysis entry points pull in pandas and pyarrow (0.6 s), the
    pipeline numpy, dpkt and cryptography; importing any module of the
    package (``espforensics.errors``, ``espforensics.synth``, a worker
    process of ``batch --jobs``) imports this file first, and needs none.
    """
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'espforensics' has no attribute {name!r}")


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
