"""Encodings from ranges and weights, and the weights' fixed-point data.

Weights are read one tensor at a time and worked on a slice of rows at a time (`ROWS_BYTES`), so
the float temporaries stay small whatever the tensor's size; only the stored integers are whole.
"""

from __future__ import annotations

import attrs
import numpy as np

from qlower.graph.lazy import LazyArray
from qlower.graph.quantize import quantize_real
from qlower.graph.types import Quant

ROWS_BYTES = 32 << 20
KV_ZERO_POINT = 128  # mllm's uint8 KV cache: symmetric around 128 (QNN offset -128)


def act_encoding(lo: float, hi: float, bits: int, symmetric: bool = False) -> tuple[np.dtype, Quant]:
    """Unsigned storage of `bits`: asymmetric over [min(lo, 0), max(hi, 0)], or symmetric around the
    middle code (zero point 2^(bits-1), QNN's offset -2^(bits-1))."""
    dtype = np.dtype(np.uint16 if bits == 16 else np.uint8)
    if symmetric:
        half = 1 << (bits - 1)
        amax = max(abs(lo), abs(hi))
        return dtype, Quant([amax / (half - 1) if amax > 0 else 1.0], [half], symmetric=True)
    return dtype, Quant.for_range(lo, hi, dtype.name)


def fixed_encoding(lo: float, hi: float, bits: int) -> tuple[np.dtype, Quant]:
    """The encoding of a result whose range is known in advance (a sigmoid's or softmax's [0, 1]):
    scale (hi - lo) / 2^bits, zero point -lo / scale, unsigned storage of `bits`. For [0, 1] that is
    HTP's required Sigmoid / Softmax output encoding, 1/65536 (16 bits) or 1/256 (8 bits) with offset 0:
    the top code is hi - scale, one step short of hi, and 1.0 saturates to it."""
    dtype = np.dtype(np.uint16 if bits == 16 else np.uint8)
    scale = (float(hi) - float(lo)) / float(1 << bits)
    return dtype, Quant((scale,), (int(round(-float(lo) / scale)),))


def kv_encoding(lo: float, hi: float, bits: int = 8) -> tuple[np.dtype, Quant]:
    """The KV cache as mllm keeps it: uint8, symmetric, zero point 128 (scale = max|x| / 127)."""
    return act_encoding(lo, hi, bits, symmetric=True)


