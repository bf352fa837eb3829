"""Quantized weights written out as they are made, into `.safetensors` shards that the graph then
references (so a weight is in memory only between its quantization and its shard's flush)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

import numpy as np

from qlower.graph.core import Value
from qlower.graph.lazy import LazyArray, SafetensorsSource

SMALL = 4096  # elements: smaller constants stay inline in the graph


class ShardWriter:
    """Collects weights up to `max_bytes`, then writes them as one shard and points their values at it."""

    def __init__(self, outdir: Path, prefix: str, max_bytes: int = 256 << 20) -> None:
        self.outdir, self.prefix, self.max_bytes = Path(outdir), prefix, max_bytes
        self.pending: dict[str, np.ndarray] = {}
        self.values: list[Value] = []
        self.size = 0
        self.count = 0
        self.paths: list[Path] = []

    def add(self, v: Value, data: np.ndarray) -> None:
        if data.size <= SMALL:
            return
        self.pending[v.name] = np.ascontiguousarray(data)
        self.values.append(v)
        self.size += data.nbytes
        if self.size >= self.max_bytes:
            self.flush()

    def flush(self) -> None:
        from safetensors.numpy import save_file

        if not self.pending:
            return
        self.count += 1
        path = self.outdir / f"{self.prefix}-{self.count:05d}.safetensors"
        tmp = path.with_suffix(".safetensors.part")
        save_file(self.pending, str(tmp))
        tmp.replace(path)
        self.paths.append(path)
        for v in self.values:
            arr = self.pending[v.name]
            v.data = LazyArray(SafetensorsSource(path, v.name), arr.dtype, arr.shape)
        self.pending, self.values, self.size = {}, [], 0

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.flush()
        else:  # nothing half-written
            for p in self.paths:
                p.unlink(missing_ok=True)
