"""Tensor-level facts every layer shares: dtypes by name and quantization."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

# Short names rule authors write, and the numpy dtypes they stand for.
DTYPE_ALIASES: dict[str, str] = {
    "f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "bool": "bool", "i4": "int4", "u4": "uint4",
}
DTYPE_NAMES = frozenset({
    "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
})


def canonical_dtype(name: str) -> str | None:
    """`f32` or `float32` → `float32`; None for an unknown name."""
    name = DTYPE_ALIASES.get(name, name)
    return name if name in DTYPE_NAMES else None


_FLOAT, _INT = frozenset({float}), frozenset({int})


def _tuple_f(v: Any) -> tuple[float, ...]:
    if type(v) is list or type(v) is tuple:
        if _FLOAT.issuperset(map(type, v)) and v:  # already Python floats: share them (block encodings are long)
            return tuple(v)
    return tuple(np.atleast_1d(np.asarray(v, dtype=np.float64)).ravel().tolist())  # tolist: C-speed floats


def _tuple_i(v: Any) -> tuple[int, ...]:
    if type(v) is list or type(v) is tuple:
        if _INT.issuperset(map(type, v)) and v and -(2**63) <= min(v) and max(v) < 2**63:
            return tuple(v)
    return tuple(np.atleast_1d(np.asarray(v, dtype=np.int64)).ravel().tolist())


@attrs.frozen
class Quant:
    """A framework-style affine encoding: real = scale · (q − zero_point).

    Per-tensor when `axis` is None, else one scale/zero point per channel along
    `axis`. `bitwidth` narrows the storage dtype (4-bit weights in int8/uint8).
    Block quantization (LPBQ) keeps per-block scales: `block_size` elements
    along `block_axis` share one scale, and `scale` then has
    channels × blocks entries in row-major order.
    """

    scale: tuple[float, ...] = attrs.field(converter=_tuple_f)
    zero_point: tuple[int, ...] = attrs.field(converter=_tuple_i)
    axis: int | None = None
    bitwidth: int | None = None
    symmetric: bool = False
    block_size: int | None = None
    block_axis: int | None = None

    @property
    def per_axis(self) -> bool:
        return self.axis is not None

    @staticmethod
    def for_range(lo: float, hi: float, dtype: str, bitwidth: int | None = None) -> Quant:
        """The per-tensor encoding that maps [lo, hi] onto the integer range of `dtype`."""
        info = np.iinfo(np.dtype(dtype))
        bits = bitwidth or info.bits
        qmin, qmax = (info.min, info.max) if bits == info.bits else (
            (0, 2**bits - 1) if info.min == 0 else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
        lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
        scale = (hi - lo) / (qmax - qmin) if hi > lo else 1.0
        zero_point = int(round(qmin - lo / scale))
        return Quant((scale,), (zero_point,), bitwidth=bitwidth)