def _row_slices(shape: tuple[int, ...]) -> list[tuple[int, int]]:
    row = max(1, int(np.prod(shape[1:])) * 4)
    step = max(1, ROWS_BYTES // row)
    return [(i, min(shape[0], i + step)) for i in range(0, shape[0], step)]


def _rows(w: np.ndarray, i: int, j: int) -> np.ndarray:
    """Rows i:j as float32; a lazily read weight reads only those."""
    return np.asarray(w.rows(i, j) if isinstance(w, LazyArray) else w[i:j], np.float32)


def _reach(x: np.ndarray, negative: float) -> np.ndarray:
    """|x| with negative values shrunk by `negative`: its max over a group is max(max x, -negative min x)."""
    return np.abs(x) if negative == 1.0 else np.maximum(x, x * -negative)


def _amax(w: np.ndarray, out_axis: int, in_axis: int, block: int | None, negative: float = 1.0) -> np.ndarray:
    """max |w| per output channel ([C]) or per (channel, block of `block` inputs) ([C, B]), 2-D weights
    with rows read a slice at a time; with `negative` < 1, max(max w, -negative · min w): the symmetric
    signed grid's one extra negative code (-2^(b-1)) reaches `1 / negative` times further than the
    top positive one (2^(b-1) - 1), so a channel whose extreme is negative takes the finer step that
    code allows."""
    if w.ndim != 2:
        a = _reach(np.moveaxis(np.asarray(w, np.float32), out_axis, 0), negative).reshape(w.shape[out_axis], -1)
        return a.max(axis=1).astype(np.float64)
    rows_are_channels = out_axis == 0
    c, k = (w.shape[0], w.shape[1]) if rows_are_channels else (w.shape[1], w.shape[0])
    nb = 1 if block is None else -(-k // block)
    out = np.zeros((c, nb), np.float64)
    for i, j in _row_slices(w.shape):
        part = _reach(_rows(w, i, j), negative)
        if not rows_are_channels:
            part = part.T  # [C, rows i:j of the inputs]
            if block is None:
                np.maximum(out[:, 0], part.max(axis=1), out=out[:, 0])
            else:
                for b in range(i // block, -(-j // block)):
                    s, e = max(i, b * block) - i, min(j, (b + 1) * block) - i
                    np.maximum(out[:, b], part[:, s:e].max(axis=1), out=out[:, b])
            continue
        if block is None:
            out[i:j, 0] = part.max(axis=1)
        else:
            pad = np.zeros((j - i, nb * block), np.float32)
            pad[:, :k] = part
            out[i:j] = pad.reshape(j - i, nb, block).max(axis=2)
    return out[:, 0] if block is None else out


CLIP_RATIOS = np.linspace(0.5, 1.0, 21)  # the least-squared-error search's candidates, fractions of max|w|


def _channel_slices(w: np.ndarray, out_axis: int) -> list[tuple[slice, int, np.ndarray]]:
    """The weight as channel-major float32 parts: (channels, first input position, [c, n] values);
    a 2-D weight a slice of rows at a time."""
    if w.ndim != 2:
        whole = np.moveaxis(np.asarray(w, np.float32), out_axis, 0).reshape(w.shape[out_axis], -1)
        return [(slice(None), 0, whole)]
    if out_axis == 0:
        return [(slice(i, j), 0, _rows(w, i, j)) for i, j in _row_slices(w.shape)]
    return [(slice(None), i, _rows(w, i, j).T) for i, j in _row_slices(w.shape)]


def _squared_errors(w: np.ndarray, scales: list[np.ndarray], bits: int, out_axis: int,
                    block: int | None) -> np.ndarray:
    """[K, C, B]: the squared error of each channel's (block's) symmetric quantization under each of the
    K candidate scale arrays ([C, B]; B = 1 per channel), the weight read a slice of rows at a time."""
    top = (1 << (bits - 1)) - 1
    err = np.zeros((len(scales), *scales[0].shape), np.float64)
    for channels, first, part in _channel_slices(w, out_axis):
        n = part.shape[1]
        ids = np.zeros(n, np.int64) if block is None else (first + np.arange(n)) // block
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        cols = ids[starts]
        for k, cand in enumerate(scales):
            scale = cand[channels][:, ids]
            sq = np.square(np.clip(np.rint(part / scale), -top - 1, top) * scale - part)
            err[k, channels][:, cols] += np.add.reduceat(sq, starts, axis=1)
    return err


def _least_error_amax(w: np.ndarray, amax: np.ndarray, bits: int, out_axis: int, block: int | None,
                      shared: bool = False) -> np.ndarray:
    """`amax` ([C] or [C, B]) clipped, per channel (or block; `shared`: one ratio for all), to the
    candidate of CLIP_RATIOS whose symmetric quantization of the weight has the least squared error:
    the converter's `param_quantizer_calibration mse`. At 4 bits clipping the largest weights pays."""
    top = (1 << (bits - 1)) - 1
    flat = amax.reshape(amax.shape[0], -1)
    err = _squared_errors(w, [np.where(flat > 0, flat * ratio / top, 1.0) for ratio in CLIP_RATIOS], bits,
                          out_axis, block)
    if shared:
        return (flat * CLIP_RATIOS[np.argmin(err.sum(axis=(1, 2)))]).reshape(amax.shape)
    return (flat * CLIP_RATIOS[np.argmin(err, axis=0)]).reshape(amax.shape)


LPBQ_LEVELS = 15  # a block's scale: its channel's float scale times an integer in 1..15 (4 bits)


def _lpbq_ints(w: np.ndarray, want: np.ndarray, channel: np.ndarray, bits: int, out_axis: int,
               block: int) -> np.ndarray:
    """Each block's integer ([C, B]) on its channel's scale: of the two around the scale the block wants
    (`want`, [C, B]), the one whose quantization of the block errs less. Rounding up clips nothing but
    coarsens the block's step by up to one part in its integer; rounding down refines it and clips the
    block's largest values a little, which often costs less."""
    ratio = want / channel[:, None]
    up = np.clip(np.ceil(ratio - 1e-9), 1, LPBQ_LEVELS)
    down = np.clip(np.floor(ratio + 1e-9), 1, LPBQ_LEVELS)
    if np.array_equal(up, down):
        return up.astype(np.int64)
    err = _squared_errors(w, [up * channel[:, None], down * channel[:, None]], bits, out_axis, block)
    return np.where(err[1] < err[0], down, up).astype(np.int64)


def weight_encoding(w: np.ndarray, bits: int, out_axis: int, in_axis: int, *, per_channel: bool = True,
                    block: int | None = None, method: str = "minmax") -> tuple[Quant, np.ndarray]:
    """Symmetric signed weights in int8 storage: per output channel (or per tensor), 8 or 4 bits; with
    `block`, LPBQ: per channel a float scale times a 4-bit integer per block of `block` inputs (what
    QNN's BLOCKWISE_EXPANSION stores), so each block's scale is that product. The codes are the whole
    signed range [-2^(b-1), 2^(b-1) - 1] (zero point 0): the scale is the least that clips nothing,
    max(max w / (2^(b-1) - 1), -min w / 2^(b-1)), finer than max|w| / (2^(b-1) - 1) where the extreme is
    negative. `method` "mse" clips each channel's (block's) range where that lowers the squared error."""
    out_axis %= w.ndim
    in_axis %= w.ndim
    top = (1 << (bits - 1)) - 1  # 127 or 7: the symmetric range
    if block is not None and (w.ndim != 2 or w.shape[in_axis] % block or w.shape[in_axis] <= block):
        block = None  # QNN's blocks are whole: a dimension they do not divide stays per channel
    if block is not None:
        amax = _amax(w, out_axis, in_axis, block, top / (top + 1))
        if method == "mse":
            amax = _least_error_amax(w, amax, bits, out_axis, block)
        amax = amax / top  # the scale each block wants
        channel = amax.max(axis=1) / LPBQ_LEVELS
        channel[channel == 0] = 1.0
        ints = _lpbq_ints(w, amax, channel, bits, out_axis, block)
        # channel × integer: at most 15 distinct values a channel, so the (channels × blocks)-long tuple
        # shares 15 float objects a channel instead of holding one each (1.7B 4-bit weights in blocks of
        # 32 are 53M scales: 1.7 GB as separate floats)
        table = (channel[:, None] * np.arange(16, dtype=np.float64)).tolist()
        scale = tuple(x for row, r in zip(table, ints.tolist()) for x in map(row.__getitem__, r))
        q = Quant(scale, (0,) * len(scale), axis=out_axis, bitwidth=bits if bits < 8 else None, symmetric=True,
                  block_size=block, block_axis=in_axis)
    else:
        amax = _amax(w, out_axis, in_axis, None, top / (top + 1))
        if not per_channel:
            amax = np.full(1, amax.max())
        if method == "mse":
            full = amax if per_channel else np.full(w.shape[out_axis], amax[0])
            amax = _least_error_amax(w, full, bits, out_axis, None, shared=not per_channel)[:len(amax)]
        scale = np.where(amax > 0, amax / top, 1.0)
        q = Quant(scale, [0] * len(scale), axis=out_axis if per_channel else None,
                  bitwidth=bits if bits < 8 else None, symmetric=True)
    return q, quantize_rows(w, q, np.dtype(np.int8))


def quantize_rows(w: np.ndarray, q: Quant, dtype: np.dtype) -> np.ndarray:
    """quantize_real, reading the weight a slice of rows at a time (an encoding along axis 0, per
    channel or in blocks, is sliced with it)."""
    if w.ndim < 2 or q.axis not in (None, 0):
        return quantize_real(np.asarray(w, np.float32), q, dtype)
    per_row = len(q.scale) // w.shape[0] if q.axis == 0 else 0  # entries per channel: 1, or its blocks
    out = np.empty(w.shape, dtype)
    for i, j in _row_slices(w.shape):
        sub = q if q.axis is None else attrs.evolve(q, scale=q.scale[i * per_row:j * per_row],
                                                    zero_point=q.zero_point[i * per_row:j * per_row])
        out[i:j] = quantize_real(_rows(w, i, j), sub, dtype)
    return out


def bias_encoding(b: np.ndarray) -> tuple[Quant, np.ndarray]:
    """32-bit symmetric per tensor."""
    b = np.asarray(b, np.float32)
    amax = float(np.abs(b).max()) if b.size else 0.0
    q = Quant([amax / (2**31 - 1) if amax > 0 else 1.0], [0], symmetric=True)
    return q, quantize_real(b, q, np.dtype(np.int32))


def param_encoding(data: np.ndarray, bits: int, symmetric: bool = False) -> tuple[Quant, np.ndarray]:
    """Any other float constant (norm weights, embedding tables, scalars): per tensor, unsigned like
    activations, over its own range; asymmetric unless the op reading it requires symmetric."""
    lo, hi = np.inf, -np.inf
    if data.ndim == 0:
        arr = np.asarray(data, np.float32)
        lo, hi = float(arr), float(arr)
    else:
        for i, j in _row_slices(data.shape):
            part = _rows(data, i, j)
            lo, hi = min(lo, float(part.min())), max(hi, float(part.max()))
    dtype, q = act_encoding(lo, hi, bits, symmetric)
    if data.ndim == 0:  # (as one element: quantize_real's 0-d path trips on numpy scalars)
        return q, quantize_real(np.asarray(data, np.float32).reshape(1), q, dtype).reshape(())
    out = np.empty(data.shape, dtype)
    for i, j in _row_slices(data.shape):
        out[i:j] = quantize_real(_rows(data, i, j), q, dtype)
    return q, out
