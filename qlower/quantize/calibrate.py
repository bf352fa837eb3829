"""Calibration: run the float graph with qlower's reference kernels, one input set (a chunk) at a
time, and observe every activation.

Unlike `qlower.reference.source.run_graph`, which holds every constant and every result for
verification, this reads each weight when its op runs and drops it after, and drops each
activation after its last use: memory is one chunk's live activations plus the largest weight.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph
from qlower.quantize.observe import RangeObserver
from qlower.reference.spec import Kernel, KernelError, OutSpec


def check_feed(graph: Graph, feed: Mapping[str, Any], where: str) -> dict[str, np.ndarray]:
    """The graph's inputs from `feed`, checked: every input present, shapes and kinds that fit."""
    out = {}
    for v in graph.inputs:
        if v.name not in feed:
            raise QlowerError(error(f"{where}: no array for graph input {v.name}", subject=f"tensor {v.name}",
                                    hint=f"calibration data is keyed by input name: "
                                    f"{', '.join(x.name for x in graph.inputs[:8])}", code="calibration"))
        arr = np.asarray(feed[v.name])
        if v.shape is not None and tuple(arr.shape) != tuple(v.shape):
            raise QlowerError(error(f"{where}: {v.name} has shape {list(arr.shape)}, the graph input is "
                                    f"{list(v.shape)}", subject=f"tensor {v.name}", code="calibration"))
        if (arr.dtype.kind == "f") != (v.dtype.kind == "f") or arr.dtype.kind not in "fiub":
            raise QlowerError(error(f"{where}: {v.name} is {arr.dtype}, the graph input is {v.dtype}",
                                    subject=f"tensor {v.name}", code="calibration"))
        out[v.name] = arr.astype(v.dtype, copy=False)
    return out


ROWS_BYTES = 32 << 20


def real_constant(v: Any) -> np.ndarray:
    """A constant's real values as float32 (its own data when not fixed-point), dequantized a slice of
    rows at a time so no float64 copy of a big table is ever whole (an encoding along axis 0, per
    channel or in blocks, is sliced with the rows)."""
    import attrs

    from qlower.graph.lazy import LazyArray
    from qlower.qnn.convert import encoding_of
    from qlower.reference.quant import dequantize

    data, q = v.data, v.quant
    if q is None:
        return np.asarray(data)
    shape = tuple(v.shape)
    if len(shape) < 2 or q.axis not in (None, 0):
        return dequantize(np.asarray(data), encoding_of(q, v.dtype, shape), v.dtype).astype(np.float32, copy=False)
    per_row = len(q.scale) // shape[0] if q.axis == 0 else 0
    out = np.empty(shape, np.float32)
    step = max(1, ROWS_BYTES // max(1, int(np.prod(shape[1:])) * 8))
    for i in range(0, shape[0], step):
        j = min(shape[0], i + step)
        part = data.rows(i, j) if isinstance(data, LazyArray) else np.asarray(data[i:j])
        sub = q if q.axis is None else attrs.evolve(q, scale=q.scale[i * per_row:j * per_row],
                                                    zero_point=q.zero_point[i * per_row:j * per_row])
        out[i:j] = dequantize(part, encoding_of(sub, v.dtype, part.shape), v.dtype)
    return out


def calibrate(graph: Graph, feeds: Iterable[Mapping[str, Any]], kernels: Mapping[str, Mapping[str, Kernel]], *,
              histogram: bool = False, observers: dict[str, RangeObserver] | None = None,
              progress: Any = None) -> dict[str, RangeObserver]:
    """name → observer of every non-constant float tensor, over all `feeds` (input name → array).

    A feed source with an `observe(outputs)` method (`qlower.frontends.llm.Prefill`) is given each
    feed's outputs before the next feed is asked for: a prefill's KV cache comes from the chunks
    before it."""
    from qlower.qnn.convert import encoding_of

    seen = observers if observers is not None else {}
    order = graph.topo_order()
    last: dict[int, int] = {}
    for k, op in enumerate(order):
        for v in op.operands:
            if v is not None:
                last[id(v)] = k
    keep = {id(v) for v in graph.outputs}
    watched = {id(v): v.name for v in graph.values if not v.is_const and v.dtype.kind == "f"}
    for name in watched.values():
        seen.setdefault(name, RangeObserver(histogram))
    observe = getattr(feeds, "observe", None)
    count = 0
    for feed in feeds:
        count += 1
        env: dict[int, Any] = {}
        where = str(getattr(feed, "file", None) or f"calibration input set {count}")
        for v, arr in zip(graph.inputs, check_feed(graph, feed, where).values()):
            env[id(v)] = arr
            if id(v) in watched:
                seen[v.name].update(arr)
        for k, op in enumerate(order):
            dialect, _, name = op.type.partition(".")
            kernel = kernels.get(dialect, {}).get(name)
            if kernel is None:
                raise QlowerError(error(f"no reference kernel for {op.type}: cannot calibrate",
                                        subject=f"node {op.name}", code="no-kernel"))
            args = []
            for v in op.operands:
                if v is None:
                    args.append(None)
                elif v.is_const:
                    args.append(real_constant(v))
                else:
                    args.append(env[id(v)])
            outs = [OutSpec(r.shape, r.dtype, encoding_of(r.quant, r.dtype) if r.quant is not None else None)
                    for r in op.results]
            try:
                results = kernel(args, op.attrs, outs)
            except KernelError as exc:
                raise QlowerError(error(str(exc), subject=f"node {op.name} ({op.type})", code="kernel")) from None
            del args
            for r, val in zip(op.results, results):
                if id(r) in watched:
                    seen[r.name].update(val)
                if id(r) in last or id(r) in keep:
                    env[id(r)] = val
            for v in op.operands:
                if v is not None and last.get(id(v)) == k and id(v) not in keep:
                    env.pop(id(v), None)
        if observe is not None:
            observe({v.name: env[id(v)] for v in graph.outputs})
        if progress is not None:
            progress(count)
        del env
    if count == 0:
        raise QlowerError(error("no calibration data: the input sets are empty", code="calibration"))
    return seen
