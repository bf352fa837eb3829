"""Bias correction: what quantizing a weight moves its op's output by on average, given back through
the op's bias.

With the weight W quantized to Ŵ, an op's output on input x moves by (Ŵ - W)·x; over the calibration
data its mean is (Ŵ - W)·E[x], the same for every position. A bias b' = b + (W - Ŵ)·E[x] takes that
mean away (Nagel et al., "Data-Free Quantization", 2019; AIMET's bias correction, done here with the
empirical E[x] of calibration): the rounding and clipping errors of a channel no longer add up to a
systematic shift, which at 4 bits, on inputs of non-zero mean (after a ReLU, say), is most of the error
the output sees. An op's bias is its bias operand, or the constant of the one Add that alone reads a
MatMul's result (a Linear exported as MatMul + Add).

Only ops whose input mean along the weight's input dimension is one vector are corrected: the roles
file's `bias_correction` names each op's input operand and feature axis (grouped convolutions and
transposed operands are left as they are). A convolution's kernel taps all see the input channel's
mean, which its zero-padded border does not: there the correction is the interior's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from qlower.graph.core import Graph, Value
from qlower.quantize.calibrate import real_constant
from qlower.quantize.observe import RangeObserver
from qlower.quantize.table import axis_of, roles

ROWS_BYTES = 32 << 20


@attrs.frozen
class Site:
    """One op whose bias takes the correction: its input (observed along `axis`), weight and bias."""

    op: str
    input: str
    axis: int
    weight: str
    out_axis: int
    in_axis: int
    bias: str


def _float_const(v: Value | None) -> bool:
    return v is not None and v.is_const and v.quant is None and v.dtype.kind == "f"


def sites(graph: Graph) -> list[Site]:
    """Every op of `graph` whose bias can take the correction (see the module docstring)."""
    table = roles()
    weights, spec_of, adds = table["weights"], table["bias_correction"], table["bias_add"]
    out = []
    for op in graph.ops:
        spec, wspec = spec_of.get(op.type), weights.get(op.type)
        if spec is None or wspec is None or any(op.attrs.get(a, d) != d for a, d in spec.get("require", {}).items()):
            continue
        ops = op.operands
        x = ops[spec["input"]] if len(ops) > spec["input"] else None
        w = ops[wspec["weight"][0]] if len(ops) > wspec["weight"][0] else None
        if x is None or x.is_const or x.shape is None or not _float_const(w) or w.shape is None or len(w.shape) < 2:
            continue
        if len(w.shape) != 2 and not spec.get("kernel"):
            continue  # a batch of matrices: each has its own outputs, no one bias
        out_axis = axis_of(wspec["weight"][1], op) % len(w.shape)
        in_axis = axis_of(wspec["weight"][2], op) % len(w.shape)
        axis = spec["axis"] % len(x.shape)
        if x.shape[axis] != w.shape[in_axis]:
            continue
        channels = w.shape[out_axis]
        bias = None
        at = wspec.get("bias")
        if at is not None and len(ops) > at and _float_const(ops[at]):
            bias = ops[at]
        elif at is None and op.type in adds and len(op.results) == 1:
            r = op.results[0]
            if r.use_count == 1 and not r.is_output and r.users[0][0].type == adds[op.type]:
                add = r.users[0][0]
                other = [v for v in add.operands if v is not r]
                if len(other) == 1 and _float_const(other[0]):
                    bias = other[0]
            if bias is not None and r.shape is not None and (not r.shape or r.shape[-1] != channels):
                bias = None  # the Add's constant broadcasts along the MatMul's output channels only
        if bias is None or bias.use_count != 1 or bias.shape is None or int(np.prod(bias.shape)) != channels or \
                (bias.shape and max(bias.shape) != channels):
            continue
        out.append(Site(op.name, x.name, axis, w.name, out_axis, in_axis, bias.name))
    return out


def correctable(graph: Graph) -> list[Site]:
    """The sites (`sites`) whose input is observed along one axis only and whose bias no other site
    shares: one mean a value, one correction a bias."""
    found = sites(graph)
    axes: dict[str, set[int]] = {}
    for s in found:
        axes.setdefault(s.input, set()).add(s.axis)
    biases = Counter(s.bias for s in found)
    return [s for s in found if len(axes[s.input]) == 1 and biases[s.bias] == 1]


def _rows(w: Any, i: int, j: int) -> np.ndarray:
    from qlower.graph.lazy import LazyArray

    return np.asarray(w.rows(i, j) if isinstance(w, LazyArray) else w[i:j], np.float32)


def shift(w_float: Value, w_quant: Value, site: Site, mean: np.ndarray) -> np.ndarray:
    """(W - Ŵ)·E[x] per output channel, float64, the weight read a slice of rows at a time."""
    shape = tuple(w_float.shape)
    if len(shape) != 2:  # a convolution's kernel: small, whole; the spatial taps sum over each input
        d = np.asarray(w_float.data, np.float64) - real_constant(w_quant).astype(np.float64)
        d = np.moveaxis(d, (site.out_axis, site.in_axis), (0, 1)).reshape(shape[site.out_axis], shape[site.in_axis], -1)
        return d.sum(axis=2) @ mean
    out = np.zeros(shape[site.out_axis], np.float64)
    step = max(1, ROWS_BYTES // max(1, shape[1] * 8))
    for i in range(0, shape[0], step):
        j = min(shape[0], i + step)
        d = _rows(w_float.data, i, j).astype(np.float64) - real_constant(w_quant, (i, j)).astype(np.float64)
        if site.out_axis == 0:  # rows are output channels
            out[i:j] = d @ mean
        else:  # rows are inputs
            out += mean[i:j] @ d
    return out


def corrections(graph: Graph, quantized: Graph, found: list[Site],
                seen: Mapping[str, RangeObserver]) -> dict[str, np.ndarray]:
    """bias name → what to add to it: `graph` holds the float weights, `quantized` the fixed-point ones
    (the weights-first pass), `seen` the input means calibration kept."""
    out: dict[str, np.ndarray] = {}
    for site in found:
        obs = seen.get(site.input)
        mean = None if obs is None else obs.feature_mean(site.axis)
        w, wq = graph.value(site.weight), quantized.value(site.weight)
        if mean is None or wq.quant is None:
            continue
        out[site.bias] = shift(w, wq, site, mean)
    return out
