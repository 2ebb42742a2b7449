"""The version of espforensics: ``TOOL_VERSION``, from the installed distribution's metadata.

In: nothing. Out: ``TOOL_VERSION`` ("0+unknown" in a source tree that was
never installed). Raises nothing. Its own module, importing nothing of ours
and no third-party library, so that ``espforensics --version`` and a bug
report name the version without loading the analysis (start-up,
docs/performance.md); results/summary.py re-exports it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    TOOL_VERSION = version("espforensics")
except PackageNotFoundError:  # running from a source tree that was never installed
    TOOL_VERSION = "0+unknown"
