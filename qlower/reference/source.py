"""Running a source-dialect graph with its dialect's reference kernels."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph
from qlower.reference.spec import Kernel, KernelError, OutSpec


def run_graph(graph: Graph, inputs: Mapping[str, np.ndarray],
              kernels: Mapping[str, Mapping[str, Kernel]]) -> dict[str, np.ndarray]:
    """Execute `graph` on real-valued inputs; `kernels` maps dialect → op name → kernel.

    Constants with an encoding are dequantized first: source semantics are
    computed on real values.
    """
    from qlower.qnn.convert import encoding_of
    from qlower.reference.quant import dequantize

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
            env[id(v)] = (dequantize(v.data, encoding_of(v.quant, v.dtype, v.shape), v.dtype).astype(np.float32)
                          if v.quant is not None else v.data)
    for op in graph.topo_order():
        dialect, _, name = op.type.partition(".")
        kernel = kernels.get(dialect, {}).get(name)
        if kernel is None:
            raise QlowerError(error(f"no reference kernel for {op.type}", subject=f"node {op.name}",
                                    code="no-kernel"))
        args = [env[id(v)] if v is not None else None for v in op.operands]
        outs = [OutSpec(r.shape, r.dtype, encoding_of(r.quant, r.dtype) if r.quant is not None else None)
                for r in op.results]
        try:
            results = kernel(args, op.attrs, outs)
        except KernelError as exc:
            raise QlowerError(error(str(exc), subject=f"node {op.name} ({op.type})", code="kernel")) from None
        for r, val in zip(op.results, results):
            env[id(r)] = val
    return {v.name: env[id(v)] for v in graph.outputs}
