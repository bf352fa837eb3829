"""QDQ models: fold QuantizeLinear/DequantizeLinear into tensor encodings, by node units.

A QDQ model (what ONNX Runtime's quantization tools write) says "this tensor
is uint8 with scale s and zero point z" by wrapping it in a QuantizeLinear →
DequantizeLinear pair, and stores quantized weights as integer initializers
behind a DequantizeLinear. ONNX Runtime's QNN EP groups such nodes into *node
units*, and this pass groups them the same way, before the graph is built:

* An op is a node unit when every float input it reads comes through a
  DequantizeLinear and every float result it writes goes only to
  QuantizeLinears (one encoding per result); integer and bool operands
  (indices, shapes, a Where's condition) and integer or bool results are
  allowed. Such an op reads and writes the quantized tensors themselves: it
  becomes one quantized QNN op, and its Q/DQ nodes go.
* Any other op stays float, as the quantizer left it (a Where whose other
  branch is a float constant, a last MatMul with a float output, a Sqrt the
  quantizer skipped): the DequantizeLinears feeding it and the
  QuantizeLinears after it stay as ops, lowered to QNN Dequantize/Quantize at
  that boundary. A DequantizeLinear of a constant feeding such an op becomes
  the dequantized float constant.
* A range that absorbed a Relu or Clip (the quantizer drops them when the
  encoding clamps) needs nothing more: the quantized op's result saturates to
  its encoding, as onnxruntime's QuantizeLinear does.
* DequantizeLinear of an integer initializer is a quantized constant (per-axis
  for per-channel weights; int4/uint4 ones, packed two per byte in the model,
  unpacked into int8/uint8 storage with a 4-bit encoding; blocked (opset 21
  `block_size`) ones keep their block encoding when QNN's block expansion
  holds the scales exactly, else they become the dequantized float constant).
  QuantizeLinear of a float initializer is quantized here.
* An integer graph input read through DequantizeLinear is a quantized input.

QuantizeLinear/DequantizeLinear of the `com.microsoft` domain (which ONNX
Runtime writes for 16- and 4-bit types before opset 21) mean the same and are
folded alike; the ones that stay become `onnx.QuantizeLinear` /
`onnx.DequantizeLinear` ops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from qlower.graph.types import Quant

_STORAGE = frozenset({"int8", "uint8", "int16", "uint16", "int32"})
_FOUR_BIT = {"int4": np.dtype(np.int8), "uint4": np.dtype(np.uint8)}
QDQ_DOMAINS = ("", "ai.onnx", "com.microsoft")
_Q, _DQ = "QuantizeLinear", "DequantizeLinear"


@attrs.define
class QdqResult:
    """What folding decided; tensor names are ONNX names."""

    nodes: list[Any]  # the NodeProtos that stay (node units' inputs renamed to the quantized tensors)
    encodings: dict[str, tuple[np.dtype, Quant]] = attrs.Factory(dict)  # tensor → storage dtype, encoding
    aliases: dict[str, str] = attrs.Factory(dict)  # removed tensor → the tensor standing for it
    # folded DQ output → the quantized tensor that node units read in its place (their inputs in `nodes`
    # are renamed so already; a frontend mapping its own graph's operands reads it here)
    sources: dict[str, str] = attrs.Factory(dict)
    quant_consts: dict[str, tuple[np.ndarray, Quant]] = attrs.Factory(dict)  # quantized constant data
    float_consts: dict[str, np.ndarray] = attrs.Factory(dict)  # dequantized constants float ops read

    def resolve(self, name: str) -> str:
        seen = 0
        while name in self.aliases and seen < 1000:
            name = self.aliases[name]
            seen += 1
        return name


def is_qdq(node: Any, op: str | None = None) -> bool:
    """A QuantizeLinear/DequantizeLinear of the default or the com.microsoft domain."""
    return node.domain in QDQ_DOMAINS and (node.op_type in (_Q, _DQ) if op is None else node.op_type == op)


def storage_of(data: np.ndarray) -> tuple[np.ndarray, int | None]:
    """Integer constant data as qlower stores it: int4/uint4 (ml_dtypes) in int8/uint8 with bitwidth 4."""
    name = np.dtype(data.dtype).name
    if name in _FOUR_BIT:
        return np.asarray(data).astype(_FOUR_BIT[name]), 4
    return np.asarray(data), None


@attrs.frozen
class _Params:
    dtype: np.dtype
    quant: Quant

    def same(self, other: _Params) -> bool:
        return self.dtype == other.dtype and self.quant == other.quant


@attrs.frozen
class QdqNode:
    """A node of another frontend's graph as `fold_qdq` reads it (a NodeProto's op_type, input, output),
    its attributes a plain mapping: torch programs' quantize/dequantize ops fold with the same rules."""

    op_type: str
    input: tuple[str, ...]
    output: tuple[str, ...]
    attrs: Mapping[str, Any] = attrs.Factory(dict)
    domain: str = ""  # (the default ONNX domain: QuantizeLinear/DequantizeLinear as `is_qdq` knows them)


