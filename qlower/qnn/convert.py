"""A lowered qlower Graph (qnn dialect only) → the QNN data model.

Tensor roles follow QNN: graph inputs APP_WRITE, outputs APP_READ, constants
STATIC, everything else NATIVE; rank-0 values become [1]. Encodings switch
from the framework convention (zero_point) to QNN's (offset = −zero_point).
Each op's package and param order come from its entry in the op registry
(`qlower.qnn.registry.QnnOps`), so a custom op package's op is written as
that package's op.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import PurePath
from typing import Any

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph, Op, Value
from qlower.graph.lazy import LazyArray
from qlower.graph.types import Quant
from qlower.qnn.datatypes import DataType, from_numpy
from qlower.qnn.model import PACKAGE, EncodingKind, OpConfig, Origin, QnnGraph, QnnTensor, QuantEncoding, \
    ScalarParam, TensorParam, TensorType
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.registry import QnnOps


def encoding_of(q: Quant, dtype: np.dtype, shape: tuple[int, ...] | None = None) -> QuantEncoding:
    """Framework encoding → QNN encoding (offset = −zero_point). A block encoding needs the
    tensor's `shape` to tell channels from blocks when it lists a zero point per block."""
    offsets = tuple((-np.asarray(q.zero_point, dtype=np.int64)).tolist())  # C speed: block encodings are long
    storage_bits = np.dtype(dtype).itemsize * 8
    narrowed = q.bitwidth is not None and q.bitwidth != storage_bits
    if q.block_size is not None:
        channels = shape[q.axis] if shape is not None and q.axis is not None and q.axis < len(shape) else None
        return _blockwise(q, offsets, channels)
    if q.axis is None:
        if narrowed:
            return QuantEncoding(EncodingKind.BW_SCALE_OFFSET, q.scale[:1], offsets[:1], bitwidth=q.bitwidth)
        return QuantEncoding(EncodingKind.SCALE_OFFSET, q.scale[:1], offsets[:1])
    if narrowed:
        return QuantEncoding(EncodingKind.BW_AXIS_SCALE_OFFSET, q.scale, offsets, axis=q.axis, bitwidth=q.bitwidth)
    return QuantEncoding(EncodingKind.AXIS_SCALE_OFFSET, q.scale, offsets, axis=q.axis)


