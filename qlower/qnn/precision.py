"""HTP's float path runs in FLOAT_16: retype a lowered float32 graph to float16.

Graph inputs and outputs keep float32 behind qnn.Cast ops, so callers feed and
read the same tensors as before (as ONNX Runtime's fp16-precision option does).
"""

from __future__ import annotations

import numpy as np

from qlower.graph.core import Graph, Provenance
from qlower.graph.lazy import LazyArray
from qlower.qnn.datatypes import DataType

_F32 = np.dtype("float32")
_F16 = np.dtype("float16")
_PROV = Provenance("htp_float16", "qlower/qnn/precision.py", "")


def _slot_accepts(registry, backend: str | None, op_type: str, kind: str, index: int,
                  datatype: DataType = DataType.FLOAT_16) -> bool:
    """Whether some datatype row of `backend` allows `datatype` at this input/output of the op."""
    if registry is None or backend is None:
        return datatype == DataType.FLOAT_16
    sup = registry.supplement(op_type, backend)
    if sup is None or not sup.rows:
        return True
    prefix = "in" if kind == "in" else "out"
    exact = f"{prefix}[{index}]"
    for row in sup.rows:
        dts = row.get(exact)
        if dts is None:
            dts = next((d for n, d in row.entries if n.startswith(f"{prefix}[") and ".." in n), None)
        if dts is None or datatype in dts:
            return True
    return False


def _keeps_f32(v, registry, backend: str | None) -> bool:
    p = v.producer
    if p is not None and p.type.startswith("qnn.") and not _slot_accepts(registry, backend, p.type[4:], "out",
                                                                          p.results.index(v)):
        return True
    return any(u.type.startswith("qnn.") and not _slot_accepts(registry, backend, u.type[4:], "in", i)
               for u, i in v.users)


def to_float16(graph: Graph, registry=None, backend: str | None = None) -> int:
    """Retype float32 values to float16 in place; returns how many values changed.

    A value stays float32 where an adjacent op has no FLOAT_16 form on `backend` (on HTP:
    Quantize's input, Dequantize's output), as the op definitions say; without a registry and
    backend every float32 value changes. Which backends run float in float16 is
    qlower.qnn.backends.FLOAT16_BACKENDS.
    """
    inputs = {id(v) for v in graph.inputs}
    outputs = {id(v) for v in graph.outputs}
    cast_rank = cast_max_rank(registry, backend)
    changed = 0
    for v in list(graph.values):
        if v.dtype != _F32 or v.quant is not None or id(v) in inputs or id(v) in outputs:
            continue
        if _keeps_f32(v, registry, backend):
            continue
        v.dtype = _F16
        if isinstance(v.data, LazyArray):  # by reference: converted when written, a piece at a time
            v.data = v.data.map(_saturate_f16, _F16)
        elif v.data is not None:
            v.data = _saturate_f16(v.data)
        changed += 1
    for v in list(graph.inputs):
        if v.dtype != _F32 or not v.users or _keeps_f32(v, registry, backend):
            continue
        # a Cast to an integer (or bool) reads the float32 input itself: through float16 first,
        # 8.998 would round to 9 before the truncation to 8
        users = [(u, i) for u, i in v.users if not _casts_to_integer(u)]
        if not users:
            continue
        nv = graph.add_value(graph.fresh_value_name(f"{v.name}.f16"), _F16, v.shape)
        casts = cast(graph, v, nv, f"{v.name}.to_f16", cast_rank)
        for user, idx in users:
            if user not in casts:
                graph.set_operand(user, idx, nv)
        changed += 1
    for v in list(graph.outputs):
        if v.dtype != _F32 or v.producer is None or _keeps_f32(v, registry, backend):
            continue
        if _exact_output(v, registry, backend):
            float_users = [(u, j) for u, j in v.users if u.type.startswith("qnn.")]
            if float_users:  # float ops after it compute in float16, behind a Cast of their own
                nv = graph.add_value(graph.fresh_value_name(f"{v.name}.f16"), _F16, v.shape)
                cast(graph, v, nv, f"{v.name}.to_f16", cast_rank)
                for user, j in float_users:
                    graph.set_operand(user, j, nv)
                changed += 1
            continue
        op = v.producer
        idx = op.results.index(v)
        nv = graph.add_value(graph.fresh_value_name(f"{v.name}.f16"), _F16, v.shape)
        graph.replace_result(op, idx, nv)
        # other consumers of the float32 output read the float16 value instead
        for user, j in list(v.users):
            graph.set_operand(user, j, nv)
        cast(graph, nv, v, f"{v.name}.to_f32", cast_rank)
        changed += 1
    return changed


