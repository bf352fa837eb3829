"""Unary elementwise mllm ops (activations and math functions)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.mllm._common import finish, inputs_of, real, str_attr
from qlower.reference.spec import Kernel, KernelError, OutSpec

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Overflow-free logistic: exp is only taken of non-positive values."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _gelu_exact(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _rsqrt(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(x)


def _sqrt(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.sqrt(x)


def _exp(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.exp(x)


def _unary(op: str, fn: Callable[[np.ndarray], np.ndarray]) -> Kernel:
    """Wraps a real function into a one-input, one-result kernel."""

    def kernel(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
               outs: Sequence[OutSpec]) -> list[np.ndarray]:
        (x,) = inputs_of(op, inputs, 1)
        return finish(op, [fn(real(x))], outs)

    kernel.__name__ = kernel.__qualname__ = f"mllm_{op}"
    kernel.__doc__ = f"Reference semantics of mllm.{op}."
    return kernel


def gelu(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
         outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """GELU: exact erf form by default, tanh approximation when approximate='tanh'."""
    (x,) = inputs_of("GELU", inputs, 1)
    mode = str_attr("GELU", attrs, "approximate", "none")
    if mode == "none":
        y = _gelu_exact(real(x))
    elif mode == "tanh":
        y = _gelu_tanh(real(x))
    else:
        raise KernelError(f"GELU: attribute 'approximate' must be 'none' or 'tanh', got {mode!r}")
    return finish("GELU", [y], outs)


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "SiLU": _unary("SiLU", lambda x: x * _sigmoid(x)),
    "Sigmoid": _unary("Sigmoid", _sigmoid),
    "GELU": gelu,
    "QuickGELU": _unary("QuickGELU", lambda x: x * _sigmoid(1.702 * x)),
    "ReLU": _unary("ReLU", lambda x: np.maximum(x, 0.0)),
    "Tanh": _unary("Tanh", np.tanh),
    "Exp": _unary("Exp", _exp),
    "Sqrt": _unary("Sqrt", _sqrt),
    "Rsqrt": _unary("Rsqrt", _rsqrt),
    "Neg": _unary("Neg", np.negative),
    "Abs": _unary("Abs", np.abs),
    "Sin": _unary("Sin", np.sin),
    "Cos": _unary("Cos", np.cos),
})
