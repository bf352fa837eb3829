"""QNN fixed-point arithmetic: real = scale · (q + offset), offset = −zero_point.

`quantize` computes round(real / scale) + zero_point, as QNN's Quantize is
defined ("round(input / scale) + offset") and as ONNX QuantizeLinear and PyTorch
do: the zero point is added after rounding, which matters on ties with an odd
zero point. It rounds half to even (numpy's `rint`): the QNN documents only say
"round", and half-to-even is what ONNX QuantizeLinear, PyTorch and AIMET (which
produce the encodings QNN consumes) use, so it is the choice that lets a
lowered graph be compared bit-exactly with its source. The result saturates to
the encoding's bitwidth: 4-bit values go to [0, 15] or [−8, 7] inside an 8-bit
container; narrow signed values are stored sign-extended.

Per-axis encodings broadcast their scales/offsets along `axis`.
BLOCKWISE_EXPANSION multiplies each channel's float scale by an integer
per-block scale; the blocks tile the tensor's input-channel dimension, which
qlower takes to be the dimension just before `axis` when `axis` is the last
one (conv [..., cin, cout], matmul [in, out]) and the last dimension otherwise
(FullyConnected [out, in]).
"""

from __future__ import annotations

import numpy as np

from qlower.graph.quantize import quantize_affine
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.model import EncodingKind, QuantEncoding

ROUNDING = "half_to_even"


def _storage(dtype: np.dtype | DataType | str) -> tuple[np.dtype, int | None]:
    """Storage dtype and, for a QNN datatype, its nominal bitwidth."""
    if isinstance(dtype, DataType):
        return to_numpy(dtype), dtype.bitwidth
    return np.dtype(dtype), None


def bit_range(dtype: np.dtype | DataType | str, enc: QuantEncoding | None = None) -> tuple[int, int]:
    """The representable [lo, hi] of a fixed-point value: the encoding's bitwidth if set,
    else the datatype's (4 for *_FIXED_POINT_4), else the storage dtype's."""
    store, nominal = _storage(dtype)
    if not np.issubdtype(store, np.integer):
        raise ValueError(f"fixed-point values need an integer storage dtype, got {store}")
    bits = (enc.bitwidth if enc is not None and enc.bitwidth else None) or nominal or store.itemsize * 8
    bits = min(bits, store.itemsize * 8)
    if np.issubdtype(store, np.signedinteger):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _axis(enc: QuantEncoding, rank: int) -> int:
    axis = enc.axis if enc.axis is not None else 0
    if axis < 0:
        axis += rank
    if not 0 <= axis < rank:
        raise ValueError(f"encoding axis {enc.axis} out of range for rank {rank}")
    return axis


def block_axis(axis: int, rank: int) -> int:
    """The dimension BLOCKWISE_EXPANSION blocks tile (see the module docstring)."""
    return axis - 1 if axis == rank - 1 else rank - 1


def scale_offset(enc: QuantEncoding, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Scale and offset arrays (float64) that broadcast against a tensor of `shape`."""
    scales = np.asarray(enc.scales, dtype=np.float64)
    offsets = np.asarray(enc.offsets, dtype=np.float64)
    if offsets.size == 0:  # symmetric: offsets may be omitted
        offsets = np.zeros_like(scales)
    if not enc.per_axis:
        if scales.size != 1 or offsets.size != 1:
            raise ValueError(f"per-tensor encoding needs one scale/offset, got {scales.size}/{offsets.size}")
        return scales.reshape(()), offsets.reshape(())
    rank = len(shape)
    axis = _axis(enc, rank)
    n = shape[axis]
    if scales.size != n or offsets.size not in (1, n):
        raise ValueError(f"per-axis encoding on axis {axis} needs {n} scales/offsets, "
                         f"got {scales.size}/{offsets.size}")
    bshape = [1] * rank
    bshape[axis] = n
    scales, offsets = scales.reshape(bshape), np.broadcast_to(offsets, (n,)).reshape(bshape)
    if enc.kind == EncodingKind.BLOCKWISE_EXPANSION:
        scales = scales * _block_scales(enc, shape, axis)
    return scales, offsets


def _block_scales(enc: QuantEncoding, shape: tuple[int, ...], axis: int) -> np.ndarray:
    if enc.block_scales is None or not enc.num_blocks_per_axis:
        raise ValueError("BLOCKWISE_EXPANSION encoding without block scales")
    rank, blocks = len(shape), enc.num_blocks_per_axis
    baxis = block_axis(axis, rank)
    bs = np.asarray(enc.block_scales, dtype=np.float64)
    if bs.shape != (shape[axis], blocks) or shape[baxis] % blocks:
        raise ValueError(f"block scales {list(bs.shape)} do not fit shape {list(shape)} "
                         f"(channels on axis {axis}, {blocks} blocks on axis {baxis})")
    full = np.repeat(bs, shape[baxis] // blocks, axis=1)  # [channels, shape[baxis]]
    out = [1] * rank
    out[axis], out[baxis] = shape[axis], shape[baxis]
    order = sorted((axis, baxis))
    if order[0] != axis:
        full = full.T
    return full.reshape(out)


def _unpack_narrow(q: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Values of a narrow bitwidth read from their low bits (QNN ignores the upper bits)."""
    q = q.astype(np.int64)
    if lo == 0:
        return q & hi
    span = hi - lo + 1
    low = q & (span - 1)
    return np.where(low > hi, low - span, low)


def dequantize(q: np.ndarray, enc: QuantEncoding, dtype: np.dtype | DataType | str | None = None) -> np.ndarray:
    """Fixed-point values to real float32 values. `dtype` (the tensor's storage or
    QNN datatype, default q's) sets the bitwidth when the encoding does not."""
    q = np.asarray(q)
    lo, hi = bit_range(q.dtype if dtype is None else dtype, enc)
    store = _storage(q.dtype if dtype is None else dtype)[0]
    vals = _unpack_narrow(q, lo, hi) if (hi - lo + 1) < (1 << (store.itemsize * 8)) else q.astype(np.float64)
    scale, offset = scale_offset(enc, q.shape)
    return (scale * (np.asarray(vals, dtype=np.float64) + offset)).astype(np.float32)


def quantize(real: np.ndarray, enc: QuantEncoding, dtype: np.dtype | DataType | str) -> np.ndarray:
    """Real values to fixed point: q = clip(rint(real / scale) − offset) in `dtype`'s storage
    (the quantizer lowering uses too: `qlower.graph.quantize`)."""
    real = np.asarray(real)
    lo, hi = bit_range(dtype, enc)
    scale, offset = scale_offset(enc, real.shape)
    return quantize_affine(real, scale, -offset, lo, hi, _storage(dtype)[0])


def on_grid(real: np.ndarray, enc: QuantEncoding, dtype: np.dtype | DataType | str) -> np.ndarray:
    """Real values as a tensor with encoding `enc` holds them: rounded to its grid and saturated to
    its range (float32). A quantized model computes this at every encoded tensor (a QDQ model's
    Q → DQ pair; a quantizer that dropped a Relu or Clip whose range the encoding clamps relies on
    the saturation)."""
    return dequantize(quantize(real, enc, dtype), enc, dtype)


def float_to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns (uint16), rounding to nearest even."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def bfloat16_bits_to_float(b: np.ndarray) -> np.ndarray:
    from qlower.graph.lazy import widen_bf16  # the one widening (checkpoints' BF16 weights use it too)

    return widen_bf16(b)
