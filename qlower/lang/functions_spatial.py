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


def _eye(n: int, dt: str) -> np.ndarray:
    if n < 1:
        raise EvalError(f"no identity matrix of size {n}")
    return np.eye(int(n), dtype=np.dtype(dt))


def _tile_tensor(t: Any, reps: list[int]) -> np.ndarray:
    a = np.asarray(t)
    if len(reps) != a.ndim or any(int(r) < 1 for r in reps):
        raise EvalError(f"tile_tensor: repeats {reps} for a rank-{a.ndim} tensor")
    return np.tile(a, [int(r) for r in reps])


SPATIAL_FUNCTIONS: tuple[Function, ...] = (
    Function("pool_divisors", ("list[int]", "list[int]", "list[int]", "list[int]", "list[list[int]]", "list[int]",
                               "bool"), "tensor", _pool_divisors,
             doc="[1, 1, *out] float32 reciprocal tap counts of average-pooling windows (spatial, kernel, "
                 "strides, dilations, pads, out, count_include_pad)"),
    Function("affine_base_grid", ("list[int]", "bool"), "tensor", _affine_base_grid,
             doc="[prod(sizes), n + 1] rows (x, y[, z], 1) of ONNX AffineGrid's base grid"),
    Function("eye", ("int", "dtype"), "tensor", _eye, doc="[n, n] identity matrix"),
    Function("tile_tensor", ("tensor", "list[int]"), "tensor", _tile_tensor,
             doc="static data repeated along each dim (numpy tile)"),
)
