"""Constraint expressions: the relations of the constraints file that no fixed check kind says.

A documented constraint such as "EDGE can only be used when rank(in[0]) <= 4" or "output_padding
must be < stride" is written in ``constraints.json`` as a small expression over the op's tensors
and params (the grammar is in ``opdefs/README.md``). Expressions are a subset of Python's
expression syntax, parsed once with `ast` and evaluated by walking the tree here (never `eval`),
so a constraints file cannot run code. `in[K]` and `out[K]` name the op's K-th input and output.

A value the expression needs but the graph does not have (the data of a non-static tensor, a
param without a default) makes the expression *unknown*: the check does not apply rather than
guessing.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from qlower.qnn.datatypes import DataType
from qlower.qnn.model import EncodingKind, QnnTensor, TensorType

_SLOT = re.compile(r"\b(in|out)\[(\d+)\]")
_CMP = {ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn}
_BIN = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.FloorDiv: np.floor_divide,
        ast.Mod: np.mod, ast.Div: np.true_divide}


class Unknown(Exception):
    """A value the expression needs is not in the graph: the check does not apply."""


class ExprError(ValueError):
    """An expression of a constraints file is not in the grammar."""


def _bits(dt: DataType) -> int | None:
    m = re.search(r"_(\d+)$", dt.name)
    return int(m.group(1)) if m else None


@attrs.frozen
class Env:
    """What an expression reads of one op: its tensors by position, its params, the backend's enum names."""

    inputs: Sequence[QnnTensor | None]
    outputs: Sequence[QnnTensor | None]
    params: Mapping[str, Any]  # name -> value (enum params by name); absent: not given and no default
    given: frozenset[str] = frozenset()  # params the op sets itself
    entries: Mapping[str, tuple[QnnTensor, ...]] = attrs.field(factory=dict)  # tensors per entry (in[1..4])
    param_dtypes: Mapping[str, str] = attrs.field(factory=dict)  # datatype names of the params the op sets


def _tensor(x: Any) -> QnnTensor:
    if not isinstance(x, QnnTensor):
        raise Unknown("not a tensor")
    return x


def _data(x: Any) -> np.ndarray:
    t = _tensor(x)
    if t.data is None:
        raise Unknown("tensor data is not in the graph")
    return np.asarray(t.data)


def _enc(x: Any):  # noqa: ANN202 - a QuantEncoding or None
    t = _tensor(x)
    enc = t.encoding
    return None if enc is None or enc.kind == EncodingKind.UNDEFINED else enc


def _symmetric(x: Any) -> bool:
    t = _tensor(x)
    enc = _enc(t)
    if enc is None:
        return True
    unsigned = t.datatype.name.startswith("UFIXED")
    bw = enc.bitwidth or _bits(t.datatype) or 8
    want = -(1 << (bw - 1)) if unsigned else 0
    return bool((np.asarray(enc.offsets) == want).all())


def _unique(x: Any) -> bool:
    a = np.asarray(x).ravel()
    return len(np.unique(a)) == a.size


def _per_axis(x: Any) -> bool:
    enc = _enc(x)
    return enc is not None and enc.per_axis


