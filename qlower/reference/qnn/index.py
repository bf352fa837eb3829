"""Index-driven kernels: Gather, GatherElements, GatherNd, ScatterElements,
ScatterNd, OneHot, NonZero, TopK, Argmax/Argmin, CumulativeSum."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import (
    axis_in, compute_dtype, finish, finish_all, need, p_bool, p_float, p_int,
)
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]


def _indices(x: np.ndarray | None, what: str, dim: int, *, wrap: bool) -> np.ndarray:
    """Integer indices checked against [-dim, dim) (wrap) or [0, dim), made non-negative."""
    idx = need(x, what).astype(np.int64)
    lo = -dim if wrap else 0
    if idx.size and (idx.min() < lo or idx.max() >= dim):
        raise KernelError(f"{what} has an index outside [{lo}, {dim - 1}]")
    return np.where(idx < 0, idx + dim, idx)


def gather(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """out = take(in[0], in[1], axis); negative indices count from the end."""
    x = need(inputs[0], "in[0]")
    axis = axis_in(p_int(params, "axis"), x.ndim)
    idx = _indices(inputs[1], "in[1]", x.shape[axis], wrap=True)
    return [finish(np.take(x, idx, axis=axis), outs[0])]


def gather_elements(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x = need(inputs[0], "in[0]")
    axis = axis_in(p_int(params, "axis", 0), x.ndim)
    idx = _indices(inputs[1], "in[1]", x.shape[axis], wrap=True)
    if idx.ndim != x.ndim:
        raise KernelError(f"GatherElements indices rank {idx.ndim} differs from data rank {x.ndim}")
    if any(i > d for a, (i, d) in enumerate(zip(idx.shape, x.shape)) if a != axis):
        raise KernelError(f"GatherElements indices {list(idx.shape)} exceed data {list(x.shape)} off the axis")
    # out[i][j][k] = in[i][j][idx[i][j][k]] (axis 2): the output has the shape of the indices
    # (MasterOpDef), so the data is cut to the indices' extent off the axis, never broadcast.
    view = x[tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(idx.shape))]
    return [finish(np.take_along_axis(view, idx, axis=axis), outs[0])]


def _nd_positions(x_shape: tuple[int, ...], idx: np.ndarray, batch_dims: int) -> tuple[np.ndarray, ...]:
    """Index tuples addressing x for every row of idx (leading batch dims shared)."""
    depth = idx.shape[-1]
    if not 0 < depth <= len(x_shape) - batch_dims:
        raise KernelError(f"index depth {depth} exceeds data rank {len(x_shape)} minus batch_dims {batch_dims}")
    if tuple(idx.shape[:batch_dims]) != tuple(x_shape[:batch_dims]):
        raise KernelError(f"batch dims of indices {list(idx.shape[:batch_dims])} "
                          f"differ from data {list(x_shape[:batch_dims])}")
    bounds = np.array(x_shape[batch_dims:batch_dims + depth])
    if idx.size and ((idx < -bounds).any() or (idx >= bounds).any()):
        raise KernelError("GatherNd/ScatterNd index out of range")
    idx = np.where(idx < 0, idx + bounds, idx)
    batch = np.indices(idx.shape[:-1])[:batch_dims]
    return tuple(batch) + tuple(np.moveaxis(idx, -1, 0))


def gather_nd(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x, idx = need(inputs[0], "in[0]"), need(inputs[1], "in[1]").astype(np.int64)
    batch_dims = p_int(params, "batch_dims", 0)
    if not 0 <= batch_dims < min(x.ndim, idx.ndim):
        raise KernelError(f"batch_dims {batch_dims} must be < min(rank(in[0]), rank(in[1]))")
    return [finish(x[_nd_positions(x.shape, idx, batch_dims)], outs[0])]


SCATTER_REDUCTIONS = ("NONE", "ADD", "MUL", "MAX")


def _scatter(y: np.ndarray, pos: tuple[np.ndarray, ...], upd: np.ndarray, reduction: int) -> None:
    """Apply updates in index order so NONE lets the last duplicate win."""
    if reduction == 0:
        y[pos] = upd
    elif reduction == 1:
        np.add.at(y, pos, upd)
    elif reduction == 2:
        np.multiply.at(y, pos, upd)
    elif reduction == 3:
        np.maximum.at(y, pos, upd)
    else:
        raise KernelError(f"unknown scatter reduction {reduction}")


def scatter_elements(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x = need(inputs[0], "in[0]")
    upd = need(inputs[2], "in[2]")
    axis = axis_in(p_int(params, "axis", 0), x.ndim)
    idx = _indices(inputs[1], "in[1]", x.shape[axis], wrap=True)
    if idx.shape != upd.shape or idx.ndim != x.ndim:
        raise KernelError(f"ScatterElements indices {list(idx.shape)} and updates {list(upd.shape)} "
                          f"must have one shape of rank {x.ndim}")
    dt = compute_dtype(x, upd)
    y = x.astype(dt, copy=True)
    pos = list(np.indices(idx.shape))
    pos[axis] = idx
    _scatter(y, tuple(pos), upd.astype(dt), p_int(params, "reduction", 0))
    return [finish(y, outs[0])]


def scatter_nd(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x, idx, upd = need(inputs[0], "in[0]"), need(inputs[1], "in[1]").astype(np.int64), need(inputs[2], "in[2]")
    dt = compute_dtype(x, upd)
    y = x.astype(dt, copy=True)
    pos = _nd_positions(x.shape, idx, 0)
    expect = idx.shape[:-1] + x.shape[idx.shape[-1]:]
    if upd.shape != expect:
        raise KernelError(f"ScatterNd updates shape {list(upd.shape)}, expected {list(expect)}")
    _scatter(y, pos, upd.astype(dt), p_int(params, "reduction", 0))
    return [finish(y, outs[0])]


def one_hot(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Indices outside [0, depth) give an all-off row (as ONNX does)."""
    idx = need(inputs[0], "in[0]").astype(np.int64)
    depth = p_int(params, "depth")
    axis = p_int(params, "axis", idx.ndim)
    if not 0 <= axis <= idx.ndim:
        raise KernelError(f"OneHot axis {axis} out of range [0, {idx.ndim}]")
    on, off = p_float(params, "on_value", 1.0), p_float(params, "off_value", 0.0)
    hot = np.expand_dims(idx, -1) == np.arange(depth)
    y = np.where(hot, on, off)
    return [finish(np.moveaxis(y, -1, axis), outs[0])]


