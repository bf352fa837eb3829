"""A lowered qlower Graph (qnn dialect only) → the QNN data model.

Tensor roles follow QNN: graph inputs APP_WRITE, outputs APP_READ, constants
STATIC, everything else NATIVE; rank-0 values become [1]. Encodings switch
from the framework convention (zero_point) to QNN's (offset = −zero_point).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph, Value
from qlower.graph.types import Quant
from qlower.qnn.datatypes import DataType, from_numpy
from qlower.qnn.model import EncodingKind, OpConfig, QnnGraph, QnnTensor, QuantEncoding, ScalarParam, \
    TensorParam, TensorType


def encoding_of(q: Quant, dtype: np.dtype) -> QuantEncoding:
    """Framework encoding → QNN encoding (offset = −zero_point)."""
    offsets = tuple(-z for z in q.zero_point)
    storage_bits = np.dtype(dtype).itemsize * 8
    narrowed = q.bitwidth is not None and q.bitwidth != storage_bits
    if q.block_size is not None:
        return _blockwise(q, offsets)
    if q.axis is None:
        if narrowed:
            return QuantEncoding(EncodingKind.BW_SCALE_OFFSET, q.scale[:1], offsets[:1], bitwidth=q.bitwidth)
        return QuantEncoding(EncodingKind.SCALE_OFFSET, q.scale[:1], offsets[:1])
    if narrowed:
        return QuantEncoding(EncodingKind.BW_AXIS_SCALE_OFFSET, q.scale, offsets, axis=q.axis, bitwidth=q.bitwidth)
    return QuantEncoding(EncodingKind.AXIS_SCALE_OFFSET, q.scale, offsets, axis=q.axis)


def _blockwise(q: Quant, offsets: tuple[int, ...]) -> QuantEncoding:
    """LPBQ: per-block float scales → per-channel scale × 4-bit integer block scales."""
    channels = len(offsets) if q.axis is not None else 1
    scales = np.asarray(q.scale, dtype=np.float64).reshape(channels, -1)
    block_bits = 4
    top = (1 << block_bits) - 1
    per_channel = scales.max(axis=1) / top
    per_channel[per_channel == 0] = 1.0
    blocks = np.clip(np.rint(scales / per_channel[:, None]), 1, top).astype(int)
    return QuantEncoding(EncodingKind.BLOCKWISE_EXPANSION, tuple(per_channel), offsets[:channels] or (0,) * channels,
                         axis=q.axis if q.axis is not None else 0, bitwidth=q.bitwidth,
                         num_blocks_per_axis=int(scales.shape[1]), block_scale_bitwidth=block_bits,
                         block_scales=tuple(tuple(int(b) for b in row) for row in blocks))


def _datatype(v: Value) -> DataType:
    """Fixed point of the storage width: a 4-bit weight stored in int8 is SFIXED_POINT_8 whose
    BW_* / BLOCKWISE_EXPANSION encoding carries the bitwidth, as HTP's op definitions expect
    (e.g. FullyConnected in[1]: SFIXED_POINT_8, static when the encoding is BW_AXIS_SCALE_OFFSET)."""
    return from_numpy(v.dtype, quantized=v.quant is not None)


def _param_datatype(pdef: Any, value: Any) -> DataType:
    if pdef is not None and pdef.datatype is not None:
        return pdef.datatype
    if isinstance(value, (bool, np.bool_)):
        return DataType.BOOL_8
    if isinstance(value, (int, np.integer)):
        return DataType.INT_32 if value < 0 else DataType.UINT_32
    if isinstance(value, (float, np.floating)):
        return DataType.FLOAT_32
    if isinstance(value, np.ndarray):
        return from_numpy(value.dtype)
    return DataType.STRING


def to_qnn(graph: Graph, registry: Any = None) -> QnnGraph:
    """Convert; raises QlowerError if an op outside the qnn dialect is left."""
    left = [op for op in graph.ops if not op.type.startswith("qnn.")]
    if left:
        raise QlowerError([error(f"not lowered ({op.type})", subject=f"node {op.name}", code="not-lowered")
                           for op in left])
    qg = QnnGraph(graph.name)
    tensors = qg.tensors

    def tensor_of(v: Value) -> str:
        t = tensors.get(v.name)
        if t is None:
            if v.is_input:
                ttype = TensorType.APP_WRITE
            elif v.is_output:
                ttype = TensorType.APP_READ
            elif v.data is not None:
                ttype = TensorType.STATIC
            else:
                ttype = TensorType.NATIVE
            dims = tuple(v.shape) if v.shape else (1,)
            data = None
            if ttype is TensorType.STATIC:
                data = np.asarray(v.data)
                if data.ndim == 0:
                    data = data.reshape(1)
            enc = encoding_of(v.quant, v.dtype) if v.quant is not None else None
            tensors[v.name] = QnnTensor(v.name, ttype, _datatype(v), dims, enc, data)
        return v.name

    for v in graph.inputs:
        tensor_of(v)
    for op in graph.topo_order():
        qtype = op.type[4:]
        operands = list(op.operands)
        while operands and operands[-1] is None:
            operands.pop()
        if any(o is None for o in operands):
            raise QlowerError(error("an absent optional input is followed by a present one, which QNN cannot "
                                    "express", subject=f"node {op.name} ({op.type})", code="absent-input"))
        inputs = [tensor_of(o) for o in operands]
        outputs = [tensor_of(r) for r in op.results]
        params = []
        opdef = registry.op(qtype) if registry is not None else None
        order = {p.name: i for i, p in enumerate(opdef.params)} if opdef is not None else {}
        for name in sorted(op.attrs, key=lambda n: (order.get(n, len(order)), n)):
            value = op.attrs[name]
            pdef = opdef.param(name) if opdef is not None else None
            scalar = pdef.is_scalar if pdef is not None else not isinstance(value, (list, tuple, np.ndarray))
            dt = _param_datatype(pdef, value if scalar else np.asarray(value))
            if scalar:
                params.append(ScalarParam(name, dt, value.item() if isinstance(value, np.generic) else value))
            else:
                arr = np.asarray(value)
                if arr.ndim == 0:
                    arr = arr.reshape(1)
                t = QnnTensor(f"{op.name}_{name}", TensorType.STATIC, dt, arr.shape, None, arr)
                params.append(TensorParam(name, t))
        prov = str(op.provenance) if op.provenance is not None else None
        qg.ops.append(OpConfig(op.name, qtype, inputs, outputs, params, provenance=prov))
    qg.inputs = [v.name for v in graph.inputs]
    qg.outputs = [tensor_of(v) for v in graph.outputs]
    return qg
