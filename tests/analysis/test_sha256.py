"""analysis/run.py sha256_file: the capture's digest, the file hashed where it is mapped."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from espforensics.analysis.run import sha256_file
from espforensics.errors import CaptureError


@pytest.mark.parametrize("size", [0, 1, 4095, 3 << 20])
def test_the_digest_is_the_files_sha256(tmp_path: Path, size: int) -> None:
    """Mapped, or read when it cannot be (an empty file cannot be mapped)."""
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    path = tmp_path / "capture.pcap"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_a_missing_file_is_a_capture_error(tmp_path: Path) -> None:
    with pytest.raises(CaptureError):
        sha256_file(tmp_path / "absent.pcap")
