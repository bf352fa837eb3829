"""The quantized copy of a float graph: encodings on every activation (from calibration) and
fixed-point weights, biases and parameters, each weight read, quantized and handed to `sink` (which
writes it out) one at a time."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph, Op, Value
from qlower.graph.types import Quant
from qlower.quantize.encode import (act_encoding, bias_encoding, fixed_encoding, kv_encoding, param_encoding,
                                    quantize_rows, weight_encoding)
from qlower.quantize.observe import RangeObserver
from qlower.quantize.options import QuantOptions
from qlower.quantize.overrides import imposed
from qlower.quantize.table import axis_of as _axis
from qlower.quantize.table import roles, softmax_rows

# The KV cache of the LLM graphs (qlower.frontends.llm): cache inputs and the chunk's outputs, paired by
# layer, share one encoding (the runtime appends the outputs to the cache the inputs read).
KV_NAME = re.compile(r"^(past|present)_(key|value)\.(\d+)$")

# (value, quantized data) -> the value, its data now written out and held by reference
Sink = Callable[[Value, np.ndarray], None]


def range_of(obs: RangeObserver | None, opts: QuantOptions, bits: int, symmetric: bool) -> tuple[float, float]:
    if obs is None or not obs.seen:
        return 0.0, 0.0
    if opts.calibration_method == "percentile":
        return obs.percentile_range(opts.percentile)
    if opts.calibration_method == "mse":
        return obs.mse_range(1 << bits, symmetric)
    return obs.lo, obs.hi


def headroom(lo: float, hi: float, fraction: float = 1 / 16) -> tuple[float, float]:
    """A 16-bit min-max range widened by `fraction` of its width on each side away from 0 (a side at 0,
    a ReLU's, stays there). The extremes of a few calibration inputs are not those of the next input:
    a value beyond them clips, and a few clipped elements (an input's, a residual stream's) cost more
    than all the rounding of the range (min-max on 8 input sets, clipping on held-out ones, was most of
    the w8a16 error of bench_accuracy's models). At 16 bits the wider step costs 20·log10(1 + 2/16)
    = 1 dB of rounding noise some 90 dB below the signal; at 8 bits, 1 dB of ~50, so only 16 bits."""
    width = (hi - lo) * fraction
    return (lo - width if lo < 0 else lo), (hi + width if hi > 0 else hi)


def quantize_graph(graph: Graph, seen: Mapping[str, RangeObserver], opts: QuantOptions, *,
                   sink: Sink | None = None, name: str | None = None, activations: bool = True,
                   hold: frozenset[str] = frozenset(), shift: Mapping[str, np.ndarray] | None = None) -> Graph:
    """The quantized graph (see the module docstring); `seen` from `calibrate`. Constants already
    fixed-point are kept as they are, so the weights can be quantized first (`activations=False`:
    every activation stays float, and so do the constants named in `hold`) and the activations
    calibrated on the graph with those weights. `shift` (constant name → array of its size) is added
    to a float constant before it is quantized (the biases' corrections, `qlower.quantize.correct`)."""
    table = roles()
    weights, passthrough, casts = table["weights"], frozenset(table["passthrough"]), frozenset(table["cast"])
    float_casts, fixed_out = table["float_cast"], table["fixed_output"]
    over = opts.overrides
    q = Graph(name or f"{graph.name}_quantized")

    def keeps_float(v: Value) -> bool:
        return v.name in over.keep_float or (v.producer is not None and v.producer.name in over.keep_float)

    def bits_of(v: Value, default: int) -> int:
        b = over.bitwidth.get(v.name)
        if b is None and v.producer is not None:
            b = over.bitwidth.get(v.producer.name)
        if b is not None and b not in (8, 16):
            raise QlowerError(error(f"override bitwidth {b}: activations are 8 or 16 bits", subject=f"tensor {v.name}",
                                    code="overrides"))
        return b or default

    # ---- activation encodings, in execution order (passthrough results share their operand's)
    act: dict[str, tuple[np.dtype, Quant] | None] = {}
    kv_pairs: dict[tuple[str, str], list[str]] = {}
    for v in list(graph.inputs) + list(graph.outputs):
        m = KV_NAME.match(v.name)
        if m and v.dtype.kind == "f":
            kv_pairs.setdefault((m.group(2), m.group(3)), []).append(v.name)

    def kv_enc(v: Value) -> tuple[np.dtype, Quant] | None:
        m = KV_NAME.match(v.name)
        if m is None or opts.kv_bitwidth is None or keeps_float(v):
            return None
        names = kv_pairs[(m.group(2), m.group(3))]
        lo = min(min(range_of(seen.get(n), opts, opts.kv_bitwidth, True)) for n in names)
        hi = max(max(range_of(seen.get(n), opts, opts.kv_bitwidth, True)) for n in names)
        return kv_encoding(lo, hi, opts.kv_bitwidth)

    def encode(v: Value, cover: Value | None = None) -> tuple[np.dtype, Quant] | None:
        if not activations or v.dtype.kind != "f" or keeps_float(v):
            return None
        fixed = over.encodings.get(v.name)
        if fixed is not None:
            if fixed.bitwidth not in (8, 16):
                raise QlowerError(error(f"quantization overrides: activations are 8 or 16 bits, not "
                                        f"{fixed.bitwidth}", subject=f"tensor {v.name}", code="overrides"))
            dtype = np.dtype(np.uint16 if fixed.bitwidth == 16 else np.uint8)
            return dtype, imposed(fixed, dtype, shape=v.shape)
        kv = kv_enc(v)
        if kv is not None:
            return kv
        bits = bits_of(v, opts.act_bitwidth)
        lo, hi = range_of(seen.get(v.name), opts, bits, opts.act_symmetric or v.name in symmetric)
        if v.name in symmetric:
            lo, hi = -max(abs(lo), abs(hi)), max(abs(lo), abs(hi))
        if cover is not None:
            clo, chi = range_of(seen.get(cover.name), opts, bits, True)
            amax = max(abs(clo), abs(chi))
            lo, hi = min(lo, -amax), max(hi, amax)
        elif not opts.act_symmetric and v.name not in symmetric:
            floor = softmax_floor(v)
            if floor is not None and lo < floor < hi:
                lo = floor
        if bits == 16 and opts.calibration_method == "minmax" and opts.range_headroom:
            lo, hi = headroom(lo, hi, opts.range_headroom)
        return act_encoding(lo, hi, bits, opts.act_symmetric)

    rows = softmax_rows(graph)

    def softmax_floor(v: Value) -> float | None:
        """The least value a softmax's operand needs: each row's entries more than K below its maximum
        weigh under e^-K each, so with K = ln(2 n / step) (n entries a row, `step` that of the softmax
        result's encoding) the n of them together move no result by half a step. Below the least row
        maximum minus K the encoding may saturate: an additive attention mask (dtype-min, -1e4, -100)
        then costs the scores none of their precision."""
        obs = seen.get(v.name)
        if id(v) not in rows or obs is None or not np.isfinite(obs.row_floor):
            return None
        n = v.shape[rows[id(v)]] if v.shape is not None else None
        k = 0.0
        for op, _ in v.users:
            r = op.results[0]
            if n is None or keeps_float(r) or r.name in over.encodings or KV_NAME.match(r.name):
                return None
            bits = bits_of(r, opts.act_bitwidth)
            if op.type in fixed_out:
                step = float(fixed_encoding(*fixed_out[op.type], bits)[1].scale[0])
            else:
                rlo, rhi = range_of(seen.get(r.name), opts, bits, False)
                step = (max(rhi, 0.0) - min(rlo, 0.0)) / ((1 << bits) - 1)
            if not step > 0:
                return None
            k = max(k, float(np.log(2.0 * n / step)))
        return obs.row_floor - k

    # ---- the new graph: same names, quantized storage
    new: dict[str, Value] = {}
    made: dict[tuple[str, str], Value] = {}
    gather, cover, symmetric_params = table["gather"], table["cover"], table["symmetric_param"]
    absorbed_by = frozenset(table["absorbs_range"])
    # results whose encoding another fact fixes
    tied = passthrough | casts | gather.keys() | cover.keys() | float_casts.keys() | fixed_out.keys()

    def float_cast(op: Op) -> bool:
        """A float -> float conversion (RMSNorm's .to(float32) and back): on fixed-point storage the
        identity on real values, so its result keeps the operand's encoding and it becomes the
        dialect's identity op (its `to` would name a float storage the quantized value has not)."""
        src = op.operands[0] if op.type in float_casts and op.operands else None
        return (src is not None and not src.is_const and src.dtype.kind == "f" and len(op.results) == 1
                and op.results[0].dtype.kind == "f")
    symmetric: set[str] = set()
    for op in graph.ops:
        at = table["symmetric_range"].get(op.type)
        v = op.operands[at] if at is not None and len(op.operands) > at else None
        while v is not None and not v.is_const:
            symmetric.add(v.name)
            p = v.producer
            v = p.operands[0] if p is not None and p.type in passthrough and p.operands else None

    def value(v: Value) -> Value:
        got = new.get(v.name)
        if got is None:
            enc = act.get(v.name)
            got = new[v.name] = q.add_value(v.name, enc[0] if enc else v.dtype, v.shape,
                                            quant=enc[1] if enc else None)
        return got

    def const(v: Value, role: str, op: Op, axes: tuple[int, int] | None = None) -> Value:
        key = (v.name, role)
        if key in made:
            return made[key]
        if v.quant is not None or v.dtype.kind != "f":  # already fixed-point, or integer data: as it is
            nv = q.add_value(v.name, v.dtype, v.shape, quant=v.quant, data=v.data)
            made[key] = nv
            return nv
        if not activations and v.name in hold:  # float until calibration gives its correction
            nv = made[key] = q.add_value(v.name, v.dtype, v.shape, data=v.data)
            return nv
        src = v.data
        if shift and v.name in shift:
            src = (np.asarray(v.data, np.float64) + np.asarray(shift[v.name]).reshape(v.shape)).astype(np.float32)
        taken = any(n == v.name for n, _ in made)
        vname = v.name if not taken else q.fresh_value_name(f"{op.name}.{role}")
        fixed = over.encodings.get(v.name)
        if fixed is not None:
            dtype = np.dtype(np.int32 if role == "bias" else np.int8 if role == "weight" else
                             np.uint16 if fixed.bitwidth > 8 else np.uint8)
            ax = axes if axes is not None else (None, None)
            enc = imposed(fixed, dtype, ax[0], ax[1], v.shape)
            data = quantize_rows(src, enc, dtype)
        elif role == "weight":
            bits = over.bitwidth.get(v.name, opts.weights_bitwidth)
            if bits not in (4, 8):
                raise QlowerError(error(f"override bitwidth {bits}: weights are 4 or 8 bits",
                                        subject=f"tensor {v.name}", code="overrides"))
            block = opts.block_size if bits == 4 and opts.block_size else None
            if block is not None and v.shape[axes[1]] <= block:
                block = None
            enc, data = weight_encoding(v.data, bits, axes[0], axes[1], per_channel=opts.per_channel, block=block,
                                        method=opts.param_calibration_method)
        elif role == "bias":
            enc, data = bias_encoding(src)
        else:
            enc, data = param_encoding(src, over.bitwidth.get(v.name, opts.act_bitwidth), role == "symmetric")
        nv = q.add_value(vname, data.dtype, v.shape, quant=enc, data=data)
        if sink is not None:
            sink(nv, data)
        del data
        made[key] = nv
        return nv

    for v in graph.inputs:
        act[v.name] = encode(v)
    for op in graph.topo_order():
        for r in op.results:
            src = op.operands[0] if op.operands else None
            table_at = gather.get(op.type)
            if (not activations or keeps_float(r) or KV_NAME.match(r.name) is not None
                    or op.name in over.keep_float):
                act[r.name] = encode(r)
            elif (table_at is not None and len(op.operands) > table_at and op.operands[table_at] is not None
                  and op.operands[table_at].is_const
                  and (op.operands[table_at].dtype.kind == "f" or op.operands[table_at].quant is not None)):
                # (a table the weights-first pass has quantized already is kept as it is)
                t = const(op.operands[table_at], "param", op)
                act[r.name] = (t.dtype, t.quant)
            elif ((op.type in passthrough or float_cast(op)) and src is not None and not src.is_const
                  and act.get(src.name) is not None):
                act[r.name] = act[src.name]
            elif (op.type in fixed_out and r is op.results[0] and r.dtype.kind == "f"
                  and r.name not in over.encodings):
                act[r.name] = fixed_encoding(*fixed_out[op.type], bits_of(r, opts.act_bitwidth))
            else:
                at = cover.get(op.type)
                act[r.name] = encode(r, op.operands[at] if at is not None and len(op.operands) > at else None)

    # an op's result that only a ReLU reads is quantized on the ReLU's [0, hi] range, which saturates
    # what the ReLU zeroes: exactly the ReLU, and no code of the range spent on negatives (the
    # Conv+Relu supergroup of AIMET, the range ORT's quantizer lets absorb the Relu)
    for op in graph.ops:
        if op.type not in absorbed_by or not op.operands or op.operands[0] is None:
            continue
        x, y = op.operands[0], op.results[0]
        enc = act.get(y.name)
        if (x.is_const or x.is_input or x.is_output or x.use_count != 1 or x.producer is None
                or x.producer.type in tied or x.name in symmetric or enc is None or act.get(x.name) is None
                or float(enc[1].zero_point[0]) != 0 or x.name in over.encodings or y.name in over.encodings):
            continue
        act[x.name] = enc

    requant: dict[str, Value] = {}
    for v in graph.inputs:
        value(v)
    for op in graph.topo_order():
        spec = weights.get(op.type)
        float_op = op.name in over.keep_float
        operands = []
        for i, v in enumerate(op.operands):
            if v is None:
                operands.append(None)
            elif not v.is_const:
                if float_op:
                    operands.append(_as_float(q, value(v), op))
                elif activations and keeps_float(v) and v.dtype.kind == "f":  # kept float, into a quantized op
                    if v.name not in requant:
                        bits = bits_of(v, opts.act_bitwidth)
                        dtype, enc = act_encoding(*range_of(seen.get(v.name), opts, bits, opts.act_symmetric), bits,
                                                  opts.act_symmetric)
                        t = q.add_value(q.fresh_value_name(f"{v.name}.quantized"), dtype, v.shape, quant=enc)
                        q.add_op(q.fresh_op_name(f"{v.name}.quantize"), "mllm.CastType", [value(v)], [t],
                                 {"dtype": dtype.name})
                        requant[v.name] = t
                    operands.append(requant[v.name])
                else:
                    operands.append(value(v))
            elif float_op:
                operands.append(made.setdefault((v.name, "float"), q.add_value(
                    v.name if not any(n == v.name for n, _ in made) else q.fresh_value_name(f"{op.name}.float"),
                    v.dtype, v.shape, data=v.data)))
            elif spec is not None and i == spec["weight"][0] and v.shape is not None and len(v.shape) >= 2:
                axes = (_axis(spec["weight"][1], op) % len(v.shape), _axis(spec["weight"][2], op) % len(v.shape))
                operands.append(const(v, "weight", op, axes))
            elif spec is not None and i == spec.get("bias"):
                operands.append(const(v, "bias", op))
            elif i == symmetric_params.get(op.type):
                operands.append(const(v, "symmetric", op))
            else:
                operands.append(const(v, "param", op))
        attrs_ = dict(op.attrs)
        results = [value(r) for r in op.results]
        if op.type in casts and "dtype" in attrs_:
            attrs_["dtype"] = results[0].dtype.name
        if float_cast(op) and operands[0].quant is not None and results[0].quant is not None:
            q.add_op(op.name, float_casts[op.type], operands, results, {})
            continue
        q.add_op(op.name, op.type, operands, results, attrs_)
    q.set_io([value(v) for v in graph.inputs], [value(v) for v in graph.outputs])
    return q


def _as_float(q: Graph, v: Value, op: Op) -> Value:
    """A kept-float op's operand: dequantized by an mllm CastType when it is quantized."""
    if v.quant is None:
        return v
    f = q.add_value(q.fresh_value_name(f"{v.name}.float"), np.float32, v.shape)
    q.add_op(q.fresh_op_name(f"{op.name}.dequantize_{v.name}"), "mllm.CastType", [v], [f], {"dtype": "float32"})
    return f
