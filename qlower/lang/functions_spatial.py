"""Built-in .qpat functions for spatial ops that lower to fixed arithmetic on static tables:
pooling window counts (average pooling as a window sum times a constant), the base grid of
an affine sampling grid, identity filters (Col2Im as a transposed convolution) and tiled
static data. Part of the built-in table (`builtin_functions`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlower.lang.functions import EvalError, Function


def _pool_divisors(spatial: list[int], kernel: list[int], strides: list[int], dilations: list[int],
                   pads: list[list[int]], out: list[int], count_pad: bool) -> np.ndarray:
    """[1, 1, *out] float32: 1 / the number of taps each pooling window averages (ONNX AveragePool).

    A tap counts when it lies in the input, or with `count_pad` in the input or its explicit
    padding; taps past the padding (ceil-mode windows) never count.
    """
    n = len(spatial)
    if not (len(kernel) == len(strides) == len(dilations) == len(pads) == len(out) == n):
        raise EvalError(f"pool_divisors: {n} spatial dims but kernel {kernel}, strides {strides}, "
                        f"dilations {dilations}, pads {pads}, out {out}")
    per_dim = []
    for size, k, s, d, (b, e), o in zip(spatial, kernel, strides, dilations, pads, out):
        extra = (int(o) - 1) * int(s) + (int(k) - 1) * int(d) + 1 - (int(size) + int(b) + int(e))
        if extra >= 2:
            # onnx.reference then shifts average-pooling windows (it splits the ceil-mode padding
            # between both ends) while its MaxPool does not: no one answer to reproduce.
            raise EvalError(f"average pooling whose ceil-mode windows reach {extra} past the padding "
                            "is not lowered: ONNX's reference shifts such windows, runtimes do not")
        lo, hi = (-int(b), int(size) + int(e)) if count_pad else (0, int(size))
        starts = np.arange(int(o)) * int(s) - int(b)
        taps = starts[:, None] + np.arange(int(k))[None, :] * int(d)
        per_dim.append(((taps >= lo) & (taps < hi)).sum(axis=1))
    counts = np.ones(out, dtype=np.float64)
    for i, c in enumerate(per_dim):
        counts = counts * c.reshape([-1 if j == i else 1 for j in range(n)])
    if np.any(counts == 0):
        raise EvalError("a pooling window covers no input element")
    return (1.0 / counts).reshape([1, 1, *out]).astype(np.float32)


def _affine_base_grid(sizes: list[int], align_corners: bool) -> np.ndarray:
    """[prod(sizes), n + 1] float32 rows (x, y[, z], 1) of ONNX AffineGrid's normalized base grid.

    `sizes` are the spatial sizes ([H, W] or [D, H, W]); x runs along the last one. Row-major
    over the sizes, so the product with theta reshapes to the grid [N, *sizes, n].
    """
    axes = []
    for size in sizes:
        size = int(size)
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, size) if size > 1 else np.zeros(1))
        else:
            axes.append((2.0 * np.arange(size) + 1.0) / size - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(int(np.prod(sizes)))]
    return np.stack(cols, axis=1).astype(np.float32)


def _kernel_taps(out: list[int], kernel: list[int], strides: list[int], pads: list[int],
                 dilations: list[int]) -> list[np.ndarray]:
    """[ys, xs], each [1, kh·kw, oh, ow] float32: where each kernel tap of each output position of a
    2-D convolution reads the input (before any deformable offset), padding included."""
    (oh, ow), (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (
        [int(v) for v in a] for a in (out, kernel, strides, pads[:2], dilations))
    i, j = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
    ys = np.arange(oh)[None, :, None] * sh - ph + (i.reshape(-1) * dh)[:, None, None]
    xs = np.arange(ow)[None, None, :] * sw - pw + (j.reshape(-1) * dw)[:, None, None]
    shape = [1, kh * kw, oh, ow]
    return [np.broadcast_to(ys, shape[1:]).reshape(shape).astype(np.float32),
            np.broadcast_to(xs, shape[1:]).reshape(shape).astype(np.float32)]


def _eye(n: int, dt: str) -> np.ndarray:
    if n < 1:
        raise EvalError(f"no identity matrix of size {n}")
    return np.eye(int(n), dtype=np.dtype(dt))


def _ints(t: Any) -> list[int]:
    return [int(v) for v in np.asarray(t).reshape(-1)]


def _tile_tensor(t: Any, reps: list[int]) -> np.ndarray:
    a = np.asarray(t)
    if len(reps) != a.ndim or any(int(r) < 1 for r in reps):
        raise EvalError(f"tile_tensor: repeats {reps} for a rank-{a.ndim} tensor")
    return np.tile(a, [int(r) for r in reps])


def _cubic(ratio: float, scale: float, a: float, antialias: bool) -> np.ndarray:
    if antialias:
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        x = np.abs(scale * (np.arange(start, 2 - start) - ratio))
        c = np.where(x <= 1, (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1,
                     np.where(x < 2, a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a, 0.0))
        return c / c.sum()
    r1, r2 = ratio + 1, 2 - ratio
    return np.array([((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
                     ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
                     ((a + 2) * (1 - ratio) - (a + 3)) * (1 - ratio) * (1 - ratio) + 1,
                     ((a * r2 - 5 * a) * r2 + 8 * a) * r2 - 4 * a])


def _linear(ratio: float, scale: float, antialias: bool) -> np.ndarray:
    if antialias:
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        c = np.clip(1 - np.abs((np.arange(start, 2 - start) - ratio) * scale), 0, 1)
        return c / c.sum()
    return np.array([1 - ratio, ratio])


def _nearest(ratio: float, mode: str) -> np.ndarray:
    if float(ratio).is_integer():
        return np.array([0.0, 1.0])
    table = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False, "ceil": True}
    if mode not in table:
        raise EvalError(f"unknown nearest_mode {mode}")
    up = float(table[mode])
    return np.array([1.0 - up, up])


def _source_coords(ctm: str, size: int, out: int, scale: float, roi: list[float]) -> np.ndarray:
    """ONNX Resize's coordinate transformation: output index → input coordinate.

    ONNX holds roi as float32, and its reference computes the roi terms in float32 (the
    rest in float64): the same here, so a coordinate on a rounding tie falls on the same side."""
    y = np.arange(out, dtype=np.float64)
    width = scale * size
    if ctm == "align_corners":
        return np.zeros(out) if width == 1 else y * (size - 1) / (width - 1)
    if ctm == "asymmetric":
        return y / scale
    if ctm == "tf_crop_and_resize":
        lo, hi = np.float32(roi[0]), np.float32(roi[1])
        x = np.full(out, float((hi - lo) * (size - 1) / 2)) if width == 1 else \
            y * float(hi - lo) * (size - 1) / (width - 1)
        return x + float(lo * (size - 1))
    if ctm == "pytorch_half_pixel":
        return np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    if ctm == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        return size / 2 * (1 - out / width) + (y + 0.5) / scale - 0.5
    raise EvalError(f"unknown coordinate_transformation_mode {ctm}")


def _resize_weights(size: int, out: int, scale: float, roi: list[float], mode: str, ctm: str, cubic_a: float,
                    exclude_outside: bool, antialias: bool, nearest_mode: str, extrapolation: float) -> list[np.ndarray]:
    """[M [out, size], b [out]] float32 with resize(x) = M·x + b along one axis (ONNX Resize).

    Resizing is separable, so an N-d Resize is one such product per axis. `b` holds the
    extrapolation value on the rows tf_crop_and_resize maps outside the input (M is 0 there).
    """
    size, out = int(size), int(out)
    if size < 1 or out < 1 or scale <= 0:
        raise EvalError(f"no resize weights from {size} to {out} (scale {scale})")
    if abs(float(scale) - 1.0) <= 1e-9 and out == size and [float(v) for v in roi] in ([], [0.0, 1.0]):
        return [np.eye(size, dtype=np.float32), np.zeros(size, dtype=np.float32)]  # ONNX skips such an axis
    x = _source_coords(ctm, size, out, float(scale), [float(v) for v in roi])
    m = np.zeros((out, size), dtype=np.float64)
    for j, xo in enumerate(x):
        base = int(np.floor(xo))
        ratio = 1.0 if xo == base else xo - base
        if mode == "nearest":
            c = _nearest(ratio, nearest_mode)
        elif mode == "linear":
            c = _linear(ratio, float(scale), antialias)
        elif mode == "cubic":
            c = _cubic(ratio, float(scale), float(cubic_a), antialias)
        else:
            raise EvalError(f"unknown resize mode {mode}")
        n = len(c)
        pad = int(np.ceil(n / 2))
        xp = xo + pad
        p = int(np.floor(xp))
        frac = xp - p
        if n % 2 == 0:
            start = p + (-(n // 2) if frac == 0 else -(n // 2) + 1)
        else:
            start = p + (-((n - 1) // 2) if frac <= 0.5 else -((n - 1) // 2) + 1)
        idx = start + np.arange(n) - pad
        if exclude_outside:
            # A coordinate on a tap gives exact zeros as rounding noise (1e-16): left after the taps
            # outside are dropped, normalising would blow that noise up to weights like [-0.2, 1.2].
            c = np.where((idx < 0) | (idx >= size) | (np.abs(c) < 1e-12), 0.0, c)
            c = c / (c.sum() if c.sum() != 0 else 1.0)
        np.add.at(m[j], np.clip(idx, 0, size - 1), c)
    b = np.zeros(out, dtype=np.float64)
    if ctm == "tf_crop_and_resize":
        outside = (x < 0) | (x > size - 1)
        m[outside] = 0.0
        b[outside] = float(extrapolation)
    return [m.astype(np.float32), b.astype(np.float32)]


def _resize_nearest_indices(size: int, out: int, scale: float, roi: list[float], ctm: str,
                            nearest_mode: str) -> np.ndarray:
    """[out] int32: the input index each output reads along one axis of a nearest ONNX Resize (its
    weights are one-hot rows, so the resize is a Gather)."""
    if ctm == "tf_crop_and_resize":
        raise EvalError("tf_crop_and_resize extrapolates outside the input: not a gather")
    m = _resize_weights(size, out, scale, roi, "nearest", ctm, -0.75, False, False, nearest_mode, 0.0)[0]
    return np.argmax(m, axis=1).astype(np.int32)


def _resize_axes(in_shape: list[int], out_shape: list[int], scales: list[float], sizes: list[int], axes: list[int],
                 roi: list[float], policy: str) -> list[list[float]]:
    """Per dim [scale, roi_lo, roi_hi] of an ONNX Resize: given scales (of `axes`, or of every dim), else
    the requested sizes (of `axes`; the output shape when none are known) over the input's, one shared
    ratio under keep_aspect_ratio_policy not_larger / not_smaller. The ratio comes from the requested
    sizes, not the output: not_smaller asks [1, 3] of [2, 4] and gets scale 0.75 on both axes."""
    r = len(in_shape)
    ax = [int(a) % r for a in axes] if axes else list(range(r))
    full = [1.0] * r
    if scales:
        if len(scales) != len(ax):
            raise EvalError(f"Resize has {len(scales)} scales for {len(ax)} axes")
        for a, v in zip(ax, scales):
            full[a] = float(v)
    else:
        if sizes and len(sizes) != len(ax):
            raise EvalError(f"Resize has {len(sizes)} sizes for {len(ax)} axes")
        wanted = [int(v) for v in sizes] if sizes else [int(out_shape[a]) for a in ax]
        ratios = [o / int(in_shape[a]) for o, a in zip(wanted, ax)]
        if policy in ("not_larger", "not_smaller"):
            ratios = [min(ratios) if policy == "not_larger" else max(ratios)] * len(ax)
        for a, v in zip(ax, ratios):
            full[a] = v
    lohi = [[0.0, 1.0] for _ in range(r)]
    if roi:
        if len(roi) != 2 * len(ax):
            raise EvalError(f"Resize roi {roi} does not have a start and an end per axis")
        for i, a in enumerate(ax):
            lohi[a] = [float(roi[i]), float(roi[len(ax) + i])]
    return [[full[a]] + lohi[a] for a in range(r)]


def _pool_taps(spatial: list[int], kernel: list[int], strides: list[int], dilations: list[int],
               pads: list[list[int]], out: list[int]) -> list[np.ndarray]:
    """Per dim [out, k] int64 coordinates of each window tap along that dim (padding included)."""
    n = len(spatial)
    if not (len(kernel) == len(strides) == len(dilations) == len(pads) == len(out) == n):
        raise EvalError(f"pooling window: {n} spatial dims but kernel {kernel}, strides {strides}, "
                        f"dilations {dilations}, pads {pads}, out {out}")
    return [np.arange(int(o))[:, None] * int(s) - int(p[0]) + np.arange(int(k))[None, :] * int(d)
            for k, s, d, p, o in zip(kernel, strides, dilations, pads, out)]


def _pool_empty_window(spatial: list[int], kernel: list[int], strides: list[int], dilations: list[int],
                       pads: list[list[int]], out: list[int]) -> list[int]:
    """The first output position (row-major) whose pooling window holds no input element, or [].

    Such a window (pads past the kernel, dilated taps that skip the input) has no maximum: ONNX
    leaves it undefined and its implementations disagree, so a rule refuses it."""
    taps = _pool_taps(spatial, kernel, strides, dilations, pads, out)
    n = len(spatial)
    empty = np.zeros([int(o) for o in out], dtype=bool)
    for i, (t, size) in enumerate(zip(taps, spatial)):
        shape = [1] * n
        shape[i] = t.shape[0]
        empty = empty | ~((t >= 0) & (t < int(size))).any(axis=1).reshape(shape)
    hits = np.argwhere(empty)
    return [int(v) for v in hits[0]] if len(hits) else []


def _pool_out_shape(spatial: list[int], kernel: list[int], strides: list[int], dilations: list[int],
                    pads: list[list[int]], ceil_mode: bool) -> list[int]:
    """Pooling windows per spatial dim as onnxruntime, onnx.reference and ONNX shape inference from
    opset 22 count them: a ceil-mode window that would start in the end padding is dropped
    (inference for older opsets counts it)."""
    out = []
    for size, k, s, d, (b, e) in zip(spatial, kernel, strides, dilations, pads):
        span = int(size) + int(b) + int(e) - (int(k) - 1) * int(d) - 1
        n = (-(-span // int(s)) if ceil_mode else span // int(s)) + 1
        out.append(n - 1 if ceil_mode and (n - 1) * int(s) >= int(size) + int(b) else n)
    return out


def _pool_fit_pads(pads: list[list[int]], spatial: list[int], kernel: list[int], strides: list[int],
                   dilations: list[int], out: list[int]) -> list[list[int]]:
    """[begin, end] pads per dim with which floor-rounded pooling gives exactly `out` windows: the
    end padding extended for ceil mode, or cut where ceil mode drops a window that floor rounding
    of the given padding would count (one starting in the end padding)."""
    fitted = []
    for (b, _e), size, k, s, d, o in zip(pads, spatial, kernel, strides, dilations, out):
        eff = (int(k) - 1) * int(d) + 1
        lo = (int(o) - 1) * int(s) + eff - int(size) - int(b)
        hi = int(o) * int(s) + eff - int(size) - int(b) - 1
        if hi < 0:
            raise EvalError(f"no end padding gives {o} pooling windows over {size} (begin padding {b})")
        fitted.append([int(b), max(lo, 0)])
    return fitted


def _pool_window_tables(spatial: list[int], kernel: list[int], strides: list[int], dilations: list[int],
                        pads: list[list[int]], out: list[int]) -> list[np.ndarray]:
    """[taps, valid, hit, miss], each [P, K] (P output positions, K window taps, both row-major).

    taps (int32): each tap's row-major flat position in its input plane (0 for a padded tap, which
    `valid` (bool) masks out); hit / miss (int32): argmax keys, distinct within a window, of a valid
    tap that does / does not equal the window maximum (2K − k / K − k, padded taps 0), so the
    largest key is the first maximal tap whatever order Argmax breaks ties in."""
    taps = _pool_taps(spatial, kernel, strides, dilations, pads, out)
    n = len(spatial)
    flat = np.zeros([1] * (2 * n), dtype=np.int64)
    valid = np.ones([1] * (2 * n), dtype=bool)
    stride = 1
    for i in reversed(range(n)):
        t = taps[i]
        shape = [1] * (2 * n)
        shape[i], shape[n + i] = t.shape
        inside = (t >= 0) & (t < int(spatial[i]))
        flat = flat + np.where(inside, t, 0).reshape(shape) * stride
        valid = valid & inside.reshape(shape)
        stride *= int(spatial[i])
    full = [int(o) for o in out] + [int(k) for k in kernel]
    p, k = int(np.prod(full[:n])), int(np.prod(full[n:]))
    flat = np.broadcast_to(flat, full).reshape(p, k)
    valid = np.broadcast_to(valid, full).reshape(p, k)
    rank = np.arange(k)[None, :]
    hit = np.where(valid, 2 * k - rank, 0)
    miss = np.where(valid, k - rank, 0)
    return [flat.astype(np.int32), valid, hit.astype(np.int32), miss.astype(np.int32)]


def _flat_strides(spatial: list[int], storage_order: int) -> list[int]:
    """How far one step along each spatial dim moves a flat index (0 row-major, 1 column-major)."""
    dims = [int(v) for v in spatial]
    order = range(len(dims)) if int(storage_order) == 1 else reversed(range(len(dims)))
    out, step = [0] * len(dims), 1
    for i in order:
        out[i], step = step, step * dims[i]
    return out


def _pool_index_offsets(spatial: list[int], kernel: list[int], dilations: list[int], storage_order: int) -> np.ndarray:
    """[K] int32: how far window tap k (row-major) lies from the window's first tap in ONNX
    MaxPool's flat Indices (any number of spatial dims; storage_order 1: column-major)."""
    fs = _flat_strides(spatial, storage_order)
    grids = np.meshgrid(*[np.arange(int(k)) * int(d) for k, d in zip(kernel, dilations)], indexing="ij")
    off = sum(g * f for g, f in zip(grids, fs))
    return np.asarray(off).reshape(-1).astype(np.int32)


