"""Activation kernels: ElementWiseNeuron and the single-purpose activation ops,
Prelu, softplus and the softmax family."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import axis_in, finish, need, p_float, p_int
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]

_ERF = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """Exact (double precision) erf; numpy has none and scipy is not a dependency."""
    x = np.asarray(x, dtype=np.float64)
    return np.asarray(_ERF(x), dtype=np.float64).reshape(x.shape)


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact (erf) form, as both the Gelu op and ElementWiseNeuron GELU define it."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def elu(x: np.ndarray, alpha: float) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.maximum(0.0, x) + np.minimum(0.0, alpha * (np.exp(np.minimum(x, 0.0)) - 1.0))


def hard_swish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def softplus(x: np.ndarray, beta: float, threshold: float) -> np.ndarray:
    """(1/beta)·ln(1 + e^(beta·x)), linear above `threshold` when threshold >= 0.

    QNN's default threshold is -1.0; taken literally it would make the op the
    identity for x > -1/beta, so a negative threshold is read as "no linear
    region" (ONNX Softplus has none either).
    """
    if beta <= 0:
        raise KernelError(f"softplus beta must be > 0, got {beta}")
    bx = beta * x
    y = np.logaddexp(0.0, bx) / beta
    if threshold >= 0:
        y = np.where(bx > threshold, x, y)
    return y


def _x(inputs: Inputs) -> np.ndarray:
    return need(inputs[0], "in[0]").astype(np.float64)


def _simple(fn: Callable[[np.ndarray], np.ndarray], name: str) -> Kernel:
    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        return [finish(fn(_x(inputs)), outs[0])]
    kernel.__name__ = name
    return kernel


# ElementWiseNeuron `operation` enum values (QnnOpDef.h).
NEURON_ENUM: tuple[str, ...] = (
    "ELU", "GELU", "HARD_SIGMOID", "HARD_SWISH", "RELU", "RELU_MIN_MAX", "SIGMOID", "SOFTPLUS", "TANH",
)


def neuron(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """ElementWiseNeuron. Defaults the op definition leaves blank follow ONNX:
    ELU alpha 1.0, HARD_SIGMOID alpha 0.2 / beta 0.5, SOFTPLUS beta 1.0."""
    op = p_int(params, "operation")
    if not 0 <= op < len(NEURON_ENUM):
        raise KernelError(f"ElementWiseNeuron: unknown operation enum value {op}")
    name, x = NEURON_ENUM[op], _x(inputs)
    if name == "ELU":
        y = elu(x, p_float(params, "alpha", 1.0))
    elif name == "GELU":
        y = gelu(x)
    elif name == "HARD_SIGMOID":
        y = np.clip(p_float(params, "alpha", 0.2) * x + p_float(params, "beta", 0.5), 0.0, 1.0)
    elif name == "HARD_SWISH":
        y = hard_swish(x)
    elif name == "RELU":
        y = np.maximum(x, 0.0)
    elif name == "RELU_MIN_MAX":
        y = np.minimum(p_float(params, "max_value"), np.maximum(p_float(params, "min_value"), x))
    elif name == "SIGMOID":
        y = sigmoid(x)
    elif name == "SOFTPLUS":
        y = softplus(x, p_float(params, "beta", 1.0), p_float(params, "threshold", -1.0))
    else:
        y = np.tanh(x)
    return [finish(y, outs[0])]


def relu_min_max(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    lo, hi = p_float(params, "min_value"), p_float(params, "max_value")
    return [finish(np.minimum(hi, np.maximum(lo, _x(inputs))), outs[0])]


def elu_op(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    return [finish(elu(_x(inputs), p_float(params, "alpha", 1.0)), outs[0])]


def softplus_op(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    y = softplus(_x(inputs), p_float(params, "beta", 1.0), p_float(params, "threshold", -1.0))
    return [finish(y, outs[0])]


def prelu(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """out = x for x >= 0, slope·x otherwise; the slope broadcasts one way, into in[0]."""
    x, slope = _x(inputs), need(inputs[1], "in[1]").astype(np.float64)
    if np.broadcast_shapes(x.shape, slope.shape) != x.shape:
        raise KernelError(f"Prelu slope of shape {list(slope.shape)} does not broadcast into {list(x.shape)}")
    return [finish(np.where(x >= 0, x, slope * x), outs[0])]


def _softmax_parts(x: np.ndarray, axis: int, beta: float) -> tuple[np.ndarray, np.ndarray]:
    z = beta * x
    z = z - np.max(z, axis=axis, keepdims=True)
    return z, np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def softmax(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """softmax(beta·x) along `axis` (default: last)."""
    x = _x(inputs)
    axis = axis_in(p_int(params, "axis", x.ndim - 1), x.ndim)
    z, lse = _softmax_parts(x, axis, p_float(params, "beta", 1.0))
    return [finish(np.exp(z - lse), outs[0])]


def log_softmax(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """beta·x − log Σ exp(beta·x) along `axis`."""
    x = _x(inputs)
    axis = axis_in(p_int(params, "axis", x.ndim - 1), x.ndim)
    z, lse = _softmax_parts(x, axis, p_float(params, "beta", 1.0))
    return [finish(z - lse, outs[0])]


def masked_softmax(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """UNCOMPRESSED mode: the additive mask [batch, channel] is broadcast over
    height and width, then softmax runs along channel. COMPRESSED (sequence
    lengths) is not modelled."""
    if p_int(params, "mode", 0) != 0:
        raise KernelError("MaskedSoftmax: only mode UNCOMPRESSED (0) has a reference kernel")
    x, mask = _x(inputs), need(inputs[1], "in[1]").astype(np.float64)
    if x.ndim != 4 or mask.shape != (x.shape[0], x.shape[3]):
        raise KernelError(f"MaskedSoftmax expects in[0] [b,h,w,c] and in[1] [b,c]; "
                          f"got {list(x.shape)}, {list(mask.shape)}")
    z, lse = _softmax_parts(x + mask[:, None, None, :], 3, 1.0)
    return [finish(np.exp(z - lse), outs[0])]


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "ElementWiseNeuron": neuron,
    "Relu": _simple(lambda x: np.maximum(x, 0.0), "relu"),
    "Relu1": _simple(lambda x: np.clip(x, -1.0, 1.0), "relu1"),
    "Relu6": _simple(lambda x: np.clip(x, 0.0, 6.0), "relu6"),
    "ReluMinMax": relu_min_max,
    "Sigmoid": _simple(sigmoid, "sigmoid"),
    "Tanh": _simple(np.tanh, "tanh"),
    "Gelu": _simple(gelu, "gelu"),
    "HardSwish": _simple(hard_swish, "hard_swish"),
    "Elu": elu_op,
    "ElementWiseSoftplus": softplus_op,
    "Prelu": prelu,
    "Softmax": softmax,
    "LogSoftmax": log_softmax,
    "MaskedSoftmax": masked_softmax,
})
