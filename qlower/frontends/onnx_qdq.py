"""QDQ models: fold QuantizeLinear/DequantizeLinear into tensor encodings.

A QDQ model (what ONNX Runtime's quantization tools write) says "this tensor
is uint8 with scale s and zero point z" by wrapping it in a QuantizeLinear →
DequantizeLinear pair, and stores quantized weights as integer initializers
behind a DequantizeLinear. ONNX Runtime's QNN EP groups such nodes into "node
units" and hands QNN quantized tensors; this pass does the same at the ONNX
level, before the graph is built:

* DequantizeLinear of an integer initializer → a quantized constant (per-axis
  for per-channel weights). QuantizeLinear of a float initializer is
  quantized here, so fake-quantized weights become quantized constants too.
* QuantizeLinear(x) → t → DequantizeLinear(t) → x': the DequantizeLinear goes
  (x' stands for t), and when x comes from an op and feeds only such
  QuantizeLinears, the QuantizeLinear goes as well: x itself becomes the
  quantized tensor. The ops between pairs so operate on quantized tensors.
* An integer graph input read through DequantizeLinear becomes a quantized
  input.

QuantizeLinear of a graph input and DequantizeLinear producing a graph output
stay (as onnx.QuantizeLinear / onnx.DequantizeLinear ops, lowered to QNN
Quantize / Dequantize), so model inputs and outputs keep their float types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from qlower.graph.types import Quant

_STORAGE = frozenset({"int8", "uint8", "int16", "uint16", "int32"})


@attrs.define
class QdqResult:
    """What folding decided; tensor names are ONNX names."""

    nodes: list[Any]  # the NodeProtos that stay
    encodings: dict[str, tuple[np.dtype, Quant]] = attrs.Factory(dict)  # tensor → storage dtype, encoding
    aliases: dict[str, str] = attrs.Factory(dict)  # removed tensor → the tensor standing for it
    quant_consts: dict[str, tuple[np.ndarray, Quant]] = attrs.Factory(dict)  # quantized constant data

    def resolve(self, name: str) -> str:
        seen = 0
        while name in self.aliases and seen < 1000:
            name = self.aliases[name]
            seen += 1
        return name


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


def _attr(node: Any, name: str, default: Any) -> Any:
    if isinstance(node, QdqNode):
        return node.attrs.get(name, default)
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _params(node: Any, consts: Mapping[str, np.ndarray], storage: np.dtype | None,
            rank: int | None) -> _Params | None:
    """Scale, zero point and axis of a Q/DQ node when they are constants (None otherwise)."""
    from qlower.reference.onnx_types import onnx_to_numpy

    ins = list(node.input)
    if len(ins) < 2 or ins[1] not in consts or int(_attr(node, "block_size", 0)):
        return None
    scale = np.asarray(consts[ins[1]], np.float64)
    zp = consts.get(ins[2]) if len(ins) > 2 and ins[2] else None
    if len(ins) > 2 and ins[2] and zp is None:
        return None
    if zp is not None:
        dtype = np.dtype(zp.dtype)
    elif storage is not None:
        dtype = np.dtype(storage)
    else:
        out_type = int(_attr(node, "output_dtype", 0))
        dtype = onnx_to_numpy(out_type) if out_type else np.dtype(np.uint8)
    if dtype is None or dtype.name not in _STORAGE:
        return None
    zero = np.zeros(scale.shape, np.int64) if zp is None else np.asarray(zp, np.int64)
    if scale.ndim == 0 or scale.size == 1:
        return _Params(dtype, Quant(scale.ravel()[:1], zero.ravel()[:1]))
    if rank is None:
        return None
    axis = int(_attr(node, "axis", 1))
    axis = axis + rank if axis < 0 else axis
    return _Params(dtype, Quant(scale.ravel(), zero.ravel(), axis=axis))


def _quantize(x: np.ndarray, p: _Params) -> np.ndarray:
    """Round-to-nearest-even quantization of constant data (what QuantizeLinear computes)."""
    q = p.quant
    scale, zero = np.asarray(q.scale), np.asarray(q.zero_point)
    if q.axis is not None:
        shape = [1] * x.ndim
        shape[q.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    info = np.iinfo(p.dtype)
    return np.clip(np.rint(np.asarray(x, np.float64) / scale) + zero, info.min, info.max).astype(p.dtype)


def fold_qdq(nodes: Sequence[Any], consts: Mapping[str, np.ndarray], types: Mapping[str, Any],
             graph_inputs: set[str], graph_outputs: set[str]) -> QdqResult:
    """Fold Q/DQ nodes (see the module docstring). `types` maps tensor → (dtype, shape)."""
    res = QdqResult(list(nodes))
    users: dict[str, list[Any]] = {}
    producer: dict[str, Any] = {}
    for n in nodes:
        for i in n.input:
            if i:
                users.setdefault(i, []).append(n)
        for o in n.output:
            producer[o] = n
    drop: set[int] = set()

    def rank(name: str) -> int | None:
        if name in consts:
            return np.ndim(consts[name])
        shape = types.get(name, (None, None))[1]
        return None if shape is None else len(shape)

    # Quantize-then-dequantize pairs, and Q of constants.
    for q in nodes:
        if q.op_type != "QuantizeLinear":
            continue
        x, t = q.input[0], q.output[0]
        p = _params(q, consts, None, rank(x))
        if p is None:
            continue
        if x in consts and x not in graph_outputs:
            res.quant_consts[t] = (_quantize(consts[x], p), p.quant)
            res.encodings[t] = (p.dtype, p.quant)
            drop.add(id(q))
        else:
            res.encodings[t] = (p.dtype, p.quant)
        dqs = [u for u in users.get(t, []) if u.op_type == "DequantizeLinear" and u.input[0] == t]
        for dq in dqs:
            dp = _params(dq, consts, p.dtype, rank(t))
            if dp is not None and dp.same(p) and dq.output[0] not in graph_outputs:
                res.aliases[dq.output[0]] = t
                drop.add(id(dq))
        if id(q) in drop or x in graph_inputs or x in graph_outputs or x not in producer or t in graph_outputs \
                or x in res.aliases:  # x is a folded DQ's result: this Q requantizes, and stays
            continue
        if len(users.get(x, [])) == 1:  # x feeds only this Q: x itself becomes the quantized tensor
            res.aliases[t] = x
            res.encodings[x] = (p.dtype, p.quant)
            drop.add(id(q))

    # Dequantize of integer initializers and of integer graph inputs.
    for dq in nodes:
        if dq.op_type != "DequantizeLinear" or id(dq) in drop:
            continue
        x, y = dq.input[0], dq.output[0]
        if x in consts and consts[x].dtype.name in _STORAGE:
            p = _params(dq, consts, consts[x].dtype, rank(x))
            if p is not None:
                res.quant_consts[y] = (np.asarray(consts[x]), p.quant)
                res.encodings[y] = (p.dtype, p.quant)
                drop.add(id(dq))
        elif x in graph_inputs:
            dtype = types.get(x, (None, None))[0]
            p = _params(dq, consts, dtype, rank(x))
            if p is not None and x not in res.encodings:
                res.encodings[x] = (p.dtype, p.quant)
                if y not in graph_outputs:
                    res.aliases[y] = x
                    drop.add(id(dq))
    res.nodes = [n for n in nodes if id(n) not in drop]
    return res
