"""capture/aside.py: a stream written on its own thread gives the file the same bytes, in
order, and raises the file's error on the caller's thread."""

from __future__ import annotations

import errno

import pytest

from espforensics.capture.aside import GATHER, Aside


class Recorded:
    """A file that keeps each piece it is given; refuses the call numbered ``refuse``."""

    def __init__(self, refuse: int = 0, error: BaseException | None = None) -> None:
        self.pieces: list[bytes] = []
        self.calls = 0
        self._refuse = refuse
        self._error = error or OSError(errno.ENOSPC, "No space left on device")

    def write(self, data: bytes | bytearray | memoryview, /) -> int:
        self.calls += 1
        if self.calls == self._refuse:
            raise self._error
        self.pieces.append(bytes(data))
        return len(self.pieces[-1])


def test_every_byte_arrives_in_order_small_writes_gathered() -> None:
    out = Recorded()
    stream = Aside(out)
    big = bytearray(b"B" * (GATHER + 3))
    view = memoryview(big)
    header = bytearray(b"head")
    taken = [stream.write(header), stream.write(view)]
    header[:] = b"XXXX"  # changed after it was handed over: the file has what was written
    view[0] = ord("Z")
    small = [bytes([k % 251]) * 100 for k in range(GATHER // 100 + 5)]  # past GATHER
    taken += [stream.write(piece) for piece in small]
    taken.append(stream.write(b"tail"))
    stream.close()
    expected = b"head" + b"B" * (GATHER + 3) + b"".join(small) + b"tail"
    assert b"".join(out.pieces) == expected
    assert taken == [4, GATHER + 3, *[100] * len(small), 4]
    # "head" alone (handed on before the large view), the view, the small writes
    # gathered to the first piece of at least GATHER bytes, then the rest with "tail"
    assert [len(p) for p in out.pieces] == [4, GATHER + 3, GATHER // 100 * 100 + 100, 404]


def test_a_refused_write_is_raised_on_close_and_nothing_is_written_after_it() -> None:
    out = Recorded(refuse=2)
    stream = Aside(out)
    for k in range(4):
        try:
            stream.write(bytes([k]) * GATHER)
        except OSError:  # raised here if the thread met it already: the same error
            break
    with pytest.raises(OSError, match="No space left on device") as raised:
        stream.close()
    assert raised.value.errno == errno.ENOSPC
    assert out.pieces == [b"\x00" * GATHER]  # the first; the second refused; no more
    assert out.calls == 2


def test_any_error_of_the_file_reaches_the_caller() -> None:
    out = Recorded(refuse=1, error=ValueError("write to closed file"))
    stream = Aside(out)
    stream.write(b"x" * GATHER)
    with pytest.raises(ValueError, match="closed file"):
        stream.close()


def test_close_twice_writes_once() -> None:
    out = Recorded()
    stream = Aside(out)
    stream.write(b"abc")
    stream.close()
    stream.close()
    assert out.pieces == [b"abc"]
