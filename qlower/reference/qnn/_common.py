"""Shared helpers for the QNN reference kernels: reading params, shaping results.

Kernels receive params keyed by QNN param name (Python scalars, or numpy
arrays for tensor params). Absent optional params take the QNN default, which
each kernel passes to these readers; an absent mandatory param is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from qlower.reference.spec import KernelError, OutSpec

REQUIRED: Any = object()  # sentinel: the param is mandatory


def _raw(params: Mapping[str, Any], name: str, default: Any) -> Any:
    if name in params and params[name] is not None:
        return params[name]
    if default is REQUIRED:
        raise KernelError(f"missing mandatory param `{name}`")
    return default


def p_int(params: Mapping[str, Any], name: str, default: Any = REQUIRED) -> int:
    """A scalar integer param (enums arrive as their integer value)."""
    v = _raw(params, name, default)
    arr = np.asarray(v)
    if arr.size != 1:
        raise KernelError(f"param `{name}` must be a scalar, got shape {arr.shape}")
    return int(arr.reshape(()))


def p_float(params: Mapping[str, Any], name: str, default: Any = REQUIRED) -> float:
    v = _raw(params, name, default)
    arr = np.asarray(v)
    if arr.size != 1:
        raise KernelError(f"param `{name}` must be a scalar, got shape {arr.shape}")
    return float(arr.reshape(()))


def p_bool(params: Mapping[str, Any], name: str, default: Any = REQUIRED) -> bool:
    """QNN BOOL_8: zero is false, anything else true."""
    return p_int(params, name, int(default) if default is not REQUIRED else REQUIRED) != 0


def p_ints(params: Mapping[str, Any], name: str, default: Any = REQUIRED) -> tuple[int, ...]:
    """A tensor param (or scalar) flattened to integers."""
    v = _raw(params, name, default)
    return tuple(int(x) for x in np.asarray(v).reshape(-1))


def p_array(params: Mapping[str, Any], name: str, default: Any = REQUIRED) -> np.ndarray:
    return np.asarray(_raw(params, name, default))


def p_pairs(params: Mapping[str, Any], name: str, rows: int, default: Any = REQUIRED) -> list[tuple[int, int]]:
    """A [rows, 2] param such as pad_amount, as (before, after) pairs."""
    arr = np.asarray(_raw(params, name, default)).astype(np.int64)
    if arr.size != rows * 2:
        raise KernelError(f"param `{name}` must have shape [{rows}, 2], got {list(arr.shape)}")
    return [(int(a), int(b)) for a, b in arr.reshape(rows, 2)]


def spatial(params: Mapping[str, Any], name: str, n: int, default: Any = REQUIRED) -> tuple[int, ...]:
    """A per-spatial-axis param (stride, dilation...): a scalar or n values."""
    vals = p_ints(params, name, default)
    if len(vals) == 1 and n > 1:
        vals = vals * n
    if len(vals) != n:
        raise KernelError(f"param `{name}` must have {n} values, got {len(vals)}")
    return vals


def need(x: np.ndarray | None, what: str) -> np.ndarray:
    """The input, or an error naming it when it was omitted."""
    if x is None:
        raise KernelError(f"mandatory input {what} is missing")
    return np.asarray(x)


def axis_in(axis: int, rank: int, what: str = "axis") -> int:
    """Validate a QNN axis (non-negative, < rank); negative values wrap for leniency."""
    if axis < 0:
        axis += rank
    if not 0 <= axis < rank:
        raise KernelError(f"{what} {axis} out of range for rank {rank}")
    return axis


def is_float(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.floating)


def finish(x: Any, out: OutSpec) -> np.ndarray:
    """Give a result the form the interpreter expects for `out`.

    Quantized results stay real (float) so the interpreter can requantize
    them; others are cast to the declared dtype. A rank-0 result stays rank 0
    (QNN tensors may have rank 0, QnnTypes.h) unless the output is declared
    [1], the way many graphs write a scalar. The shape is not checked here: callers
    (the interpreter) compare it with the declared one, which may be None.
    """
    arr = np.asarray(x)
    if arr.ndim == 0 and out.shape is not None and tuple(out.shape) == (1,):
        arr = arr.reshape(1)
    if out.encoding is not None:
        return arr if is_float(arr) else arr.astype(np.float64)
    if out.dtype == np.bool_:
        return arr if arr.dtype == np.bool_ else arr != 0
    if np.issubdtype(out.dtype, np.integer) and is_float(arr):
        info = np.iinfo(out.dtype)
        # Float-to-integer conversion truncates toward zero and saturates, like a C cast
        # with clamping; it avoids numpy's platform-dependent wraparound.
        return np.clip(np.trunc(np.nan_to_num(arr)), info.min, info.max).astype(out.dtype)
    return arr.astype(out.dtype, copy=False)


def declared_shape(out: OutSpec, op: str) -> tuple[int, ...]:
    """out's declared shape, for ops whose result size is stated only there (Reshape, Resize)."""
    if out.shape is None:
        raise KernelError(f"{op} needs its output shape declared: QNN takes it from the output tensor")
    return tuple(out.shape)


def finish_all(xs: Sequence[Any], outs: Sequence[OutSpec]) -> list[np.ndarray]:
    if len(xs) != len(outs):
        raise KernelError(f"op produces {len(xs)} results but {len(outs)} outputs are declared")
    return [finish(x, o) for x, o in zip(xs, outs)]


def compute_dtype(*xs: np.ndarray | None) -> np.dtype:
    """float64 for float math (accuracy), the promoted integer type otherwise."""
    arrs = [np.asarray(x) for x in xs if x is not None]
    if any(is_float(a) for a in arrs):
        return np.dtype(np.float64)
    return np.result_type(*arrs) if arrs else np.dtype(np.float64)


def place_along(vec: np.ndarray, axes: Sequence[int], rank: int, full: Sequence[int]) -> np.ndarray:
    """Reshape a per-axes tensor (gamma, beta) so it broadcasts against a rank-`rank` tensor.

    A tensor of rank len(axes) is laid out along `axes`; anything else must
    broadcast with numpy's trailing-dimension rule (QNN unidirectional broadcast).
    """
    vec = np.asarray(vec)
    if vec.ndim == len(axes) and len(axes) > 0:
        shape = [1] * rank
        for a, n in zip(axes, vec.shape):
            shape[a] = n
        ok = all(shape[a] in (1, full[a]) for a in axes)
        if ok:
            return vec.reshape(shape)
    try:
        np.broadcast_shapes(vec.shape, tuple(full))
    except ValueError:
        raise KernelError(f"tensor of shape {list(vec.shape)} does not broadcast to {list(full)}") from None
    return vec