def _exact_output(v, registry, backend: str | None) -> bool:
    """Whether a float32 graph output stays float32 as its producer computes it: the producer reads
    no float value (a Dequantize of a 16-bit tensor: its float16 form would lose up to 32 of its
    steps) and `backend` lets that output be FLOAT_32."""
    p = v.producer
    if not p.type.startswith("qnn.") or any(x is not None and x.dtype.kind == "f" for x in p.operands):
        return False
    return _slot_accepts(registry, backend, p.type[4:], "out", p.results.index(v), DataType.FLOAT_32)


def _casts_to_integer(op) -> bool:
    return op.type == "qnn.Cast" and op.results[0].dtype.kind in "biu" and op.results[0].quant is None


def _saturate_f16(data: np.ndarray) -> np.ndarray:
    """float32 data as float16 with finite values kept finite: an attention mask's float32 minimum
    becomes -65504, not -inf (which would turn a fully masked softmax row into NaN)."""
    big = float(np.finfo(_F16).max)
    data = np.asarray(data)
    return np.where(np.isfinite(data), np.clip(data, -big, big), data).astype(_F16)


def cast_max_rank(registry, backend: str | None) -> int | None:
    """The largest rank Cast takes on `backend`, from its constraints (HTP: 4); None when unbounded."""
    if registry is None or backend is None:
        return None
    limits = [c.fields["max"] for c in registry.checks("Cast", backend)
              if c.kind == "rank" and c.target in ("in[0]", "out[0]") and c.fields.get("max") is not None]
    return min(limits, default=None)


def cast(graph: Graph, src, dst, name: str, max_rank: int | None, prov: Provenance | None = None) -> list:
    """qnn.Cast src → dst; above the backend's rank limit for Cast on the flattened tensor, between Reshapes."""
    prov = prov or Provenance(_PROV.rule, _PROV.location, dst.name)
    if dst.shape is None or max_rank is None or len(dst.shape) <= max_rank:
        return [graph.add_op(graph.fresh_op_name(name), "qnn.Cast", [src], [dst], {}, prov)]
    n = (int(np.prod(dst.shape)),)
    flat_in = graph.add_value(graph.fresh_value_name(f"{src.name}.flat"), src.dtype, n, quant=src.quant)
    flat_out = graph.add_value(graph.fresh_value_name(f"{dst.name}.flat"), dst.dtype, n, quant=dst.quant)
    return [graph.add_op(graph.fresh_op_name(f"{name}.flatten"), "qnn.Reshape", [src], [flat_in], {}, prov),
            graph.add_op(graph.fresh_op_name(name), "qnn.Cast", [flat_in], [flat_out], {}, prov),
            graph.add_op(graph.fresh_op_name(f"{name}.unflatten"), "qnn.Reshape", [flat_out], [dst], {}, prov)]


_F16_TINY = float(np.finfo(_F16).smallest_subnormal)  # a value below half of it rounds to zero
_F16_MAX = float(np.finfo(_F16).max)


def float16_range_warnings(graph: Graph) -> list:
    """What the float16 path cannot hold: a dequantized value turned float16 (a Cast or a Dequantize
    writing FLOAT_16) whose encoding's largest value is below float16's smallest subnormal (all of it
    becomes zero) or beyond its maximum. The float ops after it would compute zeros or infinities where
    the source computes numbers, so say which value, and its figures."""
    from qlower.diagnostics import warning
    from qlower.graph.quantize import bounds

    out = []
    for op in graph.ops:
        if op.type == "qnn.Dequantize" and op.results[0].dtype == _F16:
            dq, where = op, op
        elif (op.type == "qnn.Cast" and op.results[0].dtype == _F16 and op.operands[0] is not None
              and op.operands[0].producer is not None and op.operands[0].producer.type == "qnn.Dequantize"):
            dq, where = op.operands[0].producer, op
        else:
            continue
        x = dq.operands[0]
        q = x.quant if x is not None else None
        if q is None or x.dtype.kind not in "iu":
            continue
        lo, hi = bounds(x.dtype, q.bitwidth)
        scale = np.abs(np.asarray(q.scale, np.float64))
        zp = np.asarray(q.zero_point, np.float64)
        largest = float(np.max(scale * np.maximum(np.abs(hi - zp), np.abs(lo - zp))))
        if _F16_TINY <= largest <= _F16_MAX:
            continue
        what = (f"its largest value {largest:.3g} is below float16's smallest {_F16_TINY:.3g}, so every value "
                "becomes zero" if largest < _F16_TINY else
                f"its largest value {largest:.3g} is beyond float16's {_F16_MAX:g}, so large values are lost")
        out.append(warning(
            f"`{x.name}` is dequantized into float16, which cannot hold its encoding's values: {what}",
            subject=f"node {where.name}", code="float16-range",
            hint="lower without the float16 pass (--no-float16) where the backend allows, or requantize "
                 "that tensor"))
    return out
