"""`qlower._files.StreamFile`: the artifact writers' file, written through O_DIRECT where it can be.

The laws: whatever sequence of writes, the file holds exactly their concatenation, with
O_DIRECT or without, whatever the buffer size; a filesystem that refuses O_DIRECT gets
buffered writes; a writer-thread failure (a full disk) reaches the caller.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlower._files import StreamFile

pieces = st.lists(st.one_of(st.binary(max_size=300), st.integers(0, 40_000).map(lambda n: os.urandom(n))),
                  max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces, st.sampled_from([4096, 8192, 3 * 4096]), st.booleans())
def test_the_file_holds_exactly_what_was_written(tmp_path: Path, parts: list[bytes], chunk: int,
                                                 direct: bool) -> None:
    path = tmp_path / "out.bin"
    with StreamFile.create(path, direct=direct, chunk=chunk) as f:
        for p in parts:
            assert f.write(p) == len(p)
        f.finish()
    assert path.read_bytes() == b"".join(parts)


def test_memoryviews_and_bytearrays_are_written_as_bytes(tmp_path: Path) -> None:
    import numpy as np

    arr = np.arange(3000, dtype=np.float32)
    path = tmp_path / "out.bin"
    with StreamFile.create(path, chunk=4096) as f:
        f.write(memoryview(arr))  # a float32 view: written as its bytes
        f.write(np.zeros((0, 3), np.float32))  # nothing
        f.write(arr.reshape(50, 60))  # a 2-D array: its bytes in C order
        f.write(bytearray(b"tail"))
        f.finish()
    assert path.read_bytes() == arr.tobytes() * 2 + b"tail"


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="O_DIRECT is Linux's")
def test_a_filesystem_that_refuses_o_direct_at_open_gets_buffered_writes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def refusing(path, flags, mode=0o777):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", refusing)
    path = tmp_path / "out.bin"
    with StreamFile.create(path, chunk=4096) as f:
        f.write(b"x" * 10_000)
        f.finish()
    assert path.read_bytes() == b"x" * 10_000


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="O_DIRECT is Linux's")
def test_a_filesystem_that_refuses_o_direct_at_the_first_write_gets_buffered_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    real_write = os.write

    def refusing(fd, data):
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", refusing)
    path = tmp_path / "out.bin"
    data = os.urandom(20_000)
    with StreamFile.create(path, chunk=4096) as f:
        f.write(data)
        f.finish()
    assert path.read_bytes() == data


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_reaches_the_caller() -> None:
    with pytest.raises(OSError) as e, StreamFile.create("/dev/full", chunk=4096) as f:
        f.write(b"x" * 100_000)
        f.finish()
    assert e.value.errno == errno.ENOSPC


def test_the_chunk_must_be_whole_blocks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple of 4096"):
        StreamFile.create(tmp_path / "x", chunk=1000)
    assert not (tmp_path / "x").exists()
