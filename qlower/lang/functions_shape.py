"""Built-in .qpat functions for what framework ops carry as parameters: slices with axes and
steps, paddings (auto_pad, ceil mode, transposed convolutions), broadcasts, einsum equations,
and small helpers on lists and static data. Part of the built-in table (`builtin_functions`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qlower.lang.functions import EvalError, Function, _normdim, _shape
from qlower.qnn.shapes.spatial import same_pads


def _normdims(dims: list[int], rank: int) -> list[int]:
    return [_normdim(int(d), rank) for d in dims]


def _strided_ranges(starts: list[int], ends: list[int], axes: list[int], steps: list[int],
                    shape: list[int]) -> list[list[int]]:
    """numpy/ONNX slices of some axes (negative indices wrap, out-of-range clamps) → StridedSlice ranges."""
    rank = len(shape)
    axes = list(range(len(starts))) if not axes else _normdims(axes, rank)
    steps = [1] * len(starts) if not steps else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise EvalError(f"slice needs as many starts, ends, axes and steps; got {starts}, {ends}, {axes}, {steps}")
    out = [[0, int(n), 1] for n in shape]
    for b, e, a, s in zip(starts, ends, axes, steps):
        if int(s) == 0:
            raise EvalError("slice step 0")
        b2, e2, s2 = slice(int(b), int(e), int(s)).indices(int(shape[a]))
        if (e2 - b2) * s2 <= 0:
            raise EvalError(f"slice [{b}:{e}:{s}] of dim {a} ({shape[a]}) is empty")
        out[a] = [b2, e2, s2]
    return out


def _reverse_end_mask(ranges: list[list[int]]) -> int:
    """StridedSlice end_mask bits for rows whose negative stride runs down to index 0 (end -1)."""
    return sum(1 << i for i, (_, e, s) in enumerate(ranges) if int(s) < 0 and int(e) < 0)


def _pad_pairs(pads: list[int]) -> list[list[int]]:
    """[b1, ..., bn, e1, ..., en] (ONNX pads) → [[b1, e1], ..., [bn, en]] (QNN pad_amount)."""
    if len(pads) % 2:
        raise EvalError(f"pads {pads} do not have a begin and an end per dim")
    n = len(pads) // 2
    return [[int(pads[i]), int(pads[i + n])] for i in range(n)]


def _conv_pads(auto_pad: str, pads: list[int], spatial: list[int], kernel: list[int], strides: list[int],
               dilations: list[int]) -> list[list[int]]:
    """Padding of a convolution or pooling window per dim, resolving auto_pad (NOTSET, VALID, SAME_UPPER/LOWER)."""
    n = len(spatial)
    strides = list(strides) or [1] * n
    dilations = list(dilations) or [1] * n
    if auto_pad in ("NOTSET", ""):
        return _pad_pairs(pads) if pads else [[0, 0] for _ in range(n)]
    if auto_pad == "VALID":
        return [[0, 0] for _ in range(n)]
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise EvalError(f"unknown auto_pad {auto_pad}")
    return [list(same_pads(size, k, s, d, auto_pad == "SAME_UPPER"))
            for size, k, s, d in zip(spatial, kernel, strides, dilations)]


def _ceil_pads(pads: list[list[int]], spatial: list[int], kernel: list[int], strides: list[int],
               dilations: list[int]) -> list[list[int]]:
    """End padding that makes a floor-rounded pooling window count equal the ceil-rounded one
    (the last window must still start inside the input or its begin padding)."""
    n = len(spatial)
    strides = list(strides) or [1] * n
    dilations = list(dilations) or [1] * n
    out = []
    for (b, e), size, k, s, d in zip(pads, spatial, kernel, strides, dilations):
        span = int(size) + int(b) + int(e) - ((int(k) - 1) * int(d) + 1)
        count = -(-span // int(s)) + 1
        if (count - 1) * int(s) >= int(size) + int(b):
            count -= 1
        extra = max((count - 1) * int(s) - span, 0)
        out.append([int(b), int(e) + extra])
    return out


def _conv_transpose_pads(auto_pad: str, pads: list[int], spatial: list[int], out: list[int], kernel: list[int],
                         strides: list[int], dilations: list[int], output_padding: list[int]) -> list[list[int]]:
    """Per-dim [begin, end, output_padding] of a transposed convolution, from explicit pads or, for auto_pad
    or a given output shape, from the output size: total = s·(in − 1) + output_padding + (k − 1)·d + 1 − out
    is cropped (split by auto_pad), and a negative total becomes extra output padding."""
    n = len(spatial)
    strides = list(strides) or [1] * n
    dilations = list(dilations) or [1] * n
    output_padding = list(output_padding) or [0] * n
    if auto_pad == "VALID" and not out:
        return [[0, 0, p] for p in output_padding]
    if auto_pad in ("NOTSET", "") and pads:
        return [pair + [p] for pair, p in zip(_pad_pairs(pads), output_padding)]
    res = []
    for i in range(n):
        total = int(strides[i]) * (int(spatial[i]) - 1) + int(output_padding[i]) + (int(kernel[i]) - 1) * int(
            dilations[i]) + 1 - int(out[i])
        if total < 0:  # a larger output than the op computes: the extra rows are output padding
            res.append([0, 0, int(output_padding[i]) - total])
            continue
        half = total // 2
        res.append(([half, total - half] if auto_pad == "SAME_UPPER" else [total - half, half])
                   + [int(output_padding[i])])
    return res


def _dim_sizes(values: list, axis: int) -> list[int]:
    return [_shape(v)[_normdim(axis, len(_shape(v)))] for v in values]


def _broadcast_multiples(shape: list[int], target: list[int]) -> list[int]:
    """How often each dim repeats when `shape` broadcasts to `target` (same rank; 1s stretch)."""
    if len(shape) != len(target):
        raise EvalError(f"shapes {shape} and {target} have different ranks")
    out = []
    for s, t in zip(shape, target):
        if s != t and s != 1:
            raise EvalError(f"shape {shape} does not broadcast to {target}")
        out.append(int(t) if s != t else 1)
    return out


def _einsum_matmul(equation: str) -> list[bool]:
    """[transpose_a, transpose_b] when an einsum equation is a (batched) matrix product, else an error."""
    eq = equation.replace(" ", "")
    try:
        lhs, out = eq.split("->")
        a, b = lhs.split(",")
    except ValueError:
        raise EvalError(f"einsum {equation!r} is not a two-operand product with an explicit output") from None
    batch = a[:-2]
    if "." in eq or len(a) < 2 or b[:-2] != batch or out[:-2] != batch or len(b) != len(a) or len(out) != len(a):
        raise EvalError(f"einsum {equation!r} is not a batched matrix product")
    am, bm, om = a[-2:], b[-2:], out[-2:]
    shared = set(am) & set(bm)
    if len(shared) != 1 or len(set(am + bm)) != 3 or set(batch) & set(am + bm):
        raise EvalError(f"einsum {equation!r} is not a batched matrix product")
    k = shared.pop()
    m, n = am.replace(k, ""), bm.replace(k, "")
    if om != m + n:
        raise EvalError(f"einsum {equation!r} is not a batched matrix product")
    return [am == k + m, bm == n + k]


def _pick(xs: list, indices: list[int]) -> list:
    try:
        return [xs[int(i)] for i in indices]
    except IndexError:
        raise EvalError(f"indices {indices} out of range for {xs}") from None


def _columns(rows: list, a: int, b: int | None = None) -> list:
    """Column `a` of each row, or the columns a..b-1 (as lists) when `b` is given."""
    try:
        return [r[int(a)] if b is None else list(r[int(a):int(b)]) for r in rows]
    except (IndexError, TypeError):
        raise EvalError(f"rows {rows} have no column {a}") from None


def _ratios(a: list, b: list) -> list[float]:
    if len(a) != len(b) or any(float(x) == 0 for x in a):
        raise EvalError(f"cannot divide {b} by {a} elementwise")
    return [float(y) / float(x) for x, y in zip(a, b)]


def _allclose(a: list, b: list, rtol: float = 1e-6) -> bool:
    return len(a) == len(b) and bool(np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol,
                                                 atol=0.0))


def _item(t: Any) -> Any:
    arr = np.asarray(t)
    if arr.size != 1:
        raise EvalError(f"expected a single element, got a tensor of shape {list(arr.shape)}")
    return arr.reshape(-1)[0].item()


def _values(t: Any) -> list:
    """Static data as a flat list of numbers (guards over every element, e.g. all lengths equal)."""
    return np.asarray(t).reshape(-1).tolist()


def _sqrt(x: Any) -> Any:
    return np.sqrt(np.asarray(x, dtype=np.float64) if not isinstance(x, np.ndarray) else x)


def _frame_indices(frames: int, length: int, step: int) -> np.ndarray:
    """[frames, length] int32 positions of overlapping frames: row f is f·step .. f·step + length − 1."""
    if frames < 1 or length < 1 or step < 1:
        raise EvalError(f"no frames for frames={frames}, length={length}, step={step}")
    return (np.arange(frames)[:, None] * int(step) + np.arange(length)[None, :]).astype(np.int32)


def _dft_basis(n: int, bins: int) -> list[np.ndarray]:
    """[cos, −sin] of 2π·t·k/n, each [n, bins]: a real signal's DFT as two matrix products."""
    if n < 1 or bins < 1:
        raise EvalError(f"no DFT basis for n={n}, bins={bins}")
    angle = 2.0 * np.pi * np.outer(np.arange(n), np.arange(bins)) / n
    return [np.cos(angle).astype(np.float32), (-np.sin(angle)).astype(np.float32)]


