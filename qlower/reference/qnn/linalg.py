"""MatMul and FullyConnected. Products accumulate in float64 (int64 for plain
integer operands) so the reference is at least as exact as any backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import compute_dtype, finish, need, p_bool
from qlower.reference.spec import Kernel, KernelError, OutSpec


def matmul(inputs: Sequence[np.ndarray | None], params: Mapping[str, Any], outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """C[..., i, j] = Σ_k A[..., i, k]·B[..., k, j] + bias[j]; batch dims broadcast."""
    a, b = need(inputs[0], "in[0]"), need(inputs[1], "in[1]")
    bias = inputs[2] if len(inputs) > 2 else None
    if a.ndim < 2 or b.ndim < 2:
        raise KernelError(f"MatMul operands must have rank >= 2, got {a.ndim} and {b.ndim}")
    dt = compute_dtype(a, b, bias)
    a, b = a.astype(dt), b.astype(dt)
    if p_bool(params, "transpose_in0", False):
        a = np.swapaxes(a, -1, -2)
    if p_bool(params, "transpose_in1", False):
        b = np.swapaxes(b, -1, -2)
    if a.shape[-1] != b.shape[-2]:
        raise KernelError(f"MatMul inner dimensions differ: {a.shape[-1]} vs {b.shape[-2]} "
                          f"(after transposes; shapes {list(a.shape)} and {list(b.shape)})")
    try:
        y = np.matmul(a, b)
    except ValueError as exc:
        raise KernelError(f"MatMul batch dimensions do not broadcast: {exc}") from None
    if bias is not None:
        bias = np.asarray(bias).astype(dt).reshape(-1)
        if bias.size not in (1, y.shape[-1]):
            raise KernelError(f"MatMul bias has {bias.size} values, expected {y.shape[-1]}")
        y = y + bias
    return [finish(y, outs[0])]


def fully_connected(inputs: Sequence[np.ndarray | None], params: Mapping[str, Any],
                    outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """y = x·Wᵀ + b with W [m, n]; x is flattened to [batch, n] (or kept [..., n] with keep_dims)."""
    x, w = need(inputs[0], "in[0]"), need(inputs[1], "in[1]")
    bias = inputs[2] if len(inputs) > 2 else None
    if w.ndim != 2:
        raise KernelError(f"FullyConnected weights must be [m, n], got {list(w.shape)}")
    m, n = w.shape
    if x.size % n:
        raise KernelError(f"FullyConnected input of shape {list(x.shape)} is not reshapable to [batch, {n}]")
    dt = compute_dtype(x, w, bias)
    y = x.astype(dt).reshape(-1, n) @ w.astype(dt).T
    if bias is not None:
        bias = np.asarray(bias).astype(dt).reshape(-1)
        if bias.size not in (1, m):
            raise KernelError(f"FullyConnected bias has {bias.size} values, expected {m}")
        y = y + bias
    if x.ndim == 1:
        y = y.reshape(m)
    elif p_bool(params, "keep_dims", False):
        if x.shape[-1] != n:
            raise KernelError(f"FullyConnected keep_dims needs the last input dimension to be {n}, got {x.shape[-1]}")
        y = y.reshape(*x.shape[:-1], m)
    return [finish(y, outs[0])]


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "MatMul": matmul,
    "FullyConnected": fully_connected,
})