FUNCS: Mapping[str, Callable[..., Any]] = {
    "rank": lambda x: len(_tensor(x).dims),
    "shape": lambda x: tuple(_tensor(x).dims),
    "dim": lambda x, i: _tensor(x).dims[int(i)] if -len(_tensor(x).dims) <= int(i) < len(_tensor(x).dims)
    else _raise(Unknown("no such dimension")),
    "dtype": lambda x: _tensor(x).datatype.name,
    "bits": lambda x: _bits(_tensor(x).datatype),
    "is_static": lambda x: _tensor(x).type == TensorType.STATIC,
    "data": _data,
    "quantized": lambda x: _enc(x) is not None,
    "encoding": lambda x: "NONE" if _enc(x) is None else _enc(x).kind.name,
    "per_axis": _per_axis,
    "symmetric": _symmetric,
    "scales": lambda x: np.asarray(_enc(x).scales if _enc(x) else _raise(Unknown("no encoding"))),
    "offsets": lambda x: np.asarray(_enc(x).offsets if _enc(x) else _raise(Unknown("no encoding"))),
    "quant_axis": lambda x: _enc(x).axis if _per_axis(x) else _raise(Unknown("not per-axis")),
    "same_quant": lambda a, b: _same_quant(a, b),
    "unique": _unique,
    "all": lambda x: bool(np.all(np.asarray(x))),
    "any": lambda x: bool(np.any(np.asarray(x))),
    "prod": lambda x: int(np.prod(np.asarray(x, dtype=np.int64))),
    "size": lambda x: int(np.asarray(x).size),
    "min": lambda *a: min(a) if len(a) > 1 else np.min(np.asarray(a[0])),
    "max": lambda *a: max(a) if len(a) > 1 else np.max(np.asarray(a[0])),
    "abs": lambda x: np.abs(x),
    "elem": lambda x, i: _elem(x, i),
    "quant_bits": lambda x: (_enc(x).bitwidth if _enc(x) is not None and _enc(x).bitwidth else _bits(_tensor(x).datatype)),
    "tensor_type": lambda x: _tensor(x).type.name,
    "within": lambda idx, bounds: _within(idx, bounds),
    "sum_last": lambda x: np.sum(np.asarray(x, dtype=np.float64), axis=-1),
    "indices_of": lambda x, v: np.flatnonzero(np.asarray(x).ravel() == v),
    "distinct_targets": lambda idx, axis: _distinct_targets(idx, axis),
    "mixed_broadcast": lambda a, b: _mixed_broadcast(tuple(_tensor(a).dims), tuple(_tensor(b).dims)),
    "broadcasts_to": lambda a, b: _broadcasts_to(list(a), list(b)),
    "broadcast": lambda a, b: _broadcast(list(a), list(b)),
    "reshape_ok": lambda shape, spec: _reshape_ok(list(shape), np.asarray(spec).ravel().tolist()),
    "zeros_copied": lambda shape, spec, out: all(
        int(s) != 0 or (i < len(shape) and i < len(out) and out[i] == shape[i])
        for i, s in enumerate(np.asarray(spec).ravel().tolist())),
    "dims_at": lambda x, axes: [_tensor(x).dims[int(a)] for a in np.asarray(axes).ravel().tolist()],
}
# functions of an entry's tensors (the argument is the entry's name, e.g. 'in[1..4]')
ENTRY_FUNCS = ("count", "entry_dims", "maxdim", "dtypes")
_SPECIAL = ("N", "n_inputs", "n_outputs")
# not functions of the graph: names an expression may use besides params and tensors
_CONSTS = {"True": True, "False": False, "INT32_MAX": 2 ** 31 - 1}


def _within(idx: Any, bounds: Any) -> bool:
    """Index tuples along the last axis of `idx` address a tensor of dims `bounds` (negative from the end)."""
    a = np.asarray(idx, dtype=np.int64)
    b = np.asarray(list(bounds), dtype=np.int64)
    if a.ndim == 0 or a.shape[-1] != b.size:
        raise Unknown("index depth differs")
    return bool(np.all((a >= -b) & (a < b)))


def _distinct_targets(idx: Any, axis: Any) -> bool:
    """ScatterElements: no two elements of `idx` update the same output element."""
    a = np.asarray(idx, dtype=np.int64)
    coords = np.indices(a.shape).reshape(a.ndim, -1)
    coords[int(axis)] = a.ravel()
    return np.unique(coords.T, axis=0).shape[0] == a.size


def _mixed_broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    return any(x == 1 and y > 1 for x, y in zip(a, b)) and any(y == 1 and x > 1 for x, y in zip(a, b))


def _broadcasts_to(a: list[int], b: list[int]) -> bool:
    """`a` (right-aligned) has each dim equal to b's or 1; dims b lacks must be 1."""
    extra = len(a) - len(b)
    if extra > 0 and any(x != 1 for x in a[:extra]):
        return False
    return all(x in (1, y) for x, y in zip(a[max(extra, 0):], b[max(-extra, 0):]))


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise Unknown("shapes do not broadcast")
        out.append(max(x, y) if 1 in (x, y) else x)
    return out


def _reshape_ok(shape: list[int], spec: list[int]) -> bool:
    """A Reshape shape spec (0 copies a dim, -1 infers one) keeps the element count."""
    total = int(np.prod(shape, dtype=np.int64))
    dims = [shape[i] if s == 0 and i < len(shape) else s for i, s in enumerate(spec)]
    if dims.count(-1) > 1:
        return False
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if -1 in dims:
        return known > 0 and total % known == 0
    return known == total


def _raise(exc: Exception) -> Any:
    raise exc


def _elem(x: Any, i: Any) -> Any:
    a = np.asarray(x).ravel()
    i = int(i)
    if not -a.size <= i < a.size:
        raise Unknown("no such element")
    return a[i].item()


