"""Constant folding before lowering, for every frontend.

Subgraphs that depend only on constants (causal masks built from arange and
comparisons, rotary tables, shape arithmetic) are evaluated with the
dialect's reference semantics and replaced by static tensors, as QNN needs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from qlower.graph.core import Graph
from qlower.reference.spec import Kernel, KernelError, OutSpec


def fold_constants(graph: Graph, kernels: Mapping[str, Mapping[str, Kernel]], *,
                   max_elements: int = 1 << 24) -> int:
    """Fold every op whose operands are all constants (or absent); returns how many were folded.

    Ops without a kernel, or whose results would exceed `max_elements`, are left alone.
    """
    folded = 0
    for op in graph.topo_order():
        if op.type.startswith("qnn.") or not op.results:
            continue
        if any(v is not None and (v.data is None or v.quant is not None) for v in op.operands) \
                or any(r.quant is not None for r in op.results) or not any(
                v is not None for v in op.operands):
            continue
        dialect, _, name = op.type.partition(".")
        kernel = kernels.get(dialect, {}).get(name)
        if kernel is None:
            continue
        outs = [OutSpec(r.shape, r.dtype, None) for r in op.results]
        try:
            values = kernel([v.data if v is not None else None for v in op.operands], op.attrs, outs)
        except (KernelError, ValueError, TypeError, IndexError):
            continue  # leave it to the rules; lowering reports what cannot be done
        if any(np.asarray(x).size > max_elements for x in values):
            continue
        results = list(op.results)
        operands = [v for v in op.operands if v is not None]
        graph.detach_op(op)
        for r, x in zip(results, values):
            arr = np.asarray(x)
            r.data = arr.astype(r.dtype) if r.shape is None or tuple(arr.shape) == tuple(r.shape) \
                else arr.astype(r.dtype).reshape(r.shape)
            if r.shape is None:
                r.shape = tuple(arr.shape)
        for v in operands:
            if not v.users and not v.is_output and not v.is_input and graph.has_value(v.name):
                graph.remove_value(v)
        folded += 1
    return folded
