"""espforensics: offline forensic analysis of IPsec ESP captures.

Public API::

    import espforensics
    result = espforensics.analyze("capture.pcap", ["keys.yaml"])
    result.packets      # pandas DataFrame, one row per frame
    result.summary      # Summary (verdict counts, per-SA lines)
"""

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
from espforensics.keys import SaTable, SecurityAssociation, load_sas
from espforensics.model import PacketRecord, Proto, Verdict
from espforensics.pipeline import Options
from espforensics.summary import Summary

if TYPE_CHECKING:
    from espforensics.analysis import Analysis, analyze, analyze_to_dir, summarize

_ANALYSIS = frozenset({"Analysis", "analyze", "analyze_to_dir", "summarize"})


def __getattr__(name: str) -> Any:
    """The analysis entry points, imported on first use (PEP 562).

    They pull in pandas and pyarrow (0.6 s); a worker process of
    ``batch --jobs`` imports this package before it needs either.
    """
    if name in _ANALYSIS:
        from espforensics import analysis  # noqa: PLC0415

        return getattr(analysis, name)
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
