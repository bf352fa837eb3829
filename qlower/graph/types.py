"""Tensor-level facts every layer shares: dtypes by name and quantization."""

from __future__ import annotations


import attrs
import numpy as np

from qlower._frozen import Frozen, frozen_floats, frozen_ints

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


@attrs.frozen
class Quant:
    """A framework-style affine encoding: real = scale · (q − zero_point).

    Per-tensor when `axis` is None, else one scale/zero point per channel along
    `axis`. `bitwidth` narrows the storage dtype (4-bit weights in int8/uint8).
    Block quantization (LPBQ) keeps per-block scales: `block_size` elements
    along `block_axis` share one scale, and `scale` then has
    channels × blocks entries in row-major order.
    """

    scale: Frozen = attrs.field(converter=frozen_floats)  # float64, read-only; behaves as a tuple of floats
    zero_point: Frozen = attrs.field(converter=frozen_ints)  # int64, read-only
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
