"""Kernels that cross between real and stored values: Quantize, Dequantize,
Convert and Cast.

Unlike every other kernel these see *stored* data: the interpreter hands them
the raw input arrays and, through the keyword-only `in_specs`, each input's
shape, storage dtype and encoding (None for an omitted input); out[i]'s
encoding arrives in `outs[i].encoding`. Their results are returned in the
output's storage dtype and are not requantized. RAW_IO_OPS names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from qlower.reference.qnn._common import need
from qlower.reference.quant import bit_range, dequantize, quantize
from qlower.reference.spec import KernelError, OutSpec


class RawKernel(Protocol):
    """A kernel over stored values; see the module docstring."""

    def __call__(self, inputs: Sequence[np.ndarray | None], params: Mapping[str, Any],
                 outs: Sequence[OutSpec], *, in_specs: Sequence[OutSpec | None]) -> list[np.ndarray]: ...


def _spec(in_specs: Sequence[OutSpec | None], x: np.ndarray) -> OutSpec:
    spec = in_specs[0] if in_specs else None
    return spec if spec is not None else OutSpec(x.shape, x.dtype)


def to_plain(x: np.ndarray, dtype: np.dtype, *, rounding: bool) -> np.ndarray:
    """Value conversion to a non-quantized dtype. Float to integer rounds half to
    even (`rounding`) or truncates toward zero (a C cast); integers saturate
    rather than wrap, so no result depends on platform overflow behaviour."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.asarray(x) != 0
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        if np.issubdtype(np.asarray(x).dtype, np.floating):
            x = np.nan_to_num(np.rint(x) if rounding else np.trunc(x))
            return np.clip(x, info.min, info.max).astype(dtype)
        return np.clip(np.asarray(x).astype(np.int64), info.min, info.max).astype(dtype)
    return np.asarray(x).astype(dtype)


def quantize_op(inputs: Sequence[np.ndarray | None], params: Mapping[str, Any], outs: Sequence[OutSpec], *,
                in_specs: Sequence[OutSpec | None]) -> list[np.ndarray]:
    """Float to fixed point with out[0]'s encoding."""
    x, out = need(inputs[0], "in[0]"), outs[0]
    if out.encoding is None:
        raise KernelError("Quantize output has no quantization encoding")
    return [quantize(np.asarray(x, dtype=np.float64), out.encoding, out.dtype)]


def dequantize_op(inputs: Sequence[np.ndarray | None], params: Mapping[str, Any], outs: Sequence[OutSpec], *,
                  in_specs: Sequence[OutSpec | None]) -> list[np.ndarray]:
    """Fixed point to float with in[0]'s encoding."""
    x = need(inputs[0], "in[0]")
    spec = _spec(in_specs, x)
    if spec.encoding is None:
        raise KernelError("Dequantize input has no quantization encoding")
    return [dequantize(x, spec.encoding, spec.dtype).astype(outs[0].dtype)]


def convert_op(inputs: Sequence[np.ndarray | None], params: Mapping[str, Any], outs: Sequence[OutSpec], *,
               in_specs: Sequence[OutSpec | None]) -> list[np.ndarray]:
    """Value-preserving conversion that obeys encodings on both sides:
    requantize between encodings, quantize or dequantize when one side has
    one, plain (rounding, saturating) conversion when neither does."""
    x, out = need(inputs[0], "in[0]"), outs[0]
    spec = _spec(in_specs, x)
    real = dequantize(x, spec.encoding, spec.dtype) if spec.encoding is not None else x
    if out.encoding is not None:
        return [quantize(np.asarray(real, dtype=np.float64), out.encoding, out.dtype)]
    return [to_plain(real, out.dtype, rounding=True)]


def cast_op(inputs: Sequence[np.ndarray | None], params: Mapping[str, Any], outs: Sequence[OutSpec], *,
            in_specs: Sequence[OutSpec | None]) -> list[np.ndarray]:
    """Plain dtype cast that ignores encodings (a UFIXED_POINT_8 value is read as
    UINT_8). Float to integer truncates toward zero; values saturate. A narrow
    (4-bit) quantized output saturates to its bitwidth."""
    x, out = need(inputs[0], "in[0]"), outs[0]
    y = to_plain(x, out.dtype, rounding=False)
    if out.encoding is not None and np.issubdtype(out.dtype, np.integer):
        lo, hi = bit_range(out.dtype, out.encoding)
        y = np.clip(y, lo, hi).astype(out.dtype)
    return [y]


RAW_KERNELS: Mapping[str, RawKernel] = MappingProxyType({
    "Quantize": quantize_op,
    "Dequantize": dequantize_op,
    "Convert": convert_op,
    "Cast": cast_op,
})