def _attr(node: Any, name: str, default: Any) -> Any:
    if isinstance(node, QdqNode):
        return node.attrs.get(name, default)
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _storage_dtype(dtype: np.dtype | None) -> tuple[np.dtype | None, int | None]:
    if dtype is None:
        return None, None
    name = np.dtype(dtype).name
    if name in _FOUR_BIT:
        return _FOUR_BIT[name], 4
    return (np.dtype(dtype), None) if name in _STORAGE else (None, None)


def _params(node: Any, consts: Mapping[str, np.ndarray], storage: np.dtype | None,
            rank: int | None, shape: tuple[int, ...] | None = None) -> _Params | None:
    """Scale, zero point, axis (and blocks) of a Q/DQ node when they are constants (None otherwise)."""
    from qlower.reference.onnx_types import onnx_to_numpy

    ins = list(node.input)
    if len(ins) < 2 or ins[1] not in consts:
        return None
    scale = np.asarray(consts[ins[1]], np.float64)
    zp = consts.get(ins[2]) if len(ins) > 2 and ins[2] else None
    if len(ins) > 2 and ins[2] and zp is None:
        return None
    if zp is not None:
        dtype, bits = _storage_dtype(np.dtype(zp.dtype))
    elif storage is not None:
        dtype, bits = _storage_dtype(storage)
    else:
        out_type = int(_attr(node, "output_dtype", 0))
        dtype, bits = _storage_dtype(onnx_to_numpy(out_type) if out_type else np.dtype(np.uint8))
    if dtype is None:
        return None
    zero = np.zeros(scale.shape, np.int64) if zp is None else np.asarray(zp).astype(np.int64)
    block = int(_attr(node, "block_size", 0))
    if block:
        return _blocked(node, scale, zero, dtype, bits, block, shape)
    if scale.ndim == 0 or scale.size == 1:
        return _Params(dtype, Quant(scale.ravel()[:1], zero.ravel()[:1], bitwidth=bits))
    if rank is None:
        return None
    axis = int(_attr(node, "axis", 1))
    axis = axis + rank if axis < 0 else axis
    return _Params(dtype, Quant(scale.ravel(), zero.ravel(), axis=axis, bitwidth=bits))


def _blocked(node: Any, scale: np.ndarray, zero: np.ndarray, dtype: np.dtype, bits: int | None, block: int,
             shape: tuple[int, ...] | None) -> _Params | None:
    """A 2-D blocked encoding (blocks along `axis`, one channel per entry of the other axis) as a
    block Quant, when QNN's block expansion (per-channel scale × 4-bit integer per block) holds the
    scales exactly and every block has one zero point per channel; None otherwise."""
    if shape is None or len(shape) != 2 or scale.ndim != 2:
        return None
    baxis = int(_attr(node, "axis", 1)) % 2
    caxis = 1 - baxis
    s = np.moveaxis(scale, caxis, 0)  # channels × blocks
    z = np.moveaxis(zero, caxis, 0)
    if shape[baxis] % block or s.shape[1] != shape[baxis] // block or np.any(z != z[:, :1]):
        return None
    top = 15
    per_channel = s.max(axis=1) / top
    if np.any(per_channel <= 0):
        return None
    ints = np.rint(s / per_channel[:, None])
    if np.any(ints < 1) or not np.allclose(ints * per_channel[:, None], s, rtol=1e-6, atol=0):
        return None
    return _Params(dtype, Quant(s.ravel(), z[:, 0], axis=caxis, bitwidth=bits, block_size=block, block_axis=baxis))


