"""Functions callable from .qpat expressions: built-ins and registered extras.

Each function states its parameter and result types so the checker can catch
type errors when rules load; the evaluator calls `impl`. Registered functions
(from plugins) are the only escape hatch from the expression language.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs
import numpy as np

from qlower.graph.types import Quant, canonical_dtype


class EvalError(Exception):
    """An expression could not be evaluated (bad argument, index out of range...)."""


@attrs.frozen
class Function:
    """`params` are type names (`int`, `value`, `list[int]`, `any`, ...); a
    trailing `*` type means "any number of these"; `optional` counts trailing
    params that may be omitted."""

    name: str
    params: tuple[str, ...]
    returns: str
    impl: Callable[..., Any]
    optional: int = 0
    doc: str = ""

    @property
    def min_args(self) -> int:
        fixed = [p for p in self.params if not p.endswith("*")]
        return len(fixed) - self.optional

    @property
    def max_args(self) -> int | None:
        if any(p.endswith("*") for p in self.params):
            return None
        return len(self.params)


@attrs.frozen
class RangeEncoding:
    """`quant_range(lo, hi)`: resolved against the value's dtype when emitted."""

    lo: float
    hi: float


def _extreme(fn, xs: tuple) -> Any:
    """min/max of several numbers, or of one list of numbers; a single number is itself."""
    if len(xs) == 1:
        return fn(xs[0]) if isinstance(xs[0], (list, tuple)) else xs[0]
    return fn(xs)


def _text(x: Any) -> str:
    """A value as the language writes it (true, false, none)."""
    if x is True:
        return "true"
    if x is False:
        return "false"
    if x is None:
        return "none"
    if isinstance(x, list):
        return "[" + ", ".join(_text(i) for i in x) + "]"
    return str(x)


def _shape(v) -> list[int]:
    if v.shape is None:
        raise EvalError(f"value {v.name} has no known shape")
    return list(v.shape)


def _normdim(d: int, rank: int) -> int:
    if not -rank <= d < max(rank, 1):
        raise EvalError(f"dim {d} is out of range for rank {rank}")
    return d + rank if d < 0 else d


def _dtype(name: str) -> str:
    c = canonical_dtype(str(name))
    if c is None:
        raise EvalError(f"unknown dtype {name}")
    return c


def _tensor(data: Any, dtype: str | None = None) -> np.ndarray:
    arr = np.asarray(data)
    return arr.astype(_dtype(dtype)) if dtype is not None else arr


def _prod(xs: Iterable[int]) -> int:
    return int(math.prod(xs))


def _quant(scale: Any, zero_point: Any = 0, axis: Any = None) -> Quant:
    return Quant(scale, zero_point, axis=axis)


def _const_value(v) -> np.ndarray:
    if v.data is None:
        raise EvalError(f"value {v.name} is not a constant")
    return v.data


def _range(a: int, b: int | None = None) -> list[int]:
    return list(range(a)) if b is None else list(range(a, b))


def _index_of(xs: list, x: Any) -> int:
    try:
        return list(xs).index(x)
    except ValueError:
        raise EvalError(f"{x!r} is not in {xs!r}") from None


def _perm_swap(rank: int, a: int, b: int) -> list[int]:
    p = list(range(rank))
    a, b = _normdim(a, rank), _normdim(b, rank)
    p[a], p[b] = p[b], p[a]
    return p


