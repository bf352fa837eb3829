"""Write a graph's three converter artifacts so that each is complete or absent.

All three are streamed into temporary files in the output directory first
(nothing proportional to the graph is held in memory: the JSON and C++ are
written a tensor or node at a time, the tar one static tensor at a time);
only when every one is written and flushed are they moved into place with
`os.replace` (atomic on one filesystem). Any failure removes the temporaries
and leaves earlier outputs untouched.

On big graphs (and where `os.fork` exists) the `.cpp`, the largest and
slowest artifact, is written by a forked child process while this process
runs the caller's gate (validation) and writes the `_net.json` and `.bin`:
the text writers are pure Python, so a second core shares the work. When the
text is mostly encodings' numbers (a 4-bit LLM's block scales) the `_net.json`
gets a child of its own too, and this process writes the `.bin` (reading and
writing the weights, mostly waiting on I/O). The bytes are the same either way;
a failure in a child comes back as the same exception and removes all three temporaries.
"""

from __future__ import annotations

import os
import pickle
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from qlower._files import StreamFile, remove_stale_temporaries
from qlower._frozen import Frozen
from qlower.diagnostics import QlowerError, error
from qlower.qnn import emit_bin, emit_cpp, emit_json
from qlower.qnn.model import QnnGraph
from qlower.qnn.table import QnnTable
from qlower.qnn.reader import load

__all__ = ["artifact_names", "load", "save"]
PARALLEL_OPS = 20_000  # from this many ops `save` writes the .cpp in a child process (when it can fork)
# ... or from this many encoding numbers (scales, offsets, block scales): a 4-bit LLM's block encodings
# are most of its .cpp's text on few ops (Qwen3-1.7B w4a16: 2k ops, 54M block scales, 230 MB of text)
PARALLEL_NUMBERS = 4_000_000
# The artifact a child writes: the .cpp, the largest and slowest (a second child for the _net.json
# measured slower on 2 cores for a 1M-op graph: its copy-on-write faults cost more than it saved; on an
# encoding-heavy graph of few ops there are few objects to fault on, and the _net.json gets one too).
_JSON, _CPP = 0, 1


def artifact_names(graph_name: str) -> tuple[str, str, str]:
    """`(<name>_net.json, <name>.cpp, <name>.bin)`, the converter's file names."""
    return f"{graph_name}_net.json", f"{graph_name}.cpp", f"{graph_name}.bin"


def save(graph: QnnGraph | QnnTable, outdir: Path, *, converter_command: str = "qlower",
         copyright_str: str = "", progress: Callable[[int, int], None] | None = None,
         parallel: bool | None = None, direct: bool = True,
         gate: Callable[[], bool] | None = None) -> list[Path]:
    """Write `<name>_net.json`, `<name>.cpp` and `<name>.bin` into `outdir`; return their paths.

    `converter_command` is recorded in the JSON and the `.cpp` header (pass the
    qlower command line that produced the graph). Output is byte-identical for
    identical input. Raises QlowerError if the graph cannot be written. `progress(done, total)`
    hears of the `.bin` data bytes as they are written. `parallel` writes the `.cpp` in a
    child process (default: from `PARALLEL_OPS` ops on, and the `.cpp` and the `_net.json` in a
    child each from `PARALLEL_NUMBERS` encoding numbers on, where `os.fork` exists and no other
    thread runs). `direct` writes with O_DIRECT where the filesystem takes it (see
    `qlower._files.StreamFile`); the bytes are the same either way. `gate` (e.g. validation) runs
    here while the child writes; when it returns False nothing is written and `save` returns [].
    """
    forked: tuple[int, ...] = (_CPP,) if parallel else ()  # the artifacts children write
    if parallel is None and threading.active_count() == 1:  # forking a process that runs other threads
        ops = len(graph.op_names) if isinstance(graph, QnnTable) else len(graph.ops)  # could copy a held lock
        if _encoding_numbers(graph) >= PARALLEL_NUMBERS:
            forked = (_CPP, _JSON)
        elif ops >= PARALLEL_OPS:
            forked = (_CPP,)
    if not hasattr(os, "fork"):
        forked = ()
    return _save(graph, Path(outdir), converter_command, copyright_str, progress, forked, direct, gate)


def _encoding_numbers(graph: QnnGraph | QnnTable) -> int:
    """How many numbers the graph's encodings write (each kind's once: a rough measure of the .cpp)."""
    encodings = ([k.encoding for k in graph.tensor_kinds] if isinstance(graph, QnnTable)
                 else [t.encoding for t in graph.tensors.values()])
    n = 0
    for e in encodings:
        if e is not None:
            n += len(e.scales) + len(e.offsets)
            b = e.block_scales
            if b is not None:
                n += b.array.size if isinstance(b, Frozen) else sum(map(len, b))
    return n


