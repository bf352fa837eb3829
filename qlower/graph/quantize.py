"""The one affine quantizer: real values → saturated fixed-point integers.

Lowering (`qlower.rewrite.emit.quantize_real`, framework encodings) and the
reference interpreter (`qlower.reference.quant.quantize`, QNN encodings) both
end here, so a 4-bit weight is clipped to [−8, 7] (or [0, 15]) by both, never
written out of range by one and saturated by the other.

    q = clip(rint(real / scale + zero_point), lo, hi)

rounding half to even (numpy's `rint`: ONNX QuantizeLinear, PyTorch and AIMET
do the same); NaN becomes 0, ±inf the bound. Large tensors are worked on in
slices along axis 0 so the float64 temporaries stay a few MB whatever the
tensor's size (a 150k × 1536 embedding would otherwise need 3.7 GB of them).
"""

from __future__ import annotations

import numpy as np

from qlower.graph.types import Quant

CHUNK_ELEMENTS = 1 << 20  # float64 temporaries of ~8 MB per slice


def bounds(dtype: np.dtype | str, bitwidth: int | None = None) -> tuple[int, int]:
    """[lo, hi] of an integer storage dtype narrowed to `bitwidth` (4-bit int8: [−8, 7])."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu":
        raise ValueError(f"fixed-point values need an integer storage dtype, got {dtype}")
    bits = min(bitwidth or dtype.itemsize * 8, dtype.itemsize * 8)
    if dtype.kind == "i":
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def quantize_affine(real: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, lo: int, hi: int,
                    dtype: np.dtype | str, *, block: tuple[int, int] | None = None,
                    chunk: int = CHUNK_ELEMENTS) -> np.ndarray:
    """clip(rint(real / scale) + zero_point, lo, hi) as `dtype`, slice by slice along axis 0 (QNN's and
    ONNX QuantizeLinear's formula).

    `scale`/`zero_point` broadcast against `real` (0-d, or the same rank); with
    `block=(axis, size)` they hold one entry per `size` elements along `axis`
    (the last block may be shorter) and are expanded one slice at a time.
    """
    real = np.asarray(real)
    dtype = np.dtype(dtype)
    scale, zero_point = np.asarray(scale, np.float64), np.asarray(zero_point, np.float64)
    out = np.empty(real.shape, dtype)
    if real.ndim == 0 or real.size == 0:
        if real.size:
            out[...] = _quantize(real, _full(scale, block, 0, 1, real.shape), _full(zero_point, block, 0, 1, real.shape),
                                 lo, hi, dtype)
        return out
    step = max(1, chunk // max(1, real.size // real.shape[0]))
    n = real.shape[0]
    for i in range(0, n, step):
        j = min(n, i + step)
        s = _full(scale, block, i, j, real.shape)
        z = _full(zero_point, block, i, j, real.shape)
        out[i:j] = _quantize(real[i:j], s, z, lo, hi, dtype)
    return out


def _full(a: np.ndarray, block: tuple[int, int] | None, i: int, j: int, shape: tuple[int, ...]) -> np.ndarray:
    """Rows i:j of a broadcastable parameter array, with block entries expanded."""
    if a.ndim == 0:
        return a
    if block is None:
        return a[i:j] if a.shape[0] > 1 else a
    baxis, size = block
    if baxis == 0:
        b0, b1 = i // size, -(-j // size)
        rep = np.repeat(a[b0:b1], size, axis=0)
        return rep[i - b0 * size:j - b0 * size]
    part = a[i:j] if a.shape[0] > 1 else a
    rep = np.repeat(part, size, axis=baxis)
    return rep[(slice(None),) * baxis + (slice(0, shape[baxis]),)]


def _quantize(real: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, lo: int, hi: int,
              dtype: np.dtype) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        # round first, then shift: rint(x + zp) differs from rint(x) + zp on ties when zp is odd
        q = np.rint(np.asarray(real, np.float64) / scale) + zero_point
    q = np.asarray(np.nan_to_num(q, nan=0.0, posinf=hi, neginf=lo))  # 0-d data gives a scalar, not an array
    q = np.clip(q, lo, hi)
    return np.asarray(q).astype(dtype)


def quantize_real(real: np.ndarray, q: Quant, dtype: np.dtype | str, *, chunk: int = CHUNK_ELEMENTS) -> np.ndarray:
    """Real values → integers of `dtype` under a framework encoding (per-tensor, per-axis or block),
    saturated to the encoding's bitwidth."""
    real = np.asarray(real)
    lo, hi = bounds(dtype, q.bitwidth)
    block = None
    if q.axis is not None and q.block_size is not None and q.block_axis is not None and real.ndim:
        channels = real.shape[q.axis]
        blocks = len(q.scale) // max(1, channels)
        scale = np.asarray(q.scale, np.float64).reshape(channels, blocks)
        zp = np.asarray(q.zero_point, np.float64)
        zp = (np.zeros_like(scale) if zp.size == 0 else
              np.broadcast_to(zp.reshape(channels, -1), (channels, blocks)) if zp.size in (channels, channels * blocks)
              else np.broadcast_to(zp.reshape(()), (channels, blocks)))
        if q.axis > q.block_axis:
            scale, zp = scale.T, zp.T
        compact = [1] * real.ndim
        compact[q.axis], compact[q.block_axis] = channels, blocks
        scale, zp = scale.reshape(compact), np.ascontiguousarray(zp).reshape(compact)
        block = (q.block_axis, q.block_size)
    else:
        scale = np.asarray(q.scale, np.float64)
        zp = np.asarray(q.zero_point, np.float64)
        if zp.size == 0:
            zp = np.zeros_like(scale)
        if q.axis is not None and scale.size > 1 and real.ndim:
            shape = [1] * real.ndim
            shape[q.axis] = -1
            scale, zp = scale.reshape(shape), np.broadcast_to(zp, scale.shape).reshape(shape)
        else:
            scale, zp = scale.reshape(()), zp.reshape(-1)[:1].reshape(())
    return quantize_affine(real, scale, zp, lo, hi, dtype, block=block, chunk=chunk)