def _same_quant(a: Any, b: Any) -> bool:
    ea, eb = _enc(a), _enc(b)
    if ea is None or eb is None:
        return ea is None and eb is None
    return ea.kind == eb.kind and ea.axis == eb.axis and ea.offsets == eb.offsets and len(ea.scales) == len(eb.scales) \
        and all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-30) for x, y in zip(ea.scales, eb.scales))


@attrs.frozen
class Expr:
    """A parsed constraint expression; `names` are the params it reads (for messages and file checks)."""

    text: str
    tree: ast.expression = attrs.field(eq=False, hash=False, repr=False)
    names: tuple[str, ...] = ()
    slots: tuple[str, ...] = ()  # the tensors and entries it reads, as written (in[0], out[1], in[1..4])
    uses_n: bool = False  # whether it reads N = rank(in[0])

    def __call__(self, env: Env) -> Any:
        return _Eval(env).visit(self.tree.body)


def parse(text: str) -> Expr:
    """An expression of the grammar, or ExprError saying what is not in it."""
    if not isinstance(text, str) or not text.strip():
        raise ExprError("expected a non-empty expression")
    src = _SLOT.sub(lambda m: f"__{m.group(1)}_{m.group(2)}", text)
    try:
        tree = ast.parse(src.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not an expression: {exc.msg}") from None
    names: list[str] = []
    entries: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in ENTRY_FUNCS + ("param_dtype",):
                if len(node.args) < 1 or not isinstance(node.args[0], ast.Constant) \
                        or not isinstance(node.args[0].value, str):
                    raise ExprError(f"{node.func.id} takes the name of an entry as text, e.g. {node.func.id}('in[1..4]')")
                (names if node.func.id == "param_dtype" else entries).append(node.args[0].value)
                continue
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCS or node.keywords:
                what = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ExprError(f"unknown function `{what}` (expected one of "
                                f"{', '.join(sorted([*FUNCS, *ENTRY_FUNCS, 'param_dtype']))})")
        elif isinstance(node, ast.Name):
            ident = node.id[6:] if node.id.startswith("given_") else node.id
            if ident not in FUNCS and ident not in _CONSTS and not ident.startswith("__") \
                    and ident not in ENTRY_FUNCS and ident != "param_dtype" \
                    and ident not in _SPECIAL and ident not in names:
                names.append(ident)
        elif isinstance(node, ast.Compare):
            if any(type(o) not in _CMP for o in node.ops):
                raise ExprError("unsupported comparison")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BIN:
                raise ExprError(f"unsupported operator {type(node.op).__name__}")
        elif not isinstance(node, (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
                                   ast.Constant, ast.List, ast.Tuple, ast.Subscript, ast.Slice, ast.IfExp,
                                   ast.Load, ast.expr_context, ast.cmpop, ast.operator)):
            raise ExprError(f"`{ast.unparse(node)}` is not in the expression grammar")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool)):
            raise ExprError(f"unsupported constant {node.value!r}")
    slots = tuple(dict.fromkeys(m.group(0) for m in _SLOT.finditer(text)))
    uses_n = any(isinstance(n, ast.Name) and n.id == "N" for n in ast.walk(tree))
    return Expr(text, tree, tuple(dict.fromkeys(names)), tuple(dict.fromkeys([*slots, *entries])), uses_n)


def _as_cmp(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return np.asarray(v)
    return v


def _compare(op: ast.cmpop, a: Any, b: Any) -> bool:
    """Comparisons are whole-value: == / != on the whole array, ordering on every element."""
    if isinstance(op, (ast.In, ast.NotIn)):
        seq = b.tolist() if isinstance(b, np.ndarray) else list(b) if isinstance(b, (list, tuple)) else [b]
        inside = (a.tolist() if isinstance(a, np.ndarray) else a) in seq
        return inside if isinstance(op, ast.In) else not inside
    a, b = _as_cmp(a), _as_cmp(b)
    if isinstance(a, str) or isinstance(b, str):
        if isinstance(op, ast.Eq):
            return a == b
        if isinstance(op, ast.NotEq):
            return a != b
        raise Unknown("ordering of text")
    arrays = isinstance(a, np.ndarray) or isinstance(b, np.ndarray)
    if isinstance(op, (ast.Eq, ast.NotEq)):
        if arrays:
            aa, bb = np.asarray(a), np.asarray(b)
            same = (aa.shape == bb.shape or aa.ndim == 0 or bb.ndim == 0) and bool(np.all(aa == bb))
        else:
            same = a == b
        return same if isinstance(op, ast.Eq) else not same
    fn = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal}[type(op)]
    try:
        return bool(np.all(fn(np.asarray(a), np.asarray(b))))
    except ValueError:
        raise Unknown("shapes do not compare") from None


