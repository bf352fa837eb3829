"""Writing files so that each is either complete or absent."""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import stat as stat_mod
import threading
from collections.abc import Iterable
from pathlib import Path

from qlower.diagnostics import QlowerError, error


def write_atomic(path: Path, payload: bytes) -> None:
    """Write `payload` to `path` so that the file is complete or absent.

    Where Linux offers O_TMPFILE the bytes go into a nameless file that is linked in only when
    complete (a killed run leaves nothing behind); elsewhere into a hidden temporary that is
    renamed, and the temporaries of killed runs are removed by the next write of the same name."""
    path = Path(path)
    remove_stale_temporaries(path.parent, path.name)
    try:
        if _write_unnamed(path, payload):
            return
    except OSError as e:
        raise QlowerError(error(f"cannot write {path}: {e.strerror or e}", code="io")) from None
    tmp = path.parent / temporary_name(path.name)
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


def _write_unnamed(path: Path, payload: bytes) -> bool:
    """O_TMPFILE + linkat: False where the platform or filesystem has no nameless files."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or not os.path.isdir("/proc/self/fd"):
        return False
    try:
        fd = os.open(path.parent, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
            return False  # (ENOENT: a kernel without O_TMPFILE reads it as O_DIRECTORY without the dir)
        raise
    tmp = path.parent / temporary_name(path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
            # linkat cannot replace a file: link under a fresh name, then rename over the target
            try:
                os.link(f"/proc/self/fd/{f.fileno()}", tmp, follow_symlinks=True)
            except OSError as e:  # (some filesystems, overlayfs among them, refuse to link it in)
                if e.errno in (errno.EXDEV, errno.EPERM, errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL):
                    return False
                raise
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def temporary_name(name: str) -> str:
    """The hidden name a file is written under before it is complete: `.NAME.PID.RANDOM.tmp`
    (the pid lets a later run tell a killed run's leftovers from a live run's)."""
    return f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def remove_stale_temporaries(folder: Path, name: str) -> None:
    """Remove `temporary_name(name)` files of processes that no longer run (killed runs)."""
    prefix = f".{name}."
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    except OSError:
        return
    for e in entries:
        pid, _, rand = e.name[len(prefix):-len(".tmp")].partition(".")
        if not (pid.isdigit() and len(rand) == 8 and rand.replace("_", "").isalnum()):  # (mkstemp's too)
            continue
        if int(pid) != os.getpid() and not _alive(int(pid)):
            try:
                if e.is_file(follow_symlinks=False):
                    os.unlink(e.path)
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or no way to tell): leave its files alone
    return True


def refuse_overwrite(outputs: Iterable[Path | str | None], inputs: Iterable[Path | str | None]) -> None:
    """A clear error when an output path is one of the inputs (the same file, through any name or
    hard link), as `cp` refuses: writing it would replace what is being read."""
    seen: dict[tuple[int, int], Path] = {}
    for p in inputs:
        if p is None:
            continue
        for stat in (os.stat, os.lstat):
            try:
                st = stat(p)
            except (OSError, ValueError):
                continue
            seen.setdefault((st.st_dev, st.st_ino), Path(p))
    for out in outputs:
        if out is None or str(out) == "-":
            continue
        for stat in (os.stat, os.lstat):
            try:
                st = stat(out)
            except (OSError, ValueError):
                continue
            same = seen.get((st.st_dev, st.st_ino))
            if same is not None:
                raise QlowerError(error(f"refusing to write {out}: it is the input {same}", code="same-file",
                                        hint="choose another output path; qlower never replaces a file it reads"))


class UnsafeReference(Exception):
    """A file reference that qlower refuses to follow (its message says why)."""


def confined(base: Path, ref: str) -> Path:
    """`base / ref`, when it names a regular file inside `base` (symlinks followed, but only to files
    inside `base`); else UnsafeReference, or OSError when there is no such file. Model files name their weight files relative to their own
    folder: an absolute path, a `..` leading out, a link out of the folder, or a FIFO or device (a
    read that never ends) would let a model read any file on the machine, as onnx refuses too."""
    if type(ref) is not str or not ref:
        raise UnsafeReference("the reference is empty")
    if "\x00" in ref:
        raise UnsafeReference("the reference holds a NUL character")
    if os.path.isabs(ref) or ref.startswith(("/", "\\")) or (len(ref) > 1 and ref[1] == ":" and ref[0].isalpha()):
        raise UnsafeReference("absolute paths are refused; references are relative to the model's folder")
    try:
        root = os.path.realpath(base)
        target = os.path.realpath(os.path.join(root, ref))
    except (OSError, ValueError) as e:
        raise UnsafeReference(f"cannot resolve it: {e}") from None
    if os.path.commonpath([root, target]) != root:
        raise UnsafeReference("it leads outside the model's folder")
    st = os.stat(target)  # (OSError: the caller's "cannot open")
    if not stat_mod.S_ISREG(st.st_mode):
        raise UnsafeReference("it is not a regular file")
    return Path(target)


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
