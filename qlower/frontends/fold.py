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
                   max_elements: int = 1 << 24, type_only: Mapping[str, tuple[int, ...]] | None = None) -> int:
    """Fold every op whose operands are all constants (or absent); returns how many were folded.

    Ops without a kernel, or whose results would exceed `max_elements`, are left alone. Operands
    at `type_only` positions (CastLike's second) need no data: only their dtype is read, so the
    kernel gets zeros of their type.
    """
    folded = 0
    type_only = type_only or {}
    for op in graph.topo_order():
        if op.type.startswith("qnn.") or not op.results:
            continue
        typed = {i: np.zeros(v.shape if v.shape is not None and np.prod(v.shape) <= max_elements else (0,), v.dtype)
                 for i in type_only.get(op.type, ()) if i < len(op.operands)
                 and (v := op.operands[i]) is not None and v.data is None and v.quant is None}
        if any(v is not None and i not in typed and (v.data is None or v.quant is not None)
               for i, v in enumerate(op.operands)) \
                or any(r.quant is not None for r in op.results) or not any(
                v is not None for v in op.operands):
            continue
        dialect, _, name = op.type.partition(".")
        kernel = kernels.get(dialect, {}).get(name)
        if kernel is None:
            continue
        outs = [OutSpec(r.shape, r.dtype, None) for r in op.results]
        try:
            values = kernel([typed[i] if i in typed else v.data if v is not None else None
                             for i, v in enumerate(op.operands)], op.attrs, outs)
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


def fold_empty(graph: Graph, concat_types: tuple[str, ...] = (), split_types: tuple[str, ...] = ()) -> int:
    """Empty tensors (a dim of 0: slices past the end, zero-length splits) become static empty constants.

    QNN tensors cannot be empty, and an empty tensor carries no data anyway: an op all of whose
    results are empty is replaced by its (empty) results as constants, so ops that read them
    fold away (`fold_constants`: a reduction over an empty axis becomes its identity value) and
    concatenations (`concat_types`) drop them. A split (`split_types`: sizes in operand 1 or a
    `split` attribute) with some empty parts loses them: it splits into the non-empty parts only
    (rotary embedding rotating the whole head splits off an empty pass-through part). Returns how
    many ops changed.
    """
    changed = 0
    for op in graph.topo_order():
        if op.results and all(r.shape is not None and 0 in r.shape and r.quant is None for r in op.results):
            results, operands = list(op.results), [v for v in op.operands if v is not None]
            graph.detach_op(op)
            for r in results:
                r.data = np.zeros(r.shape, r.dtype)
            _drop_unused(graph, operands)
            changed += 1
        elif op.type in split_types and op.operands and op.operands[0] is not None \
                and op.operands[0].shape is not None and any(_has_zero(r) for r in op.results):
            _drop_empty_parts(graph, op)
            changed += 1
        elif op.type in concat_types and any(map(_is_empty, op.operands)) \
                and not all(map(_is_empty, op.operands)):
            name, attrs, prov = op.name, op.attrs, op.provenance
            operands, results = list(op.operands), list(op.results)
            graph.detach_op(op)
            graph.add_op(name, op.type, [v for v in operands if not _is_empty(v)], results, attrs, prov)
            _drop_unused(graph, [v for v in operands if _is_empty(v)])
            changed += 1
    return changed


def fold_shape_ops(graph: Graph, shape_type: str, size_type: str) -> int:
    """Shape and Size ops whose input shape is known become static data, as the frontend does on import.

    Shapes that only folding or one-node inference revealed (a Pad whose pads were computed from
    constants) are found after import; their Shape feeds further folding. Returns how many changed.
    """
    changed = 0
    for op in graph.topo_order():
        if op.type not in (shape_type, size_type) or not op.operands or op.operands[0] is None:
            continue
        x, (r,) = op.operands[0], op.results
        if x.shape is None or x.quant is not None:
            continue
        dims = [int(d) for d in x.shape]
        if op.type == size_type:
            data = np.asarray(int(np.prod(dims)))
        else:
            data = np.asarray(dims[slice(int(op.attrs.get("start", 0)), int(op.attrs.get("end", len(dims))))])
        graph.detach_op(op)
        r.data = data.astype(r.dtype if r.dtype is not None else np.int32)
        if r.shape is None:
            r.shape = tuple(data.shape)
        _drop_unused(graph, [x])
        changed += 1
    return changed


def produce_constant_outputs(graph: Graph, identity_type: str) -> int:
    """Give every graph output that folded to a constant an op that produces it.

    A QNN graph output must be written by a node: the folded data moves to a fresh static
    tensor and an `identity_type` op copies it to the output. Returns how many outputs changed.
    """
    from qlower.diagnostics import QlowerError, error

    changed = 0
    for v in list(graph.outputs):
        if v.producer is not None or v.data is None or v.is_input:
            continue
        if v.data.size == 0:
            raise QlowerError(error(f"graph output {v.name} is empty (shape {list(v.shape or ())}); QNN tensors "
                                    "cannot have 0 elements", subject=f"tensor {v.name}", code="empty-output",
                                    hint="drop the output from the model, or make it non-empty"))
        src = graph.add_value(graph.fresh_value_name(f"{v.name}.const"), v.dtype, v.shape, quant=v.quant,
                              data=v.data)
        v.data = None
        graph.add_op(graph.fresh_op_name(f"{v.name}.produce"), identity_type, [src], [v], {})
        changed += 1
    return changed


def _has_zero(v) -> bool:
    return v.shape is not None and 0 in v.shape and v.quant is None


def _drop_empty_parts(graph: Graph, op) -> None:
    """Re-create a split without its empty results, which become empty constants; sizes stay explicit."""
    name, attrs, prov = op.name, dict(op.attrs), op.provenance
    operands, results = list(op.operands), list(op.results)
    axis = int(attrs.get("axis", 0)) % len(operands[0].shape)
    kept = [r for r in results if not _has_zero(r)]
    sizes = np.asarray([int(r.shape[axis]) for r in kept], np.int64)
    graph.detach_op(op)
    for r in results:
        if _has_zero(r):
            r.data = np.zeros(r.shape, r.dtype)
    attrs.pop("num_outputs", None)
    new_operands = operands[:1]
    if "split" in attrs:
        attrs["split"] = [int(x) for x in sizes]
    else:
        new_operands.append(graph.add_value(graph.fresh_value_name(f"{name}.sizes"), np.dtype(np.int64),
                                            sizes.shape, data=sizes))
    graph.add_op(name, op.type, new_operands, kept, attrs, prov)
    _drop_unused(graph, [v for v in operands[1:] if v is not None])


def _is_empty(v) -> bool:
    return v is not None and v.data is not None and v.data.size == 0


def _drop_unused(graph: Graph, values) -> None:
    for v in values:
        if not v.users and not v.is_output and not v.is_input and v.producer is None and graph.has_value(v.name):
            graph.remove_value(v)
