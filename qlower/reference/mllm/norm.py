"""Normalising and reducing mllm ops: RMSNorm, LayerNorm, Softmax, Reduce*."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.mllm._common import (bool_attr, finish, float_attr, inputs_of, int_attr,
                                           norm_dim, real)
from qlower.reference.spec import Kernel, KernelError, OutSpec

_Inputs = Sequence["np.ndarray | None"]
_Attrs = Mapping[str, Any]


def _last_dim_param(op: str, name: str, p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per-feature parameters must be exactly [D] for x's last dim D."""
    if x.ndim < 1 or p.shape != (x.shape[-1],):
        raise KernelError(f"{op}: {name} must be [{x.shape[-1] if x.ndim else '?'}] for x "
                          f"{list(x.shape)}, got {list(p.shape)}")
    return real(p)


def rms_norm(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """RMSNorm(x, weight) {epsilon, add_unit_offset}: x / sqrt(mean(x^2) + eps) * (w or 1 + w)."""
    x, w = inputs_of("RMSNorm", inputs, 2)
    x = real(x)
    w = _last_dim_param("RMSNorm", "weight", w, x)
    eps = float_attr("RMSNorm", attrs, "epsilon", 1e-6)
    if bool_attr("RMSNorm", attrs, "add_unit_offset", False):
        w = 1.0 + w
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w
    return finish("RMSNorm", [y], outs)


def layer_norm(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """LayerNorm(x, weight[, bias]) {epsilon}: over the last dim with the biased variance."""
    x, w, b = inputs_of("LayerNorm", inputs, 2, 1)
    x = real(x)
    w = _last_dim_param("LayerNorm", "weight", w, x)
    eps = float_attr("LayerNorm", attrs, "epsilon", 1e-5)
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps) * w
    if b is not None:
        y = y + _last_dim_param("LayerNorm", "bias", b, x)
    return finish("LayerNorm", [y], outs)


def softmax(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Softmax(x) {dim}: max-shifted so large logits do not overflow."""
    (x,) = inputs_of("Softmax", inputs, 1)
    x = real(x)
    dim = norm_dim("Softmax", int_attr("Softmax", attrs, "dim", -1), x.ndim)
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return finish("Softmax", [e / np.sum(e, axis=dim, keepdims=True)], outs)


def _reduce_dims(op: str, attrs: _Attrs, rank: int) -> tuple[int, ...]:
    """`dim` is an int or a non-empty list of distinct ints."""
    if "dim" not in attrs:
        raise KernelError(f"{op}: missing required attribute 'dim'")
    raw = attrs["dim"]
    if isinstance(raw, (list, tuple)):
        if not raw:
            raise KernelError(f"{op}: attribute 'dim' must not be empty")
        dims = [norm_dim(op, int_attr(op, {"dim": d}, "dim"), rank) for d in raw]
    else:
        dims = [norm_dim(op, int_attr(op, attrs, "dim"), rank)]
    if len(set(dims)) != len(dims):
        raise KernelError(f"{op}: attribute 'dim' {list(raw)} names a dim twice")
    return tuple(dims)


def _reduce(op: str, fn: Callable[..., np.ndarray]) -> Kernel:
    """Reduce*(x) {dim, keepdim}."""

    def kernel(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
        (x,) = inputs_of(op, inputs, 1)
        dims = _reduce_dims(op, attrs, x.ndim)
        keep = bool_attr(op, attrs, "keepdim", False)
        return finish(op, [fn(real(x), axis=dims, keepdims=keep)], outs)

    kernel.__name__ = kernel.__qualname__ = f"mllm_{op}"
    kernel.__doc__ = f"Reference semantics of mllm.{op} over one or more dims."
    return kernel


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "RMSNorm": rms_norm,
    "LayerNorm": layer_norm,
    "Softmax": softmax,
    "ReduceMin": _reduce("ReduceMin", np.min),
    "ReduceMax": _reduce("ReduceMax", np.max),
    "ReduceSum": _reduce("ReduceSum", np.sum),
    "ReduceMean": _reduce("ReduceMean", np.mean),
})
