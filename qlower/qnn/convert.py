"""A lowered qlower Graph (qnn dialect only) → the QNN data model.

Tensor roles follow QNN: graph inputs APP_WRITE, outputs APP_READ, constants
STATIC, everything else NATIVE; rank-0 values become [1]. Encodings switch
from the framework convention (zero_point) to QNN's (offset = −zero_point).
Each op's package and param order come from its entry in the op registry
(`qlower.qnn.registry.QnnOps`), so a custom op package's op is written as
that package's op.
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter
from pathlib import PurePath
from typing import Any

import numpy as np

from qlower._frozen import Frozen
from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph, Op, Value
from qlower.graph.lazy import LazyArray
from qlower.graph.types import Quant
from qlower.qnn.datatypes import DataType, from_numpy
from qlower.qnn.keys import NO_KEY, attrs_key, op_kind_key, params_key, scalar_param_key, tensor_kind_key
from qlower.qnn.model import PACKAGE, EncodingKind, Origin, Param, QnnGraph, QnnTensor, QuantEncoding, \
    ScalarParam, TensorParam, TensorType
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.registry import QnnOps
from qlower.qnn.table import Interner, OpKind, QnnTable, TensorKind, param_prototype


def encoding_of(q: Quant, dtype: np.dtype, shape: tuple[int, ...] | None = None) -> QuantEncoding:
    """Framework encoding → QNN encoding (offset = −zero_point). A block encoding needs the
    tensor's `shape` to tell channels from blocks when it lists a zero point per block."""
    storage_bits = np.dtype(dtype).itemsize * 8
    narrowed = q.bitwidth is not None and q.bitwidth != storage_bits
    if q.block_size is not None:
        channels = shape[q.axis] if shape is not None and q.axis is not None and q.axis < len(shape) else None
        return _blockwise(q, channels)
    offsets = _offsets(q.zero_point.array)
    if q.axis is None:
        if narrowed:
            return QuantEncoding(EncodingKind.BW_SCALE_OFFSET, q.scale[:1], offsets[:1], bitwidth=q.bitwidth)
        return QuantEncoding(EncodingKind.SCALE_OFFSET, q.scale[:1], offsets[:1])
    if narrowed:
        return QuantEncoding(EncodingKind.BW_AXIS_SCALE_OFFSET, q.scale, offsets, axis=q.axis, bitwidth=q.bitwidth)
    return QuantEncoding(EncodingKind.AXIS_SCALE_OFFSET, q.scale, offsets, axis=q.axis)


def _offsets(zero_points: np.ndarray) -> Frozen:
    """QNN offsets (−zero point, int64) of zero points, numpy throughout: block encodings are long."""
    return Frozen(np.negative(zero_points, dtype=np.int64))