def _blockwise(q: Quant, offsets: tuple[int, ...], channels: int | None = None) -> QuantEncoding:
    """LPBQ: per-block float scales → per-channel scale × 4-bit integer block scales."""
    if channels is None:
        channels = len(offsets) if q.axis is not None else 1
    if len(offsets) == len(q.scale) and channels:  # a zero point per block: QNN keeps one per channel
        offsets = offsets[::len(q.scale) // channels]
    scales = np.asarray(q.scale, dtype=np.float64).reshape(channels, -1)
    block_bits = 4
    top = (1 << block_bits) - 1
    per_channel = scales.max(axis=1) / top
    per_channel[per_channel == 0] = 1.0
    blocks = np.clip(np.rint(scales / per_channel[:, None]), 1, top).astype(int)
    return QuantEncoding(EncodingKind.BLOCKWISE_EXPANSION, tuple(per_channel.tolist()),
                         offsets[:channels] or (0,) * channels,
                         axis=q.axis if q.axis is not None else 0, bitwidth=q.bitwidth,
                         num_blocks_per_axis=int(scales.shape[1]), block_scale_bitwidth=block_bits,
                         block_scales=tuple(map(tuple, blocks.tolist())))


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


@contextmanager
def _no_gc() -> Iterator[None]:
    """Conversion allocates an object per tensor, op and param, all acyclic; cyclic GC passes
    over a big graph would cost more than the conversion and free nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def rule_location(location: str) -> str:
    """`folder/file.qpat:line` from a rule's `file:line:col`: the same on every machine."""
    parts = location.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        file, line = parts[0], parts[1]
    else:
        file, line = location, ""
    short = "/".join(PurePath(file).parts[-2:])
    return f"{short}:{line}" if line else short


def origin_of(op: Op, locations: dict[str, str] | None = None) -> Origin:
    """The op's `Origin`: its rule and input-graph nodes (itself when no rule made it).
    `locations` caches `rule_location` across the ops of a graph."""
    p = op.provenance
    if p is None:
        return Origin(None, None, (op.name,))
    loc = locations.get(p.location) if locations is not None else None
    if loc is None:
        loc = rule_location(p.location)
        if locations is not None:
            locations[p.location] = loc
    return Origin(p.rule, loc, p.sources)


def to_qnn(graph: Graph, registry: QnnOps | OpDefRegistry | None = None) -> QnnGraph:
    """Convert; raises QlowerError if an op outside the qnn dialect is left.

    `registry`: the op registry (a bare OpDefRegistry is joined into one); without it, params
    keep their names' order and every op is QNN's own (package qti.aisw)."""
    left = [op for op in graph.ops if not op.type.startswith("qnn.")]
    if left:
        raise QlowerError([error(f"not lowered ({op.type})", subject=f"node {op.name}", code="not-lowered")
                           for op in left])
    if isinstance(registry, OpDefRegistry):
        registry = QnnOps.build(registry)
    with _no_gc():
        return _convert(graph, registry)


def _convert(graph: Graph, registry: QnnOps | None) -> QnnGraph:
    qg = QnnGraph(graph.name)
    tensors = qg.tensors
    # Per-call memos: most tensors share a handful of (dtype, quantized) pairs and Quant objects,
    # and most ops a handful of (type, attribute names) layouts.
    datatypes: dict[tuple[np.dtype, bool], DataType] = {}
    encodings: dict[tuple[int, np.dtype], tuple[Quant, QuantEncoding]] = {}
    layouts: dict[tuple[str, tuple[str, ...]], list[tuple[str, Any, bool | None, DataType | None]]] = {}
    opdefs: dict[str, Any] = {}
    packages: dict[str, str] = {}  # QNN type -> its op package
    qtypes: dict[str, str] = {}
    scalars: dict[tuple, ScalarParam] = {}  # ScalarParam is immutable: ops with equal params share one
    STATIC, NATIVE = TensorType.STATIC, TensorType.NATIVE

    def tensor_of(v: Value) -> str:
        name = v.name
        if name in tensors:
            return name
        if v.quant is None and v.data is None and not v.is_input and not v.is_output:  # most tensors
            dt = datatypes.get((v.dtype, False))
            if dt is None:
                dt = datatypes[(v.dtype, False)] = _datatype(v)
            shape = v.shape
            tensors[name] = QnnTensor(name, NATIVE, dt, shape if shape else (1,), None, None)
            return name
        if v.is_input:
            ttype = TensorType.APP_WRITE
        elif v.is_output:
            ttype = TensorType.APP_READ
        elif v.data is not None:
            ttype = STATIC
        else:
            ttype = NATIVE
        dims = tuple(v.shape) if v.shape else (1,)
        data = None
        if ttype is STATIC:
            data = v.data if isinstance(v.data, LazyArray) else np.asarray(v.data)  # by reference: read when written
            if data.ndim == 0:
                data = data.reshape(1)
        q, dtype = v.quant, v.dtype
        enc = None
        if q is not None:
            # keyed by identity (the graph keeps every Quant alive for the call; the entry keeps it too)
            hit = encodings.get((id(q), dtype, dims))
            if hit is None:
                hit = encodings[(id(q), dtype, dims)] = (q, encoding_of(q, dtype, v.shape))
            enc = hit[1]
        dkey = (dtype, q is not None)
        dt = datatypes.get(dkey)
        if dt is None:
            dt = datatypes[dkey] = _datatype(v)
        tensors[name] = QnnTensor(name, ttype, dt, dims, enc, data)
        return name

    def layout(qtype: str, names: tuple[str, ...]) -> list[tuple[str, Any, bool | None, DataType | None]]:
        """The params of an op in emission order (the op definition's, then by name), each with its
        def, whether it is scalar (None: as the value says) and its fixed datatype (if any)."""
        if qtype in opdefs:
            opdef = opdefs[qtype]
        else:
            entry = registry.get(qtype) if registry is not None else None
            opdef = opdefs[qtype] = entry.definition if entry is not None else None
        order = {p.name: i for i, p in enumerate(opdef.params)} if opdef is not None else {}
        out = []
        for n in sorted(names, key=lambda n: (order.get(n, len(order)), n)):
            pdef = opdef.param(n) if opdef is not None else None
            out.append((n, pdef, pdef.is_scalar if pdef is not None else None,
                        pdef.datatype if pdef is not None else None))
        return out

    for v in graph.inputs:
        tensor_of(v)
    ops = qg.ops
    locations: dict[str, str] = {}
    texts: dict[tuple[str, str], str] = {}  # (rule, location) -> str(provenance)
    origins: dict[tuple[str, str], tuple[str, str]] = {}  # (rule, location) -> Origin's (rule, location)
    make_origin = Origin.__new__
    set_field = object.__setattr__
    for op in graph.topo_order():
        qtype = qtypes.get(op.type)
        if qtype is None:
            qtype = qtypes[op.type] = op.type[4:]
            entry = registry.get(qtype) if registry is not None else None
            packages[qtype] = (entry.package if entry is not None else None) or PACKAGE
        package = packages[qtype]
        operands = op.operands
        if operands and operands[-1] is None:
            operands = list(operands)
            while operands and operands[-1] is None:
                operands.pop()
        if None in operands:
            raise QlowerError(error("an absent optional input is followed by a present one, which QNN cannot "
                                    "express", subject=f"node {op.name} ({op.type})", code="absent-input"))
        inputs = []  # (loops, not comprehensions: no frame per op)
        for o in operands:
            n = o.name
            if n not in tensors:
                tensor_of(o)
            inputs.append(n)
        outputs = []
        for o in op.results:
            n = o.name
            if n not in tensors:
                tensor_of(o)
            outputs.append(n)
        params = []
        op_attrs = op.attrs
        if op_attrs:
            names = tuple(op_attrs)
            lkey = (qtype, names)
            plan = layouts.get(lkey)
            if plan is None:
                plan = layouts[lkey] = layout(qtype, names)
            for name, pdef, scalar, fixed in plan:
                value = op_attrs[name]
                if scalar is None:
                    scalar = not isinstance(value, (list, tuple, np.ndarray))
                if scalar:
                    dt = fixed if fixed is not None else _param_datatype(pdef, value)
                    if isinstance(value, np.generic):
                        value = value.item()
                    tv = type(value)
                    if tv is bool or tv is int or tv is str:
                        skey = (name, dt, tv, value)
                        sp = scalars.get(skey)
                        if sp is None:
                            sp = scalars[skey] = ScalarParam(name, dt, value)
                        params.append(sp)
                    else:
                        params.append(ScalarParam(name, dt, value))
                else:
                    arr = np.asarray(value)
                    dt = _param_datatype(pdef, arr)
                    if arr.ndim == 0:
                        arr = arr.reshape(1)
                    t = QnnTensor(f"{op.name}_{name}", STATIC, dt, arr.shape, None, arr)
                    params.append(TensorParam(name, t))
        prov = op.provenance
        if prov is None or type(prov.sources) is not tuple:
            ops.append(OpConfig(op.name, qtype, inputs, outputs, params, package,
                                provenance=str(prov) if prov is not None else None,
                                origin=origin_of(op, locations)))
            continue
        # the common case, as `origin_of` and `str(prov)` would make it, without their per-op formatting
        pkey = (prov.rule, prov.location)
        text = texts.get(pkey)
        if text is None:
            text = texts[pkey] = str(prov)
            origins[pkey] = (prov.rule, origin_of(op, locations).location)
        rule, loc = origins[pkey]
        origin = make_origin(Origin)
        set_field(origin, "rule", rule)
        set_field(origin, "location", loc)
        set_field(origin, "sources", prov.sources)
        ops.append(OpConfig(op.name, qtype, inputs, outputs, params, package, text, origin))
    qg.inputs = [v.name for v in graph.inputs]
    qg.outputs = [tensor_of(v) for v in graph.outputs]
    return qg
