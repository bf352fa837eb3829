"""Quantization overrides: an AIMET encodings file applied to a float graph, as QNN's converter
applies `--quantization_overrides`.

The file names tensors of the source model. Applying it gives the graph what a QDQ model of
the same encodings gives it after `onnx_qdq` folded its pairs:

* a parameter entry (a weight) quantizes that constant: per tensor, per channel along the
  consuming op's output-channel axis (Conv 0, ConvTranspose 1, Gemm 0 or 1 by `transB`, MatMul
  the last), or in blocks (LPBQ, PER_BLOCK) along its input-channel axis;
* an activation entry makes an op's result a quantized tensor; a graph input keeps its float
  type and is quantized by a QuantizeLinear behind it, a graph output is dequantized back to float;
  a float constant listed as an activation that an op reads (a tied embedding table, read by a
  Gather and the lm_head MatMul; a scalar operand) is quantized as a weight with that encoding;
* a MatMul by a 2-D weight whose only reader is an Add of a constant row, with no encoding between
  them (AIMET quantizes the pair once, after the Add), becomes a Gemm with that row as its bias
  (behind a Reshape to 2-D when the input has more dims), as the converter folds it into one
  FullyConnected;
* a bias the file leaves out (Conv's, Gemm's third input) is quantized as the converter does for
  HTP: 32-bit, symmetric, scale = input scale × weight scale (per channel with the weight's); a
  LayerNormalization's, 32-bit symmetric over its own range.

A float constant that a quantized Add/Sub/Mul/Div/MatMul/Concat/Where reads and the file leaves out
(one folded from tensors it names) gets a min/max encoding in the op's result datatype, as the
converter encodes a static tensor without an override. Tensors left out otherwise stay float.
Entries that name no tensor of the graph, or name an integer tensor, are reported, not applied. An entry whose channel count or blocks do not fit its
tensor is an error naming the entry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph, Op, Value
from qlower.graph.encodings import EncodingSet, TensorEncoding
from qlower.graph.quantize import bounds, quantize_affine
from qlower.graph.types import Quant

# Weight operand → (output-channel axis, input-channel axis), by consumer; None: rank-dependent.
_WEIGHT_AXES: Mapping[str, tuple[int, int]] = {"onnx.Conv": (0, 1), "onnx.ConvTranspose": (1, 0)}
_BIAS_OPS = frozenset({"onnx.Conv", "onnx.ConvTranspose", "onnx.Gemm"})


@attrs.frozen
class OverrideReport:
    """What applying a file did: tensor names quantized, and entries not applied with the reason."""

    params: tuple[str, ...]
    activations: tuple[str, ...]
    biases: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (entry name, why)


def _storage(bits: int, signed: bool) -> np.dtype:
    width = 8 if bits <= 8 else 16 if bits <= 16 else 32
    return np.dtype(f"{'' if signed else 'u'}int{width}") if width < 32 else np.dtype("int32")


def _weight_axes(v: Value) -> tuple[int | None, int | None]:
    """(output-channel, input-channel) axes of a weight, from the op that reads it."""
    rank = len(v.shape or ())
    for op, idx in v.users:
        if op.type in _WEIGHT_AXES and idx == 1:
            return _WEIGHT_AXES[op.type]
        if op.type == "onnx.Gemm" and idx == 1:
            return (0, 1) if op.attrs.get("transB") else (1, 0)
        if op.type == "onnx.MatMul" and idx == 1 and rank >= 2:
            return rank - 1, rank - 2
        if op.type == "onnx.Gather" and idx == 0:  # an embedding table: one encoding per row
            return 0, rank - 1
    return None, None


def _quant_of(e: TensorEncoding, v: Value, signed: bool) -> Quant:
    axis = block_axis = None
    if e.kind != "PER_TENSOR":
        axis, block_axis = _weight_axes(v) if e.axis is None else (e.axis, e.block_axis)
        if axis is None:
            users = ", ".join(sorted({op.type for op, _ in v.users})) or "no op"
            raise ValueError(f"{e.name}: a {e.kind} encoding on a tensor read by {users}, whose channel "
                             f"axis qlower does not know")
    return e.quant(signed=signed, axis=axis, block_axis=block_axis, shape=v.shape)


def _quantize_const(v: Value, q: Quant, dtype: np.dtype) -> np.ndarray:
    data = np.asarray(v.data, np.float64)
    lo, hi = bounds(dtype, q.bitwidth)
    scale, zero = np.asarray(q.scale, np.float64), np.asarray(q.zero_point, np.float64)
    if q.block_size is not None:
        channels = data.shape[q.axis]
        blocks = scale.size // channels
        full = scale.reshape(channels, blocks).repeat(q.block_size, axis=1)  # [channels, block dim]
        shape = [1] * data.ndim
        shape[q.axis], shape[q.block_axis] = channels, full.shape[1]
        full = full if q.axis < q.block_axis else full.T
        scale = full.reshape(shape)
        zero = zero.reshape([channels if i == q.axis else 1 for i in range(data.ndim)]) if zero.size == channels \
            else zero.reshape(-1)[:1].reshape(())
    elif q.axis is not None:
        shape = [1] * data.ndim
        shape[q.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    else:
        scale, zero = scale.reshape(()), zero.reshape(())
    return quantize_affine(data, scale, zero, lo, hi, dtype)


def apply_overrides(graph: Graph, encodings: EncodingSet) -> OverrideReport:
    """Apply `encodings` to `graph` in place (see the module docstring)."""
    params: list[str] = []
    acts: list[str] = []
    skipped: list[tuple[str, str]] = []
    inputs = {id(v) for v in graph.inputs}
    outputs = {id(v) for v in graph.outputs}
    by_name = {v.name: v for v in graph.values}
    try:
        for name, e in encodings.entries.items():
            v = by_name.get(name)
            if v is None:
                skipped.append((name, "no tensor of the graph has this name"))
                continue
            if e.is_float:
                skipped.append((name, "a float encoding: the tensor stays float"))
                continue
            if v.dtype is None or np.dtype(v.dtype).kind != "f" or v.quant is not None:
                skipped.append((name, f"the tensor is {'already quantized' if v.quant is not None else v.dtype}"))
                continue
            if v.data is not None and e.role == "activation" and not v.users:
                # a constant no op reads (a Clip bound, which the frontend made an attribute): the
                # converter keeps it a number. One an op reads (a tied embedding table, an attention
                # scale) QuantSim quantizes with that encoding for every reader: as a weight, below.
                skipped.append((name, "a constant listed as an activation: it stays float"))
                continue
            if v.data is not None:
                signed = e.symmetric
                q = _quant_of(e, v, signed)
                dtype = _storage(e.bitwidth, signed)
                v.data, v.dtype, v.quant = _quantize_const(v, q, dtype), dtype, q
                params.append(name)
                continue
            q = _quant_of(e, v, signed=False)
            dtype = _storage(e.bitwidth, signed=False)
            if id(v) in inputs:
                _quantize_input(graph, v, q, dtype)
            elif id(v) in outputs:
                _dequantize_output(graph, v, q, dtype)
            else:
                v.dtype, v.quant = dtype, q
            acts.append(name)
    except ValueError as exc:
        raise QlowerError(error(f"quantization overrides: {exc}", code="overrides")) from None
    _fuse_activations(graph)
    _pass_through(graph)
    _fuse_matmul_bias(graph)  # after pass-through: its input may be a Reshape's result
    biases = _quantize_biases(graph)
    params.extend(_quantize_static_operands(graph))
    return OverrideReport(tuple(params), tuple(acts), tuple(biases), tuple(skipped))


# Ops whose result is their input's values rearranged or selected: the converter gives the result
# the input's encoding when the file has none for it (AIMET does not list them).
_PASS_THROUGH = frozenset({"onnx.MaxPool", "onnx.Reshape", "onnx.Flatten", "onnx.Transpose", "onnx.Squeeze",
                           "onnx.Unsqueeze", "onnx.Identity", "onnx.Slice", "onnx.Split", "onnx.SpaceToDepth",
                           "onnx.DepthToSpace", "onnx.Expand", "onnx.Tile", "onnx.Gather"})
_ACTIVATIONS = frozenset({"onnx.Relu", "onnx.Clip"})


def _fuse_activations(graph: Graph) -> None:
    """A Conv/Gemm/MatMul/Add whose only reader is a Relu or Clip with an encoding takes that encoding
    (AIMET quantizes the pair once, after the activation; the converter fuses them likewise)."""
    outputs = {id(v) for v in graph.outputs}
    for op in graph.topo_order():
        if op.type not in _ACTIVATIONS or op.results[0].quant is None:
            continue
        x = op.operands[0]
        if (x is None or x.quant is not None or x.data is not None or x.producer is None or id(x) in outputs
                or len(x.users) != 1 or np.dtype(x.dtype).kind != "f"):
            continue
        y = op.results[0]
        x.dtype, x.quant = y.dtype, y.quant
        if id(y) not in outputs and _clamps_within(y, op):  # the encoding does the activation's work
            graph.replace_uses(y, x)
            graph.remove_op(op)
            graph.remove_value(y)


def _fuse_matmul_bias(graph: Graph) -> None:
    """MatMul(x, W [K, N]) → m → Add(m, c [N]) → y, with x, W and y quantized and m not: Gemm(x, W, c) → y
    (W per tensor, per channel or in blocks: LPBQ)."""
    outputs = {id(v) for v in graph.outputs}
    for add in list(graph.topo_order()):
        if add.type != "onnx.Add" or len(add.operands) != 2 or add.results[0].quant is None:
            continue
        for i in (0, 1):
            m, c = add.operands[i], add.operands[1 - i]
            mm = m.producer if m is not None else None
            if (mm is None or mm.type != "onnx.MatMul" or m.quant is not None or len(m.users) != 1 or id(m) in outputs
                    or c is None or c.data is None or (c.quant is None and np.dtype(c.dtype).kind != "f")
                    or (c.quant is not None and (c.quant.axis is not None or c.quant.block_size is not None))):
                continue
            x, w = mm.operands[:2]
            if (x is None or w is None or x.quant is None or x.shape is None or len(x.shape) < 2 or w.data is None
                    or w.quant is None or w.shape is None or len(w.shape) != 2):
                continue
            n = w.shape[1]
            if c.shape is None or len(c.shape) == 0 or math.prod(c.shape) != n or c.shape[-1] != n:
                continue
            _matmul_add_to_gemm(graph, mm, add, x, w, c, n)
            break


def _matmul_add_to_gemm(graph: Graph, mm: Op, add: Op, x: Value, w: Value, c: Value, n: int) -> None:
    y, m = add.results[0], mm.results[0]
    graph.detach_op(add)
    graph.detach_op(mm)
    graph.remove_value(m)
    bias = c
    if c.quant is not None:  # a constant the file quantized for another reader too (a shared zero row): its values
        bias = graph.add_value(graph.fresh_value_name(f"{c.name}.bias"), np.float32, (n,),
                               data=(c.quant.scale[0] * (np.asarray(c.data, np.float64) - c.quant.zero_point[0])
                                     ).astype(np.float32).reshape(n))
    elif c.shape != (n,) or c.users:
        bias = graph.add_value(graph.fresh_value_name(f"{c.name}.bias"), c.dtype, (n,),
                               data=np.asarray(c.data).reshape(n))
    if not c.users and c is not bias and not c.is_output:
        graph.remove_value(c)
    gemm = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
    name = graph.fresh_op_name(f"{mm.name}.gemm")
    if len(x.shape) == 2:
        graph.add_op(name, "onnx.Gemm", [x, w, bias], [y], gemm, mm.provenance)
        return
    rows = math.prod(x.shape[:-1])

    def shape_const(dims: tuple[int, ...]) -> Value:
        return graph.add_value(graph.fresh_value_name(f"{mm.name}.shape"), np.int64, (len(dims),),
                               data=np.asarray(dims, np.int64))

    x2 = graph.add_value(graph.fresh_value_name(f"{x.name}.rows"), x.dtype, (rows, x.shape[-1]), quant=x.quant)
    y2 = graph.add_value(graph.fresh_value_name(f"{y.name}.rows"), y.dtype, (rows, n), quant=y.quant)
    graph.add_op(graph.fresh_op_name(f"{mm.name}.rows"), "onnx.Reshape", [x, shape_const((rows, x.shape[-1]))], [x2],
                 {"allowzero": 0}, mm.provenance)
    graph.add_op(name, "onnx.Gemm", [x2, w, bias], [y2], gemm, mm.provenance)
    graph.add_op(graph.fresh_op_name(f"{add.name}.unrows"), "onnx.Reshape", [y2, shape_const(tuple(y.shape))], [y],
                 {"allowzero": 0}, add.provenance)


def _clamps_within(y: Value, op: Op) -> bool:
    """Whether every value on y's grid lies inside the activation's bounds (it is then the identity there)."""
    from qlower.graph.quantize import bounds as grid_bounds

    q = y.quant
    if q.axis is not None:
        return False
    lo_q, hi_q = grid_bounds(y.dtype, q.bitwidth)
    lo = q.scale[0] * (lo_q - q.zero_point[0])
    hi = q.scale[0] * (hi_q - q.zero_point[0])
    a = 0.0 if op.type == "onnx.Relu" else op.attrs.get("min")
    b = None if op.type == "onnx.Relu" else op.attrs.get("max")
    slack = 1e-6 * max(abs(lo), abs(hi), 1e-30)
    return (a is None or lo >= float(a) - slack) and (b is None or hi <= float(b) + slack)


def _pass_through(graph: Graph) -> None:
    outputs = {id(v) for v in graph.outputs}
    for op in graph.topo_order():
        if op.type not in _PASS_THROUGH or not op.operands:
            continue
        x = op.operands[0]  # Gather's: the table
        if x is None or x.quant is None or x.quant.axis is not None or (op.type != "onnx.Gather" and x.data is not None):
            continue
        for r in op.results:
            if r.quant is None and id(r) not in outputs and r.dtype is not None and np.dtype(r.dtype).kind == "f":
                r.dtype, r.quant = x.dtype, x.quant


# Ops whose constant operands are values computed with, quantized like the op's other operands.
_STATIC_OPERAND_OPS = frozenset({"onnx.Add", "onnx.Sub", "onnx.Mul", "onnx.Div", "onnx.MatMul", "onnx.Concat",
                                 "onnx.Where"})


def _quantize_static_operands(graph: Graph) -> list[str]:
    """A float constant read by an op whose result and other operands are quantized (the file names
    no encoding for it: a constant folded from tensors it does name, such as BERT's token-type
    embedding gathered at constant ids) gets a min/max encoding of its own in the result's datatype,
    as the converter gives a static tensor without an override; each such op gets its own copy."""
    done = []
    for op in list(graph.ops):
        if op.type not in _STATIC_OPERAND_OPS or not op.results or op.results[0].quant is None:
            continue
        y = op.results[0]
        if y.quant.axis is not None or not any(v is not None and v.data is None and v.quant is not None
                                               for v in op.operands):
            continue
        for i, v in enumerate(op.operands):
            if v is None or v.data is None or v.quant is not None or np.dtype(v.dtype).kind != "f":
                continue
            if op.type == "onnx.Where" and i == 0:
                continue
            data = np.asarray(v.data, np.float64)
            lo, hi = min(0.0, float(np.min(data, initial=0.0))), max(0.0, float(np.max(data, initial=0.0)))
            q = Quant.for_range(lo, hi, str(y.dtype), y.quant.bitwidth)
            c = graph.add_value(graph.fresh_value_name(f"{v.name}.{op.name}"), y.dtype, v.shape, quant=q,
                                data=_quantize_const(v, q, y.dtype))
            graph.set_operand(op, i, c)
            done.append(c.name)
    return done


def _scalar_consts(graph: Graph, base: str, q: Quant, dtype: np.dtype) -> tuple[Value, Value]:
    s = graph.add_value(graph.fresh_value_name(f"{base}.scale"), "float32", [],
                        data=np.asarray(q.scale[0], np.float32))
    z = graph.add_value(graph.fresh_value_name(f"{base}.zero_point"), dtype, [],
                        data=np.asarray(q.zero_point[0], dtype))
    return s, z


def _quantize_input(graph: Graph, v: Value, q: Quant, dtype: np.dtype) -> None:
    """A float graph input read through a QuantizeLinear: its readers see the quantized tensor."""
    users = list(v.users)
    qv = graph.add_value(graph.fresh_value_name(f"{v.name}.quantized"), dtype, v.shape, quant=q)
    s, z = _scalar_consts(graph, v.name, q, dtype)
    graph.add_op(graph.fresh_op_name(f"{v.name}.quantize"), "onnx.QuantizeLinear", [v, s, z], [qv], {})
    for op, idx in users:
        graph.set_operand(op, idx, qv)


def _dequantize_output(graph: Graph, v: Value, q: Quant, dtype: np.dtype) -> None:
    """A graph output computed quantized, dequantized back to the float tensor callers read."""
    op = v.producer
    qv = graph.add_value(graph.fresh_value_name(f"{v.name}.quantized"), dtype, v.shape, quant=q)
    graph.replace_result(op, op.results.index(v), qv)
    for user, idx in list(v.users):
        graph.set_operand(user, idx, qv)
    s, z = _scalar_consts(graph, v.name, q, dtype)
    graph.add_op(graph.fresh_op_name(f"{v.name}.dequantize"), "onnx.DequantizeLinear", [qv, s, z], [v], {})


def _quantize_biases(graph: Graph) -> list[str]:
    """Float biases of ops whose input and weight are quantized: int32, scale = s_in × s_w, zero 0."""
    done = []
    for op in list(graph.ops):
        if op.type not in _BIAS_OPS or len(op.operands) < 3:
            continue
        x, w, b = op.operands[:3]
        if b is None or b.data is None or b.quant is not None or x is None or w is None:
            continue
        if x.quant is None or w.quant is None or np.dtype(b.dtype).kind != "f":
            continue
        if x.quant.axis is not None or len(x.quant.scale) != 1:
            continue
        if _bias_shared(b, op):
            continue
        if w.quant.block_size is not None:
            # a blockwise (LPBQ) weight has no one scale per output channel for s_in × s_w: the bias
            # gets a 32-bit symmetric scale over its own range, as qlower's quantizer gives one
            data = np.asarray(b.data, np.float64)
            amax = float(np.max(np.abs(data), initial=0.0))
            q = Quant([amax / (2**31 - 1) if amax > 0 else 1.0], [0], symmetric=True)
            b.data = quantize_affine(data, np.float64(q.scale[0]), np.float64(0), *bounds(np.int32), np.int32)
            b.dtype, b.quant = np.dtype("int32"), q
            done.append(b.name)
            continue
        scale = np.asarray(w.quant.scale, np.float64) * x.quant.scale[0]
        per_channel = scale.size > 1
        q = Quant(scale, np.zeros(scale.size, np.int64), axis=0 if per_channel else None, symmetric=True)
        data = np.asarray(b.data, np.float64).reshape(-1)
        lo, hi = bounds(np.int32)
        s = scale if per_channel else scale.reshape(())
        b.data = quantize_affine(data, s, np.zeros_like(s), lo, hi, np.int32).reshape(np.shape(b.data))
        b.dtype, b.quant = np.dtype("int32"), q
        done.append(b.name)
    done.extend(_quantize_norm_biases(graph))
    return done


def _quantize_norm_biases(graph: Graph) -> list[str]:
    """The float bias (B) of a LayerNormalization whose input and scale are quantized: 32-bit
    symmetric, one scale covering its values (HTP's quantized LayerNorm takes SFIXED_POINT_32 there,
    symmetric); a bias other ops also read is copied for this one."""
    done = []
    lo, hi = bounds(np.int32)
    for op in list(graph.ops):
        if op.type != "onnx.LayerNormalization" or len(op.operands) < 3:
            continue
        x, g, b = op.operands[:3]
        if b is None or b.data is None or b.quant is not None or x is None or g is None:
            continue
        if x.quant is None or g.quant is None or np.dtype(b.dtype).kind != "f":
            continue
        data = np.asarray(b.data, np.float64)
        scale = max(float(np.max(np.abs(data), initial=0.0)), 1e-30) / hi
        if _bias_shared(b, op):
            b = graph.add_value(graph.fresh_value_name(f"{b.name}.{op.name}"), b.dtype, b.shape, data=b.data)
            graph.set_operand(op, 2, b)
        b.data = quantize_affine(data, np.float64(scale), np.float64(0.0), lo, hi, np.int32)
        b.dtype, b.quant = np.dtype("int32"), Quant(np.array([scale]), np.zeros(1, np.int64), symmetric=True)
        done.append(b.name)
    return done


def _bias_shared(b: Value, op: Op) -> bool:
    """A bias constant that another op also reads cannot take this op's encoding."""
    return any(u is not op for u, _ in b.users)
