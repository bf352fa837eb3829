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


def calibrate(graph: Graph, feeds: Iterable[Mapping[str, Any]], kernels: Mapping[str, Mapping[str, Kernel]], *,
              histogram: bool = False, observers: dict[str, RangeObserver] | None = None,
              progress: Any = None) -> dict[str, RangeObserver]:
    """name → observer of every non-constant float tensor, over all `feeds` (input name → array).

    A feed source with an `observe(outputs)` method (`qlower.frontends.llm.Prefill`) is given each
    feed's outputs before the next feed is asked for: a prefill's KV cache comes from the chunks
    before it."""
    from qlower.qnn.convert import encoding_of
    from qlower.reference.quant import dequantize

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
                    data = v.data
                    args.append(dequantize(np.asarray(data), encoding_of(v.quant, v.dtype, v.shape), v.dtype)
                                .astype(np.float32) if v.quant is not None else np.asarray(data))
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