def _resolve_shape(target: list[int], numel: int) -> list[int]:
    """Fill one -1 in a reshape target from the element count."""
    t = list(target)
    if t.count(-1) > 1:
        raise EvalError(f"shape {t} has more than one -1")
    if -1 in t:
        known = _prod(d for d in t if d != -1)
        if known == 0 or numel % known:
            raise EvalError(f"cannot resolve -1 in {t} for {numel} elements")
        t[t.index(-1)] = numel // known
    if _prod(t) != numel:
        raise EvalError(f"shape {t} does not hold {numel} elements")
    return t


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    try:
        return list(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise EvalError(f"shapes {a} and {b} do not broadcast") from None


_BUILTINS: tuple[Function, ...] = (
    Function("rank", ("value",), "int", lambda v: len(_shape(v)), doc="number of dims"),
    Function("shape", ("value",), "list[int]", _shape, doc="dims as a list"),
    Function("numel", ("value",), "int", lambda v: _prod(_shape(v)), doc="element count"),
    Function("dtype", ("value",), "dtype", lambda v: str(v.dtype), doc="numpy dtype name"),
    Function("is_const", ("value",), "bool", lambda v: v.data is not None, doc="has constant data"),
    Function("is_quantized", ("value",), "bool", lambda v: v.quant is not None),
    Function("is_output", ("value",), "bool", lambda v: v.is_output, doc="is a graph output"),
    Function("is_input", ("value",), "bool", lambda v: v.is_input, doc="is a graph input"),
    Function("uses", ("value",), "int", lambda v: v.use_count, doc="number of operand uses"),
    Function("encoding", ("value",), "encoding", lambda v: v.quant, doc="the value's encoding or none"),
    Function("const_value", ("value",), "tensor", _const_value, doc="constant data"),
    Function("len", ("list[any]",), "int", lambda xs: len(xs)),
    Function("range", ("int", "int"), "list[int]", _range, optional=1),
    Function("min", ("number*",), "number", lambda *xs: _extreme(min, xs)),
    Function("max", ("number*",), "number", lambda *xs: _extreme(max, xs)),
    Function("abs", ("number",), "number", abs),
    Function("sum", ("list[number]",), "number", lambda xs: sum(xs)),
    Function("prod", ("list[int]",), "int", _prod),
    Function("reversed", ("list[any]",), "list[any]", lambda xs: list(reversed(xs))),
    Function("index_of", ("list[any]", "any"), "int", _index_of),
    Function("str", ("any",), "str", lambda x: _text(x)),
    Function("int", ("number",), "int", lambda x: int(x)),
    Function("float", ("number",), "float", lambda x: float(x)),
    Function("normdim", ("int", "int"), "int", _normdim, doc="negative dim → positive, checked"),
    Function("swap_perm", ("int", "int", "int"), "list[int]", _perm_swap,
             doc="identity permutation of a rank with two dims swapped"),
    Function("resolve_shape", ("list[int]", "int"), "list[int]", _resolve_shape,
             doc="fill the -1 of a reshape target"),
    Function("broadcast", ("list[int]", "list[int]"), "list[int]", _broadcast),
    Function("quant", ("any", "any", "int"), "encoding", _quant, optional=2,
             doc="encoding from scale and zero point (per-axis with lists and axis)"),
    Function("quant_range", ("number", "number"), "encoding", lambda lo, hi: RangeEncoding(float(lo), float(hi)),
             doc="encoding covering [lo, hi] in the value's dtype"),
    Function("zeros", ("list[int]", "dtype"), "tensor", lambda s, d: np.zeros(s, _dtype(d))),
    Function("ones", ("list[int]", "dtype"), "tensor", lambda s, d: np.ones(s, _dtype(d))),
    Function("full", ("list[int]", "number", "dtype"), "tensor", lambda s, x, d: np.full(s, x, _dtype(d))),
    Function("array", ("any", "dtype"), "tensor", _tensor, optional=1, doc="tensor from a (nested) list"),
    Function("reshape_tensor", ("tensor", "list[int]"), "tensor", lambda t, s: np.reshape(t, s)),
)


@attrs.frozen
class FunctionTable:
    """Immutable name → Function mapping; `extend` returns a new table."""

    functions: Mapping[str, Function] = attrs.field(converter=lambda m: MappingProxyType(dict(m)))

    def get(self, name: str) -> Function | None:
        return self.functions.get(name)

    def names(self) -> list[str]:
        return sorted(self.functions)

    def extend(self, extra: Iterable[Function]) -> FunctionTable:
        merged = dict(self.functions)
        for f in extra:
            if f.name in merged:
                raise ValueError(f"function {f.name} is already defined")
            merged[f.name] = f
        return FunctionTable(merged)


def builtin_functions() -> FunctionTable:
    return FunctionTable({f.name: f for f in _BUILTINS})


def _normperm(perm: list[int], rank: int) -> list[int]:
    p = [_normdim(int(d), rank) for d in perm]
    if sorted(p) != list(range(rank)):
        raise EvalError(f"{perm} is not a permutation of {rank} dims")
    return p


def _slice_ranges(starts: list[int], ends: list[int], shape: list[int]) -> list[list[int]]:
    """Python-style step-1 slices (negative indices, clamping) → StridedSlice ranges [[b, e, 1], ...]."""
    if len(starts) != len(shape) or len(ends) != len(shape):
        raise EvalError(f"slice needs one start and end per dim ({len(shape)}), got {len(starts)} and {len(ends)}")
    out = []
    for b, e, n in zip(starts, ends, shape):
        b2, e2, _ = slice(int(b), int(e)).indices(int(n))
        out.append([b2, max(e2, b2), 1])
    return out


def _split_index(sizes: list[int]) -> list[int]:
    """Split sizes → the start index of every part after the first."""
    out, acc = [], 0
    for s in sizes[:-1]:
        acc += int(s)
        out.append(acc)
    return out


def _scale_encoding(q: Any, factor: float) -> Any:
    """An encoding whose range is `factor` times wider (same zero point)."""
    if q is None:
        return None
    if isinstance(q, RangeEncoding):
        return RangeEncoding(q.lo * factor, q.hi * factor)
    return attrs.evolve(q, scale=tuple(s * abs(float(factor)) for s in q.scale))


def _with_axis(q: Any, axis: int) -> Any:
    if q is None or getattr(q, "axis", None) is None:
        return q
    return attrs.evolve(q, axis=int(axis))


_MORE: tuple[Function, ...] = (
    Function("normperm", ("list[int]", "int"), "list[int]", _normperm, doc="negative dims → positive, checked"),
    Function("slice_ranges", ("list[int]", "list[int]", "list[int]"), "list[list[int]]", _slice_ranges,
             doc="Python slices → StridedSlice ranges"),
    Function("split_index", ("list[int]",), "list[int]", _split_index, doc="part sizes → split points"),
    Function("transpose_tensor", ("tensor", "list[int]"), "tensor", lambda t, p: np.ascontiguousarray(
        np.transpose(t, p))),
    Function("scale_encoding", ("encoding", "number"), "encoding", _scale_encoding),
    Function("with_axis", ("encoding", "int"), "encoding", _with_axis, doc="move a per-axis encoding's axis"),
    Function("quantized_like", ("value",), "bool", lambda v: v.quant is not None),
)
_BUILTINS = _BUILTINS + _MORE


def _quant_blocks(scales: list, axis: int, block_axis: int, block_size: int, bitwidth: int = 4) -> Quant:
    """Symmetric block quantization (LPBQ): `scales` is [channels][blocks] along `axis`/`block_axis`."""
    rows = [list(r) for r in scales]
    if not rows or any(len(r) != len(rows[0]) for r in rows):
        raise EvalError("quant_blocks needs a rectangular [channels][blocks] list of scales")
    flat = [float(x) for r in rows for x in r]
    return Quant(flat, [0] * len(rows), axis=int(axis), bitwidth=int(bitwidth), symmetric=True,
                 block_size=int(block_size), block_axis=int(block_axis))


_BUILTINS = _BUILTINS + (
    Function("quant_blocks", ("list[list[float]]", "int", "int", "int", "int"), "encoding", _quant_blocks,
             optional=1, doc="block (LPBQ) encoding: [channels][blocks] scales, axis, block axis, block size, bits"),
)


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
    out = []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max((-(-int(size) // int(s)) - 1) * int(s) + (int(k) - 1) * int(d) + 1 - int(size), 0)
        small = total // 2
        out.append([small, total - small] if auto_pad == "SAME_UPPER" else [total - small, small])
    return out


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


def _sqrt(x: Any) -> Any:
    return np.sqrt(np.asarray(x, dtype=np.float64) if not isinstance(x, np.ndarray) else x)


_BUILTINS = _BUILTINS + (
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
    Function("ratios", ("list[number]", "list[number]"), "list[float]", _ratios, doc="b[i] / a[i] for each i"),
    Function("pick", ("list[any]", "list[int]"), "list[any]", _pick, doc="the items at the given indices"),
    Function("columns", ("list[list[any]]", "int", "int"), "list[any]", _columns, optional=1,
             doc="column a of each row, or the columns a..b-1 of each row"),
    Function("allclose", ("list[number]", "list[number]", "number"), "bool", _allclose, optional=1,
             doc="same length and equal within a relative tolerance (default 1e-6)"),
    Function("einsum_matmul", ("str",), "list[bool]", _einsum_matmul,
             doc="[transpose_a, transpose_b] of an einsum equation that is a batched matrix product"),
    Function("broadcast_multiples", ("list[int]", "list[int]"), "list[int]", _broadcast_multiples,
             doc="per-dim repeat counts that broadcast a shape to a target of the same rank"),
)
