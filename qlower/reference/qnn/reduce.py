"""Reductions: Reduce{Max,Min,Mean,Sum,Prod,SumSquare} and Moments.

Without keep_dims the reduced axes disappear; reducing every axis would give
rank 0, which QNN's Reduce* ops write as [1] (MasterOpDef: K = max(1, N - M)).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import axis_in, compute_dtype, finish, finish_all, need, p_bool, p_ints
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]


def reduce_axes(params: Params, rank: int) -> tuple[int, ...]:
    axes = tuple(axis_in(a, rank, "reduction axis") for a in p_ints(params, "axes"))
    if not axes or len(set(axes)) != len(axes):
        raise KernelError(f"axes {list(axes)} must be non-empty and unique")
    return axes


def _sum_square(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(x * x, axis=axis, keepdims=keepdims)


_REDUCERS: Mapping[str, Callable[..., np.ndarray]] = MappingProxyType({
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceMean": np.mean,
    "ReduceSum": np.sum,
    "ReduceProd": np.prod,
    "ReduceSumSquare": _sum_square,
})


def _reduce_kernel(op: str) -> Kernel:
    fn = _REDUCERS[op]

    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        x = need(inputs[0], "in[0]")
        axes = reduce_axes(params, x.ndim)
        y = np.asarray(fn(x.astype(compute_dtype(x)), axis=axes, keepdims=p_bool(params, "keep_dims", False)))
        return [finish(y.reshape(1) if y.ndim == 0 else y, outs[0])]
    kernel.__name__ = op
    return kernel


def moments(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Mean and population variance over `axes`."""
    x = need(inputs[0], "in[0]").astype(np.float64)
    axes = reduce_axes(params, x.ndim)
    keep = p_bool(params, "keep_dims")
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(x - mean), axis=axes, keepdims=keep)
    if not keep:
        mean = np.squeeze(mean, axis=axes)
    return finish_all([mean, var], outs)


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    **{op: _reduce_kernel(op) for op in _REDUCERS},
    "Moments": moments,
})
