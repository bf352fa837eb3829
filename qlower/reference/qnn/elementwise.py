"""ElementWise* kernels: binary arithmetic, comparison and logic, unary math.

Broadcasting follows numpy's rule, which is QNN's: dimensions are aligned from
the right and a size of 1 (or a missing leading dimension) stretches. Integer
inputs stay integer except where the operation needs real division.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import compute_dtype, finish, is_float, need, p_bool, p_int
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]

Binary = Callable[[np.ndarray, np.ndarray], np.ndarray]
Unary = Callable[[np.ndarray], np.ndarray]


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncates toward zero (C semantics); float division is exact."""
    if is_float(a) or is_float(b):
        return np.true_divide(a, b)
    return np.trunc(np.true_divide(a, b)).astype(np.result_type(a, b))


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if is_float(a) or is_float(b):
        return np.power(a.astype(np.float64), b.astype(np.float64))
    return np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.result_type(a, b))


def _floor_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if is_float(a) or is_float(b):
        return np.floor(np.true_divide(a, b))
    return np.floor_divide(a, b)


def _logical(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Binary:
    return lambda a, b: fn(a != 0, b != 0)


BINARY: Mapping[str, Binary] = MappingProxyType({
    "ADD": np.add,
    "AND": _logical(np.logical_and),
    "DIVIDE": _int_div,
    "EQUAL": np.equal,
    "FLOOR_DIV": _floor_div,
    "FMOD": np.fmod,          # sign of the dividend
    "GREATER": np.greater,
    "GREATER_EQUAL": np.greater_equal,
    "LESS": np.less,
    "LESS_EQUAL": np.less_equal,
    "MAXIMUM": np.maximum,
    "MINIMUM": np.minimum,
    "MOD": np.mod,            # sign of the divisor
    "MULTIPLY": np.multiply,
    "NOT_EQUAL": np.not_equal,
    "OR": _logical(np.logical_or),
    "POWER": _power,
    "SQUARED_DIFFERENCE": lambda a, b: np.square(a - b),
    "SUBTRACT": np.subtract,
    "XOR": _logical(np.logical_xor),
})

# ElementWiseBinary `operation` enum values (QnnOpDef.h).
BINARY_ENUM: tuple[str, ...] = (
    "ADD", "AND", "DIVIDE", "EQUAL", "FLOOR_DIV", "FMOD", "GREATER", "GREATER_EQUAL", "LESS",
    "LESS_EQUAL", "MAXIMUM", "MINIMUM", "MOD", "MULTIPLY", "NOT_EQUAL", "OR", "POWER",
    "SQUARED_DIFFERENCE", "SUBTRACT", "XOR",
)


UNARY: Mapping[str, Unary] = MappingProxyType({
    "ABS": np.abs,
    "ASIN": np.arcsin,
    "ATAN": np.arctan,
    "CEIL": np.ceil,
    "COS": np.cos,
    "EXP": np.exp,
    "FLOOR": np.floor,
    "LOG": np.log,
    "NEG": np.negative,
    "NOT": lambda x: x == 0,
    "RECIPROCAL": lambda x: 1.0 / x,
    "ROUND": np.rint,          # halves to even, as the op definition states
    "RSQRT": lambda x: 1.0 / np.sqrt(x),
    "SIGN": np.sign,
    "SIN": np.sin,
    "SQRT": np.sqrt,
})

# ElementWiseUnary `operation` enum values (QnnOpDef.h).
UNARY_ENUM: tuple[str, ...] = (
    "ABS", "ASIN", "ATAN", "CEIL", "COS", "EXP", "FLOOR", "LOG", "NEG", "NOT", "RECIPROCAL",
    "ROUND", "RSQRT", "SIGN", "SIN", "SQRT",
)

_FLOAT_ONLY_UNARY = frozenset({"ASIN", "ATAN", "COS", "EXP", "LOG", "RECIPROCAL", "RSQRT", "SIN", "SQRT"})


def apply_binary(name: str, inputs: Inputs, out: OutSpec) -> np.ndarray:
    a, b = need(inputs[0], "in[0]"), need(inputs[1], "in[1]")
    dt = compute_dtype(a, b)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return finish(BINARY[name](a.astype(dt, copy=False), b.astype(dt, copy=False)), out)


def apply_unary(name: str, inputs: Inputs, out: OutSpec) -> np.ndarray:
    x = need(inputs[0], "in[0]")
    if name in _FLOAT_ONLY_UNARY or is_float(x):
        x = x.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return finish(UNARY[name](x), out)


def _binary_kernel(name: str) -> Kernel:
    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        return [apply_binary(name, inputs, outs[0])]
    kernel.__name__ = f"elementwise_{name.lower()}"
    return kernel


def _unary_kernel(name: str) -> Kernel:
    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        return [apply_unary(name, inputs, outs[0])]
    kernel.__name__ = f"elementwise_{name.lower()}"
    return kernel


def _enum_name(table: tuple[str, ...], value: int, op: str) -> str:
    if not 0 <= value < len(table):
        raise KernelError(f"{op}: unknown operation enum value {value}")
    return table[value]


def elementwise_binary(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    name = _enum_name(BINARY_ENUM, p_int(params, "operation"), "ElementWiseBinary")
    return [apply_binary(name, inputs, outs[0])]


def elementwise_unary(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    name = _enum_name(UNARY_ENUM, p_int(params, "operation"), "ElementWiseUnary")
    return [apply_unary(name, inputs, outs[0])]


def select(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    cond = need(inputs[0], "in[0]") != 0
    a, b = need(inputs[1], "in[1]"), need(inputs[2], "in[2]")
    dt = compute_dtype(a, b)
    return [finish(np.where(cond, a.astype(dt), b.astype(dt)), outs[0])]


def is_inf(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x = need(inputs[0], "in[0]").astype(np.float64)
    pos, neg = p_bool(params, "detect_positive", True), p_bool(params, "detect_negative", True)
    return [finish((np.isposinf(x) & pos) | (np.isneginf(x) & neg), outs[0])]


def is_nan(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    return [finish(np.isnan(need(inputs[0], "in[0]").astype(np.float64)), outs[0])]


def logit(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x = need(inputs[0], "in[0]").astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return [finish(np.log(x / (1.0 - x)), outs[0])]


_NAMED_BINARY = {
    "ElementWiseAdd": "ADD", "ElementWiseAnd": "AND", "ElementWiseDivide": "DIVIDE",
    "ElementWiseEqual": "EQUAL", "ElementWiseFloorDiv": "FLOOR_DIV", "ElementWiseFmod": "FMOD",
    "ElementWiseGreater": "GREATER", "ElementWiseGreaterEqual": "GREATER_EQUAL",
    "ElementWiseLess": "LESS", "ElementWiseLessEqual": "LESS_EQUAL", "ElementWiseMaximum": "MAXIMUM",
    "ElementWiseMinimum": "MINIMUM", "ElementWiseMod": "MOD", "ElementWiseMultiply": "MULTIPLY",
    "ElementWiseNotEqual": "NOT_EQUAL", "ElementWiseOr": "OR", "ElementWisePower": "POWER",
    "ElementWiseSquaredDifference": "SQUARED_DIFFERENCE", "ElementWiseSubtract": "SUBTRACT",
    "ElementWiseXor": "XOR",
}
_NAMED_UNARY = {
    "ElementWiseAbs": "ABS", "ElementWiseAsin": "ASIN", "ElementWiseAtan": "ATAN", "ElementWiseCeil": "CEIL",
    "ElementWiseCos": "COS", "ElementWiseExp": "EXP", "ElementWiseFloor": "FLOOR", "ElementWiseLog": "LOG",
    "ElementWiseNeg": "NEG", "ElementWiseNot": "NOT", "ElementWiseRound": "ROUND", "ElementWiseRsqrt": "RSQRT",
    "ElementWiseSign": "SIGN", "ElementWiseSin": "SIN", "ElementWiseSquareRoot": "SQRT",
}

KERNELS: Mapping[str, Kernel] = MappingProxyType({
    **{op: _binary_kernel(name) for op, name in _NAMED_BINARY.items()},
    **{op: _unary_kernel(name) for op, name in _NAMED_UNARY.items()},
    "ElementWiseBinary": elementwise_binary,
    "ElementWiseUnary": elementwise_unary,
    "ElementWiseSelect": select,
    "IsInf": is_inf,
    "IsNan": is_nan,
    "Logit": logit,
})
