"""Data-movement kernels that change shape or layout without arithmetic:
Reshape, Transpose, Tile, Concat, Split, Pack, UnPack, ExpandDims, Squeeze,
StridedSlice, Pad, Shape, ConstantOfShape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import (
    axis_in, declared_shape, finish, finish_all, need, p_array, p_float, p_int, p_ints, p_pairs,
)
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]


def reshape(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Static shapes only: the target is out[0]'s declared shape (in[1] is ignored, as in QNN)."""
    x, shape = need(inputs[0], "in[0]"), declared_shape(outs[0], "Reshape")
    if x.size != int(np.prod(shape, dtype=np.int64)):
        raise KernelError(f"cannot reshape {list(x.shape)} ({x.size} elements) to {list(shape)}")
    return [finish(x.reshape(shape), outs[0])]


def transpose(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x, perm = need(inputs[0], "in[0]"), p_ints(params, "perm")
    if sorted(perm) != list(range(x.ndim)):
        raise KernelError(f"perm {list(perm)} is not a permutation of 0..{x.ndim - 1}")
    return [finish(np.transpose(x, perm), outs[0])]


def tile(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x, reps = need(inputs[0], "in[0]"), p_ints(params, "multiples")
    if len(reps) != x.ndim:
        raise KernelError(f"multiples has {len(reps)} values for a rank-{x.ndim} input")
    return [finish(np.tile(x, reps), outs[0])]


def concat(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    xs = [need(x, f"in[{i}]") for i, x in enumerate(inputs)]
    axis = axis_in(p_int(params, "axis", xs[0].ndim - 1), xs[0].ndim)
    try:
        return [finish(np.concatenate(xs, axis=axis), outs[0])]
    except ValueError as exc:
        raise KernelError(f"Concat along axis {axis}: {exc}") from None


def split(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """split_index holds the start of every slice after the first."""
    x = need(inputs[0], "in[0]")
    axis = axis_in(p_int(params, "axis"), x.ndim)
    idx = p_ints(params, "split_index")
    if any(b <= a for a, b in zip(idx, idx[1:])) or any(not 0 < i < x.shape[axis] for i in idx):
        raise KernelError(f"split_index {list(idx)} must be increasing and inside (0, {x.shape[axis]})")
    return finish_all(np.split(x, idx, axis=axis), outs)


def pack(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    xs = [need(x, f"in[{i}]") for i, x in enumerate(inputs)]
    axis = p_int(params, "axis")
    if not 0 <= axis <= xs[0].ndim:
        raise KernelError(f"Pack axis {axis} out of range [0, {xs[0].ndim}]")
    return [finish(np.stack(xs, axis=axis), outs[0])]


def unpack(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x = need(inputs[0], "in[0]")
    axis = axis_in(p_int(params, "axis"), x.ndim)
    return finish_all([np.take(x, i, axis=axis) for i in range(x.shape[axis])], outs)


def expand_dims(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Inserts size-1 axes at `axes` (newer op sets) or at the scalar `axis`."""
    x = need(inputs[0], "in[0]")
    axes = p_ints(params, "axes", ()) or (p_int(params, "axis"),)
    rank = x.ndim + len(axes)
    if any(not 0 <= a < rank for a in axes):
        raise KernelError(f"ExpandDims axes {list(axes)} out of range for output rank {rank}")
    return [finish(np.expand_dims(x, tuple(axes)), outs[0])]


def _drops_only_ones(src: Sequence[int], dst: Sequence[int]) -> bool:
    """Whether dst is src with some size-1 dimensions left out."""
    i = 0
    for d in src:
        if i < len(dst) and d == dst[i]:
            i += 1
        elif d != 1:
            return False
    return i == len(dst)


def squeeze(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Removes size-1 axes: those in `axes` if given, else those out[0]'s shape
    omits (all of them when no shape is declared)."""
    x = need(inputs[0], "in[0]")
    axes = p_ints(params, "axes", ())
    if axes:
        axes = tuple(axis_in(a, x.ndim, "Squeeze axis") for a in axes)
        if any(x.shape[a] != 1 for a in axes):
            raise KernelError(f"Squeeze axes {list(axes)} include a dimension that is not 1 in {list(x.shape)}")
        return [finish(np.squeeze(x, axis=axes), outs[0])]
    if outs[0].shape is None:
        return [finish(np.squeeze(x), outs[0])]
    target = tuple(outs[0].shape)
    if not _drops_only_ones(x.shape, target):
        raise KernelError(f"Squeeze output {list(target)} is not {list(x.shape)} with size-1 axes removed")
    return [finish(x.reshape(target), outs[0])]


def _bit(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


def strided_slice(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """QNN StridedSlice, taken strictly: begin in [0, dim-1], end in [-1, dim]
    (-1 lets a negative stride reach index 0); negative indices do not wrap."""
    x = need(inputs[0], "in[0]")
    ranges = p_array(params, "ranges").astype(np.int64).reshape(-1, 3)
    begin_mask, end_mask = p_int(params, "begin_mask", 0), p_int(params, "end_mask", 0)
    shrink, new = p_int(params, "shrink_axes", 0), p_int(params, "new_axes_mask", 0)
    n = ranges.shape[0]
    new_axes = [i for i in range(n) if _bit(new, i)]
    if n - len(new_axes) != x.ndim:
        raise KernelError(f"ranges has {n} rows with {len(new_axes)} new axes, but the input has rank {x.ndim}")
    dims, it = [], iter(x.shape)
    for i in range(n):
        dims.append(1 if i in new_axes else next(it))
    y = x.reshape(dims)
    keep = []
    for i, (b, e, s) in enumerate(ranges.tolist()):
        if i in new_axes:
            keep.append(i)
            continue
        dim = dims[i]
        if s == 0:
            raise KernelError(f"ranges[{i}] has stride 0")
        if _bit(begin_mask, i):
            b = 0 if s > 0 else dim - 1
        if not 0 <= b < dim:
            raise KernelError(f"ranges[{i}] begin {b} outside [0, {dim - 1}] (QNN indices do not wrap)")
        if _bit(shrink, i):
            y = np.take(y, [b], axis=i)
            continue
        if _bit(end_mask, i):
            e = dim if s > 0 else -1
        if not -1 <= e <= dim:
            raise KernelError(f"ranges[{i}] end {e} outside [-1, {dim}]")
        idx = np.arange(b, e, s)
        if idx.size == 0:
            raise KernelError(f"ranges[{i}] = [{b}, {e}, {s}] selects nothing")
        y = np.take(y, idx, axis=i)
        keep.append(i)
    return [finish(y.reshape([y.shape[i] for i in keep]), outs[0])]


PAD_SCHEMES = ("constant", "symmetric", "reflect", "edge")  # CONSTANT, MIRROR_SYMMETRIC, MIRROR_REFLECT, EDGE


def pad(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x = need(inputs[0], "in[0]")
    scheme = p_int(params, "scheme")
    if not 0 <= scheme < len(PAD_SCHEMES):
        raise KernelError(f"Pad: unknown scheme {scheme}")
    amounts = p_pairs(params, "pad_amount", x.ndim)
    mode = PAD_SCHEMES[scheme]
    for d, (lo, hi) in zip(x.shape, amounts):
        limit = d - 1 if mode == "reflect" else d
        if mode in ("reflect", "symmetric") and max(lo, hi) > limit:
            raise KernelError(f"Pad {mode} amount {max(lo, hi)} exceeds {limit} for a dimension of {d}")
    if mode == "constant":
        y = np.pad(x, amounts, mode="constant", constant_values=p_float(params, "pad_constant_value", 0.0))
    else:
        y = np.pad(x, amounts, mode=mode)
    return [finish(y, outs[0])]


def shape_op(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x = need(inputs[0], "in[0]")
    start, end = p_int(params, "start", 0), p_int(params, "end", x.ndim)
    if not 0 <= start < end <= x.ndim:
        raise KernelError(f"Shape start {start} / end {end} invalid for rank {x.ndim}")
    return [finish(np.array(x.shape[start:end], dtype=np.int64), outs[0])]


def constant_of_shape(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    shape = tuple(int(v) for v in need(inputs[0], "in[0]").reshape(-1))
    value = p_array(params, "value").reshape(-1)[0]
    return [finish(np.full(shape, value), outs[0])]


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "Reshape": reshape,
    "Transpose": transpose,
    "Tile": tile,
    "Concat": concat,
    "Split": split,
    "Pack": pack,
    "UnPack": unpack,
    "ExpandDims": expand_dims,
    "Squeeze": squeeze,
    "StridedSlice": strided_slice,
    "Pad": pad,
    "Shape": shape_op,
    "ConstantOfShape": constant_of_shape,
})