def _quantize(x: np.ndarray, p: _Params) -> np.ndarray:
    """Round-to-nearest-even quantization of constant data (what QuantizeLinear computes)."""
    q = p.quant
    scale, zero = np.asarray(q.scale), np.asarray(q.zero_point)
    if q.axis is not None:
        shape = [1] * x.ndim
        shape[q.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    lo, hi = _int_range(p)
    return np.clip(np.rint(np.asarray(x, np.float64) / scale) + zero, lo, hi).astype(p.dtype)


def _int_range(p: _Params) -> tuple[int, int]:
    info = np.iinfo(p.dtype)
    bits = p.quant.bitwidth
    if bits is None or bits == info.bits:
        return int(info.min), int(info.max)
    return (0, 2 ** bits - 1) if info.min == 0 else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def dequantize_const(node: Any, data: np.ndarray, consts: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """A DequantizeLinear of constants, evaluated in float32 (per tensor, per axis or blocked)."""
    ins = list(node.input)
    if ins[1] not in consts or (len(ins) > 2 and ins[2] and ins[2] not in consts):
        return None
    x = np.asarray(storage_of(data)[0], np.float64)
    s = np.asarray(consts[ins[1]], np.float64)
    z = np.asarray(storage_of(consts[ins[2]])[0], np.float64) if len(ins) > 2 and ins[2] else np.zeros_like(s)
    if s.size > 1 and x.ndim:
        axis = int(_attr(node, "axis", 1)) % x.ndim
        block = int(_attr(node, "block_size", 0))
        if block:
            s = np.repeat(s, block, axis=axis).take(range(x.shape[axis]), axis=axis)
            z = np.repeat(z, block, axis=axis).take(range(x.shape[axis]), axis=axis)
        else:
            shape = [1] * x.ndim
            shape[axis] = -1
            s, z = s.reshape(shape), z.reshape(shape)
    return ((x - z) * s).astype(np.float32)


def fold_qdq(nodes: Sequence[Any], consts: Mapping[str, np.ndarray], types: Mapping[str, Any],
             graph_inputs: set[str], graph_outputs: set[str]) -> QdqResult:
    """Fold Q/DQ nodes by node units (see the module docstring). `types` maps tensor → (dtype, shape)."""
    return _Folder(nodes, consts, types, graph_inputs, graph_outputs).run()


class _Folder:
    def __init__(self, nodes: Sequence[Any], consts: Mapping[str, np.ndarray], types: Mapping[str, Any],
                 graph_inputs: set[str], graph_outputs: set[str]) -> None:
        self.nodes, self.consts, self.types = list(nodes), consts, types
        self.inputs, self.outputs = graph_inputs, graph_outputs
        self.res = QdqResult(list(nodes))
        self.users: dict[str, list[Any]] = {}
        self.producer: dict[str, Any] = {}
        for n in nodes:
            for i in n.input:
                if i:
                    self.users.setdefault(i, []).append(n)
            for o in n.output:
                self.producer[o] = n
        self.drop: set[int] = set()
        self.dq_source: dict[str, str] = {}  # DQ output → the quantized tensor it reads
        self.q_params: dict[int, _Params] = {}

    def rank(self, name: str) -> int | None:
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def shape(self, name: str) -> tuple[int, ...] | None:
        if name in self.consts:
            return tuple(np.shape(self.consts[name]))
        return self.types.get(name, (None, None))[1]

    def is_float(self, name: str) -> bool:
        if name in self.dq_source or (name in self.producer and is_qdq(self.producer[name], _DQ)):
            return True
        if name in self.consts:
            return np.asarray(self.consts[name]).dtype.kind == "f"
        dtype = self.types.get(name, (None, None))[0]
        return dtype is None or np.dtype(dtype).kind == "f"

    def run(self) -> QdqResult:
        res = self.res
        # 1. Quantized tensors: QuantizeLinear outputs and what DequantizeLinears read.
        for q in self.nodes:
            if not is_qdq(q, _Q):
                continue
            x, t = q.input[0], q.output[0]
            p = _params(q, self.consts, None, self.rank(x), self.shape(x))
            if p is None or p.quant.block_size is not None:
                continue
            self.q_params[id(q)] = p
            res.encodings[t] = (p.dtype, p.quant)
            if x in self.consts and x not in self.outputs:  # fake-quantized weight: a quantized constant
                res.quant_consts[t] = (_quantize(np.asarray(self.consts[x]), p), p.quant)
                self.drop.add(id(q))
        for dq in self.nodes:
            if not is_qdq(dq, _DQ):
                continue
            x, y = dq.input[0], dq.output[0]
            if x in res.encodings:
                p = _params(dq, self.consts, res.encodings[x][0], self.rank(x), self.shape(x))
                if p is not None and p.same(_Params(*res.encodings[x])):
                    self.dq_source[y] = x
            elif x in self.consts:
                data, bits = storage_of(np.asarray(self.consts[x]))
                if data.dtype.name not in _STORAGE:
                    continue
                p = _params(dq, self.consts, np.dtype(self.consts[x].dtype), self.rank(x), self.shape(x))
                if p is None:
                    continue
                name = x if sum(is_qdq(u, _DQ) for u in self.users.get(x, [])) == 1 and x not in self.outputs \
                    else f"{y}.quantized"
                res.quant_consts[name] = (data, p.quant)
                res.encodings[name] = (p.dtype, p.quant)
                self.dq_source[y] = name
            elif x in self.inputs:
                p = _params(dq, self.consts, self.types.get(x, (None, None))[0], self.rank(x), self.shape(x))
                if p is not None and (x not in res.encodings or p.same(_Params(*res.encodings[x]))):
                    res.encodings[x] = (p.dtype, p.quant)
                    self.dq_source[y] = x
        # 2. Node units.
        units = [n for n in self.nodes if not is_qdq(n) and self._is_unit(n)]
        in_unit = {id(n) for n in units}
        renamed: dict[int, Any] = {}
        for n in units:
            for o in n.output:
                qs = [u for u in self.users.get(o, []) if is_qdq(u, _Q)]
                if not qs:
                    continue
                p = self.q_params[id(qs[0])]
                res.encodings[o] = (p.dtype, p.quant)
                for q in qs:
                    res.aliases[q.output[0]] = o
                    self.drop.add(id(q))
            renamed[id(n)] = self._renamed(n)
        # 3. DequantizeLinears: gone where only node units read them; constants for float readers.
        for dq in self.nodes:
            y = dq.output[0] if is_qdq(dq, _DQ) else None
            if y is None or id(dq) in self.drop:
                continue
            readers = [u for u in self.users.get(y, []) if id(u) not in in_unit]
            if y in self.dq_source and not readers and y not in self.outputs:
                self.drop.add(id(dq))
            elif dq.input[0] in self.consts and y not in self.outputs:
                data = dequantize_const(dq, np.asarray(self.consts[dq.input[0]]), self.consts)
                if data is not None:
                    res.float_consts[y] = data
                    self.drop.add(id(dq))
        res.nodes = [renamed.get(id(n), n) for n in self.nodes if id(n) not in self.drop]
        res.sources = dict(self.dq_source)
        return res

    def _is_unit(self, n: Any) -> bool:
        """DQ → op → Q: every float input dequantized, every float result only quantized (one encoding)."""
        reads = [i for i in n.input if i]
        if not any(i in self.dq_source for i in reads):
            return False
        if any(self.is_float(i) and i not in self.dq_source for i in reads):
            return False
        for o in n.output:
            if not o:
                continue
            us = self.users.get(o, [])
            if not self.is_float(o) and not any(is_qdq(u, _Q) for u in us):
                continue  # an integer or bool result (a comparison, an index)
            if o in self.outputs or not us or not all(is_qdq(u, _Q) and id(u) in self.q_params for u in us):
                if not us and o not in self.outputs and n.output[0] != o:
                    continue  # an unused optional result
                return False
            first = self.q_params[id(us[0])]
            if any(not self.q_params[id(u)].same(first) or u.output[0] in self.outputs for u in us):
                return False
        return True

    def _renamed(self, n: Any) -> Any:
        if not any(i in self.dq_source for i in n.input):
            return n
        if isinstance(n, QdqNode):
            return attrs.evolve(n, input=tuple(self.dq_source.get(i, i) for i in n.input))
        from onnx import NodeProto

        copy = NodeProto()
        copy.CopyFrom(n)
        del copy.input[:]
        copy.input.extend(self.dq_source.get(i, i) for i in n.input)
        return copy
