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
    env: dict[int, np.ndarray] = {}
    for v in graph.inputs:
        if v.name not in inputs:
            raise QlowerError(error("missing input", subject=f"tensor {v.name}", code="missing-input"))
        arr = np.asarray(inputs[v.name])
        if v.shape is not None and tuple(arr.shape) != tuple(v.shape):
            raise QlowerError(error(f"expected shape {list(v.shape)}, got {list(arr.shape)}",
                                    subject=f"tensor {v.name}", code="input-shape"))
        env[id(v)] = arr
    for v in graph.values:
        if v.data is not None:
            env[id(v)] = constant_value(v)
    for op in graph.topo_order():
        results = run_op(op, [env[id(v)] if v is not None else None for v in op.operands], kernels)
        for r, val in zip(op.results, results):
            env[id(r)] = val
    return {v.name: env[id(v)] for v in graph.outputs}
