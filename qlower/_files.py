"""Writing files so that each is either complete or absent."""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import threading
from pathlib import Path

from qlower.diagnostics import QlowerError, error


def write_atomic(path: Path, payload: bytes) -> None:
    """Write a temporary file in the same folder, then rename: the file is complete or absent."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies, as for open()
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise QlowerError(error(f"cannot write {path}: {e.strerror or e}", code="io")) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_ALIGN = 4096  # O_DIRECT needs buffer address, length and file offset aligned to the device's block size
_CHUNK = 8 << 20


class StreamFile:
    """A write-only binary file for big sequential output (the converter artifacts).

    Bytes gather in page-aligned buffers that a background thread hands to the
    kernel while the caller goes on formatting; with `direct` (Linux's O_DIRECT)
    they bypass the page cache. Why: on the machines measured, writing 2 GB
    through the page cache cost the writer 3.4 s of system CPU plus 1 s of
    fsync, while O_DIRECT took 1.3 s of wall time, almost no CPU and left
    nothing to flush (`python bench/bench_write.py DIR`). Where the
    platform or filesystem refuses O_DIRECT (no such flag, tmpfs on older
    kernels, some network filesystems) the same object writes buffered I/O.

    `write` takes any bytes-like object; `finish` writes what is left, sets the
    exact size and fsyncs (raising what the writer thread met, e.g. a full
    disk); `close` releases everything without finishing.
    """

    def __init__(self, fd: int, *, direct: bool = False, chunk: int = _CHUNK) -> None:
        _check_chunk(chunk)
        self._fd = fd
        self._direct = direct
        self._chunk = chunk
        self._buffers: list[mmap.mmap] = []  # two, made on first write (a forked child may never write)
        self._fill = 0  # which buffer the caller fills
        self._pos = 0  # bytes in it
        self._size = 0  # bytes handed to the writer thread so far
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.closed = False

    @classmethod
    def create(cls, path: Path | str, *, direct: bool = True, mode: int = 0o644, chunk: int = _CHUNK) -> StreamFile:
        """Create (or truncate) `path`; O_DIRECT when asked for and the filesystem takes it."""
        _check_chunk(chunk)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        o_direct = getattr(os, "O_DIRECT", 0) if direct else 0
        if o_direct:
            try:
                return cls(os.open(path, flags | o_direct, mode), direct=True, chunk=chunk)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
        return cls(os.open(path, flags, mode), direct=False, chunk=chunk)

    def __enter__(self) -> StreamFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data)
        n = view.nbytes
        if n == 0:
            return 0  # (an empty array's view cannot be cast)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        done = 0
        if not self._buffers:
            self._buffers = [mmap.mmap(-1, self._chunk), mmap.mmap(-1, self._chunk)]
        while done < n:
            buf = self._buffers[self._fill]
            take = min(n - done, self._chunk - self._pos)
            buf[self._pos:self._pos + take] = view[done:done + take]
            self._pos += take
            done += take
            if self._pos == self._chunk:
                self._hand_over(self._chunk)
        return n

    def finish(self) -> None:
        """Write the rest, set the file's exact size, fsync; raises the writer's error if it met one."""
        self._wait()
        tail = self._pos
        if tail:
            if self._direct:  # a whole block, then cut the file back to its size
                padded = -(-tail // _ALIGN) * _ALIGN
                self._buffers[self._fill][tail:padded] = bytes(padded - tail)
                size = self._size + tail
                self._hand_over(padded, tail)
                self._wait()
                os.ftruncate(self._fd, size)
            else:
                self._hand_over(tail)
        self._wait()
        os.fsync(self._fd)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._wait(raise_error=False)
        finally:
            for b in self._buffers:
                b.close()
            self._buffers = []
            os.close(self._fd)

    # ------------------------------------------------------------ the writer thread
    def _hand_over(self, length: int, counted: int | None = None) -> None:
        self._wait()
        buf = self._buffers[self._fill]
        self._thread = threading.Thread(target=self._write_out, args=(buf, length, self._size), daemon=True,
                                        name="qlower-stream-file")
        self._thread.start()
        self._size += length if counted is None else counted
        self._fill ^= 1
        self._pos = 0

    def _write_out(self, buf: mmap.mmap, length: int, offset: int) -> None:
        try:
            with memoryview(buf) as whole, whole[:length] as view:
                done = 0
                while done < length:
                    try:
                        done += os.write(self._fd, view[done:])
                    except OSError as e:  # O_DIRECT accepted at open, refused at write: write buffered
                        if not (self._direct and e.errno == errno.EINVAL and done == 0 and offset == 0):
                            raise
                        import fcntl  # (POSIX only, as O_DIRECT is)

                        fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                        self._direct = False
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread by `_wait`
            self._error = e

    def _wait(self, raise_error: bool = True) -> None:
        t, self._thread = self._thread, None
        if t is not None:
            t.join()
        if raise_error and self._error is not None:
            e, self._error = self._error, None
            raise e


def _check_chunk(chunk: int) -> None:
    if chunk <= 0 or chunk % _ALIGN:
        raise ValueError(f"chunk must be a positive multiple of {_ALIGN}")
