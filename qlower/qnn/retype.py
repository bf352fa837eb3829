"""Datatypes a backend's op lacks, computed in another one behind Casts (the packs' `compute` declarations).

After lowering, a QNN op whose input/output datatypes match no datatype row of the backend is
retried with some of its dtypes replaced as a `compute SRC... as DST [for OPS] [backends(...)]`
declaration allows: when the op takes the replaced datatypes, and the backend's Cast converts
each replaced input to DST and each replaced output back, Casts are put around the op (static
inputs are converted in place). The declarations state which replacements are exact for which
ops (e.g. int8 → int32 for every op: an embedding; uint32 → int32 only for wrapping arithmetic);
the pass only checks what the op definitions allow.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from qlower.graph.core import Graph, Op, Provenance, Value
from qlower.graph.types import canonical_dtype
from qlower.qnn.datatypes import DataType
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.validate import datatypes_allowed

_DT = {
    "int8": DataType.INT_8, "int16": DataType.INT_16, "int32": DataType.INT_32, "int64": DataType.INT_64,
    "uint8": DataType.UINT_8, "uint16": DataType.UINT_16, "uint32": DataType.UINT_32, "uint64": DataType.UINT_64,
    "float16": DataType.FLOAT_16, "float32": DataType.FLOAT_32, "float64": DataType.FLOAT_64, "bool": DataType.BOOL_8,
}
_MAX_KINDS = 4  # distinct replaceable dtypes tried per op (2^k subsets)


def _dt(v: Value | None) -> DataType | None:
    if v is None:
        return None
    return _DT.get(np.dtype(v.dtype).name) if v.quant is None else None


def _mapping(computes: Sequence, op_type: str, backend: str) -> dict[str, list[str]]:
    """Source dtype name → the target dtype names declared for this op and backend, in order."""
    out: dict[str, list[str]] = {}
    for c in computes:
        if c.backends and backend not in c.backends:
            continue
        if c.ops and op_type not in c.ops:
            continue
        target = canonical_dtype(c.target)
        for s in c.sources:
            src = canonical_dtype(s)
            if src and target and target not in out.setdefault(src, []):
                out[src].append(target)
    return out


def _choice(op: Op, mapping: dict[str, list[str]], registry: OpDefRegistry, backend: str) -> dict[str, str] | None:
    """The replacement (dtype name → dtype name) that makes `op` and its Casts valid, or None."""
    values = [*op.operands, *op.results]
    if any(v is not None and _dt(v) is None for v in values):
        return None  # quantized or unrepresentable: not this pass's business
    kinds = sorted({np.dtype(v.dtype).name for v in values if v is not None} & set(mapping))
    if not kinds or len(kinds) > _MAX_KINDS:
        return None
    t = op.type[4:]
    for n in range(1, len(kinds) + 1):
        for subset in itertools.combinations(kinds, n):
            for targets in itertools.product(*(mapping[k] for k in subset)):
                swap = dict(zip(subset, targets))

                def dts(vs):
                    return [None if v is None else _DT[swap.get(np.dtype(v.dtype).name, np.dtype(v.dtype).name)]
                            for v in vs]

                if not datatypes_allowed(registry, t, backend, dts(op.operands), dts(op.results)):
                    continue
                casts_ok = all(
                    datatypes_allowed(registry, "Cast", backend, [_DT[a]], [_DT[b]])
                    for k, tgt in swap.items()
                    for a, b, used in ((k, tgt, any(v is not None and v.data is None and np.dtype(v.dtype).name == k
                                                    for v in op.operands)),
                                       (tgt, k, any(np.dtype(r.dtype).name == k for r in op.results)))
                    if used)
                if casts_ok:
                    return swap
    return None


def compute_in_supported_types(graph: Graph, computes: Sequence, registry: OpDefRegistry, backend: str) -> int:
    """Put Casts around the QNN ops of `graph` whose datatypes `backend` lacks, as `computes` allow.

    Returns how many ops were changed. Ops the backend already takes are left alone.
    """
    if not computes:
        return 0
    changed = 0
    casts: dict[tuple[str, str], Value] = {}
    for op in list(graph.ops):
        if not op.type.startswith("qnn.") or op.type == "qnn.Cast":
            continue
        ins = [_dt(v) for v in op.operands]
        outs = [_dt(r) for r in op.results]
        if None in outs or any(d is None for v, d in zip(op.operands, ins) if v is not None):
            continue
        if datatypes_allowed(registry, op.type[4:], backend, ins, outs):
            continue
        mapping = _mapping(computes, op.type, backend)
        swap = _choice(op, mapping, registry, backend) if mapping else None
        if swap is None:
            continue
        prov = Provenance(f"compute {'/'.join(sorted(swap))}", "qlower/qnn/retype.py", op.name)
        for i, v in enumerate(list(op.operands)):
            if v is None or np.dtype(v.dtype).name not in swap:
                continue
            target = swap[np.dtype(v.dtype).name]
            nv = casts.get((v.name, target))
            if nv is None:
                if v.data is not None and not v.is_input:
                    nv = graph.add_value(graph.fresh_value_name(f"{v.name}.{target}"), np.dtype(target), v.shape,
                                         data=np.asarray(v.data).astype(target))
                else:
                    nv = graph.add_value(graph.fresh_value_name(f"{v.name}.{target}"), np.dtype(target), v.shape)
                    graph.add_op(graph.fresh_op_name(f"{v.name}.to_{target}"), "qnn.Cast", [v], [nv], {}, prov)
                casts[(v.name, target)] = nv
            graph.set_operand(op, i, nv)
        for j, r in enumerate(list(op.results)):
            if np.dtype(r.dtype).name not in swap:
                continue
            target = swap[np.dtype(r.dtype).name]
            nv = graph.add_value(graph.fresh_value_name(f"{r.name}.{target}"), np.dtype(target), r.shape)
            graph.replace_result(op, j, nv)
            graph.add_op(graph.fresh_op_name(f"{r.name}.from_{target}"), "qnn.Cast", [nv], [r], {}, prov)
        changed += 1
    return changed
