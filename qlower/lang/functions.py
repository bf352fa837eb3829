"""Functions callable from .qpat expressions: the types, and the core built-ins.

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
    """`quant_range(lo, hi)`: resolved against the value's dtype when emitted. `unit` (`quant_unit()`):
    [0, 1) at scale 1/2^b with zero point 0, b the dtype's value bits (16 for uint16, 15 for int16), the
    encoding HTP requires of a quantized Sigmoid's or Softmax's output."""

    lo: float
    hi: float
    unit: bool = False


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


def _optype(v) -> str:
    op = getattr(v, "producer", None)
    if op is None:
        raise EvalError(f"{v.name} is not produced by an op")
    return op.type


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
    if dtype is None:
        return arr
    with np.errstate(over="ignore"):  # array([1e39], f32) is how a rule writes infinity
        return arr.astype(_dtype(dtype))


def _prod(xs: Iterable[int]) -> int:
    return int(math.prod(xs))


def _quant(scale: Any, zero_point: Any = 0, axis: Any = None) -> Quant:
    return Quant(scale, zero_point, axis=axis)


def _const_value(v) -> np.ndarray:
    if v.data is None:
        raise EvalError(f"value {v.name} is not a constant")
    return v.data


def _real_value(v) -> np.ndarray:
    """A constant's real values: its data, dequantized when it is quantized (per tensor or axis)."""
    data = _const_value(v)
    q = v.quant
    if q is None:
        return data
    if q.block_size is not None:
        raise EvalError(f"value {v.name} is block-quantized: its real values are not computed here")
    scale, zero = np.asarray(q.scale, np.float64), np.asarray(q.zero_point, np.float64)
    if q.axis is not None and np.ndim(data) > 0:
        shape = [1] * np.ndim(data)
        shape[q.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    else:
        scale, zero = scale.reshape(-1)[0], zero.reshape(-1)[0]
    return ((np.asarray(data, np.float64) - zero) * scale).astype(np.float32)


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
    Function("real_value", ("value",), "tensor", _real_value,
             doc="a constant's real values: its data, dequantized when it is quantized"),
    Function("optype", ("value",), "str", lambda v: _optype(v),
             doc="the type of the op producing the value (which alternative of `A | B` matched)"),
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
    Function("quant_unit", (), "encoding", lambda: RangeEncoding(0.0, 1.0, unit=True),
             doc="encoding of [0, 1) at scale 1/2^bits, zero point 0 (HTP's Sigmoid/Softmax output)"),
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


def _compose_perm(p: list[int], q: list[int]) -> list[int]:
    """transpose(transpose(x, p), q) == transpose(x, r) with r[i] = p[q[i]]."""
    p, q = _normperm(p, len(p)), _normperm(q, len(q))
    if len(p) != len(q):
        raise EvalError(f"cannot compose permutations of {len(p)} and {len(q)} dims")
    return [p[i] for i in q]


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
    Function("compose_perm", ("list[int]", "list[int]"), "list[int]", lambda p, q: _compose_perm(p, q),
             doc="the one permutation that transposing by p, then by q, applies"),
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
