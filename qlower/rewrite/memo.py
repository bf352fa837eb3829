"""Which one-op rules the engine may decide once per kind of op, and the key of that kind.

A rule matching one op over plain or typed captures, whose guards and lets
call only pure built-ins and see values only through rank, shape, numel and
dtype, matches or not alike for every op of a type that agrees on the
attributes the pattern names and on its operands' and results' shapes, dtypes
and constness: those are all it can read (`match_reads`). One that emits one
op over its captures in order, with params computed the same way, also emits
the same params (`emit_reads`). The engine decides the first op of each key
with the general matcher and planner, and the others from the memo: lowering
retypes them, a fixpoint skips the candidates that do not match (laws in
tests/rewrite/test_lower_memo.py compare the two on every op).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import attrgetter, is_
from typing import Any

import attrs
import numpy as np

from qlower.graph.core import Op
from qlower.lang import ast
from qlower.lang.builtins import builtin_functions
from qlower.lang.functions import FunctionTable
from qlower.qnn.keys import MISSING, NO_KEY, values_key

# the functions that read a value, and which part of it
_READS = {"rank": "shape", "shape": "shape", "numel": "shape", "dtype": "dtype"}
# attribute values an emitted op's params may share between the ops of a key (immutable scalars)
_SCALARS = frozenset({bool, int, float, str, type(None)})
# NO_KEY (qlower.qnn.keys', imported by the driver from here): what a key function returns for an op
# it cannot key (a list attribute)


def _pure_functions() -> dict[str, Any]:
    """The built-ins whose result depends only on their arguments and that take no value (but the
    readers above): a rule calling one of them, and no other function, decides by its key."""
    table = builtin_functions()
    out = {}
    for name in table.names():
        f = table.get(name)
        if name in _READS or (name != "backend" and f.returns != "value"
                              and not any("value" in p for p in f.params)):
            out[name] = f
    return out


_PURE = _pure_functions()


def _expr_reads(expr: ast.Expr, values: frozenset[str], functions: FunctionTable, reads: set[str]) -> bool:
    """Add to `reads` what `expr` reads of values ("shape", "dtype"); False when it may read more (a value
    used as itself, a function not known pure)."""
    if isinstance(expr, ast.Literal):
        return True
    if isinstance(expr, ast.Name):
        return expr.id not in values
    if isinstance(expr, ast.Call):
        f = functions.get(expr.func)
        if f is None or _PURE.get(expr.func) is not f:
            return False
        if expr.func in _READS:
            arg = expr.args[0] if len(expr.args) == 1 else None
            if not isinstance(arg, ast.Name) or arg.id not in values:
                return False
            reads.add(_READS[expr.func])
            return True
        return all(_expr_reads(a, values, functions, reads) for a in expr.args)
    if isinstance(expr, ast.ListExpr):
        parts: tuple = expr.items
    elif isinstance(expr, ast.Index):
        parts = (expr.target, expr.index)
    elif isinstance(expr, ast.Slice):
        parts = tuple(p for p in (expr.target, expr.lo, expr.hi) if p is not None)
    elif isinstance(expr, ast.Unary):
        parts = (expr.operand,)
    elif isinstance(expr, ast.Binary):
        parts = (expr.left, expr.right)
    elif isinstance(expr, ast.Conditional):
        parts = (expr.then, expr.cond, expr.otherwise)
    else:
        return False
    return all(_expr_reads(p, values, functions, reads) for p in parts)


@attrs.frozen
class Reads:
    """What deciding a rule reads of an op: the attributes its pattern names, which parts of its
    operands (and of its results, when `results`): "shape", "dtype", "const"."""

    attr_names: tuple[str, ...]
    parts: frozenset[str]
    results: bool


def _reads(rule: ast.Rule, functions: FunctionTable, emission: bool) -> Reads | None:
    """What a one-op rule reads to decide whether it matches (guards, lets and fail included), and
    with `emission` also to compute its one emitted op's params; None when it may read more."""
    (match,) = rule.matches
    pat = match.pattern
    values = set(match.binders.names)
    parts: set[str] = set()
    for p in pat.operands:
        if isinstance(p, ast.Capture):
            values.add(p.name)
            t = p.type
        elif isinstance(p, ast.Wildcard):
            t = p.type
        else:
            return None
        if t is not None:
            if t.const:
                parts.add("const")
            if t.dtype is not None:
                parts.add("dtype")
            if t.shape is not None:
                parts.add("shape")
    names = frozenset(values)
    results = False
    for stmt in rule.body:
        if isinstance(stmt, ast.Match):
            continue
        if isinstance(stmt, (ast.Require, ast.Let)):
            exprs = [stmt.expr]
        elif isinstance(stmt, ast.Fail):
            exprs = [stmt.message]
        elif isinstance(stmt, ast.Emit):
            if not emission:
                continue
            if len(stmt.items) != 1 or not isinstance(stmt.items[0], ast.EmitOp):
                return None
            exprs = [p.expr for p in stmt.items[0].params]
        else:
            return None
        for e in exprs:
            if not _expr_reads(e, names, functions, parts):
                return None
            results = results or any(isinstance(n, ast.Name) and n.id in match.binders.names
                                     for n in ast.iter_nodes(e))
    return Reads(tuple(a.name for a in pat.attrs if a.kind != "any"), frozenset(parts), results and bool(parts))