def _dft_matrix(n_in: int, c_in: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """ONNX DFT along one axis as one real matrix [n_in·c_in, bins·c_out] (rows and columns interleave
    the real and imaginary parts): the input is truncated or zero-padded to `length`; forward gives
    `length` bins (length // 2 + 1 onesided), inverse is scaled by 1/length, and inverse onesided is
    numpy's irfft (a real output of `length` samples from the first length // 2 + 1 bins)."""
    if n_in < 1 or c_in not in (1, 2) or length < 1:
        raise EvalError(f"no DFT matrix for n={n_in}, complex parts {c_in}, length {length}")
    real_out = inverse and onesided
    bins = length // 2 + 1 if onesided and not inverse else length
    c_out = 1 if real_out else 2
    used = min(n_in, length // 2 + 1 if real_out else length)
    j = np.arange(used)[:, None].astype(np.float64)
    k = np.arange(bins)[None, :].astype(np.float64)
    angle = 2.0 * np.pi * j * k / length
    cos, sin = np.cos(angle), np.sin(angle)
    m = np.zeros((n_in, c_in, bins, c_out))
    if not inverse:  # (xr + i·xi)(cos − i·sin)
        m[:used, 0, :, 0], m[:used, 0, :, 1] = cos, -sin
        if c_in == 2:
            m[:used, 1, :, 0], m[:used, 1, :, 1] = sin, cos
    else:  # (Xr + i·Xi)(cos + i·sin) / length
        w = np.ones((used, 1))
        if real_out:  # Hermitian: every bin but 0 and length/2 stands for itself and its mirror
            w[1:] = 2.0
            if length % 2 == 0 and used > length // 2:
                w[length // 2] = 1.0
        m[:used, 0, :, 0] = w * cos / length
        if not real_out:
            m[:used, 0, :, 1] = sin / length
        if c_in == 2:
            m[:used, 1, :, 0] = -w * sin / length
            if not real_out:
                m[:used, 1, :, 1] = cos / length
    return m.reshape(n_in * c_in, bins * c_out).astype(np.float32)


def _band_mask(rows: int, cols: int, lo: int, hi: int, dt: str) -> np.ndarray:
    """[rows, cols] mask: 1 (true) where lo <= j - i <= hi, else 0 — triangles, causal and window masks."""
    if rows < 0 or cols < 0:
        raise EvalError(f"no band mask of {rows} x {cols}")
    diff = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    return ((diff >= lo) & (diff <= hi)).astype(np.dtype(dt))


def _center_crop_pad(shape: list[int], target: list[int], axes: list[int]) -> list[list[list[int]]]:
    """CenterCropPad of `shape` to `target` sizes on `axes` (all when empty): [StridedSlice ranges, Pad amounts]."""
    r = len(shape)
    axes = [a + r if a < 0 else a for a in (axes or range(r))]
    if len(axes) != len(target) or any(not 0 <= a < r for a in axes):
        raise EvalError(f"CenterCropPad: {len(target)} sizes for axes {axes} of a rank-{r} input")
    ranges = [[0, d, 1] for d in shape]
    pads = [[0, 0] for _ in shape]
    for a, t in zip(axes, target):
        d = shape[a]
        if t < d:
            ranges[a] = [(d - t) // 2, (d - t) // 2 + t, 1]
        elif t > d:
            pads[a] = [(t - d) // 2, t - d - (t - d) // 2]
    return [ranges, pads]


def _band_bias(rows: int, cols: int, lo: int, hi: int) -> np.ndarray:
    """[rows, cols] float32 additive bias: 0 where lo <= j - i <= hi, -inf elsewhere (attention masks)."""
    return np.where(_band_mask(rows, cols, lo, hi, "bool"), np.float32(0), np.float32(-np.inf)).astype(np.float32)


def _nonzero_positions(t, n: int) -> list[int]:
    """Positions below n where static data is non-zero (Compress with a constant condition)."""
    flat = np.asarray(t).reshape(-1)[: int(n)]
    return [int(i) for i in np.flatnonzero(flat)]


def _axes_pads(pads: list[int], axes: list[int], rank: int) -> list[int]:
    """ONNX Pad's [begins..., ends...] for some axes → the same for every axis (0 elsewhere)."""
    axes = _normdims(axes, rank) if axes else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise EvalError(f"{len(pads)} pads for {len(axes)} axes")
    out = [0] * (2 * rank)
    for i, a in enumerate(axes):
        out[a], out[rank + a] = int(pads[i]), int(pads[len(axes) + i])
    return out


def _pad_indices(n: int, before: int, after: int, mode: str) -> list[int]:
    """Source positions of a dim of n padded by ONNX Pad's edge, reflect or wrap (numpy's pad modes)."""
    if mode not in ("edge", "reflect", "wrap") or n < 1 or before < 0 or after < 0:
        raise EvalError(f"no {mode} padding of a dim of {n} by {before}, {after}")
    if mode == "reflect" and n < 2:
        raise EvalError("reflect padding needs a dim of 2 or more")
    return [int(i) for i in np.pad(np.arange(int(n)), (int(before), int(after)), mode=mode)]


def _first_padded_axis(pads: list[int]) -> int:
    """The first axis with non-zero padding in [begins..., ends...], or -1."""
    r = len(pads) // 2
    return next((d for d in range(r) if int(pads[d]) != 0 or int(pads[r + d]) != 0), -1)


def _tfidf_vocab(pool: list[int]) -> list[int]:
    """The distinct tokens of a TfIdfVectorizer pool, sorted (the columns of its one-hot table)."""
    return sorted({int(t) for t in pool})


def _tfidf_weights(pool: list[int], counts: list[int], indexes: list[int], lo: int, hi: int) -> np.ndarray:
    """[V + V·V, outputs] 0/1 matrix from unigram counts (one per token) and bigram counts (one per
    ordered token pair, row-major) to TfIdfVectorizer's output slots, for n-grams of lo..hi items."""
    vocab = _tfidf_vocab(pool)
    col = {t: i for i, t in enumerate(vocab)}
    v, starts = len(vocab), [int(c) for c in counts] + [len(pool)]
    if hi > 2 or len(counts) < 1:
        raise EvalError("TfIdfVectorizer tables cover unigrams and bigrams only")
    grams = []
    for n, (a, b) in enumerate(zip(starts, starts[1:]), start=1):
        grams += [(n, tuple(int(t) for t in pool[i:i + n])) for i in range(a, b, n)]
    if len(grams) != len(indexes):
        raise EvalError(f"{len(grams)} n-grams in the pool but {len(indexes)} ngram_indexes")
    w = np.zeros((v + v * v, max(int(i) for i in indexes) + 1), np.float32)
    for (n, g), out in zip(grams, indexes):
        if lo <= n <= hi:
            w[col[g[0]] if n == 1 else v + col[g[0]] * v + col[g[1]], int(out)] = 1.0
    return w


def _block_expand(data: Any, axis: int, block_size: int, size: int) -> np.ndarray:
    """Blocked quantization's scale or zero point (one entry per block of `block_size` elements
    along `axis`, ONNX opset 21) stretched to one entry per element: each entry repeated, cut to `size`."""
    arr = np.asarray(data)
    if arr.ndim == 0:
        raise EvalError("block_expand needs blocked parameters with at least one dim")
    axis = _normdim(int(axis), arr.ndim)
    b, n = int(block_size), int(size)
    if b <= 0:
        raise EvalError(f"block_size must be positive, got {b}")
    if arr.shape[axis] != -(-n // b):
        raise EvalError(f"{arr.shape[axis]} blocks along axis {axis} do not cover {n} elements in blocks of {b}: "
                        f"ceil({n} / {b}) = {-(-n // b)} are needed")
    return np.take(np.repeat(arr, b, axis=axis), np.arange(n), axis=axis)


SHAPE_FUNCTIONS: tuple[Function, ...] = (
    Function("band_mask", ("int", "int", "int", "int", "dtype"), "tensor", _band_mask,
             doc="[rows, cols] 1/0 mask of the band lo <= j - i <= hi (Trilu, causal and window masks)"),
    Function("center_crop_pad", ("list[int]", "list[int]", "list[int]"), "list[list[list[int]]]", _center_crop_pad,
             doc="[StridedSlice ranges, Pad amounts] that center-crop or pad a shape to sizes on some axes"),
    Function("band_bias", ("int", "int", "int", "int"), "tensor", _band_bias,
             doc="[rows, cols] float32 bias: 0 in the band lo <= j - i <= hi, -inf outside"),
    Function("nonzero_positions", ("tensor", "int"), "list[int]", _nonzero_positions,
             doc="positions below n where static data is non-zero"),
    Function("axes_pads", ("list[int]", "list[int]", "int"), "list[int]", _axes_pads,
             doc="Pad's [begins..., ends...] for some axes → for all axes of a rank"),
    Function("pad_indices", ("int", "int", "int", "str"), "list[int]", _pad_indices,
             doc="source positions of a dim padded by ONNX Pad's edge, reflect or wrap mode"),
    Function("first_padded_axis", ("list[int]",), "int", _first_padded_axis,
             doc="the first axis with non-zero padding in [begins..., ends...], or -1"),
    Function("tfidf_vocab", ("list[int]",), "list[int]", _tfidf_vocab,
             doc="the distinct tokens of a TfIdfVectorizer pool, sorted"),
    Function("tfidf_weights", ("list[int]", "list[int]", "list[int]", "int", "int"), "tensor", _tfidf_weights,
             doc="0/1 matrix from unigram and bigram counts to TfIdfVectorizer's output slots"),
    Function("normdims", ("list[int]", "int"), "list[int]", _normdims, doc="normdim of every dim in a list"),
    Function("strided_ranges", ("list[int]", "list[int]", "list[int]", "list[int]", "list[int]"), "list[list[int]]",
             _strided_ranges, doc="numpy-style slices (starts, ends, axes, steps) of a shape → StridedSlice ranges"),
    Function("reverse_end_mask", ("list[list[int]]",), "int", _reverse_end_mask,
             doc="end_mask bits for StridedSlice rows with a negative stride that reach index 0"),
    Function("pad_pairs", ("list[int]",), "list[list[int]]", _pad_pairs,
             doc="[begins..., ends...] → [[begin, end], ...]"),
    Function("conv_pads", ("str", "list[int]", "list[int]", "list[int]", "list[int]", "list[int]"),
             "list[list[int]]", _conv_pads,
             doc="per-dim [begin, end] padding from auto_pad, pads, spatial size, kernel, strides, dilations"),
    Function("ceil_pads", ("list[list[int]]", "list[int]", "list[int]", "list[int]", "list[int]"), "list[list[int]]",
             _ceil_pads, doc="pooling pads with the end extended so floor rounding counts windows like ceil"),
    Function("conv_transpose_pads", ("str", "list[int]", "list[int]", "list[int]", "list[int]", "list[int]",
                                     "list[int]", "list[int]"), "list[list[int]]", _conv_transpose_pads,
             doc="[begin, end, output_padding] per dim of a transposed convolution from auto_pad, pads, input "
                 "and output sizes, kernel, strides, dilations, output_padding"),
    Function("dim_sizes", ("list[value]", "int"), "list[int]", _dim_sizes, doc="each value's size along a dim"),
    Function("sqrt", ("tensor",), "tensor", _sqrt, doc="elementwise square root of static data"),
    Function("item", ("tensor",), "number", _item, doc="the one element of static data, as a number"),
    Function("values", ("tensor",), "list[number]", _values, doc="the elements of static data as a flat list"),
    Function("ratios", ("list[number]", "list[number]"), "list[float]", _ratios, doc="b[i] / a[i] for each i"),
    Function("pick", ("list[any]", "list[int]"), "list[any]", _pick, doc="the items at the given indices"),
    Function("columns", ("list[list[any]]", "int", "int"), "list[any]", _columns, optional=1,
             doc="column a of each row, or the columns a..b-1 of each row"),
    Function("allclose", ("list[number]", "list[number]", "number"), "bool", _allclose, optional=1,
             doc="same length and equal within a relative tolerance (default 1e-6)"),
    Function("frame_indices", ("int", "int", "int"), "tensor", _frame_indices,
             doc="[frames, length] positions of frames taken every `step` elements"),
    Function("dft_basis", ("int", "int"), "list[tensor]", _dft_basis,
             doc="[cos, -sin] DFT matrices [n, bins] for a real signal of n samples"),
    Function("dft_matrix", ("int", "int", "int", "bool", "bool"), "tensor", _dft_matrix,
             doc="ONNX DFT along an axis as one [n·parts, bins·parts_out] matrix (inverse, onesided, length)"),
    Function("einsum_matmul", ("str",), "list[bool]", _einsum_matmul,
             doc="[transpose_a, transpose_b] of an einsum equation that is a batched matrix product"),
    Function("block_expand", ("tensor", "int", "int", "int"), "tensor", _block_expand,
             doc="blocked-quantization parameters repeated block_size times along an axis, cut to its size"),
    Function("broadcast_multiples", ("list[int]", "list[int]"), "list[int]", _broadcast_multiples,
             doc="per-dim repeat counts that broadcast a shape to a target of the same rank"),
)
