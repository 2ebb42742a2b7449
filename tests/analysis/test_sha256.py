"""analysis/run.py sha256_file: the capture's digest, the file hashed where it is mapped
(tests/analysis/test_flat_memory.py: a piece at a time, each let go)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from espforensics.analysis import run
from espforensics.analysis.run import sha256_file
from espforensics.errors import CaptureError


@pytest.mark.parametrize("can_drop", [True, False])
@pytest.mark.parametrize("size", [0, 1, 4095, 3 << 20, (32 << 20) + 5])
def test_the_digest_is_the_files_sha256(
    tmp_path: Path, size: int, can_drop: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mapped and hashed 16 MiB at a time, or read when it cannot be mapped (an empty
    file) or its pages cannot be let go (a system without MADV_DONTNEED)."""
    monkeypatch.setattr(run, "CAN_DROP", can_drop)
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    path = tmp_path / "capture.pcap"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_a_missing_file_is_a_capture_error(tmp_path: Path) -> None:
    with pytest.raises(CaptureError):
        sha256_file(tmp_path / "absent.pcap")
