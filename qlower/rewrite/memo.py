"""Which one-op rules lowering may decide once per kind of op, and the key of that kind.

A rule matching one op over plain or typed captures, whose guards, lets and
params call only pure built-ins and see values only through rank, shape,
numel and dtype, and which emits one op over its captures in order, decides
the same (match or not, which params) for every op of a type that agrees on
the attributes the pattern names and on its operands' and results' shapes,
dtypes and constness: those are all it can read. The engine decides the
first op of each key with the general matcher and planner, and retypes the
others from the memo (a law in tests/rewrite compares the two on every op).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

import numpy as np

from qlower.graph.core import Op
from qlower.lang import ast
from qlower.lang.builtins import builtin_functions
from qlower.lang.functions import FunctionTable

# the functions that read a value, and which part of it
_READS = {"rank": "shape", "shape": "shape", "numel": "shape", "dtype": "dtype"}
# attribute values a key holds as they are, told apart by type (1, 1.0 and True are equal dict keys)
_SCALARS = frozenset({bool, int, float, str, type(None)})
_MISSING = object()
NO_KEY: Any = object()  # what a key function returns for an op it cannot key (a list attribute)


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


def _key_of(value_part: Callable[[Any], Any] | None, results: bool, attr_names: tuple[str, ...],
            nops: int, shapes_only: bool) -> Callable[[Op], Any]:
    def key(op: Op) -> Any:
        a = op.attrs
        if a and attr_names:
            got = []
            for n in attr_names:
                x = a.get(n, _MISSING)
                if x is not _MISSING and type(x) not in _SCALARS:
                    return NO_KEY  # a list or an array
                got.append(x)
                got.append(type(x))
                if type(x) is float:
                    got.append(x.hex())  # -0.0 and 0.0 are equal keys
            ak = tuple(got)
        else:
            ak = ()
        vk = tuple(map(value_part, op.operands)) if value_part is not None else ()
        rk = tuple(map(value_part, op.results)) if results else ()
        return vk, rk, ak

    if not shapes_only or results or nops not in (1, 2):
        return key
    # the common case, cheaper: operand shapes alone while the op has none of the named attributes
    # (a shape is a tuple of ints or None, never a 3-tuple of tuples like the keys above)
    if nops == 1:
        def shape_key(op: Op) -> Any:
            return key(op) if op.attrs and attr_names else op.operands[0].shape
    else:
        def shape_key(op: Op) -> Any:
            if op.attrs and attr_names:
                return key(op)
            o = op.operands
            return o[0].shape, o[1].shape
    return shape_key


def _const_part(v: Any) -> Any:
    return v.shape, v.dtype, v.data is None


def memo_key(rule: ast.Rule, functions: FunctionTable) -> Callable[[Op], Any] | None:
    """The key function for `rule` (op → a key, or NO_KEY for an op it cannot key), or None when
    the rule may read more of an op than a key holds. The caller has already checked that the rule
    is a straight-line one-op match with a simple 1:1 emission (see `driver._memo_rule`)."""
    (match,) = rule.matches
    pat = match.pattern
    values = set(match.binders.names)
    reads: set[str] = set()
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
                reads.add("const")
            if t.dtype is not None:
                reads.add("dtype")
            if t.shape is not None:
                reads.add("shape")
    names = frozenset(values)
    results_read: set[str] = set()
    for stmt in rule.body:
        if isinstance(stmt, ast.Match):
            continue
        if isinstance(stmt, (ast.Require, ast.Let)):
            exprs = [stmt.expr]
        elif isinstance(stmt, ast.Fail):
            exprs = [stmt.message]
        elif isinstance(stmt, ast.Emit):
            if len(stmt.items) != 1 or not isinstance(stmt.items[0], ast.EmitOp):
                return None
            exprs = [p.expr for p in stmt.items[0].params]
        else:
            return None
        for e in exprs:
            if not _expr_reads(e, names, functions, reads):
                return None
            results_read.update(n.id for n in ast.iter_nodes(e) if isinstance(n, ast.Name)
                                and n.id in match.binders.names)
    if "const" in reads:
        part: Callable[[Any], Any] | None = _const_part
    elif reads == {"shape", "dtype"}:
        part = attrgetter("shape", "dtype")
    elif reads:
        part = attrgetter(*reads)
    else:
        part = None
    attr_names = tuple(a.name for a in pat.attrs if a.kind != "any")
    return _key_of(part, bool(results_read) and part is not None, attr_names, len(pat.operands),
                   reads == {"shape"})


def template_ok(attrs: dict[str, Any]) -> bool:
    """Whether the emitted op's params can be shared by every op of a key (each gets a copy of the
    dict): immutable scalars only, as the planner's own param memo already shares them."""
    return all(type(v) in _SCALARS or isinstance(v, np.generic) for v in attrs.values())
