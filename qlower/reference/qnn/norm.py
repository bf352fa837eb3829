"""Normalization kernels: LayerNorm, RmsNorm, GroupNorm, InstanceNorm,
Batchnorm, L2Norm, Lrn. Statistics are computed in float64."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import axis_in, finish, need, p_float, p_int, p_ints, place_along
from qlower.reference.qnn.reduce import reduce_axes
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]


def _opt(inputs: Inputs, i: int) -> np.ndarray | None:
    return None if len(inputs) <= i or inputs[i] is None else np.asarray(inputs[i], dtype=np.float64)


def _affine(y: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None, axes: Sequence[int]) -> np.ndarray:
    if gamma is not None:
        y = y * place_along(gamma, axes, y.ndim, y.shape)
    if beta is not None:
        y = y + place_along(beta, axes, y.ndim, y.shape)
    return y


def layer_norm(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """(x − μ)/sqrt(σ² + ε)·γ + β with μ, σ² over `axes`; γ, β laid out along `axes`."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    axes = reduce_axes(params, x.ndim)
    eps = p_float(params, "epsilon", 1e-3)
    mu = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(x - mu), axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return [finish(_affine(y, _opt(inputs, 1), _opt(inputs, 2), axes), outs[0])]


def rms_norm(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """x/sqrt(mean(x²) + ε)·γ + β over `axes`."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    axes = reduce_axes(params, x.ndim)
    eps = p_float(params, "epsilon", 1e-6)
    y = x / np.sqrt(np.mean(np.square(x), axis=axes, keepdims=True) + eps)
    return [finish(_affine(y, _opt(inputs, 1), _opt(inputs, 2), axes), outs[0])]


def group_norm(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Channels-last: channel c belongs to group c // (C/G); statistics per (batch, group)."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    groups, eps = p_int(params, "group"), p_float(params, "epsilon")
    c = x.shape[-1]
    if groups < 1 or c % groups:
        raise KernelError(f"GroupNorm: {c} channels not divisible into {groups} groups")
    g = x.reshape(x.shape[0] if x.ndim > 1 else 1, -1, groups, c // groups)  # rank 1 is [channel]
    mu = g.mean(axis=(1, 3), keepdims=True)
    var = np.square(g - mu).mean(axis=(1, 3), keepdims=True)
    y = ((g - mu) / np.sqrt(var + eps)).reshape(x.shape)
    return [finish(_affine(y, _opt(inputs, 1), _opt(inputs, 2), (x.ndim - 1,)), outs[0])]


INSTANCE_REGIONS = ("ACROSS_SPATIAL", "ACROSS_CHANNEL", "ACROSS_ALL")


def instance_norm(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Channels-last instance norm. `region` picks the statistic axes (spatial,
    channel, or both); mode MU_SIGMA centres and (normalize_variance) scales,
    mode RMS divides by sqrt(mean(x²) + ε). The op definition writes the RMS
    statistic as a plain sum; the mean, as its name and RmsNorm use, is taken
    here. With normalize_variance false the output is x − μ, without γ/β."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    if x.ndim < 3:
        raise KernelError(f"InstanceNorm needs rank > 2, got {x.ndim}")
    eps = p_float(params, "epsilon", 1e-12)
    mode, region = p_int(params, "mode", 0), p_int(params, "region", 0)
    normalize = p_int(params, "normalize_variance", 1) != 0
    spatial = tuple(range(1, x.ndim - 1))
    axes = {0: spatial, 1: (x.ndim - 1,), 2: spatial + (x.ndim - 1,)}.get(region)
    if axes is None or mode not in (0, 1):
        raise KernelError(f"InstanceNorm: unknown mode {mode} / region {region}")
    if mode == 1:
        y = x / np.sqrt(np.mean(np.square(x), axis=axes, keepdims=True) + eps)
    else:
        mu = np.mean(x, axis=axes, keepdims=True)
        if not normalize:
            return [finish(x - mu, outs[0])]
        y = (x - mu) / np.sqrt(np.mean(np.square(x - mu), axis=axes, keepdims=True) + eps)
    gamma = need(inputs[1] if len(inputs) > 1 else None, "in[1] (gamma)").astype(np.float64)
    return [finish(_affine(y, gamma, _opt(inputs, 2), (x.ndim - 1,)), outs[0])]


def batchnorm(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """QNN's Batchnorm is the folded form: x·w + b per channel (last axis)."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    w = need(inputs[1], "in[1]").astype(np.float64)
    return [finish(_affine(x, w, _opt(inputs, 2), (x.ndim - 1,)), outs[0])]


def l2_norm(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """x / max(‖x‖₂, ε) over `axes` when given, else over the scalar `axis` (default 0)."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    axes = p_ints(params, "axes", ()) or (p_int(params, "axis", 0),)
    axes = tuple(axis_in(a, x.ndim) for a in axes)
    norm = np.sqrt(np.sum(np.square(x), axis=axes, keepdims=True))
    return [finish(x / np.maximum(norm, p_float(params, "epsilon", 1e-12)), outs[0])]


def _window_sum(sq: np.ndarray, axis: int, radius: int) -> np.ndarray:
    """Σ over [i − R, i + R] ∩ [0, n) along axis, via a prefix sum."""
    n = sq.shape[axis]
    c = np.concatenate([np.zeros_like(np.take(sq, [0], axis=axis)), np.cumsum(sq, axis=axis)], axis=axis)
    hi = np.minimum(np.arange(n) + radius + 1, n)
    lo = np.maximum(np.arange(n) - radius, 0)
    return np.take(c, hi, axis=axis) - np.take(c, lo, axis=axis)


def lrn(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """x / (bias + α·S)^β, S the square sum over a radius-R window (across the
    last axis, or within channel over H and W). α is not divided by the window size."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    alpha, beta = p_float(params, "alpha", 1.0), p_float(params, "beta", 0.5)
    bias, radius = p_float(params, "bias", 1.0), p_int(params, "radius")
    sq = np.square(x)
    if p_int(params, "region", 0) == 0:
        s = _window_sum(sq, x.ndim - 1, radius)
    else:
        if x.ndim != 4:
            raise KernelError("Lrn WITHIN_CHANNEL needs a 4D input")
        s = _window_sum(_window_sum(sq, 1, radius), 2, radius)
    return [finish(x / np.power(bias + alpha * s, beta), outs[0])]


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "LayerNorm": layer_norm,
    "RmsNorm": rms_norm,
    "GroupNorm": group_norm,
    "InstanceNorm": instance_norm,
    "Batchnorm": batchnorm,
    "L2Norm": l2_norm,
    "Lrn": lrn,
})