class _Eval:
    def __init__(self, env: Env) -> None:
        self.env = env

    def visit(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.BoolOp):
            if isinstance(node.op, ast.And):
                return all(bool(self.visit(v)) for v in node.values)
            return any(bool(self.visit(v)) for v in node.values)
        if isinstance(node, ast.UnaryOp):
            v = self.visit(node.operand)
            return (not bool(v)) if isinstance(node.op, ast.Not) else np.negative(v)
        if isinstance(node, ast.BinOp):
            a, b = self.visit(node.left), self.visit(node.right)
            if isinstance(node.op, ast.Add) and isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
                return list(a) + list(b)  # shapes concatenate
            a, b = _as_cmp(a), _as_cmp(b)
            try:
                with np.errstate(all="raise"):
                    r = _BIN[type(node.op)](a, b)
            except (FloatingPointError, ZeroDivisionError, ValueError):
                raise Unknown("arithmetic fails") from None
            return r.item() if isinstance(r, np.ndarray) and r.ndim == 0 else r
        if isinstance(node, ast.Compare):
            left = self.visit(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = self.visit(right_node)
                if not _compare(op, left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.Call) and node.func.id in ENTRY_FUNCS + ("param_dtype",):
            return self.entry_call(node.func.id, node.args[0].value, [self.visit(a) for a in node.args[1:]])
        if isinstance(node, ast.Call):
            args = [self.visit(a) for a in node.args]
            try:
                return FUNCS[node.func.id](*args)
            except (TypeError, IndexError, ValueError, AttributeError):
                raise Unknown(f"{node.func.id} does not apply") from None
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.visit(e) for e in node.elts]
        if isinstance(node, ast.IfExp):
            return self.visit(node.body) if self.visit(node.test) else self.visit(node.orelse)
        if isinstance(node, ast.Subscript):
            v = self.visit(node.value)
            seq = v if isinstance(v, (list, tuple, np.ndarray)) else _raise(Unknown("not indexable"))
            if isinstance(node.slice, ast.Slice):
                lo = None if node.slice.lower is None else int(self.visit(node.slice.lower))
                hi = None if node.slice.upper is None else int(self.visit(node.slice.upper))
                out = seq[lo:hi]
                return np.asarray(out) if isinstance(seq, np.ndarray) else list(out)
            i = int(self.visit(node.slice))
            if not -len(seq) <= i < len(seq):
                raise Unknown("no such element")
            out = seq[i]
            return out.item() if isinstance(out, np.ndarray) and out.ndim == 0 else out.item() \
                if isinstance(out, np.generic) else out
        raise Unknown(type(node).__name__)

    def entry_call(self, fn: str, name: str, args: list[Any]) -> Any:
        env = self.env
        if fn == "param_dtype":
            if name not in env.param_dtypes:
                raise Unknown(f"param {name} is not set")
            return env.param_dtypes[name]
        ts = env.entries.get(name, ())
        if fn == "count":
            return len(ts)
        if fn == "dtypes":
            return [t.datatype.name for t in ts]
        if fn == "maxdim":
            return max((d for t in ts for d in t.dims), default=0)
        axis = int(args[0]) if args else 0
        return [t.dims[axis] if -len(t.dims) <= axis < len(t.dims) else _raise(Unknown("no such dimension"))
                for t in ts]

    def name(self, ident: str) -> Any:
        env = self.env
        if ident in _CONSTS:
            return _CONSTS[ident]
        if ident.startswith("__in_") or ident.startswith("__out_"):
            kind, _, i = ident[2:].partition("_")
            seq = env.inputs if kind == "in" else env.outputs
            k = int(i)
            if k >= len(seq) or seq[k] is None:
                raise Unknown(f"{kind}[{k}] is not given")
            return seq[k]
        if ident == "N":
            if not env.inputs or env.inputs[0] is None:
                raise Unknown("no in[0]")
            return len(env.inputs[0].dims)
        if ident.startswith("given_"):
            return ident[6:] in env.given
        if ident == "n_inputs":
            return sum(1 for t in env.inputs if t is not None)
        if ident == "n_outputs":
            return sum(1 for t in env.outputs if t is not None)
        if ident not in env.params:
            raise Unknown(f"param {ident} has no value")
        v = env.params[ident]
        return v

