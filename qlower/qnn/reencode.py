"""Quantized tensors in a datatype the backend's op lacks: re-encoded where that is exact.

A quantizer chooses datatypes for its own runtime (onnxruntime's: int8 weights, 16-bit
activations); a QNN backend's op may take only some (CPU's FullyConnected and HTP's LayerNorm
read no SFIXED_POINT_8 weight; CPU computes no 16-bit fixed point). After lowering, for each QNN op
whose datatypes match no row of the backend:

1. Its static quantized operands are re-encoded between the signed and unsigned fixed point of
   the same width: q + 2^(b−1) with zero point z + 2^(b−1) (b the encoding's bitwidth) holds the
   same real values exactly. The op's own copy is re-encoded; other users keep theirs.
2. Otherwise, on a backend that computes float in float32 (CPU), the op computes in float32
   between a Dequantize of each quantized operand and a Quantize of each quantized result: what
   the QDQ model itself computes (dequantize, float op, quantize), so no value changes beyond the
   float op's own rounding.

An op neither makes valid is left for validation to report (naming the op and its datatypes).
"""

from __future__ import annotations

import itertools

import attrs
import numpy as np

from qlower.graph.core import Graph, Op, Provenance, Value
from qlower.qnn.checks import datatypes_allowed
from qlower.qnn.datatypes import DataType, from_numpy
from qlower.qnn.opdef import OpDefRegistry

_PLAIN = {"int8": DataType.INT_8, "int16": DataType.INT_16, "int32": DataType.INT_32, "uint8": DataType.UINT_8,
          "uint16": DataType.UINT_16, "uint32": DataType.UINT_32, "float16": DataType.FLOAT_16,
          "float32": DataType.FLOAT_32, "bool": DataType.BOOL_8}
_MAX_FLIPS = 4  # static operands tried per op (subsets of them)
_FLIP = {"int8": "uint8", "uint8": "int8", "int16": "uint16", "uint16": "int16"}


def _dt(v: Value | None) -> DataType | None:
    if v is None:
        return None
    name = np.dtype(v.dtype).name
    return from_numpy(v.dtype, quantized=True) if v.quant is not None else _PLAIN.get(name)


def _valid(registry: OpDefRegistry, backend: str, op_type: str, ins: list, outs: list) -> bool:
    return None not in outs and datatypes_allowed(registry, op_type, backend, ins, outs)


def flipped(v: Value) -> tuple[np.ndarray, np.dtype, object] | None:
    """`v`'s static data and encoding in the other signedness of its width (exact), or None."""
    name = np.dtype(v.dtype).name
    if v.data is None or v.quant is None or name not in _FLIP:
        return None
    bits = v.quant.bitwidth or np.dtype(v.dtype).itemsize * 8
    shift = 1 << (bits - 1)
    signed = name.startswith("int")
    new = np.dtype(_FLIP[name])
    data = np.asarray(v.data).astype(np.int64) + (shift if signed else -shift)
    info = np.iinfo(new)
    if data.size and (data.min() < info.min or data.max() > info.max):
        return None
    zero = tuple(int(z) + (shift if signed else -shift) for z in v.quant.zero_point)
    return data.astype(new), new, attrs.evolve(v.quant, zero_point=zero)


def reencode_unsupported(graph: Graph, registry: OpDefRegistry, backend: str, *, float_fallback: bool) -> int:
    """Make the ops whose quantized datatypes `backend` lacks valid where exact (module doc); returns
    how many ops changed."""
    changed = 0
    made: dict[str, Value] = {}  # one re-encoded copy per static tensor, whatever reads it
    for op in list(graph.ops):
        if not op.type.startswith("qnn.") or op.type in ("qnn.Quantize", "qnn.Dequantize"):
            continue
        kind = op.type[4:]
        ins, outs = [_dt(v) for v in op.operands], [_dt(r) for r in op.results]
        if _valid(registry, backend, kind, ins, outs):
            continue
        if _flip_static(graph, op, registry, backend, ins, outs, made):
            changed += 1
        elif float_fallback and _in_float(graph, op, registry, backend):
            changed += 1
    return changed


def _flip_static(graph: Graph, op: Op, registry: OpDefRegistry, backend: str, ins: list, outs: list,
                 made: dict[str, Value]) -> bool:
    flippable = [(i, f) for i, v in enumerate(op.operands) if v is not None and (f := flipped(v)) is not None]
    chosen = None
    for k in range(1, min(len(flippable), _MAX_FLIPS) + 1):  # the fewest re-encoded operands that do
        for slots in itertools.combinations(flippable, k):
            trial = list(ins)
            for i, (_, dtype, _) in slots:
                trial[i] = from_numpy(dtype, quantized=True)
            if _valid(registry, backend, op.type[4:], trial, outs):
                chosen = slots
                break
        if chosen is not None:
            break
    if chosen is None:
        return False
    for i, (data, dtype, quant) in chosen:
        v = op.operands[i]
        nv = made.get(v.name)
        if nv is None:
            nv = made[v.name] = graph.add_value(graph.fresh_value_name(f"{v.name}.{dtype.name}"), dtype, v.shape,
                                                quant=quant, data=data)
        graph.set_operand(op, i, nv)
        if not v.users and not v.is_output and graph.has_value(v.name):
            graph.remove_value(v)
    return True


def _in_float(graph: Graph, op: Op, registry: OpDefRegistry, backend: str) -> bool:
    f32 = DataType.FLOAT_32
    ins = [f32 if v is not None and v.quant is not None else _dt(v) for v in op.operands]
    outs = [f32 if r.quant is not None else _dt(r) for r in op.results]
    if not any(v is not None and v.quant is not None for v in op.operands) and not any(r.quant for r in op.results):
        return False
    if not _valid(registry, backend, op.type[4:], ins, outs):
        return False
    for v in op.operands:
        if v is not None and v.quant is not None and not _valid(registry, backend, "Dequantize", [_dt(v)], [f32]):
            return False
    for r in op.results:
        if r.quant is not None and not _valid(registry, backend, "Quantize", [f32], [_dt(r)]):
            return False
    prov = Provenance("quantized op in float32 (qlower/qnn/reencode.py)", "qlower/qnn/reencode.py", op.name)
    for i, v in enumerate(list(op.operands)):
        if v is None or v.quant is None:
            continue
        fv = graph.add_value(graph.fresh_value_name(f"{v.name}.f32"), np.dtype(np.float32), v.shape)
        graph.add_op(graph.fresh_op_name(f"{op.name}.dequantize_{i}"), "qnn.Dequantize", [v], [fv], {}, prov)
        graph.set_operand(op, i, fv)
    for j, r in enumerate(list(op.results)):
        if r.quant is None:
            continue
        fr = graph.add_value(graph.fresh_value_name(f"{r.name}.f32"), np.dtype(np.float32), r.shape)
        graph.replace_result(op, j, fr)
        graph.add_op(graph.fresh_op_name(f"{op.name}.quantize_{j}"), "qnn.Quantize", [fr], [r], {}, prov)
    return True