def non_zero(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """[M, N] coordinates of the non-zero elements, in row-major order."""
    return [finish(np.argwhere(need(inputs[0], "in[0]") != 0), outs[0])]


def top_k(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Sorted top k along the last axis. Equal values: the larger index comes
    first, as the op definition states (ONNX prefers the smaller)."""
    x = need(inputs[0], "in[0]")
    k, largest = p_int(params, "k"), p_bool(params, "largest", True)
    n = x.shape[-1]
    if not 0 < k <= n:
        raise KernelError(f"TopK k={k} out of range (1..{n})")
    pos = np.broadcast_to(np.arange(n), x.shape)
    key = -x.astype(np.float64) if largest else x.astype(np.float64)
    order = np.lexsort((-pos, key), axis=-1)[..., :k]
    return finish_all([np.take_along_axis(x, order, -1), order], outs)


def _arg(fn: Any) -> Kernel:
    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        x = need(inputs[0], "in[0]")
        axis = axis_in(p_int(params, "axis"), x.ndim)
        y = fn(x, axis=axis, keepdims=p_bool(params, "keep_dims", False))
        return [finish(y, outs[0])]
    kernel.__name__ = fn.__name__
    return kernel


def cumulative_sum(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x = need(inputs[0], "in[0]")
    axis = axis_in(p_int(params, "axis"), x.ndim)
    exclusive, reverse = p_bool(params, "exclusive", False), p_bool(params, "reverse", False)
    y = x.astype(compute_dtype(x))
    if reverse:
        y = np.flip(y, axis)
    c = np.cumsum(y, axis=axis)
    if exclusive:  # shift by one along axis, a zero first
        head = np.zeros_like(np.take(c, [0], axis=axis))
        c = np.concatenate([head, np.take(c, np.arange(c.shape[axis] - 1), axis=axis)], axis=axis)
    if reverse:
        c = np.flip(c, axis)
    return [finish(c, outs[0])]


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "Gather": gather,
    "GatherElements": gather_elements,
    "GatherNd": gather_nd,
    "ScatterElements": scatter_elements,
    "ScatterNd": scatter_nd,
    "OneHot": one_hot,
    "NonZero": non_zero,
    "TopK": top_k,
    "Argmax": _arg(np.argmax),
    "Argmin": _arg(np.argmin),
    "CumulativeSum": cumulative_sum,
})