def _save(graph: QnnGraph | QnnTable, outdir: Path, converter_command: str, copyright_str: str,
          progress: Callable[[int, int], None] | None = None, forked: tuple[int, ...] = (),
          direct: bool = True, gate: Callable[[], bool] | None = None) -> list[Path]:
    try:
        layout = emit_bin.plan(graph)
    except QlowerError:
        if gate is not None and not gate():
            return []  # the gate's findings (e.g. validation's) explain the graph better than the writer
        raise
    tick = None
    if progress is not None:
        total, done = emit_bin.static_bytes(layout), [0]

        def tick(n: int) -> None:
            done[0] += n
            progress(done[0], total)
    text_args = {"converter_command": converter_command, "copyright_str": copyright_str, "layout": layout}
    writers: list[tuple[str, Callable[[BinaryIO], None]]] = [
        (name, fn) for name, fn in zip(artifact_names(graph.name), (
            lambda f: emit_json.write(graph, f, **text_args),
            lambda f: emit_cpp.write(graph, f, **text_args),
            (lambda f: emit_bin.write(graph, f, layout)) if tick is None
            else (lambda f: emit_bin.write(graph, f, layout, tick)),
        ))
    ]
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise QlowerError(error(f"cannot create output directory: {exc}", subject=str(outdir),
                                code="output-dir")) from None
    temps: list[tuple[Path, Path]] = []
    files: list[StreamFile] = []
    children: dict[int, _Child] = {}  # the processes writing artifacts (by index), when there are any
    try:
        for name, _ in writers:
            remove_stale_temporaries(outdir, name)  # what a killed run left
            # a name no one else has, with the pid that tells a later run whether its writer still runs
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.{os.getpid()}.", suffix=".tmp", dir=outdir)
            os.close(fd)
            temps.append((Path(tmp), outdir / name))
            files.append(StreamFile.create(tmp, direct=direct))
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; artifacts are ordinary files
        for i in forked:
            try:
                children[i] = _Child.start(writers[i][1], files[i], writers[i][0])
            except OSError:  # no process to spare (memory, process limit): write it here
                break
            files[i].close()  # (nothing buffered yet) the child has its own copy
        if gate is not None and not gate():
            _discard(temps, files, children)
            return []
        for i, (_, write) in enumerate(writers):
            if i not in children:
                _write_file(write, files[i])
        while children:
            children.pop(next(iter(children))).join()
        for tmp, final in temps:
            os.replace(tmp, final)
    except OSError as exc:
        _discard(temps, files, children)
        raise QlowerError(error(f"cannot write artifacts: {exc}", subject=str(outdir),
                                code="output-write")) from None
    except BaseException:
        _discard(temps, files, children)
        raise
    return [final for _, final in temps]


def _write_file(write: Callable[[BinaryIO], None], f: StreamFile) -> None:
    with f:
        write(f)  # type: ignore[arg-type]  # (the writers only call `write`)
        f.finish()


class _Child:
    """One artifact written by a forked child; its exception, if any, pickled back through a pipe."""

    def __init__(self, pid: int, pipe: int, what: str) -> None:
        self.pid, self.pipe, self.what = pid, pipe, what

    @classmethod
    def start(cls, write: Callable[[BinaryIO], None], f: StreamFile, what: str) -> _Child:
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            raise
        if pid == 0:  # the child: write, report, and leave without running the parent's cleanup
            code = 1
            try:
                os.close(r)
                try:
                    _write_file(write, f)
                    payload, code = b"", 0
                except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
                    payload = _pickled(exc)
                with os.fdopen(w, "wb") as p:
                    p.write(payload)
            finally:
                os._exit(code)
        os.close(w)
        return cls(pid, r, what)

    def join(self) -> None:
        """Wait for the child; raise what it raised (or why it died)."""
        with os.fdopen(self.pipe, "rb") as p:
            payload = p.read()
        _, status = os.waitpid(self.pid, 0)
        if payload:
            raise pickle.loads(payload)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            why = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            raise QlowerError(error(f"the process writing {self.what} ended with {why}", code="output-write"))

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.pipe)


def _pickled(exc: BaseException) -> bytes:
    try:
        return pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - an exception that does not pickle still reaches the parent
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))


def _discard(temps: list[tuple[Path, Path]], files: list[StreamFile], children: dict[int, _Child] | None = None
             ) -> None:
    for child in (children or {}).values():
        child.kill()
    for f in files:
        try:
            f.close()
        except OSError:
            pass
    for tmp, _ in temps:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