def _pool_index_base(planes: int, spatial: list[int], strides: list[int], pads: list[list[int]], out: list[int],
                     storage_order: int) -> list[np.ndarray]:
    """[planes [planes, 1], first [1, P]] int32, whose sum is ONNX MaxPool's flat Index of each window's
    first tap (it may lie in the padding; the tap that wins never does): plane p (= n·C + c) starts
    at p·prod(spatial). Two broadcast parts rather than their [planes, P] sum: less static data."""
    fs = _flat_strides(spatial, storage_order)
    grids = np.meshgrid(*[np.arange(int(o)) * int(s) - int(p[0]) for o, s, p in zip(out, strides, pads)],
                        indexing="ij")
    first = np.asarray(sum(g * f for g, f in zip(grids, fs))).reshape(1, -1)
    size = int(np.prod([int(v) for v in spatial]))
    if int(planes) * size >= 2**31:
        raise EvalError("MaxPool Indices past 2^31 do not fit int32")
    return [(np.arange(int(planes)) * size).reshape(-1, 1).astype(np.int32), first.astype(np.int32)]


SPATIAL_FUNCTIONS: tuple[Function, ...] = (
    Function("pool_fit_pads", ("list[list[int]]", "list[int]", "list[int]", "list[int]", "list[int]", "list[int]"),
             "list[list[int]]", _pool_fit_pads,
             doc="[begin, end] pads giving exactly `out` floor-rounded pooling windows (pads, spatial, kernel, "
                 "strides, dilations, out)"),
    Function("pool_out_shape", ("list[int]", "list[int]", "list[int]", "list[int]", "list[list[int]]", "bool"),
             "list[int]", _pool_out_shape,
             doc="pooling windows per spatial dim, ceil-mode windows starting in the end padding dropped (spatial, "
                 "kernel, strides, dilations, pads, ceil_mode)"),
    Function("pool_empty_window", ("list[int]", "list[int]", "list[int]", "list[int]", "list[list[int]]", "list[int]"),
             "list[int]", _pool_empty_window,
             doc="first output position whose pooling window holds no input element, or [] (spatial, kernel, "
                 "strides, dilations, pads, out)"),
    Function("pool_window_tables", ("list[int]", "list[int]", "list[int]", "list[int]", "list[list[int]]",
                                    "list[int]"), "list[tensor]", _pool_window_tables,
             doc="[taps, valid, hit, miss] [P, K]: flat input position of each window tap, whether it is in the "
                 "input, and first-maximum argmax keys (spatial, kernel, strides, dilations, pads, out)"),
    Function("pool_index_offsets", ("list[int]", "list[int]", "list[int]", "int"), "tensor", _pool_index_offsets,
             doc="[K] int32 offsets of window taps in MaxPool's flat Indices, any rank (spatial, kernel, dilations, "
                 "storage_order)"),
    Function("pool_index_base", ("int", "list[int]", "list[int]", "list[list[int]]", "list[int]", "int"),
             "list[tensor]", _pool_index_base,
             doc="[[planes, 1], [1, P]] int32 whose sum is the flat Index of each window's first tap, any rank "
                 "(planes, spatial, strides, pads, out, storage_order)"),
    Function("pool_divisors", ("list[int]", "list[int]", "list[int]", "list[int]", "list[list[int]]", "list[int]",
                               "bool"), "tensor", _pool_divisors,
             doc="[1, 1, *out] float32 reciprocal tap counts of average-pooling windows (spatial, kernel, "
                 "strides, dilations, pads, out, count_include_pad)"),
    Function("affine_base_grid", ("list[int]", "bool"), "tensor", _affine_base_grid,
             doc="[prod(sizes), n + 1] rows (x, y[, z], 1) of ONNX AffineGrid's base grid"),
    Function("resize_weights", ("int", "int", "number", "list[number]", "str", "str", "number", "bool", "bool", "str",
                                "number"), "list[tensor]", _resize_weights,
             doc="[M, b] float32 with ONNX Resize along one axis = M·x + b (size, out, scale, roi [lo, hi], mode, "
                 "coordinate transform, cubic_coeff_a, exclude_outside, antialias, nearest_mode, extrapolation)"),
    Function("resize_nearest_indices", ("int", "int", "number", "list[number]", "str", "str"), "tensor",
             _resize_nearest_indices,
             doc="[out] int32 input index per output of a nearest ONNX Resize along one axis (size, out, scale, "
                 "roi [lo, hi], coordinate transform, nearest_mode)"),
    Function("resize_axes", ("list[int]", "list[int]", "list[number]", "list[int]", "list[int]", "list[number]",
                             "str"),
             "list[list[float]]", _resize_axes,
             doc="per dim [scale, roi_lo, roi_hi] of an ONNX Resize (input and output shapes, scales, sizes, axes, "
                 "roi, keep_aspect_ratio_policy)"),
    Function("upper", ("str",), "str", str.upper, doc="the string in upper case (ONNX mode names as QNN enum names)"),
    Function("kernel_taps", ("list[int]", "list[int]", "list[int]", "list[int]", "list[int]"), "list[tensor]",
             _kernel_taps, doc="[ys, xs] [1, kh·kw, oh, ow]: input positions of each tap of a 2-D convolution "
                               "(out, kernel, strides, pads, dilations)"),
    Function("eye", ("int", "dtype"), "tensor", _eye, doc="[n, n] identity matrix"),
    Function("ints", ("tensor",), "list[int]", _ints, doc="static integer data (a shape input) as a list"),
    Function("tile_tensor", ("tensor", "list[int]"), "tensor", _tile_tensor,
             doc="static data repeated along each dim (numpy tile)"),
)
