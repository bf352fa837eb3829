"""Running a source-dialect graph with its dialect's reference kernels.

Source semantics are computed on real values: constants with an encoding are
dequantized, and a result with an encoding holds what the quantized source
computes there, its kernel's value rounded to the encoding's grid and
saturated to its range (`qlower.reference.quant.on_grid`). A QDQ model computes
exactly that (every encoded tensor is a QuantizeLinear → DequantizeLinear
pair), and its quantizer may rely on the saturation: ONNX Runtime's drops a
Relu or Clip whose output range the encoding already clamps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph, Op, Value
from qlower.reference.spec import Kernel, KernelError, OutSpec


def constant_value(v: Value) -> np.ndarray:
    """A constant's real value (dequantized when it has an encoding)."""
    from qlower.qnn.convert import encoding_of
    from qlower.reference.quant import dequantize

    if v.quant is None:
        return v.data
    return dequantize(v.data, encoding_of(v.quant, v.dtype, v.shape), v.dtype).astype(np.float32)


def run_op(op: Op, args: Sequence[np.ndarray | None],
           kernels: Mapping[str, Mapping[str, Kernel]]) -> list[np.ndarray]:
    """One source op on real-valued operands: its kernel's results, encoded ones on their grid."""
    from qlower.qnn.convert import encoding_of
    from qlower.reference.quant import on_grid

    dialect, _, name = op.type.partition(".")
    kernel = kernels.get(dialect, {}).get(name)
    if kernel is None:
        raise QlowerError(error(f"no reference kernel for {op.type}", subject=f"node {op.name}", code="no-kernel"))
    encs = [encoding_of(r.quant, r.dtype, r.shape) if r.quant is not None else None for r in op.results]
    outs = [OutSpec(r.shape, r.dtype, e) for r, e in zip(op.results, encs)]
    try:
        results = kernel(args, op.attrs, outs)
        return [on_grid(val, e, r.dtype) if e is not None and r.dtype.kind in "iu" else np.asarray(val)
                for r, e, val in zip(op.results, encs, results)]
    except KernelError as exc:
        raise QlowerError(error(str(exc), subject=f"node {op.name} ({op.type})", code="kernel")) from None
    except ValueError as exc:  # an encoding that does not fit its tensor
        raise QlowerError(error(f"cannot put the result on its encoding's grid: {exc}",
                                subject=f"node {op.name} ({op.type})", code="kernel")) from None


def run_graph(graph: Graph, inputs: Mapping[str, np.ndarray],
              kernels: Mapping[str, Mapping[str, Kernel]]) -> dict[str, np.ndarray]:
    """Execute `graph` on real-valued inputs; `kernels` maps dialect → op name → kernel."""
    for v in graph.inputs:
        if v.name not in inputs:
            raise QlowerError(error("missing input", subject=f"tensor {v.name}", code="missing-input"))
        arr = np.asarray(inputs[v.name])
        if v.shape is not None and tuple(arr.shape) != tuple(v.shape):
            raise QlowerError(error(f"expected shape {list(v.shape)}, got {list(arr.shape)}",
                                    subject=f"tensor {v.name}", code="input-shape"))
    values = run_values(graph, {v.name: np.asarray(inputs[v.name]) for v in graph.inputs}, kernels)
    return {v.name: values[v.name] for v in graph.outputs}


def run_values(graph: Graph, inputs: Mapping[str, np.ndarray], kernels: Mapping[str, Mapping[str, Kernel]],
               ops: Sequence[Op] | None = None, env: Mapping[str, np.ndarray] | None = None
               ) -> dict[str, np.ndarray]:
    """Run the source ops (all, or `ops` in the given order) on real values; every value by name.

    The one source interpreter (`run_graph` and verification's localisation run it). `env` holds
    values already known (boundary operands of a part of the graph); constants are read as
    `constant_value` makes them, when first used."""
    vals: dict[str, np.ndarray] = dict(env or {})
    vals.update(inputs)

    def value_of(v: Value) -> np.ndarray:
        got = vals.get(v.name)
        if got is None and v.data is not None:
            got = vals[v.name] = constant_value(v)
        if got is None:
            raise QlowerError(error("value is used before it is computed", subject=f"tensor {v.name}",
                                    code="not-computed"))
        return got

    for op in (graph.topo_order() if ops is None else ops):
        results = run_op(op, [value_of(v) if v is not None else None for v in op.operands], kernels)
        for r, val in zip(op.results, results):
            vals[r.name] = np.asarray(val)
    return vals
