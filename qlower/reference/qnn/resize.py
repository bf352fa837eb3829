"""Resize (N-d, channels-last), ResizeBilinear and ResizeNearestNeighbor.

Each spatial axis is resampled separately: a coordinate transform maps an
output index to a source coordinate, then nearest, linear or cubic taps with
weights are gathered. Resize follows ONNX Resize (its op definition cites it;
note that the definition's formula names x_in/x_out the other way round).
ResizeBilinear/NearestNeighbor follow TensorFlow's resize ops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import declared_shape, finish, need, p_bool, p_float, p_int
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]
Taps = tuple[np.ndarray, np.ndarray]  # indices [out, taps], weights [out, taps]

HALF_PIXEL, PYTORCH_HALF_PIXEL, ALIGN_CORNERS, ASYMMETRIC = range(4)
NEAREST, LINEAR, CUBIC = range(3)
ROUND_PREFER_FLOOR, ROUND_PREFER_CEIL, FLOOR, CEIL = range(4)


def source_coords(mode: int, n_in: int, n_out: int) -> np.ndarray:
    """Source coordinate of every output index (ONNX coordinate_transformation_mode)."""
    x, scale = np.arange(n_out, dtype=np.float64), n_out / n_in
    if mode == HALF_PIXEL:
        return (x + 0.5) / scale - 0.5
    if mode == PYTORCH_HALF_PIXEL:
        return (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if mode == ALIGN_CORNERS:
        return x * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    if mode == ASYMMETRIC:
        return x / scale
    raise KernelError(f"Resize: unknown transformation_mode {mode}")


def nearest_taps(src: np.ndarray, n_in: int, rounding: int) -> Taps:
    if rounding == ROUND_PREFER_FLOOR:
        idx = np.ceil(src - 0.5)
    elif rounding == ROUND_PREFER_CEIL:
        idx = np.floor(src + 0.5)
    elif rounding == FLOOR:
        idx = np.floor(src)
    elif rounding == CEIL:
        idx = np.ceil(src)
    else:
        raise KernelError(f"Resize: unknown nearest_mode {rounding}")
    idx = np.clip(idx, 0, n_in - 1).astype(np.int64)[:, None]
    return idx, np.ones_like(idx, dtype=np.float64)


def linear_taps(src: np.ndarray, n_in: int) -> Taps:
    """Two taps; the coordinate is clamped to the input, matching edge replication."""
    src = np.clip(src, 0.0, n_in - 1)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    return np.stack([lo, hi], 1), np.stack([1.0 - frac, frac], 1)


def cubic_taps(src: np.ndarray, n_in: int, a: float, exclude_outside: bool) -> Taps:
    """Four Keys-cubic taps at floor−1..floor+2; outside taps replicate the edge,
    or are dropped and the rest renormalised when exclude_outside."""
    base = np.floor(src).astype(np.int64)
    t = src - base
    dist = np.stack([1 + t, t, 1 - t, 2 - t], 1)
    ad = np.abs(dist)
    w = np.where(ad <= 1, ((a + 2) * ad - (a + 3)) * ad * ad + 1,
                 np.where(ad < 2, ((a * ad - 5 * a) * ad + 8 * a) * ad - 4 * a, 0.0))
    idx = base[:, None] + np.arange(-1, 3)[None, :]
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        w = w / w.sum(axis=1, keepdims=True)
    return np.clip(idx, 0, n_in - 1), w


def resample(x: np.ndarray, axis: int, taps: Taps) -> np.ndarray:
    idx, w = taps
    g = np.take(x, idx, axis=axis)  # axis becomes (out, taps)
    shape = [1] * g.ndim
    shape[axis], shape[axis + 1] = w.shape
    return np.sum(g * w.reshape(shape), axis=axis + 1)


def _spatial_axes(x: np.ndarray, out: OutSpec, op: str) -> list[tuple[int, int, int]]:
    shape = declared_shape(out, op)
    if len(shape) != x.ndim or shape[0] != x.shape[0] or shape[-1] != x.shape[-1]:
        raise KernelError(f"{op} keeps batch and channel: input {list(x.shape)}, output {list(shape)}")
    return [(a, x.shape[a], shape[a]) for a in range(1, x.ndim - 1)]


def resize(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x = need(inputs[0], "in[0]").astype(np.float64)
    mode = p_int(params, "transformation_mode", HALF_PIXEL)
    interp = p_int(params, "interpolation_mode", NEAREST)
    for axis, n_in, n_out in _spatial_axes(x, outs[0], "Resize"):
        src = source_coords(mode, n_in, n_out)
        if interp == NEAREST:
            taps = nearest_taps(src, n_in, p_int(params, "nearest_mode", ROUND_PREFER_FLOOR))
        elif interp == LINEAR:
            taps = linear_taps(src, n_in)
        elif interp == CUBIC:
            a, exclude = p_float(params, "cubic_coeff", -0.75), p_bool(params, "exclude_outside", False)
            taps = cubic_taps(src, n_in, a, exclude)
        else:
            raise KernelError(f"Resize: unknown interpolation_mode {interp}")
        x = resample(x, axis, taps)
    return [finish(x, outs[0])]


def _tf_flags(params: Params, op: str) -> tuple[bool, bool]:
    align, half = p_bool(params, "align_corners", False), p_bool(params, "half_pixel_centers", False)
    if align and half:
        raise KernelError(f"{op}: align_corners and half_pixel_centers cannot both be true")
    return align, half


def resize_bilinear(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """TensorFlow resize_bilinear: align_corners → ALIGN_CORNERS, half_pixel_centers
    → HALF_PIXEL, neither → ASYMMETRIC; edges clamp."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    align, half = _tf_flags(params, "ResizeBilinear")
    if p_bool(params, "antialias", False):
        raise KernelError("ResizeBilinear: antialias has no reference kernel")
    mode = ALIGN_CORNERS if align else HALF_PIXEL if half else ASYMMETRIC
    for axis, n_in, n_out in _spatial_axes(x, outs[0], "ResizeBilinear"):
        x = resample(x, axis, linear_taps(source_coords(mode, n_in, n_out), n_in))
    return [finish(x, outs[0])]


def resize_nearest(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """TensorFlow resize_nearest_neighbor: align_corners rounds (halves away from
    zero) x·(in−1)/(out−1); half_pixel_centers takes floor((x+0.5)·in/out);
    otherwise floor(x·in/out); clamped to the input."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    align, half = _tf_flags(params, "ResizeNearestNeighbor")
    for axis, n_in, n_out in _spatial_axes(x, outs[0], "ResizeNearestNeighbor"):
        o = np.arange(n_out, dtype=np.float64)
        if align:
            src = np.floor(o * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0) + 0.5)
        elif half:
            src = np.floor((o + 0.5) * (n_in / n_out))
        else:
            src = np.floor(o * (n_in / n_out))
        idx = np.clip(src, 0, n_in - 1).astype(np.int64)
        x = np.take(x, idx, axis=axis)
    return [finish(x, outs[0])]


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "Resize": resize,
    "ResizeBilinear": resize_bilinear,
    "ResizeNearestNeighbor": resize_nearest,
})
