"""Write a graph's three converter artifacts so that each is complete or absent.

All three are streamed into temporary files in the output directory first
(nothing proportional to the graph is held in memory: the JSON and C++ are
written a tensor or node at a time, the tar one static tensor at a time);
only when every one is written and flushed are they moved into place with
`os.replace` (atomic on one filesystem). Any failure removes the temporaries
and leaves earlier outputs untouched.
"""

from __future__ import annotations

import gc
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from qlower.diagnostics import QlowerError, error
from qlower.qnn import emit_bin, emit_cpp, emit_json
from qlower.qnn.model import QnnGraph
from qlower.qnn.reader import load

__all__ = ["artifact_names", "load", "save"]
_BUFFER = 1 << 20  # the writers hand over chunks of about this size or small tar headers


def artifact_names(graph_name: str) -> tuple[str, str, str]:
    """`(<name>_net.json, <name>.cpp, <name>.bin)`, the converter's file names."""
    return f"{graph_name}_net.json", f"{graph_name}.cpp", f"{graph_name}.bin"


def save(graph: QnnGraph, outdir: Path, *, converter_command: str = "qlower",
         copyright_str: str = "", progress: Callable[[int, int], None] | None = None) -> list[Path]:
    """Write `<name>_net.json`, `<name>.cpp` and `<name>.bin` into `outdir`; return their paths.

    `converter_command` is recorded in the JSON and the `.cpp` header (pass the
    qlower command line that produced the graph). Output is byte-identical for
    identical input. Raises QlowerError if the graph cannot be written. `progress(done, total)`
    hears of the `.bin` data bytes as they are written.
    """
    enabled = gc.isenabled()
    gc.disable()  # writing allocates millions of acyclic temporaries; cyclic GC passes over a big graph free nothing
    try:
        return _save(graph, Path(outdir), converter_command, copyright_str, progress)
    finally:
        if enabled:
            gc.enable()


def _save(graph: QnnGraph, outdir: Path, converter_command: str, copyright_str: str,
          progress: Callable[[int, int], None] | None = None) -> list[Path]:
    layout = emit_bin.plan(graph)
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
    try:
        for name, write in writers:
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=outdir)
            temps.append((Path(tmp), outdir / name))
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; artifacts are ordinary files
            with os.fdopen(fd, "wb", buffering=_BUFFER) as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
        for tmp, final in temps:
            os.replace(tmp, final)
    except OSError as exc:
        _discard(temps)
        raise QlowerError(error(f"cannot write artifacts: {exc}", subject=str(outdir),
                                code="output-write")) from None
    except BaseException:
        _discard(temps)
        raise
    return [final for _, final in temps]


def _discard(temps: list[tuple[Path, Path]]) -> None:
    for tmp, _ in temps:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