def match_reads(rule: ast.Rule, functions: FunctionTable) -> Reads | None:
    """`_reads` of whether a straight-line one-op rule matches."""
    return _reads(rule, functions, emission=False)


def emit_reads(rule: ast.Rule, functions: FunctionTable) -> Reads | None:
    """`_reads` of whether it matches and of its one emitted op's params."""
    return _reads(rule, functions, emission=True)


def key_function(reads: list[Reads], nops: int) -> Callable[[Op], Any]:
    """op → a key holding everything `reads` read of it, or NO_KEY for an op it cannot key (a list
    attribute). For ops of one type with `nops` operands, none absent (the caller checks)."""
    names = tuple(dict.fromkeys(n for r in reads for n in r.attr_names))
    missing = (MISSING,) * len(names)
    parts = frozenset().union(*(r.parts for r in reads))
    results = any(r.results for r in reads)
    fields = [f for f in ("shape", "dtype") if f in parts or "const" in parts]
    part = attrgetter(*fields) if fields else None
    const = "const" in parts
    data = attrgetter("data")

    def values(vs: list) -> Any:
        got = tuple(map(part, vs)) if part is not None else ()
        return (got, tuple(map(is_, map(data, vs), repeat(None)))) if const else got

    def key(op: Op) -> Any:
        a = op.attrs
        if a and names:
            ak = values_key(tuple(map(a.get, names, missing)))  # (1, 1.0 and True, -0.0 and 0.0: keys apart)
            if ak is NO_KEY:
                return NO_KEY  # a list or an array
        else:
            ak = ()
        return values(op.operands), values(op.results) if results else (), ak

    if parts != {"shape"} or results or nops not in (1, 2):
        return key
    # the common case, cheaper: operand shapes alone while the op has none of the named attributes
    # (a shape is a tuple of ints or None, never a 3-tuple of tuples like the keys above)
    if nops == 1:
        def shape_key(op: Op) -> Any:
            return key(op) if op.attrs and names else op.operands[0].shape
    else:
        def shape_key(op: Op) -> Any:
            if op.attrs and names:
                return key(op)
            o = op.operands
            return o[0].shape, o[1].shape
    return shape_key


def template_ok(attrs: dict[str, Any]) -> bool:
    """Whether the emitted op's params can be shared by every op of a key (each gets a copy of the
    dict): immutable scalars only, as the planner's own param memo already shares them."""
    return all(type(v) in _SCALARS or isinstance(v, np.generic) for v in attrs.values())
