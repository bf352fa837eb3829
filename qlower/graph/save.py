"""Saving graphs as `qlower-graph/1` JSON (deterministic, atomic; data inline or in an npz)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph, Value
from qlower.graph.types import DTYPE_NAMES
from qlower.graph.format import FORMAT, _PLAIN, _plain_list, quant_problems
from qlower._files import write_atomic
from qlower.graph.lazy import LazyArray, NpySource, SafetensorsSource
from qlower.graph.npz import _npz_bytes


def dumps_graph(graph: Graph) -> str:
    """The graph as `qlower-graph/1` text with all constant data inline."""
    return _dump(graph, None, {}, None)


def save_graph(graph: Graph, path: str | Path, *, npz: bool | str = False, quant_refs: int | None = None) -> None:
    """Write a graph file atomically; `npz` (True = `<stem>.npz`, or a name relative to
    the JSON's folder) moves constant data into an archive written the same way.
    `quant_refs`: encodings with at least this many scales keep their scales and zero points
    in `<stem>.quant.npz` (by reference), so loading them parses no million-number JSON lists."""
    path = Path(path)
    qarrays: dict[str, np.ndarray] = {}
    qrefs = None if quant_refs is None else _QuantRefs(path.with_suffix(".quant.npz").name, quant_refs, qarrays)
    if not npz:
        text = _dump(graph, None, {}, path.parent, qrefs)
        if qarrays:
            write_atomic(path.with_suffix(".quant.npz"), _npz_bytes(qarrays))
        write_atomic(path, text.encode("utf-8"))
        return
    npz_path = path.with_suffix(".npz") if npz is True else path.parent / str(npz)
    if npz_path.resolve() == path.resolve():
        raise QlowerError(error(f"the npz file {npz_path} would overwrite the graph file", code="io"))
    arrays: dict[str, np.ndarray] = {}
    text = _dump(graph, Path(os.path.relpath(npz_path, path.parent)).as_posix(), arrays, path.parent, qrefs)
    if arrays:
        write_atomic(npz_path, _npz_bytes(arrays))
    if qarrays:
        write_atomic(path.with_suffix(".quant.npz"), _npz_bytes(qarrays))
    write_atomic(path, text.encode("utf-8"))


@attrs.define
class _QuantRefs:
    """Where long encodings go: the `.quant.npz` name, the length from which they go there, its arrays."""

    file: str
    threshold: int
    arrays: dict[str, np.ndarray]


def _dump(graph: Graph, npz_ref: str | None, arrays: dict[str, np.ndarray], ref_dir: Path | None,
          qrefs: _QuantRefs | None = None) -> str:
    """`ref_dir` (the saved file's folder): data still by reference to a .npy/.safetensors file
    stays a reference, relative to it; None writes everything inline or into the npz."""
    enc = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "), default=_json_default).encode
    key = enc  # tensor names are JSON strings
    tensors = []
    for v in graph.values:
        t: dict[str, Any] = {"dtype": _dtype_name(v), "shape": None if v.shape is None else list(v.shape)}
        if v.quant is not None:
            t["quant"] = _quant_json(v, qrefs)
        if v.data is not None:
            ref = _ref_json(v.data, ref_dir)
            t["data"] = ref if ref is not None else _data_json(v, npz_ref, arrays)
        tensors.append(f"    {key(v.name)}: {enc(t)}")
    nodes = []
    for op in graph.ops:
        n: dict[str, Any] = {"name": op.name, "op": op.type,
                             "inputs": ["" if x is None else x.name for x in op.operands],
                             "outputs": [r.name for r in op.results]}
        if op.attrs:
            n["attrs"] = op.attrs
            for k, a in op.attrs.items():
                if type(k) is not str or (type(a) not in _PLAIN and not _plain_list(a) and not _dumpable(a, enc)):
                    raise QlowerError(error(f"node `{op.name}`: attribute `{k}` = {a!r} has no JSON form "
                                            "(attributes are scalars, strings and lists)",
                                            subject=f"node {op.name}", code="bad-attr"))
        nodes.append(f"    {enc(n)}")
    head = {"format": FORMAT, "name": graph.name, "inputs": [v.name for v in graph.inputs],
            "outputs": [v.name for v in graph.outputs]}
    lines = ["{"] + [f"  {enc(k)}: {enc(x)}," for k, x in head.items()]
    lines.append('  "tensors": {' + ("\n" + ",\n".join(tensors) + "\n  }," if tensors else "},"))
    lines.append('  "nodes": [' + ("\n" + ",\n".join(nodes) + "\n  ]" if nodes else "]"))
    lines.append("}\n")
    return "\n".join(lines)


def _json_default(x: Any) -> Any:
    if isinstance(x, np.generic) and x.dtype.kind in "biuf":
        return x.item()
    raise TypeError(type(x).__name__)


def _dumpable(a: Any, enc: Callable[[Any], str]) -> bool:
    if isinstance(a, dict):
        return False
    if isinstance(a, (list, tuple)):
        return all(_dumpable(x, enc) for x in a)
    try:
        enc(a)
        return True
    except (TypeError, ValueError):
        return False


def _dtype_name(v: Value) -> str:
    name = v.dtype.name
    if name not in DTYPE_NAMES:
        raise QlowerError(error(f"tensor `{v.name}`: dtype {v.dtype} has no qlower-graph/1 name",
                                subject=f"tensor {v.name}", code="unknown-dtype"))
    return name


def _quant_json(v: Value, qrefs: _QuantRefs | None = None) -> dict[str, Any]:
    q = v.quant
    problems = quant_problems(q, v.dtype, v.shape)
    if problems:
        raise QlowerError([error(f"tensor `{v.name}`: {m}", subject=f"tensor {v.name}", code=c)
                           for c, m in problems])
    if q.axis is None:
        out: dict[str, Any] = {"scale": q.scale[0], "zero_point": q.zero_point[0]}
    else:
        if qrefs is not None and len(q.scale) >= qrefs.threshold:
            out = _quant_ref_json(v, qrefs)
        else:
            out = {"scale": list(q.scale), "zero_point": list(q.zero_point)}
        out["axis"] = q.axis
        if q.block_size is not None:
            out["block_size"], out["block_axis"] = q.block_size, q.block_axis
    if q.bitwidth is not None:
        out["bitwidth"] = q.bitwidth
    if q.symmetric:
        out["symmetric"] = True
    return out


def _quant_ref_json(v: Value, refs: "_QuantRefs") -> dict[str, Any]:
    """`scale` (float64) and `zero_point` (the narrowest of int8/16/32/64 that holds them) as npz refs."""
    q = v.quant
    zp = np.asarray(q.zero_point, np.int64)
    lo, hi = (int(zp.min()), int(zp.max())) if zp.size else (0, 0)
    narrow = next(t for t in (np.int8, np.int16, np.int32, np.int64)
                  if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max)
    refs.arrays[f"{v.name}.scale"] = np.asarray(q.scale, np.float64)
    refs.arrays[f"{v.name}.zero_point"] = zp.astype(narrow)
    return {"scale": {"npz": refs.file, "key": f"{v.name}.scale"},
            "zero_point": {"npz": refs.file, "key": f"{v.name}.zero_point"}}


def _ref_json(data: Any, ref_dir: Path | None) -> dict[str, str] | None:
    """The reference a lazily read constant came from, unless it was changed since, lies outside the
    saved file's folder (see `qlower._files.confined`) or inline is wanted."""
    if ref_dir is None or not isinstance(data, LazyArray) or data.steps:
        return None
    src = data.source
    rel = Path(os.path.relpath(Path(src.path).resolve(), Path(ref_dir).resolve())).as_posix()
    if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
        return None  # loading refuses references out of the file's folder: the data itself goes in
    if isinstance(src, SafetensorsSource):
        return {"safetensors": rel, "key": src.key}
    if isinstance(src, NpySource):
        return {"npy": rel}
    return None


def _data_json(v: Value, npz_ref: str | None, arrays: dict[str, np.ndarray]) -> Any:
    data = np.asarray(v.data)
    if v.shape is None or data.shape != v.shape or data.dtype != v.dtype:
        raise QlowerError(error(f"tensor `{v.name}`: constant data is {data.dtype}{list(data.shape)} but the tensor "
                                f"is {v.dtype}{list(v.shape) if v.shape is not None else '[?]'}",
                                subject=f"tensor {v.name}", code="data-shape"))
    if npz_ref is None:
        return data.tolist()
    arrays[v.name] = data
    return {"npz": npz_ref, "key": v.name}