def _blockwise(q: Quant, channels: int | None = None) -> QuantEncoding:
    """LPBQ: per-block float scales → per-channel scale × 4-bit integer block scales."""
    zp = q.zero_point.array
    if channels is None:
        channels = len(zp) if q.axis is not None else 1
    if len(zp) == len(q.scale) and channels:  # a zero point per block: QNN keeps one per channel
        zp = zp[::len(q.scale) // channels]
    offsets = _offsets(zp[:channels])
    scales = np.asarray(q.scale, dtype=np.float64).reshape(channels, -1)
    block_bits = 4
    per_channel, blocks = _lpbq_split(scales, block_bits)  # (1..16: one byte each)
    return QuantEncoding(EncodingKind.BLOCKWISE_EXPANSION, Frozen(per_channel),  # ours: frozen without a copy
                         offsets or np.zeros(channels, np.int64),
                         axis=q.axis if q.axis is not None else 0, bitwidth=q.bitwidth,
                         num_blocks_per_axis=int(scales.shape[1]), block_scale_bitwidth=block_bits,
                         block_scales=Frozen(blocks))


def _lpbq_split(scales: np.ndarray, block_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-block scales [channels, blocks] as a per-channel scale times integer block scales, kept
    exact where they are such a product: a channel's largest block is its scale times 2^bits - 1
    (qlower's quantizer) or times 2^bits (AIMET's LPBQ, whose integer scales run 1..2^bits and which
    QNN's converter takes as they are). A channel that is neither is split on AIMET's grid, nearest."""
    top = 1 << block_bits
    peak = scales.max(axis=1)
    zero = peak == 0  # (a channel of zeros: scale 1, block scales 1)
    out_pc, out_ints = None, None
    for levels in (top - 1, top):
        pc = np.where(zero, 1.0, peak / levels)
        ints = np.clip(np.rint(scales / pc[:, None]), 1, levels)
        exact = zero | np.all(np.abs(ints * pc[:, None] - scales) <= 1e-6 * np.abs(scales), axis=1)
        if out_pc is None:
            out_pc, out_ints = pc, ints
            if exact.all():
                break
            keep = exact
        else:  # the channels 2^bits - 1 does not reproduce take AIMET's grid
            out_pc = np.where(keep, out_pc, pc)
            out_ints = np.where(keep[:, None], out_ints, ints)
    return out_pc, out_ints.astype(np.uint8)


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
    return to_table(graph, registry).graph()


def to_table(graph: Graph, registry: QnnOps | OpDefRegistry | None = None) -> QnnTable:
    """`to_qnn`, as a `QnnTable` (what the writers and the validator walk; `.graph()` is the QnnGraph)."""
    left = [op for op in graph.ops if not op.type.startswith("qnn.")]
    if left:
        raise QlowerError([error(f"not lowered ({op.type})", subject=f"node {op.name}", code="not-lowered")
                           for op in left])
    if isinstance(registry, OpDefRegistry):
        registry = QnnOps.build(registry)
    return _convert(graph, registry)


_NAME, _TYPE, _OPERANDS, _RESULTS, _PROVENANCE, _ATTRS, _PRODUCER = (
    attrgetter(a) for a in ("name", "type", "operands", "results", "provenance", "attrs", "producer"))


def _convert(graph: Graph, registry: QnnOps | None) -> QnnTable:
    table = QnnTable(graph.name)
    intern = Interner(table)
    # Per-call memos: most tensors share a handful of (dtype, shape) kinds and Quant objects, and
    # most ops a handful of (type, attributes, provenance, tensor kinds) kinds.
    plain: dict[tuple[int, int], int] = {}  # (id(dtype), id(shape)) of a plain activation -> its kind
    general: dict[tuple, int] = {}  # the same, with the Quant's id and the role, for the other values
    keep: list[tuple] = []  # (the objects whose ids key `plain`, alive as long as it is)
    datatypes: dict[tuple[np.dtype, bool], DataType] = {}
    encodings: dict[tuple[int, np.dtype], tuple[Quant, QuantEncoding]] = {}
    layouts: dict[tuple[str, tuple[str, ...]], list[tuple[str, Any, bool | None, DataType | None]]] = {}
    opdefs: dict[str, Any] = {}
    packages: dict[str, str] = {}  # QNN type -> its op package
    qtypes: dict[str, str] = {}
    scalars: dict[Any, ScalarParam] = {}  # ScalarParam is immutable: ops with equal params share one
    STATIC, NATIVE = TensorType.STATIC, TensorType.NATIVE

    def kind_of(v: Value) -> int:
        """The kind of the tensor `v` becomes."""
        if v.quant is None and v.data is None and not v.is_input and not v.is_output:  # most tensors
            pkey = (id(v.dtype), id(v.shape))  # (the graph shares dtype and shape objects: cheap to hash)
            k = plain.get(pkey)
            if k is None:
                dt = datatypes.get((v.dtype, False))
                if dt is None:
                    dt = datatypes[(v.dtype, False)] = _datatype(v)
                dims = v.shape if v.shape else (1,)
                k = intern.tensor_kind(tensor_kind_key(NATIVE, dt, dims, None, False),
                                       lambda: TensorKind(NATIVE, dt, dims))
                plain[pkey] = k
                keep.append((v.dtype, v.shape))
            return k
        if v.is_input:
            ttype = TensorType.APP_WRITE
        elif v.is_output:
            ttype = TensorType.APP_READ
        elif v.data is not None:
            ttype = STATIC
        else:
            ttype = NATIVE
        dims = tuple(v.shape) if v.shape else (1,)
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
        return intern.tensor_kind(tensor_kind_key(ttype, dt, dims, enc, ttype is STATIC),
                                  lambda: TensorKind(ttype, dt, dims, enc, ttype is STATIC))

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

    def params_of(op: Op, qtype: str) -> tuple[list[Param], list[QnnTensor]]:
        """The op's params in order, and its tensor params' tensors."""
        params: list[Param] = []
        tensors: list[QnnTensor] = []
        op_attrs = op.attrs
        if not op_attrs:
            return params, tensors
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
                skey = scalar_param_key(name, dt, value)
                if skey is NO_KEY:
                    params.append(ScalarParam(name, dt, value))
                else:
                    sp = scalars.get(skey)
                    if sp is None:
                        sp = scalars[skey] = ScalarParam(name, dt, value)
                    params.append(sp)
            else:
                arr = np.asarray(value)
                dt = _param_datatype(pdef, arr)
                if arr.ndim == 0:
                    arr = arr.reshape(1)
                t = QnnTensor(f"{op.name}_{name}", STATIC, dt, arr.shape, None, arr)
                params.append(TensorParam(name, t))
                tensors.append(t)
        return params, tensors

    def new_kind(op: Op, qtype: str, i: int, in_kinds: tuple[int, ...], out_kinds: tuple[int, ...]) -> int:
        """The kind of op `i` (its key not seen yet, or its params its own)."""
        params, tensors = params_of(op, qtype)
        prov = op.provenance
        if prov is None:
            text = rule = loc = None
        else:
            text, rule, loc = str(prov), prov.rule, origin_of(op, locations).location
        pk = params_key(params)
        okey = op_kind_key(qtype, packages[qtype], pk if pk is not NO_KEY else ("own", i), in_kinds, out_kinds,
                           text, rule, loc, True)
        if tensors:
            table.op_params[i] = tuple(tensors)
            params = list(map(param_prototype, params))
        return intern.op_kind(okey, lambda: OpKind(qtype, packages[qtype], tuple(params), in_kinds, out_kinds,
                                                   text, rule, loc))

    locations: dict[str, str] = {}
    order = graph.topo_order()
    # Each op's operands (absent optional ones at the end dropped: QNN lists only what is there) and results.
    operand_lists = list(map(_OPERANDS, order))
    result_lists = list(map(_RESULTS, order))
    if None in chain.from_iterable(operand_lists):
        for j, (op, operands) in enumerate(zip(order, operand_lists)):
            if None in operands:
                operands = list(operands)
                while operands and operands[-1] is None:
                    operands.pop()
                if None in operands:
                    raise QlowerError(error("an absent optional input is followed by a present one, which QNN "
                                            "cannot express", subject=f"node {op.name} ({op.type})",
                                            code="absent-input"))
                operand_lists[j] = operands
    # The tensors, in the order they are first needed: graph inputs, then each op's operands and results
    # in execution order, then graph outputs not met before (found, and deduplicated, in C).
    tensors = list(dict.fromkeys(chain(graph.inputs, chain.from_iterable(chain.from_iterable(
        zip(operand_lists, result_lists))), graph.outputs)))
    # Their kinds, looked up in line by the identities of what decides a kind (the graph shares dtype,
    # shape and Quant objects between its values): plain activations by dtype and shape, the others
    # (constants, graph inputs and outputs, quantized values) by those and their role too; `kind_of`
    # (which memoizes plain ones) and `other_kind` only for the first value of each key.
    pget, gget = plain.get, general.get

    def other_kind(v: Value, gkey: tuple) -> int:
        k = general[gkey] = kind_of(v)
        keep.append((v.dtype, v.shape, v.quant))
        return k

    kinds = [(k if (k := pget((id(v.dtype), id(v.shape)))) is not None else kind_of(v))
             if v.quant is None and v.data is None and not v.is_input and not v.is_output else
             (k if (k := gget(gkey := (id(v.dtype), id(v.shape), id(v.quant), v.is_input, v.is_output,
                                       v.data is None))) is not None else other_kind(v, gkey))
             for v in tensors]
    table.tensor_names = list(map(_NAME, tensors))
    table.tensor_kind = kinds
    data_of = table.tensor_data
    for i in [i for i, v in enumerate(tensors) if v.data is not None]:
        v = tensors[i]
        if table.tensor_kinds[kinds[i]].type is STATIC:
            data = v.data if isinstance(v.data, LazyArray) else np.asarray(v.data)  # by reference: read when written
            data_of[i] = data if data.ndim else data.reshape(1)
    table.unproduced = [i for i, p in enumerate(map(_PRODUCER, tensors)) if p is None]
    kind_of_value = dict(zip(tensors, kinds)).__getitem__
    op_names, op_kind, op_sources = table.op_names, table.op_kind, table.op_sources
    kinds_of_ops: dict[tuple, int] = {}  # (op type, attributes, rule, input and output kinds) -> op kind
    for op, op_name, op_type, operands, results, prov, op_attrs in zip(
            order, map(_NAME, order), map(_TYPE, order), operand_lists, result_lists,
            map(_PROVENANCE, order), map(_ATTRS, order)):
        in_kinds = tuple(map(kind_of_value, operands))
        out_kinds = tuple(map(kind_of_value, results))
        if prov is None:
            where = None
            sources: tuple[str, ...] = (op_name,)
        else:
            where = (prov.rule, prov.location)  # (a location can hold several rules: the retype pass's do)
            sources = prov.sources if type(prov.sources) is tuple else tuple(prov.sources)
        akey = attrs_key(op_attrs) if op_attrs else ()
        key = (op_type, akey, where, in_kinds, out_kinds) if akey is not NO_KEY else None
        k = kinds_of_ops.get(key) if key is not None else None
        if k is None:
            qtype = qtypes.get(op_type)
            if qtype is None:
                qtype = qtypes[op_type] = op_type[4:]
                entry = registry.get(qtype) if registry is not None else None
                packages[qtype] = (entry.package if entry is not None else None) or PACKAGE
            k = new_kind(op, qtype, len(op_names), in_kinds, out_kinds)
            if key is not None and len(op_names) not in table.op_params:  # (tensor params: the op's own)
                kinds_of_ops[key] = k
        op_names.append(op_name)
        op_kind.append(k)
        op_sources.append(sources)
    # the ops' input and output names, each all in one list (in C)
    table.op_input_names = list(map(_NAME, chain.from_iterable(operand_lists)))
    table.op_output_names = list(map(_NAME, chain.from_iterable(result_lists)))
    table.inputs = [v.name for v in graph.inputs]
    table.outputs = [v.name for v in graph.outputs]
    return table
