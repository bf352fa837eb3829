"""Data-movement mllm ops: View, Repeat, Transpose, Permute, Slice, Concat,
Split, Embedding, Gather and Index.

These move values without arithmetic, so operands keep their dtype until
`finish` converts to the declared result dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.mllm._common import (REQUIRED, finish, indices_of, inputs_of, int_attr,
                                           ints_attr, norm_dim)
from qlower.reference.spec import Kernel, KernelError, OutSpec

# Slice's "to the end of the dim" sentinel in `ends` (INT32_MAX); with
# Python-style clamping it selects the whole remainder of the dim.
SLICE_END = 2147483647

_Inputs = Sequence["np.ndarray | None"]
_Attrs = Mapping[str, Any]


def view(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """View {shape}: reshape; one -1 is inferred. Without `shape`, the declared result shape is used."""
    (x,) = inputs_of("View", inputs, 1)
    if "shape" in attrs:
        shape = ints_attr("View", attrs, "shape")
    elif len(outs) == 1:
        shape = list(outs[0].shape)
    else:
        raise KernelError("View: missing attribute 'shape' and no single declared result shape")
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise KernelError(f"View: shape {shape} may hold at most one -1 and no other negative entry")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or x.size % known:
            raise KernelError(f"View: cannot infer -1 in {shape} for {x.size} elements")
        shape[shape.index(-1)] = x.size // known
    if math.prod(shape) != x.size:
        raise KernelError(f"View: shape {shape} holds {math.prod(shape)} elements, operand "
                          f"{list(x.shape)} holds {x.size}")
    return finish("View", [x.reshape(shape)], outs)


def repeat(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Repeat {dim, times}: repeat_interleave (h0,h0,h1,h1), not tiling."""
    (x,) = inputs_of("Repeat", inputs, 1)
    dim = norm_dim("Repeat", int_attr("Repeat", attrs, "dim"), x.ndim)
    times = int_attr("Repeat", attrs, "times")
    if times < 1:
        raise KernelError(f"Repeat: times must be >= 1, got {times}")
    return finish("Repeat", [np.repeat(x, times, axis=dim)], outs)


def transpose(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Transpose {dim0, dim1}: swap two dims."""
    (x,) = inputs_of("Transpose", inputs, 1)
    d0 = norm_dim("Transpose", int_attr("Transpose", attrs, "dim0"), x.ndim, "dim0")
    d1 = norm_dim("Transpose", int_attr("Transpose", attrs, "dim1"), x.ndim, "dim1")
    return finish("Transpose", [np.swapaxes(x, d0, d1)], outs)


def permute(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Permute {perm}: result dim i is operand dim perm[i] (negative entries normalised)."""
    (x,) = inputs_of("Permute", inputs, 1)
    perm = [norm_dim("Permute", p, x.ndim, "perm entry") for p in ints_attr("Permute", attrs, "perm")]
    if sorted(perm) != list(range(x.ndim)):
        raise KernelError(f"Permute: perm {attrs['perm']} is not a permutation of {x.ndim} dims")
    return finish("Permute", [np.transpose(x, perm)], outs)


def slice_(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Slice {starts, ends}: one (start, end) per dim, x[start:end] with step 1.

    Python semantics: negative indices count from the end and out-of-range
    bounds clamp. The whole dim is start 0, end SLICE_END (2147483647).
    """
    (x,) = inputs_of("Slice", inputs, 1)
    starts = ints_attr("Slice", attrs, "starts")
    ends = ints_attr("Slice", attrs, "ends")
    if len(starts) != x.ndim or len(ends) != x.ndim:
        raise KernelError(f"Slice: starts {starts} and ends {ends} need one entry per dim "
                          f"of the rank-{x.ndim} operand")
    return finish("Slice", [x[tuple(slice(s, e) for s, e in zip(starts, ends))]], outs)


def concat(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Concat(xs...) {dim}."""
    if not inputs or any(x is None for x in inputs):
        raise KernelError("Concat: needs at least one operand and none may be omitted")
    xs = [np.asarray(x) for x in inputs]
    rank = xs[0].ndim
    dim = norm_dim("Concat", int_attr("Concat", attrs, "dim"), rank)
    for x in xs:
        if x.ndim != rank or x.shape[:dim] + x.shape[dim + 1:] != xs[0].shape[:dim] + xs[0].shape[dim + 1:]:
            shapes = [list(x.shape) for x in xs]
            raise KernelError(f"Concat: operand shapes {shapes} differ outside dim {dim}")
    return finish("Concat", [np.concatenate(xs, axis=dim)], outs)


def split(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Split {dim, sizes}: consecutive parts of the given sizes, which must cover the dim."""
    (x,) = inputs_of("Split", inputs, 1)
    dim = norm_dim("Split", int_attr("Split", attrs, "dim"), x.ndim)
    sizes = ints_attr("Split", attrs, "sizes")
    if not sizes or any(s < 1 for s in sizes) or sum(sizes) != x.shape[dim]:
        raise KernelError(f"Split: sizes {sizes} must be positive and sum to dim {dim}'s "
                          f"extent {x.shape[dim]}")
    parts = np.split(x, np.cumsum(sizes)[:-1], axis=dim)
    return finish("Split", parts, outs)


def embedding(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Embedding(ids, table): table rows gathered by ids; result ids.shape + [hidden]."""
    ids, table = inputs_of("Embedding", inputs, 2)
    if table.ndim != 2:
        raise KernelError(f"Embedding: table must be [vocab, hidden], got {list(table.shape)}")
    idx = indices_of("Embedding", ids, "ids")
    if idx.size and (idx.min() < 0 or idx.max() >= table.shape[0]):
        raise KernelError(f"Embedding: ids must lie in [0, {table.shape[0]}), got "
                          f"[{idx.min()}, {idx.max()}]")
    return finish("Embedding", [table[idx]], outs)


def _take(op: str) -> Kernel:
    """Gather/Index {dim}: numpy take along dim.

    Result shape is x.shape[:dim] + indices.shape + x.shape[dim+1:];
    indices in [-n, n) are allowed, negative ones counting from the end.
    """

    def kernel(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
        x, indices = inputs_of(op, inputs, 2)
        dim = norm_dim(op, int_attr(op, attrs, "dim", REQUIRED), x.ndim)
        idx = indices_of(op, indices)
        n = x.shape[dim]
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise KernelError(f"{op}: indices must lie in [{-n}, {n}) for dim {dim}, got "
                              f"[{idx.min()}, {idx.max()}]")
        return finish(op, [np.take(x, idx, axis=dim)], outs)

    kernel.__name__ = kernel.__qualname__ = f"mllm_{op}"
    kernel.__doc__ = _take.__doc__
    return kernel


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "View": view,
    "Repeat": repeat,
    "Transpose": transpose,
    "Permute": permute,
    "Slice": slice_,
    "Concat": concat,
    "Split": split,
    "Embedding": embedding,
    "Gather": _take("Gather"),
    "Index": _take("Index"),
})
