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
from qlower.quantize.table import roles, softmax_rows
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


def real_constant(v: Any, span: tuple[int, int] | None = None) -> np.ndarray:
    """A constant's real values (rows i:j of them with `span`) as float32 (its own data when not
    fixed-point), dequantized a slice of rows at a time so no float64 copy of a big table is ever
    whole (an encoding along axis 0, per channel or in blocks, is sliced with the rows)."""
    import attrs

    from qlower.graph.lazy import LazyArray
    from qlower.qnn.convert import encoding_of
    from qlower.reference.quant import dequantize

    data, q = v.data, v.quant
    shape = tuple(v.shape)
    lo, hi = span if span is not None else (0, shape[0] if shape else 0)

    def rows(i: int, j: int) -> np.ndarray:
        if span is None and (i, j) == (0, shape[0] if shape else 0):
            return np.asarray(data)
        return data.rows(i, j) if isinstance(data, LazyArray) else np.asarray(data[i:j])

    if q is None:
        return rows(lo, hi) if shape else np.asarray(data)
    if len(shape) < 2 or q.axis not in (None, 0):
        whole = dequantize(np.asarray(data), encoding_of(q, v.dtype, shape), v.dtype).astype(np.float32, copy=False)
        return whole if span is None else whole[lo:hi]
    per_row = len(q.scale) // shape[0] if q.axis == 0 else 0
    out = np.empty((hi - lo, *shape[1:]), np.float32)
    step = max(1, ROWS_BYTES // max(1, int(np.prod(shape[1:])) * 8))
    for i in range(lo, hi, step):
        j = min(hi, i + step)
        part = rows(i, j)
        sub = q if q.axis is None else attrs.evolve(q, scale=q.scale[i * per_row:j * per_row],
                                                    zero_point=q.zero_point[i * per_row:j * per_row])
        out[i - lo:j - lo] = dequantize(part, encoding_of(sub, v.dtype, part.shape), v.dtype)
    return out


def _run(op: Any, kernel: Kernel, env: Mapping[int, Any], outs: list[OutSpec]) -> list[np.ndarray]:
    """One op on the kernels, a big weight's rows (or a table's needed rows) at a time where the roles
    file says the op allows it, so no big constant is ever whole in float (the reference kernels
    compute in float64)."""
    table = roles()
    split = table["split_rows"].get(op.type)
    gather = table["gather_rows"].get(op.type)
    ops = op.operands
    if split is not None and len(ops) > split["weight"] and ops[split["weight"]] is not None \
            and ops[split["weight"]].is_const and ops[split["weight"]].shape is not None:
        w = ops[split["weight"]]
        rows = w.shape[0]
        step = max(1, ROWS_BYTES // max(1, int(np.prod(w.shape[1:])) * 8))
        if step < rows:
            b_at = split.get("bias")
            parts = []
            for i in range(0, rows, step):
                j = min(rows, i + step)
                args = [env[id(v)] if v is not None and not v.is_const else None for v in ops]
                args[split["weight"]] = real_constant(w, (i, j))
                if b_at is not None and len(ops) > b_at and ops[b_at] is not None:
                    args[b_at] = real_constant(ops[b_at])[i:j]
                for k, v in enumerate(ops):
                    if v is not None and v.is_const and args[k] is None:
                        args[k] = real_constant(v)
                shape = None if outs[0].shape is None else (*outs[0].shape[:-1], j - i)
                parts.append(kernel(args, op.attrs, [OutSpec(shape, outs[0].dtype, None)])[0])
                del args
            return [np.concatenate(parts, axis=-1)]
    if gather is not None and ops[gather[1]] is not None and ops[gather[1]].is_const and \
            ops[gather[0]] is not None and not ops[gather[0]].is_const:
        ids = np.asarray(env[id(ops[gather[0]])])
        t = ops[gather[1]]
        n = t.shape[0]
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise KernelError(f"{op.type}: ids must lie in [0, {n}), got [{ids.min()}, {ids.max()}]")
        want, inverse = np.unique(ids, return_inverse=True)
        picked = np.empty((want.size, *t.shape[1:]), np.float32)
        step = max(1, ROWS_BYTES // max(1, int(np.prod(t.shape[1:])) * 8))
        for i in range(0, n, step):
            j = min(n, i + step)
            sel = (want >= i) & (want < j)
            if sel.any():
                picked[sel] = real_constant(t, (i, j))[want[sel] - i]
        args = [None] * len(ops)
        args[gather[0]] = inverse.reshape(ids.shape).astype(ids.dtype)
        args[gather[1]] = picked
        return kernel(args, op.attrs, outs)
    args = [None if v is None else real_constant(v) if v.is_const else env[id(v)] for v in ops]
    return kernel(args, op.attrs, outs)


def calibrate(graph: Graph, feeds: Iterable[Mapping[str, Any]], kernels: Mapping[str, Mapping[str, Kernel]], *,
              histogram: bool = False, observers: dict[str, RangeObserver] | None = None,
              progress: Any = None, features: Mapping[str, int] | None = None) -> dict[str, RangeObserver]:
    """name → observer of every non-constant float tensor, over all `feeds` (input name → array);
    `features` (name → axis) also get their mean along that axis kept (`RangeObserver.update_features`).

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
    rows = softmax_rows(graph)
    feature_axes = {id(v): features[v.name] for v in graph.values if features and v.name in features
                    and id(v) in watched}
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
                if id(v) in rows:
                    seen[v.name].update_rows(arr, rows[id(v)])
                if id(v) in feature_axes:
                    seen[v.name].update_features(arr, feature_axes[id(v)])
        for k, op in enumerate(order):
            dialect, _, name = op.type.partition(".")
            kernel = kernels.get(dialect, {}).get(name)
            if kernel is None:
                raise QlowerError(error(f"no reference kernel for {op.type}: cannot calibrate",
                                        subject=f"node {op.name}", code="no-kernel"))
            outs = [OutSpec(r.shape, r.dtype, encoding_of(r.quant, r.dtype) if r.quant is not None else None)
                    for r in op.results]
            try:
                results = _run(op, kernel, env, outs)
            except KernelError as exc:
                raise QlowerError(error(str(exc), subject=f"node {op.name} ({op.type})", code="kernel")) from None
            for r, val in zip(op.results, results):
                if id(r) in watched:
                    seen[r.name].update(val)
                    if id(r) in rows:
                        seen[r.name].update_rows(val, rows[id(r)])
                    if id(r) in feature_axes:
                        seen[r.name].update_features(val, feature_axes[id(r)])
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
